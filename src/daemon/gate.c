/* The gate of one HTTP connection (see front.c): holds evhttp off, reads and checks each
 * request head, hands it over, meters a chunked body, and refuses in JSON with a graceful
 * close. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "basic/log.h"
#include "daemon/daemon.h"
#include "daemon/front.h"

static void gate_process(struct gate *g);

/* ---- holding evhttp off ---- */

static void hold(struct gate *g)
{
	bufferevent_set_rate_limit(g->bev, front_hold_cfg);
	ev_ssize_t have = bufferevent_get_read_limit(g->bev);
	bufferevent_decrement_read_limit(g->bev, have);
}

static void grant(struct gate *g, uint64_t n)
{
	ev_ssize_t have = bufferevent_get_read_limit(g->bev);
	bufferevent_decrement_read_limit(g->bev, have - (ev_ssize_t)n);
}

void gate_release(struct gate *g)
{
	bufferevent_set_rate_limit(g->bev, NULL);
}

void gate_uncharge(struct gate *g)
{
	g->f->inflight -= g->charged;
	g->charged = 0;
}

/* ---- refusing: JSON, then a graceful close ---- */

struct lingerer {
	int fd;
	struct front *f;
	struct event *ev;
	uint64_t until_ms, dropped, max_bytes;
	struct lingerer *next, *prev;
};

static struct lingerer *lingerers;

static void linger_end(struct lingerer *l)
{
	if (l->prev)
		l->prev->next = l->next;
	else
		lingerers = l->next;
	if (l->next)
		l->next->prev = l->prev;
	event_free(l->ev);
	close(l->fd);
	l->f->conns--;
	front_listener_update(l->f);
	free(l);
}

static void on_linger(evutil_socket_t fd, short what, void *arg)
{
	struct lingerer *l = arg;
	char buf[16384];
	ssize_t n = (what & EV_READ) ? read(fd, buf, sizeof(buf)) : 0;
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n > 0)
		l->dropped += n;
	if (n <= 0 || l->dropped > l->max_bytes || now_ms() >= l->until_ms)
		linger_end(l);
}

/* Keeps the socket (a dup of evhttp's fd) open after evhttp lets go of it, reading what the
 * client still sends: a close with unread input would reset the connection and the client
 * could lose the answer. */
static void linger_start(struct front *f, int fd, uint64_t max_bytes, unsigned ms)
{
	int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	struct lingerer *l = dfd >= 0 ? calloc(1, sizeof(*l)) : NULL;
	if (!l) {
		if (dfd >= 0)
			close(dfd);
		shutdown(fd, SHUT_WR);
		return;
	}
	shutdown(dfd, SHUT_WR);
	*l = (struct lingerer){.fd = dfd, .f = f, .until_ms = now_ms() + ms, .max_bytes = max_bytes};
	l->ev = event_new(D.base, dfd, EV_READ | EV_PERSIST, on_linger, l);
	struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
	if (!l->ev || event_add(l->ev, &tv) < 0) {
		if (l->ev)
			event_free(l->ev);
		close(dfd);
		free(l);
		return;
	}
	l->next = lingerers;
	if (lingerers)
		lingerers->prev = l;
	lingerers = l;
	f->conns++;
}

void lingerers_end(void)
{
	while (lingerers)
		linger_end(lingerers);
}

static const char *status_text(int status)
{
	switch (status) {
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 411: return "Length Required";
	case 413: return "Payload Too Large";
	case 429: return "Too Many Requests";
	case 507: return "Insufficient Storage";
	case 501: return "Not Implemented";
	case 502: return "Bad Gateway";
	default: return "Service Unavailable";
	}
}

/* Answers @status {"error": {"code": @code, ...}} on the socket and ends the connection.
 * evhttp has not been given this request, so its side of the socket is idle. */
