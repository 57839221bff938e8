/* The HTTP face of cordond: listeners, the route table, authentication and replies.
 *
 * front.c admits each connection and checks each request head (API key, route, framing, the
 * route's body limit, bytes in flight) before evhttp may read the body; evhttp then reads the
 * request, and dispatch() matches the route table, checks the principal again and calls the
 * handler. Every error, the front's included, is JSON {"error": {"code", "message"}}.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <openssl/crypto.h>

#include "basic/log.h"
#include "daemon/daemon.h"
#include "daemon/reqhead.h"
#include "daemon/service.h"

#define MAX_HEADERS (16u << 10)
#define HTTP_TIMEOUT_S 120

/* The surfaces both listeners answer (http_start), in the order they are matched. */
static const struct surface *const *surfaces;
static size_t n_surfaces;

static const char *reason(int status)
{
	static const struct {
		int status;
		const char *text;
	} t[] = {{200, "OK"}, {201, "Created"}, {204, "No Content"}, {400, "Bad Request"},
		 {401, "Unauthorized"}, {403, "Forbidden"}, {404, "Not Found"},
		 {405, "Method Not Allowed"}, {409, "Conflict"}, {411, "Length Required"},
		 {413, "Payload Too Large"},
		 {429, "Too Many Requests"}, {500, "Internal Server Error"},
		 {503, "Service Unavailable"}, {504, "Gateway Timeout"}};
	for (size_t i = 0; i < ELEMENTSOF(t); i++)
		if (t[i].status == status)
			return t[i].text;
	return "Unknown";
}

static void forget_close(struct evhttp_request *req)
{
	front_on_close(req, NULL, NULL);
}

void reply_buf(struct evhttp_request *req, int status, const char *type, struct evbuffer *buf)
{
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);
	if (type)
		evhttp_add_header(h, "Content-Type", type);
	forget_close(req);
	if (status >= 400)
		metric_inc(M_HTTP_ERRORS);
	evhttp_send_reply(req, status, reason(status), buf);
}

void reply_json(struct evhttp_request *req, int status, json_t *body)
{
	_cleanup_(json_decrefp) json_t *b = body;
	_cleanup_free_ char *s = b ? json_dumps(b, JSON_COMPACT) : NULL;
	struct evbuffer *buf = evbuffer_new();
	if (!s || !buf) {
		if (buf)
			evbuffer_free(buf);
		reply_error(req, API_ERR_INTERNAL, "out of memory");
		return;
	}
	evbuffer_add(buf, s, strlen(s));
	evbuffer_add(buf, "\n", 1);
	reply_buf(req, status, "application/json", buf);
	evbuffer_free(buf);
}

static const struct surface *surface_of(struct evhttp_request *req);

static void reply_error_v(struct evhttp_request *req, enum api_error e, const char *fmt, va_list ap)
{
	char msg[600];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	const struct surface *sf = surface_of(req);
	_cleanup_free_ char *s = sf ? sf->render_error(e, msg) : api_error_render(e, msg);
	struct evbuffer *buf = evbuffer_new();
	if (!buf)
		return;
	if (api_error_status(e) == 503)
		evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "1");
	if (s) {
		evbuffer_add(buf, s, strlen(s));
		evbuffer_add(buf, "\n", 1);
	}
	reply_buf(req, api_error_status(e), "application/json", buf);
	evbuffer_free(buf);
}

void reply_error(struct evhttp_request *req, enum api_error e, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	reply_error_v(req, e, fmt, ap);
	va_end(ap);
}

void reply_errno(struct evhttp_request *req, int code, const char *msg)
{
	reply_error(req, api_error_from_errno(code), "%s", msg);
}

void reply_empty(struct evhttp_request *req, int status)
{
	reply_buf(req, status, NULL, NULL);
}

void reply_audit_failed(struct evhttp_request *req, int r)
{
	reply_error(req, API_ERR_AUDIT_UNAVAILABLE,
		    "the audit log cannot be written (%s): nothing was done", strerror(-r));
}

void reply_svc_err(struct evhttp_request *req, const struct svc_err *err)
{
	reply_error(req, err->code, "%s", err->msg);
}

void reply_svc(struct evhttp_request *req, int r, int status, json_t *body,
	       const struct svc_err *err)
{
	if (r < 0) {
		json_decref(body);
		reply_svc_err(req, err);
	} else if (body) {
		reply_json(req, status, body);
	} else {
		reply_empty(req, status);
	}
}

