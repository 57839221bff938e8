/* The intercepting relay: for a TLS connection to a host one of the sandbox's secrets is for,
 * the proxy is the server (a leaf certificate the Cordon CA minted for the SNI name), reads
 * each HTTP/1.1 request (net/httpreq.c), and sends it on over a second TLS connection to the
 * real server, verified against the host's CA store (tls.c). In a request the placeholder of
 * a secret is replaced by its value only when every check holds:
 *
 *   - the SNI is one of the secret's hosts (the relay is chosen for such names only),
 *   - the proxy dialled an address it resolved for that name itself (conn->by_name),
 *   - the Host header equals the SNI (no other port than the one dialled),
 *   - the placeholder is where the secret allows it: a header's value, the query string
 *     (after "?"), a body with a Content-Length of at most BODY_MAX.
 *
 * A placeholder anywhere else (another secret's host, a header name, the path, a body it may
 * not be in, a chunked body) refuses the connection with a 403 and a secret.misuse report;
 * nothing of that request goes upstream. A Host other than the SNI is refused (421) even
 * without a placeholder: the relay does not carry one name's connection to another. Requests
 * are checked one by one, pipelined or not. Responses are relayed as they come. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent_ssl.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "net/egress/egress.h"
#include "net/httpreq.h"

#define TLS_RELAY_HIGH (1u << 20)
#define BODY_MAX (64u << 10) /* a body held whole for substitution */

enum { ST_HEAD, ST_BODY, ST_CHUNKED, ST_HELD, ST_DONE };

struct tls_state {
	int st;
	uint64_t left; /* ST_BODY: bytes of the body still to come */
	struct httpreq_chunked ch;
	struct secret_tail tail; /* of the body being streamed */
	struct bufferevent *raw_in, *raw_out; /* the sockets under the TLS filters */
	struct event *flush; /* closing: waits for the sockets to take what is queued */
	int flush_tries;
	bool lingering; /* our side is shut: reading what the sandbox still sends, until EOF */
	bool paused_sandbox, paused_server; /* not read: the other side has TLS_RELAY_HIGH queued */
	struct evbuffer *raw_in_buf, *raw_out_buf; /* the sockets' output buffers, watched */
	struct evbuffer_cb_entry *cb_in, *cb_out;
	bool plain;	   /* relay_http: no TLS, so no secret is substituted (a placeholder is misuse) */
	bool approved;	   /* the request at the head of the input was approved: it goes on */
	struct held *held; /* ST_HELD: waiting for a decision (approve.c) */
	bool upstream_lost; /* the server hung up while a request was held: dialled again if allowed */
	struct sockaddr_storage peer; /* the address dialled (by name), to dial again */
	socklen_t peer_len;
};

static bool wants(const struct conn *c)
{
	return c->s->e->tls && c->by_name && strcmp(c->proto, "tls") == 0 &&
	       (sbx_has_secret_for(c->s, c->name) || approve_host_rule(c->s, c->name, ntohs(c->orig.sin_port)));
}

/* Plain HTTP is read only where an approve rule may hold one of its requests. */
static bool wants_http(const struct conn *c)
{
	return c->by_name && strcmp(c->proto, "http") == 0 && approve_host_rule(c->s, c->name, ntohs(c->orig.sin_port));
}

/* Whether @sec's value may go into this connection: its host, and TLS. */
static bool sec_here(const struct conn *c, const struct egress_secret *sec)
{
	const struct tls_state *t = c->relay_state;
	return !t->plain && secret_for_host(sec, c->name);
}

static void close_when_flushed(struct bufferevent *bev, void *arg);
static void discard(struct bufferevent *bev, void *arg);
static void on_event(struct bufferevent *bev, short what, void *arg);
static void from_server(struct bufferevent *bev, void *arg);
static void raw_drained(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg);

