/* The front door of cordond's HTTP listeners: who may connect, and which requests evhttp may
 * read.
 *
 * libevent 2.1's evhttp reads a request's headers and its whole body before any of our code
 * runs, and answers its own errors in HTML. So each connection gets a gate that reads the
 * request head itself while evhttp is held off (a read rate limit with no tokens: evhttp's own
 * enable calls cannot lift it), checks the head (route, API key, framing, size, bytes in
 * flight), and only then hands the head to evhttp and lets it read the body. A refused request
 * is answered here in JSON and the connection closed gracefully (shutdown, then the rest of
 * the upload is read and dropped for a moment, so that the client can read the answer). After
 * each reply (evhttp's on_complete) the gate holds evhttp off again for the next head.
 *
 * Admission: each listener has a connection cap (TCP's also per peer address, and lowered to
 * fit RLIMIT_NOFILE so that the unix socket keeps fds of its own); at the cap the listener is
 * paused, not spun. A connection must send a complete head within --header-timeout seconds.
 * accept() failures (EMFILE) pause the listener briefly and are logged once a second.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <event2/listener.h>

#include "basic/log.h"
#include "daemon/daemon.h"
#include "daemon/reqhead.h"

#define HEAD_MAX	   (16u << 10)	/* bytes of a request line and headers (evhttp's too) */
#define CHUNK_SLICE	   (256u << 10) /* bytes of a chunked body evhttp may read per grant */
/* The rest of a refused upload is read and dropped, so that a client still sending can read
 * the answer: from a stranger 2 s or 16 MiB at most; from a local or authenticated client the
 * body it announced, up to 10 s or 128 MiB. */
#define LINGER_MS	   2000
#define LINGER_BYTES	   (16u << 20)
#define LINGER_TRUSTED_MS  10000
#define LINGER_TRUSTED_MAX (128u << 20)
#define ACCEPT_PAUSE_MS	   200		/* after EMFILE/ENFILE */
#define UNIX_MAX_CONNS	   256
#define KEEPALIVE_IDLE_S   120		/* between requests on a kept-alive connection */

enum gate_state { G_NEW, G_HEAD, G_BODY, G_DISPATCHED, G_REFUSED };

struct front;

struct gate {
	struct front *f;
	struct bufferevent *bev; /* evhttp's, made by us in bevcb */
	struct evhttp_connection *evcon;
	enum gate_state state;
	int fd;
	dev_t dev; /* with ino, the socket: a stale gate is told by it (see front_sweep) */
	ino_t ino;
	struct sockaddr_storage peer;
	socklen_t peer_len;
	struct evbuffer *buf; /* bytes read by the gate, not yet given to evhttp */
	struct event *work, *deadline;
	bool first, chunked;
	bool trusted;         /* the current head came on the unix socket or with a valid key */
	bool no_linger;       /* refused for want of fds: no dup to linger on */
	uint64_t announced;   /* its Content-Length, at most LINGER_TRUSTED_MAX */
	uint64_t charged;     /* body bytes of the current request counted in f->inflight */
	uint64_t body_seen;   /* bytes evhttp has read past the current head */
	uint64_t granted;     /* chunked: bytes past the head evhttp may read */
	uint64_t max_body;    /* bytes on the wire past the head */
	size_t route_max;     /* the route's limit on the (decoded) body */
	void (*close_cb)(struct evhttp_connection *, void *); /* a handler's */
	void *close_arg;
	struct gate *next, *prev;
};

struct front {
	bool tcp;
	struct evhttp *http;
	struct evconnlistener *lev;
	size_t conns, max_conns, max_peer; /* conns counts lingering refusals too */
	uint64_t inflight, max_inflight;
	bool paused_cap, paused_err;
	struct event *resume_ev;
	uint64_t warn_ms;
	unsigned warn_count;
	struct gate *gates;
};

static struct front *fronts[2];
static bool stopping; /* the listeners are gone (front_quiesce) */
static struct ev_token_bucket_cfg *hold_cfg; /* read: no refill to speak of; write: unlimited */
static struct event *sweep_ev;

static void gate_free(struct gate *g);
static void gate_process(struct gate *g);

/* ---- admission ---- */

static size_t fd_limit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return 65536;
	return rl.rlim_cur;
}

