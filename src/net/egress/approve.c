/* Approval gates: requests held for a human. A sandbox's approve rules (ctl.c's set, "approve")
 * name a host or wildcard and, optionally, methods and path prefixes; an HTTP request the
 * intercepting relay reads (relay-tls.c: TLS terminated, or plain HTTP's head) that matches
 * one is held: nothing of it goes upstream, the sandbox is not read any further, and the
 * controller is told ({"kind":"approval.pending", id, method, host, path, a bounded preview
 * with every secret's placeholder and value redacted}). The controller answers with
 * {"op":"decide","id","decision":"allow"|"deny","reason"}; allow sends the request on as it
 * was, deny answers 403 with the reason. The controller owns the timeout (cordond denies at
 * the rule's timeout_s); ours, APPROVE_GRACE_S later, is a backstop for a controller that
 * never answers. Held requests are bounded per sandbox, in all and in bytes: past a bound a
 * request is denied at once (an "approval.refused" report). A held connection that closes,
 * or whose sandbox is deleted, ends its approval ("approval.gone"). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "basic/cleanup.h"
#include "net/egress/egress.h"
#include "net/httpreq.h"

struct held {
	struct egress *e;
	struct conn *c;
	char id[24];
	size_t bytes;
	struct event *timer;
	struct held *next;
};

void approve_rules_free(struct approve_rule *rules, size_t n)
{
	for (size_t i = 0; rules && i < n; i++)
		egress_policy_free(rules[i].host);
	free(rules);
}

static int rule_strings(json_t *a, size_t max, size_t len_max, char *dst, size_t stride,
			size_t *ret_n, const char *what, struct cordon_err *err)
{
	size_t n = json_array_size(a);
	if (a && (!json_is_array(a) || n > max))
		return cordon_err_setf(err, -EINVAL, "approve: %s: at most %zu strings", what, max);
	for (size_t i = 0; i < n; i++) {
		const char *s = json_string_value(json_array_get(a, i));
		if (!s || !*s || strlen(s) >= len_max)
			return cordon_err_setf(err, -EINVAL, "approve: %s: strings of 1 to %zu bytes", what,
					       len_max - 1);
		snprintf(dst + i * stride, stride, "%s", s);
	}
	*ret_n = n;
	return 0;
}

static int rule_parse(struct egress *e, json_t *o, struct approve_rule *r, struct cordon_err *err)
{
	const char *host = json_string_value(json_object_get(o, "approve"));
	json_t *t = json_object_get(o, "timeout_s");
	if (!host)
		return cordon_err_setf(err, -EINVAL, "approve: each rule names a host (\"approve\")");
	if (t && (!json_is_integer(t) || json_integer_value(t) < 1 || json_integer_value(t) > APPROVE_TIMEOUT_MAX))
		return cordon_err_setf(err, -EINVAL, "approve: timeout_s: 1 to %d", APPROVE_TIMEOUT_MAX);
	r->timeout_s = t ? (unsigned)json_integer_value(t) : APPROVE_TIMEOUT_DEFAULT;
	snprintf(r->text, sizeof(r->text), "approve %s", host);
	int k = rule_strings(json_object_get(o, "methods"), APPROVE_METHODS_MAX, sizeof(r->methods[0]),
			     r->methods[0], sizeof(r->methods[0]), &r->n_methods, "methods", err);
	if (k >= 0)
		k = rule_strings(json_object_get(o, "paths"), APPROVE_PATHS_MAX, sizeof(r->paths[0]),
				 r->paths[0], sizeof(r->paths[0]), &r->n_paths, "paths", err);
	if (k >= 0 && (k = egress_policy_parse(EGRESS_ALLOW, &host, 1, &r->host, err)) >= 0 &&
	    r->host->rules[0].kind == RULE_CIDR)
		k = cordon_err_setf(err, -EINVAL, "approve: %s: a host or wildcard, not an address", host);
	if (r->host) {
		r->host->extra = &e->blocks;
		/* What a decision names as the rule that let the connection through. */
		snprintf(r->host->rules[0].text, sizeof(r->host->rules[0].text), "%s", r->text);
	}
	return k;
}

int approve_rules_parse(struct egress *e, json_t *a, struct approve_rule **ret, size_t *ret_n,
			struct cordon_err *err)
{
	size_t n = json_array_size(a);
	if (!json_is_array(a) || n > APPROVE_RULES_MAX)
		return cordon_err_setf(err, -EINVAL, "approve: at most %d rules", APPROVE_RULES_MAX);
	struct approve_rule *rules = n ? calloc(n, sizeof(*rules)) : NULL;
	if (n && !rules)
		return cordon_err_setf(err, -ENOMEM, "approve: out of memory");
	int r = 0;
	for (size_t i = 0; r >= 0 && i < n; i++)
		r = rule_parse(e, json_array_get(a, i), &rules[i], err);
	if (r < 0) {
		approve_rules_free(rules, n);
		return r;
	}
	*ret = rules;
	*ret_n = n;
	return 0;
}