struct sbx *ctx_sbx(struct ctx *c)
{
	struct sbx *s = sbx_find(c->principal, c->params[0]);
	if (!s) {
		reply_error(c->req, API_ERR_NOT_FOUND, "no sandbox '%.64s'", c->params[0]);
		return NULL;
	}
	bool live = c->route->state == ST_RUNNING || c->route->state == ST_LIVE;
	if (live && s->state != SBX_RUNNING) {
		reply_error(c->req, API_ERR_CONFLICT, "the sandbox is not running");
		return NULL;
	}
	if (live && s->busy) {
		reply_error(c->req, API_ERR_SANDBOX_BUSY,
			    "a snapshot of sandbox %s is being made: try again once it is done", s->id);
		return NULL;
	}
	if (c->route->state == ST_RUNNING && s->paused) {
		reply_error(c->req, API_ERR_SANDBOX_PAUSED,
			    "the sandbox is paused: POST /v1/sandboxes/%s/resume first", s->id);
		return NULL;
	}
	return s;
}

bool stream_start(struct evhttp_request *req, const char *content_type)
{
	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", content_type);
	evhttp_send_reply_start(req, 200, "OK");
	return true;
}

/* Queues one chunk; false when the reader lags more than SUBSCRIBER_BACKLOG behind, then the
 * caller drops it rather than buffer a sandbox's output without bound. */
bool stream_send(struct evhttp_request *req, const char *data, size_t len)
{
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
	if (bev && evbuffer_get_length(bufferevent_get_output(bev)) > SUBSCRIBER_BACKLOG)
		return false;
	struct evbuffer *buf = evbuffer_new();
	if (!buf)
		return false;
	evbuffer_add(buf, data, len);
	evhttp_send_reply_chunk(req, buf);
	evbuffer_free(buf);
	return true;
}

void stream_end(struct evhttp_request *req)
{
	forget_close(req);
	evhttp_send_reply_end(req);
}

/* ---- streams: a stream_sink over a chunked reply ---- */

struct http_sink {
	struct stream_sink k;
	struct evhttp_request *req;
	struct evbuffer *out;            /* the connection's output, while watched */
	struct evbuffer_cb_entry *watch;
	void (*drained)(void *arg);
	void *drained_arg;
	struct event *hangup;            /* EV_CLOSED on the connection's fd (watch_hangup) */
};

/* The client went while we owed @req an answer: libevent has let go of such a request (it
 * has no connection any more), and it is ours to free. */
static void forget_request(struct evhttp_request *req)
{
	if (!evhttp_request_get_connection(req))
		evhttp_request_free(req);
}

static int sink_write(struct stream_sink *k, const void *data, size_t len)
{
	struct http_sink *h = OWNER_OF(k, struct http_sink, k);
	return stream_send(h->req, data, len) ? 0 : -ENOBUFS;
}

/* Before the request can end: the watch is on its connection's buffer, which may be freed
 * with the connection. */
static void sink_unwatch(struct http_sink *h)
{
	h->hangup = loop_event_free(h->hangup); /* the reply may close the fd at once */
	if (h->watch)
		evbuffer_remove_cb_entry(h->out, h->watch);
	h->watch = NULL;
	h->out = NULL;
}

static void sink_end(struct stream_sink *k, const void *last, size_t len)
{
	struct http_sink *h = OWNER_OF(k, struct http_sink, k);
	struct evbuffer *buf = last ? evbuffer_new() : NULL;
	sink_unwatch(h);
	if (buf) { /* past the backlog: one line more */
		evbuffer_add(buf, last, len);
		evhttp_send_reply_chunk(h->req, buf);
		evbuffer_free(buf);
	}
	stream_end(h->req); /* forgets the close callback */
	free(h);
}

static size_t sink_backlog(const struct stream_sink *k)
{
	const struct http_sink *h = OWNER_OF(k, const struct http_sink, k);
	return h->out ? evbuffer_get_length(h->out) : 0;
}

static void on_sink_drain(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct http_sink *h = arg;
	if (info->n_deleted > 0)
		h->drained(h->drained_arg);
}