/* Whether a new connection got an fd close to the limit. The kernel hands out the lowest free
 * number, so every fd below @fd is in use: whatever holds them (sandboxes, files, clients),
 * TCP stops taking more while the rest is the unix socket's and the daemon's own. */
static bool fds_short(int fd)
{
	size_t lim = fd_limit(), reserve = lim / 8 > 32 ? lim / 8 : 32;
	return (size_t)fd + reserve >= lim;
}

static void pause_listener(struct front *f)
{
	struct timeval tv = {0, ACCEPT_PAUSE_MS * 1000};
	evconnlistener_disable(f->lev);
	f->paused_err = true;
	event_add(f->resume_ev, &tv);
}

static void warn_limited(struct front *f, const char *what)
{
	uint64_t now = now_ms();
	f->warn_count++;
	if (now - f->warn_ms < 1000)
		return;
	log_warning("%s socket: %s; paused %d ms (%u times since the last warning)",
		    f->tcp ? "TCP" : "unix", what, ACCEPT_PAUSE_MS, f->warn_count);
	f->warn_ms = now;
	f->warn_count = 0;
}

static void listener_update(struct front *f)
{
	bool full = f->conns >= f->max_conns;
	if (f->paused_err || stopping) /* on_resume() decides; or there is no listener */
		return;
	if (full && !f->paused_cap) {
		f->paused_cap = true;
		evconnlistener_disable(f->lev);
	} else if (!full && f->paused_cap) {
		f->paused_cap = false;
		evconnlistener_enable(f->lev);
	}
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
	struct front *f = arg;
	f->paused_err = false;
	f->paused_cap = true; /* it is disabled: enabled again unless full */
	listener_update(f);
}

/* accept() failed with something other than EAGAIN: usually EMFILE, when the listener would
 * be woken again at once by the same pending connection. Pause it instead of spinning. */
static void on_accept_error(struct evconnlistener *lev, void *arg)
{
	int e = EVUTIL_SOCKET_ERROR();
	struct front *f = fronts[0] && fronts[0]->lev == lev ? fronts[0] : fronts[1];
	if (!f || f->lev != lev)
		return;
	char what[160];
	snprintf(what, sizeof(what), "accept: %s", strerror(e));
	warn_limited(f, what);
	pause_listener(f);
}

static bool same_peer(const struct gate *a, const struct gate *b)
{
	if (a->peer_len != b->peer_len || a->peer.ss_family != b->peer.ss_family)
		return false;
	if (a->peer.ss_family == AF_INET)
		return ((const struct sockaddr_in *)&a->peer)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)&b->peer)->sin_addr.s_addr;
	if (a->peer.ss_family == AF_INET6)
		return memcmp(&((const struct sockaddr_in6 *)&a->peer)->sin6_addr,
			      &((const struct sockaddr_in6 *)&b->peer)->sin6_addr, 16) == 0;
	return false;
}

static size_t peer_conns(const struct gate *g)
{
	size_t n = 0;
	for (const struct gate *o = g->f->gates; o; o = o->next)
		if (o != g && o->state != G_NEW && same_peer(o, g))
			n++;
	return n;
}

/* ---- holding evhttp off ---- */

static void hold(struct gate *g)
{
	bufferevent_set_rate_limit(g->bev, hold_cfg);
	ev_ssize_t have = bufferevent_get_read_limit(g->bev);
	bufferevent_decrement_read_limit(g->bev, have);
}

static void grant(struct gate *g, uint64_t n)
{
	ev_ssize_t have = bufferevent_get_read_limit(g->bev);
	bufferevent_decrement_read_limit(g->bev, have - (ev_ssize_t)n);
}

static void release(struct gate *g)
{
	bufferevent_set_rate_limit(g->bev, NULL);
}

static void uncharge(struct gate *g)
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
	listener_update(l->f);
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
	default: return "Service Unavailable";
	}
}

/* Answers @status {"error": {"code": @code, ...}} on the socket and ends the connection.
 * evhttp has not been given this request, so its side of the socket is idle. */
