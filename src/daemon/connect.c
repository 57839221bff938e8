/* Answers of the E2B surface's envd calls (connect.h): a svc_reply and a stream_sink over an
 * evhttp request, rendered as Connect unary, Connect server-streaming or E2B's REST.
 *
 * A call owns the request until it answers. While a service's answer is pending the call holds
 * the request's close callback; once it streams, the stream is an http_sink (http.c), which
 * holds it, and the call turns each NDJSON line the service writes into an envelope. A stream
 * gets a keepalive message every Keepalive-Ping-Interval seconds, and a call with
 * Connect-Timeout-Ms ends with deadline_exceeded when it is up. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "daemon/connect.h"
#include "daemon/daemon.h"
#include "daemon/service.h"

#define KEEPALIVE_MIN_S 1
#define KEEPALIVE_MAX_S 300

struct call {
	struct connect_call cc;
	struct svc_reply r;         /* the pending service answer */
	struct stream_sink k;       /* what the service writes a stream into */
	struct stream_sink *inner;  /* the http_sink under it, once streaming */
	bool ended_well;            /* the stream's last message was sent */
	uint64_t deadline_ms;
	unsigned keepalive_s;
	struct event *deadline_ev, *keepalive_ev;
};

static void call_free(struct call *c)
{
	if (c->cc.ops && c->cc.ops->free)
		c->cc.ops->free(c->cc.arg);
	if (c->deadline_ev)
		event_free(c->deadline_ev);
	if (c->keepalive_ev)
		event_free(c->keepalive_ev);
	free(c);
}

/* ---- rendering ---- */

static bool rest_like(enum connect_mode m)
{
	return m == CONNECT_MODE_REST || m == CONNECT_MODE_NDJSON;
}

static char *error_body(const struct call *c, enum connect_code code, int status, const char *msg)
{
	json_t *e = rest_like(c->cc.mode)
			    ? json_pack("{s:i, s:s}", "code", status, "message", msg)
			    : json_pack("{s:s, s:s}", "code", connect_code_name(code), "message", msg);
	if (e && c->cc.mode == CONNECT_MODE_STREAM)
		e = json_pack("{s:o}", "error", e);
	_cleanup_(json_decrefp) json_t *j = e;
	return j ? json_dumps(j, JSON_COMPACT) : NULL;
}

/* @json as one envelope with @flags into @buf. */
static void envelope_add(struct evbuffer *buf, uint8_t flags, const char *json)
{
	uint8_t head[CONNECT_ENVELOPE_HEAD];
	size_t n = strlen(json);
	connect_envelope_head(head, flags, (uint32_t)n);
	evbuffer_add(buf, head, sizeof(head));
	evbuffer_add(buf, json, n);
}

static void send_buf(struct evhttp_request *req, int status, const char *type, struct evbuffer *buf)
{
	reply_buf(req, status, type, buf);
	if (buf)
		evbuffer_free(buf);
}

/* Answers @req with an error and no call around it; the stream mode's END envelope. */
static void render_error(struct call *c, enum connect_code code, int status, const char *msg)
{
	_cleanup_free_ char *body = error_body(c, code, status, msg);
	struct evbuffer *buf = evbuffer_new();
	if (!buf)
		return;
	if (c->cc.mode == CONNECT_MODE_STREAM) {
		envelope_add(buf, CONNECT_FLAG_END, body ? body : "{}");
		send_buf(c->cc.req, 200, "application/connect+json", buf);
		return;
	}
	if (body)
		evbuffer_add(buf, body, strlen(body));
	send_buf(c->cc.req, rest_like(c->cc.mode) ? status : connect_code_status(code),
		  "application/json", buf);
}

void connect_refuse(struct evhttp_request *req, enum connect_mode mode, enum connect_code code,
		    int status, const char *msg)
{
	struct call c = {.cc = {.req = req, .mode = mode}};
	render_error(&c, code, status, msg);
}

/* ---- the end of a call ---- */