/* Ends the connection after telling the sandbox why, in a response of our own. */
static void refuse(struct conn *c, int code, const char *status, const char *why)
{
	struct tls_state *t = c->relay_state;
	t->st = ST_DONE;
	if (c->out) {
		/* Nothing more goes upstream, not even what was queued. */
		bufferevent_disable(c->out, EV_READ | EV_WRITE);
		struct evbuffer *o = bufferevent_get_output(c->out);
		evbuffer_drain(o, evbuffer_get_length(o));
	}
	evbuffer_drain(bufferevent_get_input(c->in), evbuffer_get_length(bufferevent_get_input(c->in)));
	evbuffer_add_printf(bufferevent_get_output(c->in),
			    "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nConnection: close\r\n"
			    "Content-Length: %zu\r\n\r\n%s\n", code, status, strlen(why) + 1, why);
	/* Reading goes on (and is thrown away): the sandbox's handshake may not be over, and our
	 * answer goes out only once it is. The close is polled from the loop (the filter may have
	 * taken the answer already, so no write callback would come; and our callers still hold
	 * @c). */
	bufferevent_setcb(c->in, discard, NULL, on_event, c);
	bufferevent_enable(c->in, EV_READ | EV_WRITE);
	struct timeval tv = {0, 1000};
	if (!evtimer_pending(t->flush, NULL))
		evtimer_add(t->flush, &tv);
}

static void misuse(struct conn *c, const struct egress_secret *sec, const char *where)
{
	decide_report_misuse(c->s, c, NULL, sec, where);
	refuse(c, 403, "Forbidden", "cordon: a secret's placeholder was sent where it may not go; refused by policy");
}

static size_t count(const uint8_t *p, size_t len, const struct egress_secret *sec)
{
	size_t n = 0;
	for (const uint8_t *q = p; (q = memmem(q, len - (size_t)(q - p), sec->placeholder, sec->ph_len));
	     q += sec->ph_len)
		n++;
	return n;
}

/* How many of @sec's placeholders in the head are where @sec allows them. */
static size_t allowed_in_head(const struct conn *c, const uint8_t *p, const struct httpreq *req,
			      const struct egress_secret *sec)
{
	if (!sec_here(c, sec))
		return 0;
	size_t n = 0;
	if (sec->in & SECRET_IN_QUERY) {
		const uint8_t *q = memchr(p + req->target.off, '?', req->target.len);
		if (q)
			n += count(q, req->target.len - (size_t)(q - (p + req->target.off)), sec);
	}
	for (size_t i = 0; (sec->in & SECRET_IN_HEADER) && i < req->n_headers; i++)
		n += count(p + req->headers[i].value.off, req->headers[i].value.len, sec);
	return n;
}

/* @p with every placeholder of a secret for this host replaced by its value, into @dst; bit
 * k of the result: secret k was put in. */
static unsigned subst(struct evbuffer *dst, const struct conn *c, const uint8_t *p, size_t len)
{
	unsigned used = 0;
	const struct sbx *s = c->s;
	size_t from = 0;
	for (size_t i = 0; i < len;) {
		const struct egress_secret *hit = NULL;
		for (size_t k = 0; !hit && k < s->n_secrets; k++) {
			const struct egress_secret *sec = &s->secrets[k];
			if (len - i >= sec->ph_len && p[i] == (uint8_t)sec->placeholder[0] &&
			    memcmp(p + i, sec->placeholder, sec->ph_len) == 0 && sec_here(c, sec))
				hit = sec;
		}
		if (!hit) {
			i++;
			continue;
		}
		evbuffer_add(dst, p + from, i - from);
		evbuffer_add(dst, hit->value, hit->value_len);
		used |= 1u << (hit - s->secrets);
		i += hit->ph_len;
		from = i;
	}
	evbuffer_add(dst, p + from, len - from);
	return used;
}

/* Each secret of @used was put in a request to this host: reported for the audit log. */
static void report_used(const struct conn *c, unsigned used)
{
	for (size_t k = 0; used && k < c->s->n_secrets; k++)
		if (used & (1u << k))
			decide_report_use(c, &c->s->secrets[k]);
}

