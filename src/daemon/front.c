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
 *
 * This file admits connections and keeps their gates; gate.c is the gate itself.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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
#include "daemon/front.h"

static struct front *fronts[_LISTEN_MAX];
static bool stopping; /* the listeners are gone (front_quiesce) */
struct ev_token_bucket_cfg *front_hold_cfg; /* read: no refill to speak of; write: unlimited */
static struct event *sweep_ev;

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

void front_listener_update(struct front *f)
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
	front_listener_update(f);
}

/* accept() failed with something other than EAGAIN: usually EMFILE, when the listener would
 * be woken again at once by the same pending connection. Pause it instead of spinning. */
static void on_accept_error(struct evconnlistener *lev, void *arg)
{
	int e = EVUTIL_SOCKET_ERROR();
	struct front *f = NULL;
	for (int i = 0; i < _LISTEN_MAX; i++)
		if (fronts[i] && fronts[i]->lev == lev)
			f = fronts[i];
	if (!f)
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
	evhttp_connection_set_closecb(g->evcon, gate_on_closed, g);
	g->state = G_HEAD;
	g->fd = bufferevent_getfd(g->bev);
	event_free(g->work);
	g->work = g->fd >= 0 ? event_new(D.base, g->fd, EV_READ | EV_PERSIST, gate_on_read, g) : NULL;
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
	/* A stream's events are small writes one after another: without this, Nagle holds each
	 * one back until the client's delayed ACK of the one before (40 ms apiece). */
	if (g->f->tcp)
		(void)setsockopt(g->fd, IPPROTO_TCP, TCP_NODELAY, &(int){1}, sizeof(int));
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
	gate_start_head(g);
}

static void on_attach(evutil_socket_t fd, short what, void *arg)
{
	attach(arg);
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
		g->deadline = event_new(base, -1, 0, gate_on_timer, g);
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
	*g = (struct gate){.f = f, .bev = bev, .fd = -1, .spool_fd = -1, .first = true, .buf = g->buf,
			   .work = g->work, .deadline = g->deadline, .next = f->gates};
	if (f->gates)
		f->gates->prev = g;
	f->gates = g;
	f->conns++;
	front_listener_update(f);
	bufferevent_set_rate_limit(bev, front_hold_cfg);
	bufferevent_decrement_read_limit(bev, bufferevent_get_read_limit(bev));
	evbuffer_add_cb(bufferevent_get_input(bev), gate_on_input, g);
	bufferevent_incref(bev); /* until attach() has looked at it */
	event_active(g->work, EV_TIMEOUT, 0);
	return bev;
}

void gate_free(struct gate *g)
{
	struct front *f = g->f;
	if (g->bev && g->state != G_NEW)
		evbuffer_remove_cb(bufferevent_get_input(g->bev), gate_on_input, g);
	gate_uncharge(g);
	spool_close(g);
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
	front_listener_update(f);
}

/* A gate whose connection evhttp freed without its close callback (a handler may clear it
 * before evhttp_connection_free) is found by its socket: gone, or another socket. */
static void front_sweep(evutil_socket_t fd, short what, void *arg)
{
	for (int i = 0; i < _LISTEN_MAX; i++)
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
	for (int i = 0; i < _LISTEN_MAX; i++)
		for (struct gate *g = fronts[i] ? fronts[i]->gates : NULL; g; g = g->next)
			if (g->evcon == evcon)
				return g;
	return NULL;
}

/* ---- what http.c calls ---- */
int front_listener(struct evhttp_request *req)
{
	struct gate *g = gate_of(req);
	return g ? (int)g->f->kind : -1;
}

/* dispatch() has @req with its whole body: the gate waits for its reply, then the next head. */
void front_request(struct evhttp_request *req)
{
	struct gate *g = gate_of(req);
	if (!g || g->state != G_BODY)
		return;
	g->state = G_DISPATCHED;
	gate_release(g);
	evhttp_request_set_on_complete_cb(req, gate_request_done, g);
}

int front_spool(struct evhttp_request *req, uint64_t *ret_len)
{
	struct gate *g = gate_of(req);
	if (!g || g->spool_fd < 0)
		return -1;
	*ret_len = g->spool_len;
	return g->spool_fd;
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

int front_attach(struct evhttp *http, struct evhttp_bound_socket *bound, enum listener l)
{
	if (!front_hold_cfg) {
		struct timeval tick = {30 * 86400, 0}; /* one byte of refill a month: none */
		front_hold_cfg = ev_token_bucket_cfg_new(1, (size_t)1 << 40, (size_t)1 << 40, (size_t)1 << 40, &tick);
		struct timeval sweep = {1, 0};
		sweep_ev = event_new(D.base, -1, EV_PERSIST, front_sweep, NULL);
		if (!front_hold_cfg || !sweep_ev || event_add(sweep_ev, &sweep) < 0)
			return -ENOMEM;
	}
	struct front *f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	*f = (struct front){.tcp = l != LISTEN_UNIX, .kind = l, .http = http, .lev = evhttp_bound_socket_get_listener(bound),
			    .max_inflight = D.cfg.max_inflight, .max_spool = D.cfg.max_spool};
	f->resume_ev = event_new(D.base, -1, 0, on_resume, f);
	if (!f->resume_ev) {
		free(f);
		return -ENOMEM;
	}
	set_caps(f);
	fronts[l] = f;
	evhttp_set_bevcb(http, on_new_connection, f);
	evconnlistener_set_error_cb(f->lev, on_accept_error);
	return 0;
}

/* Before evhttp_free(), which frees the listeners and then every connection (and so every
 * gate, through its close callback). */
void front_quiesce(void)
{
	stopping = true;
	for (int i = 0; i < _LISTEN_MAX; i++)
		if (fronts[i])
			event_del(fronts[i]->resume_ev);
}

/* After evhttp_free(). */
void front_stop(void)
{
	lingerers_end();
	for (int i = 0; i < _LISTEN_MAX; i++) {
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