/* NDJSON mode: @msg (an array: its elements) as lines into @buf; -ENOMEM. */
static int lines_add(struct evbuffer *buf, const json_t *msg)
{
	size_t i, n = json_is_array(msg) ? json_array_size(msg) : 1;
	for (i = 0; i < n; i++) {
		const json_t *m = json_is_array(msg) ? json_array_get(msg, i) : msg;
		_cleanup_free_ char *s = json_dumps(m, JSON_COMPACT | JSON_ENCODE_ANY);
		if (!s || evbuffer_add(buf, s, strlen(s)) < 0 || evbuffer_add(buf, "\n", 1) < 0)
			return -ENOMEM;
	}
	return 0;
}

/* NDJSON mode: the stream ends with @last (stolen; NULL: the failed() hook's line unless it
 * ended well). */
static void ndjson_finish(struct call *c, json_t *last, const char *msg)
{
	_cleanup_(json_decrefp) json_t *m = last;
	struct evbuffer *buf = evbuffer_new();
	if (!m && !c->ended_well && c->cc.ops->failed)
		m = c->cc.ops->failed(&c->cc, msg);
	if (buf && m && lines_add(buf, m) == 0)
		c->inner->end(c->inner, evbuffer_pullup(buf, -1), evbuffer_get_length(buf));
	else
		c->inner->end(c->inner, NULL, 0);
	if (buf)
		evbuffer_free(buf);
	call_free(c);
}

/* The stream's last envelope: {} when its last message went, else @code and @msg. */
static void stream_finish(struct call *c, enum connect_code code, const char *msg)
{
	if (c->cc.mode == CONNECT_MODE_NDJSON)
		return ndjson_finish(c, NULL, msg);
	_cleanup_free_ char *err = c->ended_well ? NULL : error_body(c, code, 0, msg);
	struct evbuffer *buf = evbuffer_new();
	if (buf) {
		envelope_add(buf, CONNECT_FLAG_END, err ? err : "{}");
		size_t n = evbuffer_get_length(buf);
		c->inner->end(c->inner, evbuffer_pullup(buf, -1), n);
		evbuffer_free(buf);
	} else {
		c->inner->end(c->inner, NULL, 0);
	}
	call_free(c);
}

void connect_answer(struct connect_call *cc, int status, json_t *msg)
{
	struct call *c = OWNER_OF(cc, struct call, cc);
	_cleanup_(json_decrefp) json_t *m = msg;
	_cleanup_free_ char *s = m ? json_dumps(m, JSON_COMPACT) : strdup("{}");
	struct evbuffer *buf = s ? evbuffer_new() : NULL;
	bool empty = rest_like(cc->mode) && !m && status == 204;
	if (!buf) {
		render_error(c, CONNECT_INTERNAL, 500, "out of memory");
	} else if (cc->mode == CONNECT_MODE_STREAM) {
		envelope_add(buf, 0, s);
		envelope_add(buf, CONNECT_FLAG_END, "{}");
		send_buf(cc->req, 200, "application/connect+json", buf);
	} else if (empty) {
		send_buf(cc->req, 204, NULL, buf);
	} else {
		evbuffer_add(buf, s, strlen(s));
		send_buf(cc->req, rest_like(cc->mode) ? status : 200, "application/json", buf);
	}
	call_free(c);
}

void connect_answer_bytes(struct connect_call *cc, const char *type, struct evbuffer *buf)
{
	reply_buf(cc->req, 200, type, buf);
	call_free(OWNER_OF(cc, struct call, cc));
}

static void answer_error(struct call *c, enum connect_code code, int status, const char *msg)
{
	if (c->inner)
		stream_finish(c, code, msg);
	else {
		render_error(c, code, status, msg);
		call_free(c);
	}
}

void connect_answer_error(struct connect_call *cc, enum connect_code code, const char *fmt, ...)
{
	char msg[600];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	answer_error(OWNER_OF(cc, struct call, cc), code, connect_code_status(code), msg);
}

void connect_answer_svc_err(struct connect_call *cc, const struct svc_err *err)
{
	answer_error(OWNER_OF(cc, struct call, cc), connect_code_from_api(err->code),
		     api_error_status(err->code), err->msg);
}

/* ---- the service's answer ---- */

static void r_json(struct svc_reply *r, int status, json_t *body)
{
	struct call *c = OWNER_OF(r, struct call, r);
	req_on_close(c->cc.req, NULL, NULL);
	if (c->cc.ops->json)
		c->cc.ops->json(&c->cc, status, body);
	else
		connect_answer(&c->cc, status, body);
}

