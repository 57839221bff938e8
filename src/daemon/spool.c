/* A large upload's body streamed into a spool file by the gate, not held in memory (front.h).
 *
 * libevent 2.1's evhttp reads a whole body into memory before its request callback runs, and
 * it offers no hook on an incoming request before its headers are parsed (evhttp_set_newreqcb
 * is 2.2's), so a request's chunk callback cannot be set in time. The gate reads the head
 * already (gate.c); for a route that reads a spool (BODY_SPOOL) and a Content-Length of
 * SPOOL_MIN_BYTES or more, or a chunked body (decoded here: its framing, sizes in hex, chunk
 * extensions and trailers skipped, the decoded length bounded by the route's limit, 413
 * past it), it reads the body as well, 64 KiB at a time, into an O_TMPFILE of
 * the state directory: unlinked from the start, so a client that leaves mid-body, a daemon
 * killed mid-upload, leave nothing on disk. At the end evhttp gets the head with
 * Content-Length 0 (Expect dropped: the gate answered 100 Continue itself) and dispatch() the
 * file (front_spool()), which the gate closes after the reply.
 */
#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "daemon/chunked.h"
#include "daemon/daemon.h"
#include "daemon/front.h"

#define SPOOL_READ (64u << 10)

/* Whether the header line @l (@n bytes, no line end) is named @name. */
static bool header_is(const char *l, size_t n, const char *name)
{
	size_t k = strlen(name);
	return n > k && l[k] == ':' && strncasecmp(l, name, k) == 0;
}

/* The head @p (@n bytes, through its empty line) without its Content-Length,
 * Transfer-Encoding and Expect lines, with "Content-Length: 0"; *@ret_expect when it asked
 * for 100 Continue. */
static char *head_rewrite(const char *p, size_t n, size_t *ret_len, bool *ret_expect)
{
	static const char cl0[] = "Content-Length: 0\r\n";
	char *out = malloc(n + sizeof(cl0));
	size_t o = 0;
	if (!out)
		return NULL;
	*ret_expect = false;
	for (size_t i = 0; i < n;) {
		const char *nl = memchr(p + i, '\n', n - i);
		size_t end = nl ? (size_t)(nl - p) + 1 : n, len = end - i;
		size_t bare = len - (len && p[end - 1] == '\n') - (len > 1 && p[end - 2] == '\r');
		if (bare == 0) { /* the empty line ends the head */
			memcpy(out + o, cl0, sizeof(cl0) - 1);
			o += sizeof(cl0) - 1;
		}
		if (header_is(p + i, bare, "expect"))
			*ret_expect = true;
		if (!header_is(p + i, bare, "content-length") && !header_is(p + i, bare, "expect") &&
		    !header_is(p + i, bare, "transfer-encoding")) {
			memcpy(out + o, p + i, len);
			o += len;
		}
		i = end;
	}
	*ret_len = o;
	return out;
}

static void arm_idle(struct gate *g)
{
	struct timeval tv = {SPOOL_IDLE_S, 0};
	event_add(g->deadline, &tv);
}