/* The head again, substituted, with Content-Length @cl when @cl >= 0. */
static unsigned emit_head(struct evbuffer *dst, const struct conn *c, const uint8_t *p,
			  const struct httpreq *req, long long cl)
{
	const uint8_t *eol = memchr(p, '\r', req->head_len);
	unsigned used = subst(dst, c, p, (size_t)(eol - p) + 2);
	for (size_t i = 0; i < req->n_headers; i++) {
		const struct httpreq_header *h = &req->headers[i];
		evbuffer_add(dst, p + h->name.off, h->name.len);
		evbuffer_add(dst, ": ", 2);
		if (cl >= 0 && h->name.len == 14 && strncasecmp((const char *)p + h->name.off, "content-length", 14) == 0)
			evbuffer_add_printf(dst, "%lld", cl);
		else
			used |= subst(dst, c, p + h->value.off, h->value.len);
		evbuffer_add(dst, "\r\n", 2);
	}
	evbuffer_add(dst, "\r\n", 2);
	return used;
}

/* Whether a secret for this host may be put in a body. */
static bool body_wanted(const struct conn *c)
{
	for (size_t i = 0; i < c->s->n_secrets; i++)
		if ((c->s->secrets[i].in & SECRET_IN_BODY) && sec_here(c, &c->s->secrets[i]))
			return true;
	return false;
}

/* Every check of one request head; false when @c was refused. */
static bool check_head(struct conn *c, const uint8_t *p, const struct httpreq *req)
{
	for (size_t i = 0; i < c->s->n_secrets; i++) {
		const struct egress_secret *sec = &c->s->secrets[i];
		size_t all = count(p, req->head_len, sec);
		if (!all)
			continue;
		if (!httpreq_host_is(p, req, c->name, ntohs(c->orig.sin_port))) {
			misuse(c, sec, "with a Host other than the TLS name");
			return false;
		}
		if (allowed_in_head(c, p, req, sec) != all) {
			const struct tls_state *t = c->relay_state;
			misuse(c, sec, sec_here(c, sec) ? "in a part of the request it is not for"
				       : t->plain ? "over plain HTTP" : "to a host it is not for");
			return false;
		}
	}
	if (!httpreq_host_is(p, req, c->name, ntohs(c->orig.sin_port))) {
		decide_report(c, NULL, "Host does not match the TLS name");
		refuse(c, 421, "Misdirected Request", "cordon: the Host header must match the TLS server name");
		return false;
	}
	if (req->upgrade) {
		decide_report(c, NULL, "protocol upgrade on an intercepted connection");
		refuse(c, 501, "Not Implemented", "cordon: no protocol upgrade on an intercepted connection");
		return false;
	}
	if (req->chunked && body_wanted(c)) {
		decide_report(c, NULL, "chunked body where a secret may be substituted");
		refuse(c, 411, "Length Required", "cordon: a body that may carry a secret needs a Content-Length");
		return false;
	}
	return true;
}

/* A whole request with a body of at most BODY_MAX: substituted in head and body. 0 when sent,
 * -EAGAIN while the body is incomplete. */
static int send_whole(struct conn *c, const struct httpreq *req)
{
	struct evbuffer *in = bufferevent_get_input(c->in);
	size_t total = req->head_len + (size_t)req->content_length;
	if (evbuffer_get_length(in) < total)
		return -EAGAIN;
	const uint8_t *p = evbuffer_pullup(in, (ssize_t)total);
	if (!p)
		return -ENOMEM;
	for (size_t i = 0; i < c->s->n_secrets; i++) {
		const struct egress_secret *sec = &c->s->secrets[i];
		if (count(p + req->head_len, (size_t)req->content_length, sec) &&
		    !((sec->in & SECRET_IN_BODY) && sec_here(c, sec))) {
			misuse(c, sec, "in a body it may not be substituted in");
			return -EPIPE;
		}
	}
	struct evbuffer *body = evbuffer_new();
	if (!body)
		return -ENOMEM;
	unsigned used = subst(body, c, p + req->head_len, (size_t)req->content_length);
	struct evbuffer *out = bufferevent_get_output(c->out);
	report_used(c, used | emit_head(out, c, p, req, (long long)evbuffer_get_length(body)));
	evbuffer_add_buffer(out, body);
	evbuffer_free(body);
	evbuffer_drain(in, total);
	return 0;
}