static int sink_watch(struct stream_sink *k, void (*drained)(void *arg), void *arg)
{
	struct http_sink *h = OWNER_OF(k, struct http_sink, k);
	struct evhttp_connection *evcon = evhttp_request_get_connection(h->req);
	struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
	if (!bev)
		return -ENOTCONN;
	h->drained = drained;
	h->drained_arg = arg;
	h->out = bufferevent_get_output(bev);
	h->watch = evbuffer_add_cb(h->out, on_sink_drain, h);
	if (!h->watch)
		h->out = NULL;
	return h->watch ? 0 : -ENOMEM;
}

static void sink_on_close(struct evhttp_connection *evcon, void *arg)
{
	struct http_sink *h = arg;
	sink_unwatch(h);
	if (h->k.gone)
		h->k.gone(h->k.gone_arg);
	forget_request(h->req);
	free(h);
}

/* The peer hung up. evhttp reads nothing while it writes a reply, so without this a reader
 * gone during a quiet stretch would be noticed only at the next write. */
static void on_sink_hangup(evutil_socket_t fd, short what, void *arg)
{
	struct http_sink *h = arg;
	struct evhttp_connection *evcon = evhttp_request_get_connection(h->req);
	h->hangup = loop_event_free(h->hangup);
	if (!evcon)
		return;
	req_on_close(h->req, NULL, NULL); /* the front's own close handler stays and frees its gate */
	sink_unwatch(h);
	if (h->k.gone)
		h->k.gone(h->k.gone_arg);
	free(h);
	evhttp_connection_free(evcon); /* frees the request with it */
}

static void sink_watch_hangup(struct stream_sink *k)
{
	struct http_sink *h = OWNER_OF(k, struct http_sink, k);
	struct evhttp_connection *evcon = evhttp_request_get_connection(h->req);
	struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
	if (!bev || h->hangup || !(event_base_get_features(D.base) & EV_FEATURE_EARLY_CLOSE))
		return;
	h->hangup = loop_event_new(bufferevent_getfd(bev), EV_CLOSED, on_sink_hangup, h);
	if (h->hangup)
		event_add(h->hangup, NULL);
}

struct stream_sink *http_sink_new(struct evhttp_request *req)
{
	struct http_sink *h = calloc(1, sizeof(*h));
	if (!h)
		return NULL;
	*h = (struct http_sink){.k = {.write = sink_write, .end = sink_end, .backlog = sink_backlog,
				      .watch = sink_watch, .watch_hangup = sink_watch_hangup},
				.req = req};
	return &h->k;
}

void http_sink_start(struct stream_sink *k, const char *content_type)
{
	struct http_sink *h = OWNER_OF(k, struct http_sink, k);
	stream_start(h->req, content_type);
	req_on_close(h->req, sink_on_close, h);
}

/* ---- deferred answers: a svc_reply over a request ---- */

struct http_reply {
	struct svc_reply r;
	struct evhttp_request *req;
};

static void hr_json(struct svc_reply *r, int status, json_t *body)
{
	struct http_reply *h = OWNER_OF(r, struct http_reply, r);
	if (body)
		reply_json(h->req, status, body);
	else
		reply_empty(h->req, status);
	free(h);
}

static void hr_bytes(struct svc_reply *r, const char *type, struct evbuffer *buf)
{
	struct http_reply *h = OWNER_OF(r, struct http_reply, r);
	reply_buf(h->req, 200, type, buf);
	free(h);
}

static void hr_error(struct svc_reply *r, const struct svc_err *err)
{
	struct http_reply *h = OWNER_OF(r, struct http_reply, r);
	reply_svc_err(h->req, err);
	free(h);
}

static struct stream_sink *hr_stream(struct svc_reply *r, const char *type)
{
	struct http_reply *h = OWNER_OF(r, struct http_reply, r);
	struct stream_sink *k = http_sink_new(h->req);
	if (!k)
		return NULL;
	http_sink_start(k, type); /* the sink's close callback replaces ours */
	free(h);
	return k;
}

static void hr_on_close(struct evhttp_connection *evcon, void *arg)
{
	struct http_reply *h = arg;
	if (h->r.gone)
		h->r.gone(h->r.gone_arg);
	forget_request(h->req);
	free(h);
}

/* Every reply forgets the close callback (reply_buf), so hr_on_close() runs only for a
 * client that left unanswered. */
