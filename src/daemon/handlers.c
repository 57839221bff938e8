/* Handlers of the sandbox routes (create, list, info, destroy, timeout, network), of a
 * sandbox's audit stream, and of /healthz and /metrics. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "basic/host.h"
#include "audit/audit.h"
#include "daemon/daemon.h"
#include "image/store.h"
#include "policy/egress.h"

static const char *const policy_names[] = {"deny", "allow", "public"};

/* The policy is checked before anything is made, so that a bad rule is a 400 naming it. */
static bool network_ok(struct ctx *c, const struct api_network *n, const char *prefix)
{
	struct cordon_err err = {};
	struct egress_policy *p = NULL;
	if (n->policy != API_NET_DENY && !D.egress) {
		reply_error(c->req, API_ERR_INVALID_FIELD,
			    "%spolicy: this server cannot give sandboxes a network (it does not run as root)", prefix);
		return false;
	}
	if (egress_policy_parse((enum egress_mode)n->policy, n->allow, n->n_allow, &p, &err) < 0) {
		reply_error(c->req, API_ERR_INVALID_FIELD, "%sallow: %s", prefix, err.msg);
		return false;
	}
	egress_policy_free(p);
	return true;
}

/* Limits over what this host has are a 400 naming the host's maximum (api_limits_check()). */
static bool limits_ok(struct ctx *c, const struct api_limits *l)
{
	struct api_host_max max = {.cpus_milli = host_cpus_milli()};
	struct cordon_err err = {};
	uint64_t mem;
	if (host_memory_bytes(&mem) == 0)
		max.memory_mb = mem >> 20 > UINT32_MAX ? UINT32_MAX : (uint32_t)(mem >> 20);
	if (api_limits_check(l, &max, &err) == 0)
		return true;
	reply_error(c->req, API_ERR_INVALID_FIELD, "%s", err.msg);
	return false;
}

void handle_create(struct ctx *c)
{
	struct api_create *req = NULL;
	struct cordon_err err = {};
	int r = api_create_parse(c->body, c->body_len, D.cfg.max_timeout_s, &req, &err);
	if (r < 0) {
		reply_errno(c->req, r, err.msg);
		return;
	}
	char root[4096];
	if (!limits_ok(c, &req->limits))
		;
	else if (strcmp(req->template_name, "host") != 0 &&
	    store_path(req->template_name, root, sizeof(root)) < 0)
		reply_error(c->req, API_ERR_NOT_FOUND, "no template '%s' (cordon template ls)",
			    req->template_name);
	else if (!network_ok(c, &req->network, "network."))
		;
	else if (c->principal && c->principal->live >= c->principal->max_sandboxes)
		reply_error(c->req, API_ERR_QUOTA_EXCEEDED, "key '%s' may hold %llu sandboxes",
			    c->principal->name, (unsigned long long)c->principal->max_sandboxes);
	else
		sbx_create(c, req);
	api_create_free(req);
}

static bool metadata_match(const struct sbx *s, const struct api_filter *f)
{
	for (size_t i = 0; i < f->n; i++) {
		const char *v = json_string_value(json_object_get(s->metadata, f->items[i].key));
		if (!v || strcmp(v, f->items[i].value) != 0)
			return false;
	}
	return true;
}

void handle_list(struct ctx *c)
{
	struct api_filter *f = NULL;
	struct cordon_err err = {};
	int r = api_filter_parse(c->query, c->query ? strlen(c->query) : 0, &f, &err);
	if (r < 0) {
		reply_errno(c->req, r, err.msg);
		return;
	}
	json_t *list = json_array();
	for (struct sbx *s = D.sandboxes; s; s = s->next) {
		if (s->pooled || s->state == SBX_DESTROYED)
			continue;
		if (c->principal && s->owner != c->principal)
			continue;
		if (metadata_match(s, f))
			json_array_append_new(list, sbx_json(s));
	}
	api_filter_free(f);
	reply_json(c->req, 200, json_pack("{s:o}", "sandboxes", list));
}