/* A request an approve rule holds waits, its body (up to BODY_MAX) read first so that the
 * preview shows it, for the decision: nothing more of the sandbox's is handled meanwhile. 0: not held, go on;
 * -EAGAIN: held, or its body still coming; -EPIPE: refused at once (a bound). */
static int maybe_hold(struct conn *c, const struct httpreq *req)
{
	struct tls_state *t = c->relay_state;
	struct evbuffer *in = bufferevent_get_input(c->in);
	if (t->approved) {
		t->approved = false;
		return 0;
	}
	const struct approve_rule *rule = approve_match(c, evbuffer_pullup(in, (ssize_t)req->head_len), req);
	if (!rule)
		return 0;
	size_t want = req->head_len;
	if (req->has_length && req->content_length <= BODY_MAX)
		want += (size_t)req->content_length;
	if (evbuffer_get_length(in) < want)
		return -EAGAIN;
	const char *why = NULL;
	t->held = approve_hold(c, rule, evbuffer_pullup(in, (ssize_t)want), want, req, &why);
	if (!t->held) {
		char msg[200];
		snprintf(msg, sizeof(msg), "cordon: this request was denied by policy (%s)", why);
		refuse(c, 403, "Forbidden", msg);
		return -EPIPE;
	}
	/* Reading goes on, so that a client that gives up is seen (its EOF ends the approval);
	 * nothing read is handled while held (from_sandbox), and the read watermark bounds it. */
	t->st = ST_HELD;
	return -EAGAIN;
}