static void r_bytes(struct svc_reply *r, const char *type, struct evbuffer *buf)
{
	struct call *c = OWNER_OF(r, struct call, r);
	req_on_close(c->cc.req, NULL, NULL);
	if (c->cc.ops->bytes)
		c->cc.ops->bytes(&c->cc, type, buf);
	else
		connect_answer_bytes(&c->cc, type, buf);
}

static void r_error(struct svc_reply *r, const struct svc_err *err)
{
	struct call *c = OWNER_OF(r, struct call, r);
	req_on_close(c->cc.req, NULL, NULL);
	if (c->cc.ops->error)
		c->cc.ops->error(&c->cc, err);
	else
		connect_answer_svc_err(&c->cc, err);
}

/* The client left while a service's answer was pending: the request is ours to free. */
static void on_close(struct evhttp_connection *evcon, void *arg)
{
	struct call *c = arg;
	if (c->r.gone)
		c->r.gone(c->r.gone_arg);
	if (!evhttp_request_get_connection(c->cc.req))
		evhttp_request_free(c->cc.req);
	call_free(c);
}

/* ---- streams ---- */

/* What the line hook makes of one line the service wrote (NULL: nothing to send). */
static json_t *k_message(struct call *c, const void *data, size_t len, bool *end)
{
	_cleanup_(json_decrefp) json_t *line = json_loadb(data, len, 0, NULL);
	return line && c->cc.ops->line ? c->cc.ops->line(&c->cc, line, end) : NULL;
}

/* @msg (NULL: none) as the stream's next envelope, or its next lines in NDJSON mode; @end:
 * it is the last. */
static int envelope_send(struct call *c, json_t *msg, bool end)
{
	bool nd = c->cc.mode == CONNECT_MODE_NDJSON;
	_cleanup_free_ char *s = msg && !nd ? json_dumps(msg, JSON_COMPACT) : NULL;
	if (!s && !(nd && msg))
		return 0;
	struct evbuffer *buf = evbuffer_new();
	if (!buf)
		return -ENOBUFS;
	if (nd && lines_add(buf, msg) < 0) {
		evbuffer_free(buf);
		return -ENOBUFS;
	}
	if (!nd)
		envelope_add(buf, 0, s);
	int r = c->inner->write(c->inner, evbuffer_pullup(buf, -1), evbuffer_get_length(buf));
	evbuffer_free(buf);
	c->ended_well |= end && r == 0;
	return r;
}

static int k_write(struct stream_sink *k, const void *data, size_t len)
{
	struct call *c = OWNER_OF(k, struct call, k);
	bool end = false;
	_cleanup_(json_decrefp) json_t *msg = k_message(c, data, len, &end);
	return envelope_send(c, msg, end);
}

static void k_end(struct stream_sink *k, const void *last, size_t len)
{
	struct call *c = OWNER_OF(k, struct call, k);
	bool end = false;
	if (c->cc.mode == CONNECT_MODE_NDJSON && last) { /* the source's own last line */
		json_t *m = k_message(c, last, len, &end);
		c->ended_well |= end;
		return ndjson_finish(c, m, "the reader fell too far behind");
	}
	stream_finish(c, CONNECT_UNAVAILABLE,
		      last ? "the reader fell too far behind the process's output"
			   : "the sandbox was killed or the process is gone");
}

static size_t k_backlog(const struct stream_sink *k)
{
	const struct call *c = OWNER_OF(k, const struct call, k);
	return c->inner->backlog(c->inner);
}

static int k_watch(struct stream_sink *k, void (*drained)(void *arg), void *arg)
{
	struct call *c = OWNER_OF(k, struct call, k);
	return c->inner->watch(c->inner, drained, arg);
}

static void k_watch_hangup(struct stream_sink *k)
{
	struct call *c = OWNER_OF(k, struct call, k);
	if (c->inner->watch_hangup)
		c->inner->watch_hangup(c->inner);
}

/* The http_sink's reader went: so does ours, and the call with it. */
static void on_inner_gone(void *arg)
{
	struct call *c = arg;
	if (c->k.gone)
		c->k.gone(c->k.gone_arg);
	call_free(c);
}