struct svc_reply *http_reply_new(struct evhttp_request *req)
{
	struct http_reply *h = calloc(1, sizeof(*h));
	if (!h)
		return NULL;
	*h = (struct http_reply){.r = {.json = hr_json, .bytes = hr_bytes, .error = hr_error,
				       .stream = hr_stream},
				 .req = req};
	req_on_close(req, hr_on_close, h);
	return &h->r;
}

void req_on_close(struct evhttp_request *req, void (*cb)(struct evhttp_connection *, void *),
		  void *arg)
{
	front_on_close(req, cb, arg);
}

char *http_error_json(const char *code, const char *message)
{
	_cleanup_(json_decrefp) json_t *j = json_pack("{s:{s:s, s:s?}}", "error", "code", code,
						      "message", message);
	return j ? json_dumps(j, JSON_COMPACT) : NULL;
}

/* An error of the HTTP layer itself, whose code the domain's table does not have. */
static void reply_http_error(struct evhttp_request *req, int status, const char *code,
			     const char *msg)
{
	_cleanup_free_ char *s = http_error_json(code, msg);
	struct evbuffer *buf = evbuffer_new();
	if (!buf)
		return;
	if (s) {
		evbuffer_add(buf, s, strlen(s));
		evbuffer_add(buf, "\n", 1);
	}
	reply_buf(req, status, "application/json", buf);
	evbuffer_free(buf);
}

const char *query_get(const struct ctx *c, const char *key, char *buf, size_t size)
{
	struct evkeyvalq q = {0};
	const char *v;
	if (!c->query || evhttp_parse_query_str(c->query, &q) < 0)
		return NULL;
	v = evhttp_find_header(&q, key);
	if (v && strlen(v) < size) {
		snprintf(buf, size, "%s", v);
		v = buf;
	} else {
		v = v ? "" : NULL; /* too long: an empty value fails validation */
	}
	evhttp_clear_headers(&q);
	return v;
}

/* Matches @path against @pattern segment by segment; "{x}" captures one segment. */
static bool match(const char *pattern, char *path, const char *params[2])
{
	int n = 0;
	const char *p = pattern;
	char *s = path;
	while (*p && *s) {
		if (*p != '/' || *s != '/')
			return false;
		p++, s++;
		const char *pe = strchrnul(p, '/');
		char *se = strchrnul(s, '/');
		if (*p == '{') {
			if (se == s || n >= 2)
				return false;
			params[n++] = s;
		} else if (pe - p != se - s || strncmp(p, s, pe - p) != 0) {
			return false;
		}
		p = pe, s = se;
	}
	if (*p || *s)
		return false;
	for (int i = 0; i < n; i++) /* cut the captured segments out of the copy */
		*strchrnul((char *)params[i], '/') = '\0';
	return true;
}

struct api_key *http_api_key(const char *key, size_t len)
{
	for (size_t i = 0; key && i < D.n_keys; i++)
		if (strlen(D.keys[i].key) == len && CRYPTO_memcmp(D.keys[i].key, key, len) == 0)
			return &D.keys[i];
	return NULL;
}

static struct api_key *key_find(const char *h, size_t hlen)
{
	if (!h || hlen < 7 || strncasecmp(h, "Bearer ", 7) != 0)
		return NULL;
	return http_api_key(h + 7, hlen - 7);
}

bool http_key_ok(const char *authorization, size_t len)
{
	return key_find(authorization, len) != NULL;
}

static struct api_key *authenticate(struct evhttp_request *req)
{
	const char *h = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
	return h ? key_find(h, strlen(h)) : NULL;
}

static size_t body_max(enum body_kind k)
{
	size_t t[] = {[BODY_API] = API_MAX_BODY, [BODY_UPLOAD] = D.cfg.max_upload,
		      [BODY_BUILD] = API_MAX_BUILD_BODY, [BODY_SPOOL] = D.cfg.max_upload};
	return t[k];
}

static const char *method_name(enum evhttp_cmd_type m)
{
	static const struct {
		enum evhttp_cmd_type m;
		const char *name;
	} t[] = {{EVHTTP_REQ_GET, "GET"}, {EVHTTP_REQ_POST, "POST"}, {EVHTTP_REQ_PUT, "PUT"},
		 {EVHTTP_REQ_DELETE, "DELETE"}, {EVHTTP_REQ_PATCH, "PATCH"}};
	for (size_t i = 0; i < ELEMENTSOF(t); i++)
		if (t[i].m == m)
			return t[i].name;
	return "?";
}