const struct egress_rule *approve_host_rule(const struct sbx *s, const char *name, uint16_t port)
{
	for (size_t i = 0; i < s->n_approve; i++) {
		const struct egress_rule *r = egress_match_name(s->approve[i].host, name, port);
		if (r)
			return r;
	}
	return NULL;
}

const struct egress_rule *approve_dns_rule(const struct sbx *s, const char *name)
{
	for (size_t i = 0; i < s->n_approve; i++) {
		const struct egress_rule *r = egress_match_dns(s->approve[i].host, name);
		if (r)
			return r;
	}
	return NULL;
}

static bool span_is(const uint8_t *p, struct httpreq_span sp, const char *s)
{
	return sp.len == strlen(s) && strncasecmp((const char *)p + sp.off, s, sp.len) == 0;
}

/* The path without its query, as the server reads it, against a prefix: "/v1/charges" takes
 * "/v1/charges" and "/v1/charges/ch_1", not "/v1/chargesX". */
static bool path_under(const uint8_t *p, struct httpreq_span target, const char *prefix)
{
	char norm[HTTPREQ_HEAD_MAX + 1];
	const uint8_t *t = p + target.off;
	const uint8_t *q = memchr(t, '?', target.len);
	int len = httpreq_path_normalize(t, q ? (size_t)(q - t) : target.len, norm);
	size_t n = strlen(prefix);
	if (len < 0)
		return true;
	if ((size_t)len < n || memcmp(norm, prefix, n) != 0)
		return false;
	return (size_t)len == n || prefix[n - 1] == '/' || norm[n] == '/';
}

const struct approve_rule *approve_match(const struct conn *c, const uint8_t *p, const struct httpreq *req)
{
	for (size_t i = 0; i < c->s->n_approve; i++) {
		const struct approve_rule *r = &c->s->approve[i];
		bool m = r->n_methods == 0, pa = r->n_paths == 0;
		for (size_t k = 0; !m && k < r->n_methods; k++)
			m = span_is(p, req->method, r->methods[k]);
		for (size_t k = 0; !pa && k < r->n_paths; k++)
			pa = path_under(p, req->target, r->paths[k]);
		if (m && pa && egress_match_name(r->host, c->name, ntohs(c->orig.sin_port)))
			return r;
	}
	return NULL;
}

/* @p[0..len) for a person to read: printable ASCII kept, other bytes '.', and every
 * placeholder and value of the sandbox's secrets replaced by "[secret NAME]". Into @out (its
 * size at least PREVIEW_FIELD_MAX + 1); how many input bytes it covered. */
size_t approve_redact(const struct sbx *s, const uint8_t *p, size_t len, char *out, size_t size)
{
	size_t o = 0, i = 0;
	while (i < len && o + 1 < size) {
		size_t skip = 0;
		const struct egress_secret *hit = NULL;
		for (size_t k = 0; !hit && k < s->n_secrets; k++) {
			const struct egress_secret *sec = &s->secrets[k];
			if (len - i >= sec->ph_len && memcmp(p + i, sec->placeholder, sec->ph_len) == 0)
				hit = sec, skip = sec->ph_len;
			else if (len - i >= sec->value_len && memcmp(p + i, sec->value, sec->value_len) == 0)
				hit = sec, skip = sec->value_len;
		}
		if (hit) {
			int w = snprintf(out + o, size - o, "[secret %s]", hit->name);
			if (w < 0 || (size_t)w >= size - o)
				break;
			o += (size_t)w;
			i += skip;
			continue;
		}
		out[o++] = p[i] >= 0x20 && p[i] < 0x7f ? (char)p[i] : '.';
		i++;
	}
	out[o] = '\0';
	return i;
}

static json_t *redacted(const struct sbx *s, const uint8_t *p, size_t len, size_t max)
{
	char buf[PREVIEW_BODY_MAX + 64];
	if (max > PREVIEW_BODY_MAX)
		max = PREVIEW_BODY_MAX;
	approve_redact(s, p, len < max ? len : max, buf, sizeof(buf));
	return json_string(buf);
}

/* Headers (at most PREVIEW_HEADERS, values cut at PREVIEW_VALUE_MAX) and the start of the
 * body that came with the head: what a person decides on. */
static json_t *preview(const struct conn *c, const uint8_t *p, size_t avail, const struct httpreq *req)
{
	json_t *h = json_array();
	for (size_t i = 0; h && i < req->n_headers && i < PREVIEW_HEADERS; i++) {
		const struct httpreq_header *x = &req->headers[i];
		json_array_append_new(h, json_pack("[o, o]", redacted(c->s, p + x->name.off, x->name.len, 64),
						    redacted(c->s, p + x->value.off, x->value.len, PREVIEW_VALUE_MAX)));
	}
	size_t body = avail > req->head_len ? avail - req->head_len : 0;
	return json_pack("{s:o?, s:o, s:I, s:b}", "headers", h, "body",
			 redacted(c->s, p + req->head_len, body, PREVIEW_BODY_MAX), "body_bytes",
			 (json_int_t)(req->has_length ? req->content_length : body), "chunked", req->chunked);
}