static void gate_refuse(struct gate *g, int status, const char *code, const char *extra_header,
			const char *fmt, ...)
{
	char msg[300], head[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	_cleanup_free_ char *body = http_error_json(code, msg);
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
	uncharge(g);
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
	g->trusted = !f->tcp || http_key_ok(h->auth, h->auth_len);
	g->announced = h->chunked || h->cl > LINGER_TRUSTED_MAX ? LINGER_TRUSTED_MAX : h->cl;
	if (h->bad) {
		gate_refuse(g, 400, "bad_request", NULL, "%s", h->bad);
		return false;
	}
	if (!g->trusted && strcmp(h->path, "/healthz") != 0) {
		gate_refuse(g, 401, "unauthorized", NULL, "a valid API key is needed (Authorization: Bearer KEY)");
		return false;
	}
	int r = http_route_body_limit(h->method, h->path, &max_body, allow, sizeof(allow));
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
	uint64_t want = h->chunked ? (CHUNK_SLICE < max_body ? CHUNK_SLICE : max_body) + 64 : h->cl;
	if (f->inflight + want > f->max_inflight) {
		gate_refuse(g, 503, "capacity", "Retry-After: 1\r\n",
			    "too many request bodies in flight; retry shortly");
		return false;
	}
	f->inflight += want;
	g->charged = want;
	g->chunked = h->chunked;
	g->granted = want;
	/* A chunked body is measured on the wire, framing included: allow for it here; dispatch
	 * checks the decoded length exactly. */
	g->max_body = max_body + max_body / 16 + 4096;
	g->route_max = max_body;
	return true;
}

/* Gives evhttp the head (and what followed it) and lets it read the body. */
static void hand_over(struct gate *g, size_t head_len)
{
	size_t have = evbuffer_get_length(g->buf);
	event_del(g->deadline);
	event_del(g->work);
	struct evbuffer *in = bufferevent_get_input(g->bev);
	/* A socket bufferevent freezes its input's end between its own reads. */
	evbuffer_unfreeze(in, 0);
	int r = evbuffer_add_buffer(in, g->buf); /* not counted by on_input: still G_HEAD */
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
		release(g);
	bufferevent_trigger(g->bev, EV_READ, BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
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
	if (check_head(g, &h))
		hand_over(g, n);
}

static void arm_deadline(struct gate *g, unsigned seconds)
{
	struct timeval tv = {seconds, 0};
	event_add(g->deadline, &tv);
}

/* The socket is readable (EV_READ), or the gate holds bytes to look at (EV_TIMEOUT). */
static void on_gate_read(evutil_socket_t fd, short what, void *arg)
{
	struct gate *g = arg;
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
			g->state = G_REFUSED;
			event_del(g->work);
			event_del(g->deadline);
			bufferevent_trigger_event(g->bev, BEV_EVENT_EOF | BEV_EVENT_READING,
						  BEV_TRIG_DEFER_CALLBACKS);
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
static void start_head(struct gate *g)
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

static void on_gate_closed(struct evhttp_connection *evcon, void *arg)
{
	struct gate *g = arg;
	if (g->close_cb)
		g->close_cb(evcon, g->close_arg);
	gate_free(g);
}

/* Runs once the connection is made (evhttp has given the bufferevent its fd). */
static void attach(struct gate *g)
{
	bufferevent_data_cb rcb, wcb;
	bufferevent_event_cb ecb;
	void *arg = NULL;
	struct stat st;
	bufferevent_getcb(g->bev, &rcb, &wcb, &ecb, &arg);
	bufferevent_decref(g->bev); /* ours, from on_new_connection() */
	if (!ecb) { /* evhttp gave up on the connection already: that was the last reference */
		g->bev = NULL;
		gate_free(g);
		return;
	}
	g->evcon = arg;
	evhttp_connection_set_closecb(g->evcon, on_gate_closed, g);
	g->state = G_HEAD;
	g->fd = bufferevent_getfd(g->bev);
	event_free(g->work);
	g->work = g->fd >= 0 ? event_new(D.base, g->fd, EV_READ | EV_PERSIST, on_gate_read, g) : NULL;
	if (!g->work || fstat(g->fd, &st) < 0) {
		g->state = G_REFUSED; /* evhttp drops it, and the close callback frees the gate */
		bufferevent_trigger_event(g->bev, BEV_EVENT_EOF | BEV_EVENT_READING, BEV_TRIG_DEFER_CALLBACKS);
		return;
	}
	g->dev = st.st_dev;
	g->ino = st.st_ino;
	g->peer_len = sizeof(g->peer);
	if (g->f->tcp && getpeername(g->fd, (struct sockaddr *)&g->peer, &g->peer_len) < 0)
		g->peer_len = 0;
	if (g->f->tcp && fds_short(g->fd) && !stopping) {
		g->no_linger = true;
		warn_limited(g->f, "too few file descriptors left for TCP clients");
		pause_listener(g->f);
		gate_refuse(g, 503, "capacity", "Retry-After: 1\r\n",
			    "the server is short of file descriptors; retry shortly");
		return;
	}
	if (g->f->tcp && peer_conns(g) >= g->f->max_peer) {
		gate_refuse(g, 429, "quota_exceeded", "Retry-After: 1\r\n",
			    "too many connections from this address (at most %zu)", g->f->max_peer);
		return;
	}
	start_head(g);
}

static void on_attach(evutil_socket_t fd, short what, void *arg)
{
	attach(arg);
}

/* Counts what evhttp reads of a chunked body; at the end of a grant, the gate decides on the
 * next one (in its own callback: this one runs inside the bufferevent's read). */
static void on_input(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
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

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
	struct gate *g = arg;
	if (g->state == G_BODY && (what & EV_READ))
		on_chunk_grant(g);
	else if (g->state == G_HEAD && (what & EV_TIMEOUT))
		on_deadline(fd, what, g);
}

/* evhttp's bevcb: every connection's bufferevent is made here, with evhttp held off. */
static struct bufferevent *on_new_connection(struct event_base *base, void *arg)
{
	struct front *f = arg;
	struct gate *g = calloc(1, sizeof(*g));
	struct bufferevent *bev = bufferevent_socket_new(base, -1, 0);
	if (g)
		g->buf = evbuffer_new();
	if (g && bev && g->buf) {
		g->work = event_new(base, -1, 0, on_attach, g);
		g->deadline = event_new(base, -1, 0, on_timer, g);
	}
	if (!g || !bev || !g->buf || !g->work || !g->deadline) {
		if (g) {
			if (g->buf)
				evbuffer_free(g->buf);
			if (g->work)
				event_free(g->work);
			if (g->deadline)
				event_free(g->deadline);
			free(g);
		}
		return bev; /* evhttp serves it unguarded: better than a crash; memory is short */
	}
	*g = (struct gate){.f = f, .bev = bev, .fd = -1, .first = true, .buf = g->buf,
			   .work = g->work, .deadline = g->deadline, .next = f->gates};
	if (f->gates)
		f->gates->prev = g;
	f->gates = g;
	f->conns++;
	listener_update(f);
	bufferevent_set_rate_limit(bev, hold_cfg);
	bufferevent_decrement_read_limit(bev, bufferevent_get_read_limit(bev));
	evbuffer_add_cb(bufferevent_get_input(bev), on_input, g);
	bufferevent_incref(bev); /* until attach() has looked at it */
	event_active(g->work, EV_TIMEOUT, 0);
	return bev;
}

static void gate_free(struct gate *g)
{
	struct front *f = g->f;
	if (g->bev && g->state != G_NEW)
		evbuffer_remove_cb(bufferevent_get_input(g->bev), on_input, g);
	uncharge(g);
	if (g->work)
		event_free(g->work);
	event_free(g->deadline);
	evbuffer_free(g->buf);
	if (g->prev)
		g->prev->next = g->next;
	else
		f->gates = g->next;
	if (g->next)
		g->next->prev = g->prev;
	f->conns--;
	free(g);
	listener_update(f);
}

/* A gate whose connection evhttp freed without its close callback (a handler may clear it
 * before evhttp_connection_free) is found by its socket: gone, or another socket. */
static void front_sweep(evutil_socket_t fd, short what, void *arg)
{
	for (int i = 0; i < 2; i++)
		for (struct gate *g = fronts[i] ? fronts[i]->gates : NULL, *next; g; g = next) {
			struct stat st;
			next = g->next;
			if (g->state == G_NEW ||
			    (fstat(g->fd, &st) == 0 && st.st_ino == g->ino && st.st_dev == g->dev))
				continue;
			g->bev = NULL; /* freed with its connection */
			gate_free(g);
		}
}

static struct gate *gate_of(struct evhttp_request *req)
{
	struct evhttp_connection *evcon = req ? evhttp_request_get_connection(req) : NULL;
	if (!evcon)
		return NULL;
	for (int i = 0; i < 2; i++)
		for (struct gate *g = fronts[i] ? fronts[i]->gates : NULL; g; g = g->next)
			if (g->evcon == evcon)
				return g;
	return NULL;
}

/* ---- what http.c calls ---- */

static void on_request_done(struct evhttp_request *req, void *arg)
{
	struct gate *g = arg;
	uncharge(g);
	g->first = false;
	start_head(g);
}

/* dispatch() has @req with its whole body: the gate waits for its reply, then the next head. */
void front_request(struct evhttp_request *req)
{
	struct gate *g = gate_of(req);
	if (!g || g->state != G_BODY)
		return;
	g->state = G_DISPATCHED;
	release(g);
	evhttp_request_set_on_complete_cb(req, on_request_done, g);
}

void front_on_close(struct evhttp_request *req, void (*cb)(struct evhttp_connection *, void *),
		    void *arg)
{
	struct gate *g = gate_of(req);
	if (g) {
		g->close_cb = cb;
		g->close_arg = arg;
	} else if (evhttp_request_get_connection(req)) {
		evhttp_connection_set_closecb(evhttp_request_get_connection(req), cb, arg);
	}
}

/* Half of the process's fds at most go to clients, so that sandboxes, the state database and
 * the audit logs keep theirs; the unix socket's share is its own, so that it answers when TCP
 * is at its cap. */
static void set_caps(struct front *f)
{
	size_t clients = fd_limit() / 2;
	size_t unix_cap = clients / 4 < UNIX_MAX_CONNS ? clients / 4 : UNIX_MAX_CONNS;
	if (!f->tcp) {
		f->max_conns = unix_cap;
		return;
	}
	size_t tcp_cap = clients - unix_cap;
	f->max_conns = D.cfg.max_connections < tcp_cap ? D.cfg.max_connections : tcp_cap;
	if (f->max_conns < D.cfg.max_connections)
		log_warning("TCP connections capped at %zu to fit RLIMIT_NOFILE (%zu)", f->max_conns,
			    fd_limit());
	f->max_peer = D.cfg.max_peer_connections ? D.cfg.max_peer_connections : f->max_conns;
}

int front_attach(struct evhttp *http, struct evhttp_bound_socket *bound, bool tcp)
{
	if (!hold_cfg) {
		struct timeval tick = {30 * 86400, 0}; /* one byte of refill a month: none */
		hold_cfg = ev_token_bucket_cfg_new(1, (size_t)1 << 40, (size_t)1 << 40, (size_t)1 << 40, &tick);
		struct timeval sweep = {1, 0};
		sweep_ev = event_new(D.base, -1, EV_PERSIST, front_sweep, NULL);
		if (!hold_cfg || !sweep_ev || event_add(sweep_ev, &sweep) < 0)
			return -ENOMEM;
	}
	struct front *f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	*f = (struct front){.tcp = tcp, .http = http, .lev = evhttp_bound_socket_get_listener(bound),
			    .max_inflight = D.cfg.max_inflight};
	f->resume_ev = event_new(D.base, -1, 0, on_resume, f);
	if (!f->resume_ev) {
		free(f);
		return -ENOMEM;
	}
	set_caps(f);
	fronts[tcp] = f;
	evhttp_set_bevcb(http, on_new_connection, f);
	evconnlistener_set_error_cb(f->lev, on_accept_error);
	return 0;
}

/* Before evhttp_free(), which frees the listeners and then every connection (and so every
 * gate, through its close callback). */
void front_quiesce(void)
{
	stopping = true;
	for (int i = 0; i < 2; i++)
		if (fronts[i])
			event_del(fronts[i]->resume_ev);
}

/* After evhttp_free(). */
void front_stop(void)
{
	while (lingerers)
		linger_end(lingerers);
	for (int i = 0; i < 2; i++) {
		struct front *f = fronts[i];
		if (!f)
			continue;
		while (f->gates) { /* stale ones, not swept yet: their bufferevents are gone */
			struct gate *g = f->gates;
			if (g->state == G_NEW && g->bev)
				bufferevent_decref(g->bev);
			g->bev = NULL;
			gate_free(g);
		}
		event_free(f->resume_ev);
		free(f);
		fronts[i] = NULL;
	}
	if (sweep_ev)
		event_free(sweep_ev);
	sweep_ev = NULL;
}