/* @raw without a trailing slash into @path; false when it is no path a route could match. */
static bool route_path(const char *raw, char path[520])
{
	if (snprintf(path, 520, "%s", raw) >= 520)
		return false;
	size_t n = strlen(path);
	if (n > 1 && path[n - 1] == '/')
		path[n - 1] = '\0';
	return true;
}

/* Whether route @rt matches @raw, its parameters then cut out of @path. */
static bool route_match(const struct route *rt, const char *raw, char path[520],
			const char *params[2])
{
	params[0] = params[1] = NULL;
	return route_path(raw, path) && match(rt->pattern, path, params);
}

/* The route of @method and @raw (a path, a trailing slash allowed) in the first surface that
 * has one, its parameters cut out of @path; NULL with -ENOENT (no such path) or -EOPNOTSUPP
 * (not with @method; @allow lists the methods that are) in @ret_r. */
static const struct route *route_find(enum listener lst, int method, const char *raw,
				      char path[520], const char *params[2], char *allow,
				      size_t allow_size, int *ret_r)
{
	bool path_known = false;
	if (allow_size)
		allow[0] = '\0';
	for (size_t k = 0; k < n_surfaces; k++)
		for (size_t i = 0; (surfaces[k]->listeners & (1u << lst)) && i < surfaces[k]->n; i++) {
			const struct route *rt = &surfaces[k]->routes[i];
			if (!route_match(rt, raw, path, params))
				continue;
			if ((int)rt->method == method)
				return rt;
			if (allow_size && !strstr(allow, method_name(rt->method))) {
				size_t l = strlen(allow);
				snprintf(allow + l, allow_size - l, "%s%s", l ? ", " : "",
					 method_name(rt->method));
			}
			path_known = true;
		}
	*ret_r = path_known ? -EOPNOTSUPP : -ENOENT;
	return NULL;
}

/* The surface of @req's listener whose table has its path (its errors are rendered its
 * way); for a path none has, the listener's first; NULL before http_start(). */
static const struct surface *surface_of(struct evhttp_request *req)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *raw = uri ? evhttp_uri_get_path(uri) : NULL;
	const char *params[2];
	char path[520];
	int l = front_listener(req);
	unsigned on = l < 0 ? ~0u : 1u << l;
	const struct surface *first = NULL;
	for (size_t k = 0; k < n_surfaces; k++) {
		if (!(surfaces[k]->listeners & on))
			continue;
		first = first ? first : surfaces[k];
		for (size_t i = 0; raw && i < surfaces[k]->n; i++)
			if (route_match(&surfaces[k]->routes[i], raw, path, params))
				return surfaces[k];
	}
	return first ? first : n_surfaces ? surfaces[0] : NULL;
}

int http_route_body_limit(enum listener l, int method, const char *raw, size_t *ret_max,
			  bool *ret_spool, char *allow, size_t allow_size,
			  const struct surface **ret_sf)
{
	char path[520];
	const char *params[2];
	int r = 0;
	if (strlen(raw) > 512)
		raw = "/"; /* dispatch refuses it; the smallest limit meanwhile */
	const struct surface *sf = NULL;
	const struct route *rt = route_find(l, method, raw, path, params, allow, allow_size, &r);
	for (size_t k = 0; rt && k < n_surfaces; k++)
		if (rt >= surfaces[k]->routes && rt < surfaces[k]->routes + surfaces[k]->n)
			sf = surfaces[k];
	*ret_max = rt ? body_max(rt->body) : API_MAX_BODY;
	*ret_spool = rt && rt->body == BODY_SPOOL;
	*ret_sf = sf;
	return rt ? 0 : r;
}

bool http_takeover(enum listener l, int method, const char *raw, const char *auth,
		   size_t auth_len, int fd, const void *rest, size_t rest_len)
{
	char path[520];
	const char *params[2];
	int r = 0;
	if (strlen(raw) > 512)
		return false;
	const struct route *rt = route_find(l, method, raw, path, params, NULL, 0, &r);
	int dfd = rt && rt->raw ? fcntl(fd, F_DUPFD_CLOEXEC, 3) : -1;
	if (dfd < 0)
		return false; /* evhttp has it: dispatch() answers a raw route's 503 */
	struct raw_ctx c = {.fd = dfd, .principal = l == LISTEN_TCP ? key_find(auth, auth_len) : NULL,
			    .params = {params[0], params[1]}, .rest = rest, .rest_len = rest_len};
	rt->raw(&c);
	return true;
}