void handle_info(struct ctx *c)
{
	struct sbx *s = sbx_lookup(c, false);
	if (s)
		reply_json(c->req, 200, sbx_json(s));
}

void handle_destroy(struct ctx *c)
{
	struct sbx *s = sbx_lookup(c, false);
	if (!s)
		return;
	sbx_destroy(s, "api");
	reply_empty(c->req, 204);
}

void handle_timeout(struct ctx *c)
{
	struct cordon_err err = {};
	uint32_t t;
	struct sbx *s = sbx_lookup(c, false);
	if (!s)
		return;
	int r = api_timeout_parse(c->body, c->body_len, D.cfg.max_timeout_s, &t, &err);
	if (r < 0) {
		reply_errno(c->req, r, err.msg);
		return;
	}
	/* The record first: without it the deadline stays as it is. */
	r = sbx_audit_rc(s, AUDIT_POLICY_CHANGE,
			 json_pack("{s:s, s:I, s:I}", "kind", "timeout", "old", (json_int_t)s->timeout_s,
				   "timeout_s", (json_int_t)t));
	if (r < 0) {
		reply_audit_failed(c->req, r);
		return;
	}
	sbx_set_timeout(s, t);
	reply_json(c->req, 200, sbx_json(s));
}

void handle_network(struct ctx *c)
{
	struct api_network_req *n = NULL;
	struct cordon_err err = {};
	struct sbx *s = sbx_lookup(c, true);
	if (!s)
		return;
	int r = api_network_parse(c->body, c->body_len, &n, &err);
	if (r < 0) {
		reply_errno(c->req, r, err.msg);
		return;
	}
	if (network_ok(c, &n->network, "")) {
		const char *policy = policy_names[n->network.policy];
		json_t *rules = json_array();
		for (size_t i = 0; i < n->network.n_allow; i++)
			json_array_append_new(rules, json_string(n->network.allow[i]));
		/* The record first, then the change: it applies to new connections at once. Without
		 * the record the policy stays as it is. */
		r = sbx_audit_rc(s, AUDIT_POLICY_CHANGE,
				 json_pack("{s:s, s:s, s:o, s:O}", "kind", "network", "policy", policy,
					   "allow", rules, "old", s->network));
		if (r < 0)
			reply_audit_failed(c->req, r);
		else if (network_set(s, policy, n->network.allow, n->network.n_allow, &err) < 0)
			reply_error(c->req, API_ERR_INVALID_FIELD, "%s", err.msg);
		else
			reply_json(c->req, 200, json_incref(s->network));
	}
	api_network_free(n);
}

/* ---- audit: the sandbox's JSON Lines, and new records as they are written ---- */

struct follower {
	struct evhttp_request *req;
	off_t off;
	struct sbx *s;
	struct follower *next;
};

struct collect {
	struct evbuffer *buf;
};

static int collect_line(const char *line, size_t len, off_t offset, void *data)
{
	struct collect *c = data;
	evbuffer_add(c->buf, line, len); /* the record's own newline included */
	return evbuffer_get_length(c->buf) > (16u << 20) ? 1 : 0;
}

static int read_audit(const char *id, off_t from, struct evbuffer *buf, off_t *ret_next)
{
	char name[80];
	struct collect c = {buf};
	snprintf(name, sizeof(name), "%s.jsonl", id);
	return audit_read_from(D.audit_dirfd, name, from, collect_line, &c, ret_next);
}

static void follower_drop(struct sbx *s, struct follower *f)
{
	for (struct follower **p = &s->followers; *p; p = &(*p)->next)
		if (*p == f) {
			*p = f->next;
			break;
		}
	free(f);
}

static void on_follower_close(struct evhttp_connection *evcon, void *arg)
{
	struct follower *f = arg;
	follower_drop(f->s, f);
}