/* @n bytes at @p onto the spool; -errno. */
static int spool_write(struct gate *g, const void *p, size_t n)
{
	for (size_t off = 0; off < n;) {
		ssize_t w = write(g->spool_fd, (const char *)p + off, n - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		off += (size_t)w;
	}
	g->spool_len += n;
	return 0;
}

/* The whole body is in: evhttp gets the rewritten head. */
/* The whole body is in: evhttp gets the rewritten head, before what followed the body (a
 * pipelined request, left in g->buf). */
static void spool_done(struct gate *g)
{
	event_del(g->deadline);
	evbuffer_prepend(g->buf, g->spool_head, g->spool_head_len);
	size_t n = g->spool_head_len;
	free(g->spool_head);
	g->spool_head = NULL;
	free(g->chunks);
	g->chunks = NULL;
	g->chunked = false; /* evhttp reads no body */
	g->state = G_HEAD; /* what hand_over moves from */
	gate_hand_over(g, n);
}

/* The client left or stalled (@status 0), or the body is refused: nothing of it stays. */
static void spool_fail(struct gate *g, int status, const char *code, const char *msg)
{
	spool_close(g);
	if (status == 0) {
		gate_drop(g);
		return;
	}
	g->state = G_HEAD; /* gate_refuse() answers a request evhttp has not seen */
	gate_refuse(g, status, code, status == 503 ? "Retry-After: 1\r\n" : NULL, "%s", msg);
}

static void spool_write_failed(struct gate *g, int r)
{
	char msg[128];
	snprintf(msg, sizeof(msg), "the upload's spool: %s", strerror(-r));
	spool_fail(g, 507, "insufficient_storage", msg);
}

/* chunked_feed()'s callback: the decoded bytes onto the spool, within the route's limit and
 * the listener's room for spools. */
static int chunk_data(void *arg, const char *p, size_t n)
{
	struct gate *g = arg;
	if (g->spool_len + n > g->route_max)
		return -EFBIG;
	if (g->f->spooled + n > g->f->max_spool)
		return -ENOBUFS;
	g->f->spooled += n;
	g->spool_charged += n;
	return spool_write(g, p, n);
}

/* @n bytes of the body at @p; true when the body is complete (what is past it was put back
 * in g->buf) or the request was refused. */
static bool body_feed(struct gate *g, const char *p, size_t n)
{
	ssize_t k;
	if (g->chunks) {
		k = chunked_feed(g->chunks, p, n, chunk_data, g);
	} else {
		k = n < g->spool_left ? (ssize_t)n : (ssize_t)g->spool_left;
		int r = spool_write(g, p, (size_t)k);
		g->spool_left -= (uint64_t)k;
		k = r < 0 ? r : k;
	}
	if (k == -EBADMSG || k == -EFBIG) {
		char msg[128];
		snprintf(msg, sizeof(msg), k == -EBADMSG ? "bad chunked framing" : "the body is over %zu bytes",
			 g->route_max);
		spool_fail(g, k == -EBADMSG ? 400 : 413, k == -EBADMSG ? "bad_request" : "payload_too_large", msg);
		return true;
	}
	if (k == -ENOBUFS) {
		spool_fail(g, 503, "capacity", "too many uploads being spooled; retry shortly");
		return true;
	}
	if (k < 0) {
		spool_write_failed(g, (int)k);
		return true;
	}
	bool done = g->chunks ? chunked_done(g->chunks) : g->spool_left == 0;
	if (done && (size_t)k < n)
		evbuffer_prepend(g->buf, p + k, n - (size_t)k);
	if (done)
		spool_done(g);
	return done;
}

bool spool_start(struct gate *g, size_t head_len, const struct reqhead *h)
{
	bool expect = false;
	const char *p = (const char *)evbuffer_pullup(g->buf, (ev_ssize_t)head_len);
	int fd = p ? open(D.cfg.state_dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600) : -1;
	char *head = fd >= 0 ? head_rewrite(p, head_len, &g->spool_head_len, &expect) : NULL;
	struct chunked *c = head && h->chunked ? malloc(sizeof(*c)) : NULL;
	if (!head || (h->chunked && !c)) {
		free(head);
		if (fd >= 0)
			close(fd);
		return false;
	}
	if (c)
		chunked_init(c);
	g->spool_fd = fd;
	g->spool_head = head;
	g->chunks = c;
	g->spool_len = 0;
	g->spool_left = h->chunked ? 0 : h->cl;
	g->state = G_SPOOL;
	evbuffer_drain(g->buf, head_len);
	if (expect)
		(void)!send(g->fd, "HTTP/1.1 100 Continue\r\n\r\n", 25, MSG_NOSIGNAL | MSG_DONTWAIT);
	/* What came with the head (at most HEAD_MAX bytes) is the body's first part. */
	size_t have = evbuffer_get_length(g->buf);
	char first[HEAD_MAX + 1];
	if (have > sizeof(first))
		have = sizeof(first);
	evbuffer_remove(g->buf, first, have);
	if ((h->chunked || h->cl > 0) && !body_feed(g, first, have))
		arm_idle(g);
	else if (!h->chunked && h->cl == 0)
		spool_done(g);
	return true;
}

void spool_on_read(struct gate *g)
{
	char buf[SPOOL_READ];
	/* A Content-Length body is read to its end and no further; a chunked one in full reads
	 * (what follows its end goes back to g->buf). */
	size_t want = !g->chunks && g->spool_left < sizeof(buf) ? (size_t)g->spool_left : sizeof(buf);
	ssize_t n = read(g->fd, buf, want);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		spool_fail(g, 0, NULL, NULL);
		return;
	}
	if (!body_feed(g, buf, (size_t)n))
		arm_idle(g);
}

void spool_on_idle(struct gate *g)
{
	spool_fail(g, 0, NULL, NULL);
}

void spool_close(struct gate *g)
{
	g->f->spooled -= g->spool_charged;
	g->spool_charged = 0;
	if (g->spool_fd >= 0)
		close(g->spool_fd);
	g->spool_fd = -1;
	free(g->spool_head);
	g->spool_head = NULL;
	free(g->chunks);
	g->chunks = NULL;
}