/* The raw handler a surface of @l claims @h for, its parameters into @params; or NULL. */
static raw_fn host_claim(enum listener l, const struct reqhead *h, char params[2][80])
{
	raw_fn fn = NULL;
	for (size_t k = 0; !fn && k < n_surfaces; k++)
		if ((surfaces[k]->listeners & (1u << l)) && surfaces[k]->claim)
			fn = surfaces[k]->claim(h, params);
	return fn;
}

bool http_host_claimed(enum listener l, const struct reqhead *h)
{
	char params[2][80];
	return host_claim(l, h, params) != NULL;
}

bool http_takeover_host(enum listener l, int fd, const void *req, size_t len)
{
	struct reqhead h;
	char params[2][80] = {};
	reqhead_parse(req, reqhead_end(req, len), &h);
	raw_fn fn = host_claim(l, &h, params);
	int dfd = fn ? fcntl(fd, F_DUPFD_CLOEXEC, 3) : -1;
	if (dfd < 0)
		return false;
	struct raw_ctx c = {.fd = dfd, .params = {params[0], params[1]}, .rest = req, .rest_len = len};
	fn(&c);
	return true;
}

char *http_error_answer(const struct svc_err *err)
{
	_cleanup_free_ char *body = api_error_render(err->code, err->msg);
	char *out = NULL;
	if (body && asprintf(&out, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
			     "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
			     api_error_status(err->code), api_error_code(err->code), strlen(body),
			     body) < 0)
		out = NULL;
	return out;
}

static void dispatch(struct evhttp_request *req, void *arg)
{
	enum listener l = (enum listener)(uintptr_t)arg;
	bool tcp = l != LISTEN_UNIX;
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *raw = uri ? evhttp_uri_get_path(uri) : NULL;
	struct ctx c = {.req = req, .query = uri ? evhttp_uri_get_query(uri) : NULL, .body_fd = -1};

	front_request(req);
	if (D.cfg.verbose)
		log_info("%s %s", tcp ? "tcp" : "unix", evhttp_request_get_uri(req));
	if (!raw || strlen(raw) > 512) {
		reply_error(req, API_ERR_BAD_REQUEST, "bad request path");
		return;
	}
	bool healthz = strcmp(raw, "/healthz") == 0;
	/* a client's work, which a refill waits behind; a probe or a scrape is not */
	if (!healthz && strcmp(raw, "/metrics") != 0)
		pool_request_seen();
	/* /healthz answers anyone (load balancers); everything else over TCP needs a key. */
	if (l == LISTEN_TCP && !healthz && !(c.principal = authenticate(req))) {
		reply_error(req, API_ERR_UNAUTHORIZED, "a valid API key is needed (Authorization: Bearer KEY)");
		return;
	}
	char path[520], allow[96];
	const char *params[2];
	int r = 0;
	const struct route *rt = route_find(l, evhttp_request_get_command(req), raw, path, params,
					    allow, sizeof(allow), &r);
	if (!rt && r == -EOPNOTSUPP) {
		char msg[600];
		evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", allow);
		snprintf(msg, sizeof(msg), "%s takes %s", raw, allow);
		reply_http_error(req, 405, "method_not_allowed", msg);
		return;
	}
	if (!rt) {
		reply_error(req, API_ERR_NOT_FOUND, "no such route: %s", raw);
		return;
	}
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	uint64_t spooled = 0;
	c.body_fd = rt->body == BODY_SPOOL ? front_spool(req, &spooled) : -1;
	c.body_len = c.body_fd >= 0 ? (size_t)spooled : evbuffer_get_length(in);
	if (c.body_len > body_max(rt->body)) { /* a chunked body, whose length only shows now */
		reply_error(req, API_ERR_PAYLOAD_TOO_LARGE, "the body is over %zu bytes",
			    body_max(rt->body));
		return;
	}
	c.body = c.body_len && c.body_fd < 0 ? (const char *)evbuffer_pullup(in, -1) : "";
	c.path = path;
	c.params[0] = params[0];
	c.params[1] = params[1];
	c.route = rt;
	if (rt->raw) /* the front could not take the connection over (no fd for the dup) */
		reply_error(req, API_ERR_CAPACITY, "no file descriptor for the tunnel; retry shortly");
	else
		rt->fn(&c);
}