/* The approved request goes on: read again from the head of the input. */
static void go_on(struct conn *c)
{
	struct tls_state *t = c->relay_state;
	t->st = ST_HEAD;
	t->approved = true;
	bufferevent_enable(c->in, EV_READ);
	bufferevent_trigger(c->in, EV_READ, BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
}

/* A server that closes an idle connection (most do within a minute) must not cost a request
 * a person approved: its side is dropped while the request waits, and dialled again (the same
 * address the proxy resolved for the name, verified again over TLS) once it is allowed. */
static void upstream_drop(struct conn *c)
{
	struct tls_state *t = c->relay_state;
	if (t->cb_out)
		evbuffer_remove_cb_entry(t->raw_out_buf, t->cb_out);
	t->cb_out = NULL;
	t->raw_out_buf = NULL;
	t->raw_out = NULL;
	bufferevent_free(c->out); /* and the socket under a filter */
	c->out = NULL;
	t->upstream_lost = true;
}

static void redial_failed(struct conn *c)
{
	decide_report(c, NULL, "the server closed while the request waited, and cannot be reached again");
	refuse(c, 502, "Bad Gateway", "cordon: the server cannot be reached again after the approval");
}

static void on_redialled(struct bufferevent *b, short what, void *arg)
{
	struct conn *c = arg;
	struct tls_state *t = c->relay_state;
	if (!(what & BEV_EVENT_CONNECTED)) {
		redial_failed(c);
		return;
	}
	bufferevent_add_to_rate_limit_group(b, c->s->group);
	if (!t->plain) {
		SSL *sout = tls_new_client(c->s->e->tls, c->name);
		struct bufferevent *f = sout ? bufferevent_openssl_filter_new(c->s->e->base, b, sout,
									      BUFFEREVENT_SSL_CONNECTING,
									      BEV_OPT_CLOSE_ON_FREE)
					     : NULL;
		if (!f) {
			SSL_free(sout);
			redial_failed(c);
			return;
		}
		bufferevent_openssl_set_allow_dirty_shutdown(f, 1);
		c->out = f;
	}
	t->raw_out_buf = bufferevent_get_output(t->raw_out);
	t->cb_out = evbuffer_add_cb(t->raw_out_buf, raw_drained, c);
	bufferevent_setcb(c->out, from_server, NULL, on_event, c);
	bufferevent_enable(c->out, EV_READ | EV_WRITE);
	t->upstream_lost = false;
	go_on(c);
}

static void redial(struct conn *c)
{
	struct tls_state *t = c->relay_state;
	struct bufferevent *b = bufferevent_socket_new(c->s->e->base, -1, BEV_OPT_CLOSE_ON_FREE);
	if (!b) {
		redial_failed(c);
		return;
	}
	c->out = t->raw_out = b; /* freed with @c whatever happens next */
	bufferevent_setcb(b, NULL, NULL, on_redialled, c);
	if (bufferevent_socket_connect(b, (struct sockaddr *)&t->peer, t->peer_len) < 0)
		redial_failed(c);
}

void relay_approved(struct conn *c, bool allow, const char *reason)
{
	struct tls_state *t = c->relay_state;
	t->held = NULL;
	if (!allow) {
		char msg[400];
		snprintf(msg, sizeof(msg), "cordon: this request was denied by policy (approval denied%s%s)",
			 reason && *reason ? ": " : "", reason ? reason : "");
		refuse(c, 403, "Forbidden", msg);
		return;
	}
	if (t->upstream_lost)
		redial(c);
	else
		go_on(c);
}

/* One request head at the start of the input: checked, then sent (or held for its body).
 * 0: go on; -EAGAIN: wait for more bytes; -EPIPE: refused. */
static int on_head(struct conn *c)
{
	struct tls_state *t = c->relay_state;
	struct evbuffer *in = bufferevent_get_input(c->in);
	size_t len = evbuffer_get_length(in);
	size_t n = len < HTTPREQ_HEAD_MAX ? len : HTTPREQ_HEAD_MAX;
	const uint8_t *p = evbuffer_pullup(in, (ssize_t)n);
	struct httpreq req;
	int r = httpreq_parse(p, n, &req);
	if (r == -EAGAIN)
		return -EAGAIN;
	if (r < 0) {
		const struct egress_secret *sec = secret_in_bytes(c->s, p, n);
		if (sec)
			misuse(c, sec, "in a request that is not HTTP/1.1");
		else {
			decide_report(c, NULL, "not an HTTP/1.1 request the relay can check");
			refuse(c, 400, "Bad Request", "cordon: not an HTTP/1.1 request the proxy can check");
		}
		return -EPIPE;
	}
	if (!check_head(c, p, &req))
		return -EPIPE;
	if ((r = maybe_hold(c, &req)) < 0)
		return r;
	/* A body the proxy can hold is checked whole before any of the request goes: a
	 * placeholder in it stops the head too. Longer and chunked bodies are streamed and
	 * scanned; a placeholder there cuts the connection mid-body (never forwarded itself). */
	if (req.has_length && req.content_length > 0 && req.content_length <= BODY_MAX) {
		r = send_whole(c, &req);
		if (r == -EAGAIN)
			return r; /* the input's watermark bounds what waits (start) */
		if (r == -EPIPE)
			return r;
		if (r < 0) {
			refuse(c, 503, "Service Unavailable", "cordon: out of memory");
			return -EPIPE;
		}
		return 0;
	}
	report_used(c, emit_head(bufferevent_get_output(c->out), c, p, &req, -1));
	evbuffer_drain(in, req.head_len);
	t->tail.n = 0;
	t->ch = (struct httpreq_chunked){0};
	t->left = req.has_length ? req.content_length : 0;
	t->st = req.chunked ? ST_CHUNKED : t->left ? ST_BODY : ST_HEAD;
	return 0;
}

/* What of the input belongs to the body being streamed: scanned for placeholders, sent. */
static int on_body(struct conn *c)
{
	struct tls_state *t = c->relay_state;
	struct evbuffer *in = bufferevent_get_input(c->in);
	size_t len = evbuffer_get_length(in), n = len;
	bool done = false;
	if (t->st == ST_BODY) {
		n = len < t->left ? len : (size_t)t->left;
		done = n == t->left;
	} else {
		const uint8_t *p = evbuffer_pullup(in, (ssize_t)len);
		long k = httpreq_chunked_feed(&t->ch, p, len, &done);
		if (k < 0) {
			decide_report(c, NULL, "malformed chunked body");
			refuse(c, 400, "Bad Request", "cordon: malformed chunked body");
			return -EPIPE;
		}
		n = (size_t)k;
	}
	struct evbuffer *part = evbuffer_new();
	if (!part || evbuffer_remove_buffer(in, part, n) != (int)n) {
		if (part)
			evbuffer_free(part);
		refuse(c, 503, "Service Unavailable", "cordon: out of memory");
		return -EPIPE;
	}
	const struct egress_secret *sec = secret_in_stream(c->s, &t->tail, part);
	if (sec) {
		evbuffer_free(part);
		misuse(c, sec, "in a body it may not be substituted in");
		return -EPIPE;
	}
	evbuffer_add_buffer(bufferevent_get_output(c->out), part);
	evbuffer_free(part);
	if (t->st == ST_BODY)
		t->left -= n;
	if (done)
		t->st = ST_HEAD;
	return done ? 0 : -EAGAIN;
}

/* Bytes queued toward one side: in its TLS filter and in the socket under it. A filter
 * encrypts everything it is given into its socket's buffer at once, so the filter's own
 * output alone says nothing of a slow reader. */
static size_t queued_to(const struct tls_state *t, struct bufferevent *filter, struct evbuffer *raw)
{
	/* Plain HTTP: the "filter" is the socket itself. */
	return evbuffer_get_length(bufferevent_get_output(filter)) + (raw && !t->plain ? evbuffer_get_length(raw) : 0);
}

static void from_sandbox(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	struct tls_state *t = c->relay_state;
	int r = 0;
	while (r == 0 && t->st != ST_DONE && t->st != ST_HELD && evbuffer_get_length(bufferevent_get_input(bev)))
		r = t->st == ST_HEAD ? on_head(c) : on_body(c);
	/* Backpressure: the sandbox is read again once the server's socket has drained. */
	if (t->st != ST_DONE && t->st != ST_HELD && queued_to(t, c->out, t->raw_out_buf) >= TLS_RELAY_HIGH) {
		bufferevent_disable(bev, EV_READ);
		t->paused_sandbox = true;
	}
}

static void from_server(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	struct tls_state *t = c->relay_state;
	evbuffer_add_buffer(bufferevent_get_output(c->in), bufferevent_get_input(bev));
	if (queued_to(t, c->in, t->raw_in_buf) >= TLS_RELAY_HIGH) {
		bufferevent_disable(bev, EV_READ);
		t->paused_server = true;
	}
}

/* A socket's buffer shrank: the side that was paused for it reads again below half. */
static void raw_drained(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct conn *c = arg;
	struct tls_state *t = c->relay_state;
	if (!info->n_deleted || t->st == ST_DONE)
		return;
	if (buf == t->raw_in_buf && t->paused_server && queued_to(t, c->in, buf) < TLS_RELAY_HIGH / 2) {
		t->paused_server = false;
		bufferevent_enable(c->out, EV_READ);
	}
	if (buf == t->raw_out_buf && t->paused_sandbox && t->st != ST_HELD &&
	    queued_to(t, c->out, buf) < TLS_RELAY_HIGH / 2) {
		t->paused_sandbox = false;
		bufferevent_enable(c->in, EV_READ);
		/* What was read before the pause: handled from the loop, not from in here. */
		bufferevent_trigger(c->in, EV_READ, BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
	}
}

static void discard(struct bufferevent *bev, void *arg)
{
	(void)arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	evbuffer_drain(in, evbuffer_get_length(in));
}

static bool queued(struct bufferevent *filter, struct bufferevent *raw)
{
	/* A side whose socket is gone has nothing left that could be sent. */
	return raw && (evbuffer_get_length(bufferevent_get_output(filter)) ||
		       evbuffer_get_length(bufferevent_get_output(raw)));
}

/* A filter's output is empty once the bytes are encrypted into its socket's buffer, not yet
 * sent: the connection closes when the socket's buffer is empty too (or after 5 s). */
static void flush_check(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;
	struct tls_state *t = c->relay_state;
	(void)fd;
	(void)what;
	if (++t->flush_tries > 500) {
		conn_close(c);
		return;
	}
	/* Refused (ST_DONE): nothing more goes upstream, whatever is still queued there. */
	if (!queued(c->in, t->raw_in) && (t->st == ST_DONE || !queued(c->out, t->raw_out))) {
		if (!t->raw_in) {
			conn_close(c);
			return;
		}
		/* A lingering close: closing with the sandbox's bytes unread would reset the
		 * connection and could destroy our answer before it is read. */
		if (!t->lingering) {
			t->lingering = true;
			shutdown(bufferevent_getfd(t->raw_in), SHUT_WR);
			bufferevent_setcb(c->in, discard, NULL, on_event, c);
			bufferevent_enable(c->in, EV_READ);
		}
	}
	struct timeval tv = {0, 10000};
	evtimer_add(t->flush, &tv);
}

static void close_when_flushed(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	struct tls_state *t = c->relay_state;
	if (evbuffer_get_length(bufferevent_get_output(bev)) != 0 || evtimer_pending(t->flush, NULL))
		return;
	flush_check(-1, 0, c);
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
	struct conn *c = arg;
	struct tls_state *t = c->relay_state;
	if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
		return;
	if (bev == c->out && (what & BEV_EVENT_ERROR)) {
		SSL *ssl = bufferevent_openssl_get_ssl(c->out);
		long v = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
		if (v != X509_V_OK) {
			char why[160];
			snprintf(why, sizeof(why), "upstream certificate not verified: %s",
				 X509_verify_cert_error_string(v));
			decide_report(c, NULL, why);
			if (t->st != ST_DONE)
				refuse(c, 502, "Bad Gateway", "cordon: the server's certificate did not verify");
			return;
		}
	}
	if (bev == c->out && t->st == ST_HELD && t->peer_len) {
		upstream_drop(c);
		return;
	}
	struct bufferevent *to = bev == c->in ? c->out : c->in;
	if (bev == c->in)
		t->raw_in = NULL; /* gone: nothing more can be sent to the sandbox */
	else
		t->raw_out = NULL;
	bufferevent_disable(bev, EV_READ | EV_WRITE);
	if (to && evbuffer_get_length(bufferevent_get_output(to)) > 0) {
		bufferevent_setcb(to, NULL, close_when_flushed, on_event, c);
		bufferevent_disable(to, EV_READ);
		return;
	}
	if (!evtimer_pending(t->flush, NULL))
		flush_check(-1, 0, c);
}

static void tls_free(struct conn *c)
{
	struct tls_state *t = c->relay_state;
	if (t && t->held)
		approve_release(t->held);
	if (t && t->flush)
		event_free(t->flush);
	if (t && t->cb_in)
		evbuffer_remove_cb_entry(t->raw_in_buf, t->cb_in);
	if (t && t->cb_out)
		evbuffer_remove_cb_entry(t->raw_out_buf, t->cb_out);
	free(c->relay_state);
	c->relay_state = NULL;
}

/* The relay's state for @c, with its close timer; NULL without memory. */
static struct tls_state *state_new(struct conn *c)
{
	struct tls_state *t = calloc(1, sizeof(*t));
	if (t && !(t->flush = evtimer_new(c->s->e->base, flush_check, c))) {
		free(t);
		return NULL;
	}
	/* Where the server is (c->out is still its socket), should it have to be dialled again. */
	t->peer_len = sizeof(t->peer);
	if (getpeername(bufferevent_getfd(c->out), (struct sockaddr *)&t->peer, &t->peer_len) < 0)
		t->peer_len = 0;
	return t;
}

/* Both sides are set up (filters or sockets): watch the sockets' buffers, read requests. */
static void begin(struct conn *c, struct tls_state *t)
{
	/* A request waiting for its body is held whole: bounded by the read watermark. */
	bufferevent_setwatermark(c->in, EV_READ, 0, HTTPREQ_HEAD_MAX + BODY_MAX);
	t->raw_in_buf = bufferevent_get_output(t->raw_in);
	t->raw_out_buf = bufferevent_get_output(t->raw_out);
	t->cb_in = evbuffer_add_cb(t->raw_in_buf, raw_drained, c);
	t->cb_out = evbuffer_add_cb(t->raw_out_buf, raw_drained, c);
	bufferevent_setcb(c->in, from_sandbox, NULL, on_event, c);
	bufferevent_setcb(c->out, from_server, NULL, on_event, c);
	bufferevent_enable(c->in, EV_READ | EV_WRITE);
	bufferevent_enable(c->out, EV_READ | EV_WRITE);
	/* The first bytes were read while sniffing and wait in the socket's buffer: have the
	 * filter (or the relay) read them (deferred: nothing may free @c before we return). */
	bufferevent_trigger(t->raw_in, EV_READ, BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
}

static void tls_start(struct conn *c)
{
	struct egress *e = c->s->e;
	struct tls_state *t = state_new(c);
	SSL *sin = t ? tls_new_server(e->tls, c->name) : NULL;
	SSL *sout = sin ? tls_new_client(e->tls, c->name) : NULL;
	if (!sout) {
		SSL_free(sin);
		if (t)
			event_free(t->flush);
		free(t);
		conn_block(c, "cannot intercept (out of memory)");
		return;
	}
	c->relay_state = t;
	t->raw_in = c->in;
	t->raw_out = c->out;
	bufferevent_setcb(c->in, NULL, NULL, NULL, NULL);
	bufferevent_setwatermark(c->in, EV_READ, 0, 0);
	struct bufferevent *fin = bufferevent_openssl_filter_new(e->base, c->in, sin, BUFFEREVENT_SSL_ACCEPTING,
								 BEV_OPT_CLOSE_ON_FREE);
	if (!fin) {
		SSL_free(sin);
		SSL_free(sout);
		conn_block(c, "cannot intercept (out of memory)");
		return;
	}
	c->in = fin;
	struct bufferevent *fout = bufferevent_openssl_filter_new(e->base, c->out, sout, BUFFEREVENT_SSL_CONNECTING,
								  BEV_OPT_CLOSE_ON_FREE);
	if (!fout) {
		SSL_free(sout);
		conn_block(c, "cannot intercept (out of memory)");
		return;
	}
	c->out = fout;
	bufferevent_openssl_set_allow_dirty_shutdown(fin, 1);
	bufferevent_openssl_set_allow_dirty_shutdown(fout, 1);
	begin(c, t);
}

/* Plain HTTP to a host with an approve rule: the same request reading over the sockets. */
static void http_start(struct conn *c)
{
	struct tls_state *t = state_new(c);
	if (!t) {
		conn_block(c, "cannot read requests (out of memory)");
		return;
	}
	c->relay_state = t;
	t->plain = true;
	t->raw_in = c->in;
	t->raw_out = c->out;
	begin(c, t);
}

const struct relay_ops relay_tls = {
	.name = "tls",
	.wants = wants,
	.start = tls_start,
	.free = tls_free,
};

const struct relay_ops relay_http = {
	.name = "http",
	.wants = wants_http,
	.start = http_start,
	.free = tls_free,
};