static void report(struct egress *e, json_t *ev, bool bounded)
{
	_cleanup_(json_decrefp) json_t *o = ev;
	_cleanup_free_ char *line = o ? json_dumps(o, JSON_COMPACT) : NULL;
	if (line)
		ctl_send(e, line, bounded);
}

static json_t *request_json(const struct conn *c, const uint8_t *p, const struct httpreq *req)
{
	return json_pack("{s:s, s:s, s:s, s:s, s:s, s:i, s:o, s:o}", "op", "event", "sandbox", c->s->id,
			 "proto", c->proto, "dst", c->dst, "host", c->name, "port", (int)ntohs(c->orig.sin_port),
			 "method", redacted(c->s, p + req->method.off, req->method.len, 32), "path",
			 redacted(c->s, p + req->target.off, req->target.len, PREVIEW_PATH_MAX));
}

static void held_unlink(struct held *h)
{
	for (struct held **pp = &h->e->held; *pp; pp = &(*pp)->next)
		if (*pp == h) {
			*pp = h->next;
			break;
		}
	h->e->n_held--;
	h->e->held_bytes -= h->bytes;
	if (h->c->s->n_held)
		h->c->s->n_held--;
	if (h->timer)
		event_free(h->timer);
	free(h);
}

static void held_end(struct held *h, bool allow, const char *reason)
{
	struct conn *c = h->c;
	held_unlink(h);
	relay_approved(c, allow, reason);
}

static void on_backstop(evutil_socket_t fd, short what, void *arg)
{
	struct held *h = arg;
	(void)fd;
	(void)what;
	report(h->e, json_pack("{s:s, s:s, s:s, s:s}", "op", "event", "kind", "approval.timeout", "sandbox",
			       h->c->s->id, "id", h->id), false);
	held_end(h, false, "no decision in time");
}

/* Which bound a new hold would pass; NULL when none. */
static const char *over_bound(const struct egress *e, const struct sbx *s, size_t bytes)
{
	if (s->n_held >= APPROVALS_PER_SBX)
		return "too many requests of this sandbox waiting for approval";
	if (e->n_held >= APPROVALS_MAX)
		return "too many requests waiting for approval";
	if (e->held_bytes + bytes > APPROVALS_HELD_BYTES)
		return "too many bytes held for approval";
	return NULL;
}

struct held *approve_hold(struct conn *c, const struct approve_rule *r, const uint8_t *p, size_t avail,
			  const struct httpreq *req, const char **ret_refused)
{
	struct egress *e = c->s->e;
	json_t *ev = request_json(c, p, req);
	const char *why = over_bound(e, c->s, avail);
	struct held *h = why ? NULL : calloc(1, sizeof(*h));
	if (h && !(h->timer = evtimer_new(e->base, on_backstop, h))) {
		free(h);
		h = NULL;
	}
	if (!h) {
		*ret_refused = why ? why : "out of memory";
		json_object_set_new(ev, "kind", json_string("approval.refused"));
		json_object_set_new(ev, "reason", json_string(*ret_refused));
		json_object_set_new(ev, "rule", json_string(r->text));
		report(e, ev, true);
		return NULL;
	}
	*h = (struct held){.e = e, .c = c, .bytes = avail, .timer = h->timer, .next = e->held};
	snprintf(h->id, sizeof(h->id), "ap-%llx%04x", (unsigned long long)++e->approval_seq,
		 (unsigned)(random() & 0xffff));
	e->held = h;
	e->n_held++;
	e->held_bytes += avail;
	c->s->n_held++;
	struct timeval tv = {(time_t)r->timeout_s + APPROVE_GRACE_S, 0};
	evtimer_add(h->timer, &tv);
	json_object_set_new(ev, "kind", json_string("approval.pending"));
	json_object_set_new(ev, "id", json_string(h->id));
	json_object_set_new(ev, "rule", json_string(r->text));
	json_object_set_new(ev, "timeout_s", json_integer(r->timeout_s));
	json_object_set_new(ev, "preview", preview(c, p, avail, req));
	/* Not dropped past the backlog bound: the count of held requests bounds these, and a
	 * dropped one would hold its request unseen until the backstop. */
	report(e, ev, false);
	return h;
}

void approve_release(struct held *h)
{
	if (!h)
		return;
	report(h->e, json_pack("{s:s, s:s, s:s, s:s}", "op", "event", "kind", "approval.gone", "sandbox",
			       h->c->s->id, "id", h->id), false);
	held_unlink(h);
}

int approve_decide(struct egress *e, const char *id, bool allow, const char *reason)
{
	for (struct held *h = e->held; h; h = h->next)
		if (strcmp(h->id, id) == 0) {
			held_end(h, allow, reason);
			return 0;
		}
	return -ENOENT;
}

void approve_drop_sbx(struct egress *e, const struct sbx *s)
{
	for (struct held *h = e->held, *next; h; h = next) {
		next = h->next;
		if (h->c->s == s)
			conn_close(h->c); /* its relay's free releases @h */
	}
}