static struct evhttp *new_http(enum listener l)
{
	struct evhttp *http = evhttp_new(D.base);
	if (!http)
		return NULL;
	evhttp_set_max_headers_size(http, MAX_HEADERS);
	/* The front enforces each route's limit first, in JSON; this is evhttp's backstop, above
	 * anything the front lets through (a chunked body's framing included). */
	size_t body = D.cfg.max_upload > API_MAX_BUILD_BODY ? D.cfg.max_upload : API_MAX_BUILD_BODY;
	evhttp_set_max_body_size(http, body + body / 8 + 65536);
	evhttp_set_timeout(http, HTTP_TIMEOUT_S);
	/* Every method reaches dispatch(), so that an unsupported one gets a JSON error rather
	 * than libevent's HTML page. */
	evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
						 EVHTTP_REQ_DELETE | EVHTTP_REQ_HEAD |
						 EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
						 EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
	evhttp_set_gencb(http, dispatch, (void *)(uintptr_t)l);
	return http;
}

/* A socket file left by a dead daemon is replaced; one that answers belongs to a live daemon. */
static int unix_listen(const char *path, gid_t gid)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	_cleanup_close_ int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
		close(fd);
		return -EADDRINUSE;
	}
	unlink(path);
	mode_t old = umask(0117);
	int r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (r == 0 && gid != (gid_t)-1 && chown(path, (uid_t)-1, gid) < 0)
		r = -1;
	if (r < 0 || chmod(path, 0660) < 0 || listen(fd, 512) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

static int socket_gid(gid_t *ret)
{
	*ret = (gid_t)-1;
	if (!D.cfg.socket_group)
		return 0;
	struct group *g = getgrnam(D.cfg.socket_group);
	if (!g) {
		log_error("--socket-group '%s': no such group", D.cfg.socket_group);
		return -ENOENT;
	}
	*ret = g->gr_gid;
	return 0;
}

/* Listener @l on @addr (HOST:PORT, from option @opt) into *@ret. */
static int tcp_start(struct evhttp **ret, const char *opt, const char *addr, enum listener l)
{
	char host[256];
	const char *colon = strrchr(addr, ':');
	if (!colon || colon == addr || (size_t)(colon - addr) >= sizeof(host)) {
		log_error("%s '%s': expected HOST:PORT", opt, addr);
		return -EINVAL;
	}
	snprintf(host, sizeof(host), "%.*s", (int)(colon - addr), addr);
	*ret = new_http(l);
	struct evhttp_bound_socket *b =
		*ret ? evhttp_bind_socket_with_handle(*ret, host, atoi(colon + 1)) : NULL;
	if (!b) {
		log_error("listen on %s: %m", addr);
		return -EADDRINUSE;
	}
	return front_attach(*ret, b, l);
}

int http_start(const struct surface *const *list, size_t n)
{
	surfaces = list;
	n_surfaces = n;
	gid_t gid;
	int r = socket_gid(&gid);
	if (r < 0)
		return r;
	D.http_unix = new_http(LISTEN_UNIX);
	if (!D.http_unix)
		return -ENOMEM;
	int fd = unix_listen(D.cfg.socket_path, gid);
	if (fd < 0) {
		log_error("listen on %s: %s", D.cfg.socket_path,
			  fd == -EADDRINUSE ? "another cordond answers there" : strerror(-fd));
		return fd;
	}
	struct evhttp_bound_socket *b = evhttp_accept_socket_with_handle(D.http_unix, fd);
	if (!b) {
		close(fd);
		return -EIO;
	}
	if ((r = front_attach(D.http_unix, b, LISTEN_UNIX)) < 0)
		return r;
	if (D.cfg.listen && (r = tcp_start(&D.http_tcp, "--listen", D.cfg.listen, LISTEN_TCP)) < 0)
		return r;
	if (D.cfg.e2b_listen)
		r = tcp_start(&D.http_e2b, "--e2b-listen", D.cfg.e2b_listen, LISTEN_E2B);
	return r;
}

void http_stop(void)
{
	front_quiesce();
	if (D.http_unix)
		evhttp_free(D.http_unix);
	if (D.http_tcp)
		evhttp_free(D.http_tcp);
	if (D.http_e2b)
		evhttp_free(D.http_e2b);
	D.http_unix = D.http_tcp = D.http_e2b = NULL;
	front_stop();
	unlink(D.cfg.socket_path);
}