void gate_refuse(struct gate *g, int status, const char *code, const char *extra_header,
			const char *fmt, ...)
{
	char msg[300], head[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	_cleanup_free_ char *body = g->f->kind == LISTEN_E2B ? e2b_render_status(status, msg)
							    : http_error_json(code, msg);
	size_t blen = body ? strlen(body) : 0;
	int n = snprintf(head, sizeof(head),
			 "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
			 "Connection: close\r\n%s\r\n",
			 status, status_text(status), blen + 1, extra_header ? extra_header : "");
	struct iovec iov[3] = {{head, (size_t)n}, {body, blen}, {"\n", 1}};
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 3};
	(void)!sendmsg(g->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	metric_inc(M_HTTP_ERRORS);
	if (D.cfg.verbose)
		log_info("%s: refused %d %s: %s", g->f->tcp ? "tcp" : "unix", status, code, msg);
	if (g->no_linger)
		shutdown(g->fd, SHUT_WR);
	else if (g->trusted)
		linger_start(g->f, g->fd, g->announced > LINGER_BYTES ? g->announced : LINGER_BYTES,
			     LINGER_TRUSTED_MS);
	else
		linger_start(g->f, g->fd, LINGER_BYTES, LINGER_MS);
	g->state = G_REFUSED;
	event_del(g->work);
	event_del(g->deadline);
	gate_uncharge(g);
	evbuffer_drain(g->buf, evbuffer_get_length(g->buf));
	/* evhttp frees the connection on EOF; deferred, so that no caller is inside it. */
	bufferevent_trigger_event(g->bev, BEV_EVENT_EOF | BEV_EVENT_READING, BEV_TRIG_DEFER_CALLBACKS);
}

/* ---- reading and checking a head ---- */

static bool takes_body(enum evhttp_cmd_type m)
{
	return m == EVHTTP_REQ_POST || m == EVHTTP_REQ_PUT || m == EVHTTP_REQ_PATCH;
}

/* evhttp reads a body of GET, DELETE, OPTIONS and CONNECT only if one is announced, and none
 * of HEAD or TRACE: one announced there would be parsed as the next request. */
static bool may_have_body(enum evhttp_cmd_type m)
{
	return m != EVHTTP_REQ_HEAD && m != EVHTTP_REQ_TRACE;
}

/* The verdict on a complete head; true if evhttp may have the request. */
static bool check_head(struct gate *g, const struct reqhead *h)
{
	struct front *f = g->f;
	char allow[96] = "";
	size_t max_body = 0;
	g->trusted = !f->tcp || (f->kind == LISTEN_E2B ? h->api_key && http_api_key(h->api_key, h->api_key_len)
						      : http_key_ok(h->auth, h->auth_len));
	g->announced = h->chunked || h->cl > LINGER_TRUSTED_MAX ? LINGER_TRUSTED_MAX : h->cl;
	if (h->bad) {
		gate_refuse(g, 400, "bad_request", NULL, "%s", h->bad);
		return false;
	}
	/* The E2B listener's clients authenticate in their surface (X-API-KEY, access tokens). */
	if (!g->trusted && f->kind != LISTEN_E2B && strcmp(h->path, "/healthz") != 0) {
		gate_refuse(g, 401, "unauthorized", NULL, "a valid API key is needed (Authorization: Bearer KEY)");
		return false;
	}
	const struct surface *sf = NULL;
	const char *why = NULL;
	bool spool = false;
	int r = http_route_body_limit(f->kind, h->method, h->path, &max_body, &spool, allow,
				      sizeof(allow), &sf);
	if (r == -EOPNOTSUPP) {
		char hdr[128];
		snprintf(hdr, sizeof(hdr), "Allow: %s\r\n", allow);
		gate_refuse(g, 405, "method_not_allowed", hdr, "%s takes %s", h->path, allow);
		return false;
	}
	if (r == -ENOENT || h->method < 0) {
		gate_refuse(g, 404, "not_found", NULL, "no such route: %.300s", h->path);
		return false;
	}
	if (sf && sf->keyed && !g->trusted) { /* a keyed surface of the E2B listener */
		gate_refuse(g, 401, "unauthorized", NULL, "a valid API key is needed (X-API-KEY)");
		return false;
	}
	int st = sf && sf->admit && max_body > API_MAX_BODY ? sf->admit(h, &why) : 0;
	if (st) { /* an upload its surface will not take from this head */
		gate_refuse(g, st, st == 401 ? "unauthorized" : "unavailable", NULL, "%s", why);
		return false;
	}
	if (!may_have_body(h->method) && (h->chunked || h->cl > 0)) {
		gate_refuse(g, 400, "bad_request", NULL, "a HEAD or TRACE request has no body");
		return false;
	}
	if (takes_body(h->method) && !h->has_cl && !h->chunked) {
		gate_refuse(g, 411, "length_required", NULL,
			    "a body needs Content-Length or Transfer-Encoding: chunked");
		return false;
	}
	if (h->cl > max_body) {
		gate_refuse(g, 413, "payload_too_large", NULL, "the body is %llu bytes; %s takes at most %zu",
			    (unsigned long long)h->cl, h->path, max_body);
		return false;
	}
	/* A spooled body is on disk, not in flight in memory. */
	g->spool_want = spool && (h->chunked || h->cl >= SPOOL_MIN_BYTES);
	uint64_t want = g->spool_want ? 0
		      : h->chunked ? (CHUNK_SLICE < max_body ? CHUNK_SLICE : max_body) + 64 : h->cl;
	/* A Content-Length body to spool takes its room on disk now; a chunked one as it comes. */
	uint64_t spool_want = g->spool_want && !h->chunked ? h->cl : 0;
	if (f->inflight + want > f->max_inflight || f->spooled + spool_want > f->max_spool) {
		gate_refuse(g, 503, "capacity", "Retry-After: 1\r\n",
			    "too many request bodies in flight; retry shortly");
		return false;
	}
	f->inflight += want;
	g->charged = want;
	f->spooled += spool_want;
	g->spool_charged = spool_want;
	g->chunked = h->chunked;
	g->granted = want;
	/* A chunked body is measured on the wire, framing included: allow for it here; dispatch
	 * checks the decoded length exactly. */
	g->max_body = max_body + max_body / 16 + 4096;
	g->route_max = max_body;
	return true;
}

/* Gives evhttp the head (and what followed it) and lets it read the body. */
void gate_hand_over(struct gate *g, size_t head_len)
{
	size_t have = evbuffer_get_length(g->buf);
	event_del(g->deadline);
	event_del(g->work);
	struct evbuffer *in = bufferevent_get_input(g->bev);
	/* A socket bufferevent freezes its input's end between its own reads. */
	evbuffer_unfreeze(in, 0);
	int r = evbuffer_add_buffer(in, g->buf); /* not counted by gate_on_input: still G_HEAD */
	evbuffer_freeze(in, 0);
	if (r < 0) {
		g->state = G_REFUSED;
		bufferevent_trigger_event(g->bev, BEV_EVENT_EOF | BEV_EVENT_READING, BEV_TRIG_DEFER_CALLBACKS);
		return;
	}
	g->state = G_BODY;
	g->body_seen = have - head_len;
	if (g->chunked && g->body_seen >= g->granted)
		event_active(g->deadline, EV_READ, 0); /* decide on the next grant at once */
	else if (g->chunked)
		grant(g, g->granted - g->body_seen);
	else
		gate_release(g);
	bufferevent_trigger(g->bev, EV_READ, BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
}

/* A raw route (a tunnel, http_takeover()) takes the socket: its handler has a dup, and
 * evhttp, which has seen nothing of this request, drops the connection without touching the
 * socket: its events go first, then /dev/null takes the fd's number, so that evhttp's
 * shutdown() and close() reach nothing of the client's. */
/* With @by_host, for a request its Host alone routes (http_takeover_host()): the whole request
 * so far is the handler's. */
static bool take_over(struct gate *g, const struct reqhead *h, size_t head_len, size_t len,
		      bool by_host)
{
	char auth[256]; /* @h points into the buffer, which the pullup below may move */
	size_t auth_len = h->auth && h->auth_len < sizeof(auth) ? h->auth_len : 0;
	memcpy(auth, auth_len ? h->auth : "", auth_len);
	const char *p = (const char *)evbuffer_pullup(g->buf, -1);
	if (!p || !(by_host ? http_takeover_host(g->f->kind, g->fd, p, len)
			    : http_takeover(g->f->kind, h->method, h->path, auth, auth_len, g->fd,
					    p + head_len, len - head_len)))
		return false;
	g->state = G_REFUSED;
	event_del(g->work);
	event_del(g->deadline);
	gate_uncharge(g);
	evbuffer_drain(g->buf, evbuffer_get_length(g->buf));
	bufferevent_disable(g->bev, EV_READ | EV_WRITE);
	int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (nul < 0 || dup3(nul, g->fd, O_CLOEXEC) < 0)
		log_warning("a tunnel's socket stays evhttp's too: %m");
	if (nul >= 0)
		close(nul);
	bufferevent_trigger_event(g->bev, BEV_EVENT_EOF | BEV_EVENT_READING, BEV_TRIG_DEFER_CALLBACKS);
	return true;
}

static void gate_process(struct gate *g)
{
	size_t len;
	/* RFC 9112: a server ignores empty lines before a request line. */
	while ((len = evbuffer_get_length(g->buf))) {
		char c;
		evbuffer_copyout(g->buf, &c, 1);
		if (c != '\r' && c != '\n')
			break;
		evbuffer_drain(g->buf, 1);
	}
	if (len == 0)
		return;
	size_t look = len < HEAD_MAX + 1 ? len : HEAD_MAX + 1;
	const char *p = (const char *)evbuffer_pullup(g->buf, look);
	size_t n = p ? reqhead_end(p, look) : 0;
	if (n == 0) {
		if (len > HEAD_MAX)
			gate_refuse(g, 400, "bad_request", NULL, "request headers over %u bytes", HEAD_MAX);
		return;
	}
	struct reqhead h;
	reqhead_parse(p, n, &h);
	if (!h.bad && http_host_claimed(g->f->kind, &h) && take_over(g, &h, n, len, true))
		return;
	if (check_head(g, &h) && !take_over(g, &h, n, len, false) &&
	    !(g->spool_want && spool_start(g, n, &h)))
		gate_hand_over(g, n);
}

void gate_drop(struct gate *g)
{
	g->state = G_REFUSED;
	event_del(g->work);
	event_del(g->deadline);
	/* Deferred, so that no caller is inside evhttp when it frees the connection. */
	bufferevent_trigger_event(g->bev, BEV_EVENT_EOF | BEV_EVENT_READING, BEV_TRIG_DEFER_CALLBACKS);
}

static void arm_deadline(struct gate *g, unsigned seconds)
{
	struct timeval tv = {seconds, 0};
	event_add(g->deadline, &tv);
}

/* The socket is readable (EV_READ), or the gate holds bytes to look at (EV_TIMEOUT). */
void gate_on_read(evutil_socket_t fd, short what, void *arg)
{
	struct gate *g = arg;
	if (g->state == G_SPOOL && (what & EV_READ))
		spool_on_read(g);
	if (g->state != G_HEAD)
		return;
	if (what & EV_READ) {
		size_t had = evbuffer_get_length(g->buf);
		size_t room = had <= HEAD_MAX ? HEAD_MAX + 1 - had : 1;
		int n = evbuffer_read(g->buf, fd, (int)room);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n <= 0) {
			/* Gone, or half-closed without a complete request: evhttp drops it. */
			gate_drop(g);
			return;
		}
		if (had == 0 && !g->first)
			arm_deadline(g, (unsigned)D.cfg.header_timeout_s);
	}
	gate_process(g);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
	struct gate *g = arg;
	if (g->state != G_HEAD)
		return;
	if (D.cfg.verbose)
		log_info("%s: no complete request headers in time; closing", g->f->tcp ? "tcp" : "unix");
	g->state = G_REFUSED;
	event_del(g->work);
	bufferevent_trigger_event(g->bev, BEV_EVENT_READING | BEV_EVENT_TIMEOUT, BEV_TRIG_DEFER_CALLBACKS);
}

/* Waits for the next head: evhttp is held off, and what it read past the last request is the
 * gate's again. */
void gate_start_head(struct gate *g)
{
	struct evbuffer *in = bufferevent_get_input(g->bev);
	g->state = G_HEAD;
	g->chunked = false;
	g->body_seen = g->granted = 0;
	hold(g);
	evbuffer_add_buffer(g->buf, in);
	arm_deadline(g, g->first || evbuffer_get_length(g->buf) ? (unsigned)D.cfg.header_timeout_s
								 : KEEPALIVE_IDLE_S);
	event_add(g->work, NULL);
	if (evbuffer_get_length(g->buf))
		event_active(g->work, EV_TIMEOUT, 0);
}

void gate_on_closed(struct evhttp_connection *evcon, void *arg)
{
	struct gate *g = arg;
	if (g->close_cb)
		g->close_cb(evcon, g->close_arg);
	gate_free(g);
}

/* Counts what evhttp reads of a chunked body; at the end of a grant, the gate decides on the
 * next one (in its own callback: this one runs inside the bufferevent's read). */
void gate_on_input(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct gate *g = arg;
	if (g->state != G_BODY || !g->chunked || !info->n_added)
		return;
	g->body_seen += info->n_added;
	if (g->body_seen >= g->granted)
		event_active(g->deadline, EV_READ, 0);
}

static void on_chunk_grant(struct gate *g)
{
	struct front *f = g->f;
	if (g->body_seen > g->max_body) {
		gate_refuse(g, 413, "payload_too_large", NULL, "the body is over %zu bytes",
			    g->route_max);
		return;
	}
	if (f->inflight + CHUNK_SLICE > f->max_inflight) {
		gate_refuse(g, 503, "capacity", "Retry-After: 1\r\n",
			    "too many request bodies in flight; retry shortly");
		return;
	}
	f->inflight += CHUNK_SLICE;
	g->charged += CHUNK_SLICE;
	g->granted += CHUNK_SLICE;
	grant(g, g->granted - g->body_seen);
}

void gate_on_timer(evutil_socket_t fd, short what, void *arg)
{
	struct gate *g = arg;
	if (g->state == G_BODY && (what & EV_READ))
		on_chunk_grant(g);
	else if (g->state == G_SPOOL && (what & EV_TIMEOUT))
		spool_on_idle(g);
	else if (g->state == G_HEAD && (what & EV_TIMEOUT))
		on_deadline(fd, what, g);
}

void gate_request_done(struct evhttp_request *req, void *arg)
{
	struct gate *g = arg;
	gate_uncharge(g);
	spool_close(g);
	g->first = false;
	gate_start_head(g);
}