void audit_followers_push(struct sbx *s)
{
	for (struct follower *f = s->followers, *next; f; f = next) {
		next = f->next;
		struct evbuffer *buf = evbuffer_new();
		off_t to = f->off;
		if (buf && read_audit(s->id, f->off, buf, &to) >= 0 && evbuffer_get_length(buf)) {
			size_t n = evbuffer_get_length(buf);
			if (!stream_send(f->req, (const char *)evbuffer_pullup(buf, -1), n)) {
				stream_end(f->req);
				follower_drop(s, f);
			} else {
				f->off = to;
			}
		}
		if (buf)
			evbuffer_free(buf);
	}
}

void audit_followers_end(struct sbx *s)
{
	while (s->followers) {
		struct follower *f = s->followers;
		stream_end(f->req);
		follower_drop(s, f);
	}
}

void handle_audit(struct ctx *c)
{
	char fbuf[16];
	bool follow = false;
	struct cordon_err err = {};
	struct sbx *s = sbx_lookup(c, false);
	if (!s)
		return;
	const char *fv = query_get(c, "follow", fbuf, sizeof(fbuf));
	if (fv && api_query_bool_parse(fv, "follow", &follow, &err) < 0) {
		reply_errno(c->req, -EINVAL, err.msg);
		return;
	}
	struct evbuffer *buf = evbuffer_new();
	off_t next = 0;
	int r = buf ? read_audit(s->id, 0, buf, &next) : -ENOMEM;
	if (r < 0 && r != -ENOENT) {
		if (buf)
			evbuffer_free(buf);
		reply_errno(c->req, r, "cannot read the audit log");
		return;
	}
	struct follower *f = follow ? calloc(1, sizeof(*f)) : NULL;
	if (!f) {
		reply_buf(c->req, 200, "application/x-ndjson", buf);
		evbuffer_free(buf);
		return;
	}
	*f = (struct follower){.req = c->req, .off = next, .s = s, .next = s->followers};
	s->followers = f;
	stream_start(c->req, "application/x-ndjson");
	if (evbuffer_get_length(buf))
		stream_send(c->req, (const char *)evbuffer_pullup(buf, -1), evbuffer_get_length(buf));
	evbuffer_free(buf);
	req_on_close(c->req, on_follower_close, f);
}

void handle_healthz(struct ctx *c)
{
	reply_json(c->req, 200, json_pack("{s:s, s:I, s:I}", "status", "ok", "sandboxes",
					  (json_int_t)D.n_live, "pool_ready",
					  (json_int_t)D.n_pool_ready));
}

void handle_metrics(struct ctx *c)
{
	_cleanup_free_ char *text = metrics_render();
	struct evbuffer *buf = evbuffer_new();
	if (!text || !buf) {
		if (buf)
			evbuffer_free(buf);
		reply_error(c->req, API_ERR_INTERNAL, "out of memory");
		return;
	}
	evbuffer_add(buf, text, strlen(text));
	reply_buf(c->req, 200, "text/plain; version=0.0.4", buf);
	evbuffer_free(buf);
}

static json_t *runtime_json(const struct cordon_runtime_info *info)
{
	json_t *caps = json_array();
	for (int b = 0; caps && b < _CORDON_RUNTIME_CAP_COUNT; b++)
		if (info->caps & (1u << b))
			json_array_append_new(caps, json_string(cordon_runtime_cap_name(1u << b)));
	return json_pack("{s:s, s:b, s:s?, s:o*}", "name", info->name, "available", info->available,
			 "reason", info->available ? NULL : info->reason, "capabilities", caps);
}

/* GET /v1/runtimes: the registry as this host sees it, for a client to choose before it asks
 * (a runtime it cannot run is refused at create with unsupported_runtime). */
void handle_runtimes(struct ctx *c)
{
	struct cordon_runtime_info info;
	const char *best = NULL;
	json_t *list = json_array();
	for (size_t i = 0; list && cordon_runtime_get(i, &info) == 0; i++)
		json_array_append_new(list, runtime_json(&info));
	cordon_runtime_resolve("auto", &best, NULL);
	reply_json(c->req, 200, json_pack("{s:o*, s:s, s:s?}", "runtimes", list, "default", "jail",
					  "auto", best));
}