static void on_keepalive(evutil_socket_t fd, short what, void *arg)
{
	struct call *c = arg;
	struct timeval tv = {c->keepalive_s, 0};
	if (c->inner)
		k_write(&c->k, "{\"type\":\"keepalive\"}", 20);
	event_add(c->keepalive_ev, &tv);
}

static struct stream_sink *r_stream(struct svc_reply *r, const char *type)
{
	struct call *c = OWNER_OF(r, struct call, r);
	struct stream_sink *inner = http_sink_new(c->cc.req);
	if (!inner)
		return NULL;
	/* its close callback replaces ours */
	http_sink_start(inner, c->cc.mode == CONNECT_MODE_NDJSON ? type : "application/connect+json");
	inner->gone = on_inner_gone;
	inner->gone_arg = c;
	c->inner = inner;
	c->k = (struct stream_sink){.write = k_write, .end = k_end, .backlog = k_backlog,
				    .watch = k_watch, .watch_hangup = k_watch_hangup};
	if (c->cc.ops->start) {
		_cleanup_(json_decrefp) json_t *first = c->cc.ops->start(&c->cc);
		(void)envelope_send(c, first, false); /* a reader already gone: the next write says */
	}
	if (c->keepalive_s) {
		struct timeval tv = {c->keepalive_s, 0};
		c->keepalive_ev = evtimer_new(D.base, on_keepalive, c);
		if (c->keepalive_ev)
			event_add(c->keepalive_ev, &tv);
	}
	return &c->k;
}

struct svc_reply *connect_reply(struct connect_call *cc)
{
	struct call *c = OWNER_OF(cc, struct call, cc);
	c->r = (struct svc_reply){.json = r_json, .bytes = r_bytes, .error = r_error,
				  .stream = r_stream};
	req_on_close(cc->req, on_close, c);
	return &c->r;
}

/* ---- deadlines ---- */

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
	struct call *c = arg;
	const char *msg = "the call's Connect-Timeout-Ms passed";
	if (c->inner) { /* the service lets go of the stream first */
		if (c->k.gone)
			c->k.gone(c->k.gone_arg);
		c->ended_well = false;
		stream_finish(c, CONNECT_DEADLINE_EXCEEDED, msg);
		return;
	}
	req_on_close(c->cc.req, NULL, NULL);
	if (c->r.gone)
		c->r.gone(c->r.gone_arg);
	render_error(c, CONNECT_DEADLINE_EXCEEDED, 504, msg);
	call_free(c);
}

static unsigned header_uint(struct evhttp_request *req, const char *name, uint64_t max)
{
	const char *v = evhttp_find_header(evhttp_request_get_input_headers(req), name);
	uint64_t n = 0;
	if (!v || connect_timeout_parse(v, &n) < 0)
		return 0;
	return (unsigned)(n > max ? max : n);
}

struct connect_call *connect_call_new(struct evhttp_request *req, enum connect_mode mode,
				      const struct connect_ops *ops, void *arg)
{
	static const struct connect_ops none;
	struct call *c = calloc(1, sizeof(*c));
	if (!c) {
		connect_refuse(req, mode, CONNECT_INTERNAL, 500, "out of memory");
		return NULL;
	}
	c->cc = (struct connect_call){.req = req, .ops = ops ? ops : &none, .arg = arg, .mode = mode};
	uint64_t ms = header_uint(req, "Connect-Timeout-Ms", UINT32_MAX);
	if (mode == CONNECT_MODE_STREAM) {
		unsigned k = header_uint(req, "Keepalive-Ping-Interval", KEEPALIVE_MAX_S);
		c->keepalive_s = k ? (k < KEEPALIVE_MIN_S ? KEEPALIVE_MIN_S : k) : 0;
	}
	if (mode == CONNECT_MODE_NDJSON)
		c->keepalive_s = CONNECT_NDJSON_KEEPALIVE_S;
	if (ms) {
		struct timeval tv = {ms / 1000, ms % 1000 * 1000};
		c->deadline_ev = evtimer_new(D.base, on_deadline, c);
		if (c->deadline_ev)
			event_add(c->deadline_ev, &tv);
	}
	return &c->cc;
}
