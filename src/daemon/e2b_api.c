/* The E2B control plane (e2b.h): E2B's REST API over the service layer, authenticated by
 * X-API-KEY (one of cordond's API keys), errors as {"code": <HTTP status>, "message"}. A key
 * sees and touches its own sandboxes only (sbx_find() with it); a sandbox of another key is
 * 404 as one that does not exist. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <sys/queue.h>

#include "daemon/connect.h"
#include "daemon/daemon.h"
#include "daemon/e2b.h"
#include "daemon/service.h"

#define LIST_DEFAULT 100 /* sandboxes of one page of /v2/sandboxes */
#define LIST_MAX     1000

/* ---- shared with e2b_envd.c ---- */

bool e2b_sbx_id(const char *e2b_id, size_t len, char ret[E2B_ID_LEN + 4])
{
	if (len != E2B_ID_LEN)
		return false;
	snprintf(ret, E2B_ID_LEN + 4, "sb-%.*s", (int)len, e2b_id);
	return valid_id(ret);
}

bool e2b_access_token(const char *id, char ret[E2B_TOKEN_LEN + 1])
{
	return token_derive("e2b-envd", id, ret);
}

bool e2b_traffic_token(const char *id, char ret[E2B_TOKEN_LEN + 1])
{
	return token_derive("e2b-traffic", id, ret);
}

bool e2b_secure(const struct sbx *s)
{
	return !json_object_get(s->metadata, E2B_META_INSECURE);
}

static json_t *public_metadata(const json_t *md)
{
	json_t *out = json_is_object(md) ? json_deep_copy(md) : json_object();
	if (out)
		json_object_del(out, E2B_META_INSECURE);
	return out;
}

static const char *v1_str(const json_t *v1, const char *key)
{
	const char *s = json_string_value(json_object_get(v1, key));
	return s ? s : "";
}

json_t *e2b_sandbox_json(const json_t *v1, bool detail, bool token, bool secure)
{
	const char *id = v1_str(v1, "id");
	char tok[E2B_TOKEN_LEN + 1];
	json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:n}", "sandboxID",
			      strlen(id) > 3 ? id + 3 : id, "templateID", v1_str(v1, "template"),
			      "alias", v1_str(v1, "template"), "clientID", "cordon", "envdVersion",
			      E2B_ENVD_VERSION, "domain");
	if (o && token && secure && e2b_access_token(id, tok))
		json_object_set_new(o, "envdAccessToken", json_string(tok));
	if (o && token && secure && e2b_traffic_token(id, tok))
		json_object_set_new(o, "trafficAccessToken", json_string(tok));
	if (!o || !detail)
		return o;
	json_t *lim = json_object_get(v1, "limits");
	double cpus = json_number_value(json_object_get(lim, "cpus"));
	json_object_set_new(o, "startedAt", json_string(v1_str(v1, "created_at")));
	json_object_set_new(o, "endAt", json_string(v1_str(v1, "expires_at")));
	json_object_set_new(o, "cpuCount", json_integer(cpus > 1 ? (json_int_t)(cpus + 0.999) : 1));
	json_object_set_new(o, "memoryMB", json_incref(json_object_get(lim, "memory_mb")));
	json_object_set_new(o, "diskSizeMB", json_incref(json_object_get(lim, "disk_mb")));
	json_object_set_new(o, "metadata", public_metadata(json_object_get(v1, "metadata")));
	json_object_set_new(o, "state", json_string(strcmp(v1_str(v1, "state"), "paused") == 0
							    ? "paused" : "running"));
	return o;
}

/* ---- who asks ---- */

/* The key of X-API-KEY; NULL with 401 answered. */
static struct api_key *e2b_auth(struct ctx *c)
{
	const char *k = evhttp_find_header(evhttp_request_get_input_headers(c->req), "X-API-KEY");
	struct api_key *key = k ? http_api_key(k, strlen(k)) : NULL;
	if (!key)
		reply_error(c->req, API_ERR_UNAUTHORIZED, "a valid API key is needed (X-API-KEY)");
	c->principal = key;
	return key;
}

/* Sandbox {id} of the caller's key, live; else NULL with 401 or 404 answered. */
static struct sbx *e2b_sbx(struct ctx *c)
{
	char id[E2B_ID_LEN + 4];
	if (!e2b_auth(c))
		return NULL;
	struct sbx *s = e2b_sbx_id(c->params[0], strlen(c->params[0]), id)
				? sbx_find(c->principal, id) : NULL;
	if (!s || s->state == SBX_DESTROYED)
		reply_error(c->req, API_ERR_NOT_FOUND, "sandbox %.64s not found", c->params[0]);
	return s && s->state != SBX_DESTROYED ? s : NULL;
}

/* {"timeout": seconds} of /timeout and /connect: 1..--max-timeout. */
static int timeout_parse(const struct ctx *c, uint32_t *ret, struct cordon_err *err)
{
	json_error_t je;
	_cleanup_(json_decrefp) json_t *b = json_loadb(c->body, c->body_len, 0, &je);
	json_t *t = json_object_get(b, "timeout");
	json_int_t v = json_integer_value(t);
	if (!json_is_integer(t) || v < 1 || (uint64_t)v > D.cfg.max_timeout_s)
		return cordon_err_setf(err, -EINVAL, "timeout: must be an integer of seconds, 1..%llu",
				       (unsigned long long)D.cfg.max_timeout_s);
	*ret = (uint32_t)v;
	return 0;
}

/* ---- sandboxes ---- */

static void created(struct connect_call *cc, int status, json_t *body)
{
	bool secure = cc->arg != NULL;
	json_t *out = e2b_sandbox_json(body, false, true, secure);
	json_decref(body);
	connect_answer(cc, 201, out);
}

static const struct connect_ops create_ops = {.json = created};

static void e2b_create(struct ctx *c)
{
	struct e2b_create ec = {};
	struct cordon_err perr = {};
	struct svc_err err = {};
	struct svc_caller who = {NULL};
	if (!(who.principal = e2b_auth(c)))
		return;
	const struct e2b_alias aliases[] = {{"base", D.cfg.e2b_base_template},
					    {"code-interpreter-v1", D.cfg.e2b_code_template}};
	int r = e2b_create_parse(c->body, c->body_len, D.cfg.max_timeout_s, aliases,
				 ELEMENTSOF(aliases), D.egress != NULL, &ec, &perr);
	if (c->body_len)
		explicit_bzero((char *)c->body, c->body_len); /* envVars may hold secrets */
	if (r < 0) {
		reply_errno(c->req, r, perr.msg);
		return;
	}
	struct connect_call *cc = NULL;
	if (svc_sandbox_check(&who, ec.req, &err) < 0)
		reply_svc_err(c->req, &err);
	else if ((cc = connect_call_new(c->req, CONNECT_MODE_REST, &create_ops,
					ec.secure ? (void *)1 : NULL)) &&
		 svc_sandbox_create_from(&who, ec.req, NULL, connect_reply(cc), &err) < 0)
		connect_answer_svc_err(cc, &err);
	e2b_create_done(&ec);
}

static void e2b_info(struct ctx *c)
{
	struct sbx *s = e2b_sbx(c);
	_cleanup_(json_decrefp) json_t *v1 = s ? svc_sandbox_info(s) : NULL;
	if (s)
		reply_json(c->req, 200, e2b_sandbox_json(v1, true, true, e2b_secure(s)));
}

static void e2b_kill(struct ctx *c)
{
	struct sbx *s = e2b_sbx(c);
	if (!s)
		return;
	svc_sandbox_destroy(s);
	reply_empty(c->req, 204);
}

/* Sandbox {id} and the body's timeout; NULL with the error answered. */
static struct sbx *sbx_timeout(struct ctx *c, uint32_t *ret)
{
	struct cordon_err perr = {};
	struct sbx *s = e2b_sbx(c);
	if (s && timeout_parse(c, ret, &perr) < 0) {
		reply_errno(c->req, -EINVAL, perr.msg);
		return NULL;
	}
	return s;
}

static void e2b_timeout(struct ctx *c)
{
	struct svc_err err = {};
	json_t *out = NULL;
	uint32_t t;
	struct sbx *s = sbx_timeout(c, &t);
	if (!s)
		return;
	int r = svc_sandbox_timeout(s, t, &out, &err);
	json_decref(out);
	reply_svc(c->req, r, 204, NULL, &err);
}

/* Resumes a paused sandbox and moves its deadline to @t seconds from now, never earlier. */
static void e2b_connect(struct ctx *c)
{
	struct svc_err err = {};
	json_t *out = NULL;
	uint32_t t;
	struct sbx *s = sbx_timeout(c, &t);
	if (!s)
		return;
	bool was_paused = s->paused;
	int r = was_paused ? svc_sandbox_resume(s, &out, &err) : 0;
	uint64_t now = now_ms(), left = s->deadline_ms > now ? s->deadline_ms - now : 0;
	json_decref(out);
	out = NULL;
	if (r == 0 && (uint64_t)t * 1000 > left)
		r = svc_sandbox_timeout(s, t, &out, &err);
	json_decref(out);
	if (r < 0) {
		reply_svc_err(c->req, &err);
		return;
	}
	_cleanup_(json_decrefp) json_t *v1 = svc_sandbox_info(s);
	reply_json(c->req, was_paused ? 201 : 200, e2b_sandbox_json(v1, false, true, e2b_secure(s)));
}

static void e2b_pause(struct ctx *c)
{
	struct svc_err err = {};
	json_t *out = NULL;
	struct sbx *s = e2b_sbx(c);
	if (!s)
		return;
	if (s->paused) { /* E2B says so: the SDK's pause() then answers false */
		reply_error(c->req, API_ERR_CONFLICT, "sandbox %.64s is already paused", c->params[0]);
		return;
	}
	int r = svc_sandbox_pause(s, &out, &err);
	json_decref(out);
	reply_svc(c->req, r, 204, NULL, &err);
}

/* One of the service's usage samples as E2B's metric: CPU as a share of all the sandbox's
 * CPUs, the totals from its limits where the sample has none yet. */
static json_t *e2b_metric(const struct sbx *s, const json_t *x)
{
	double cpus = s->spec.cpus_milli / 1000.0;
	int n = cpus > 1 ? (int)(cpus + 0.999) : 1;
	double pct = json_number_value(json_object_get(x, "cpu_pct")) / n;
	json_int_t disk = json_integer_value(json_object_get(x, "disk_total_bytes"));
	return json_pack("{s:O, s:f, s:i, s:O, s:I, s:i, s:O, s:I}", "timestamp",
			 json_object_get(x, "timestamp"), "cpuUsedPct", pct > 100 ? 100.0 : pct,
			 "cpuCount", n, "memUsed", json_object_get(x, "memory_bytes"), "memTotal",
			 (json_int_t)s->spec.memory_bytes, "memCache", 0, "diskUsed",
			 json_object_get(x, "disk_used_bytes"), "diskTotal",
			 disk > 0 ? disk : (json_int_t)s->spec.disk_bytes);
}

/* The samples of the last minutes, oldest first, and the current one last. */
static void e2b_metrics(struct ctx *c)
{
	struct svc_err err = {};
	json_t *m = NULL;
	struct sbx *s = e2b_sbx(c);
	if (!s)
		return;
	if (svc_sandbox_metrics(s, &m, &err) < 0) {
		reply_svc_err(c->req, &err);
		return;
	}
	_cleanup_(json_decrefp) json_t *mm = m;
	json_t *out = json_array(), *x;
	size_t i;
	json_array_foreach(json_object_get(m, "samples"), i, x)
		json_array_append_new(out, e2b_metric(s, x));
	json_array_append_new(out, e2b_metric(s, json_object_get(m, "current")));
	reply_json(c->req, 200, out);
}

/* ---- lists: newest first, filtered, in pages ---- */

struct list_query {
	struct evkeyvalq metadata; /* k=v pairs, decoded */
	bool running, paused;      /* the states asked for (both when none is named) */
	char tpl[API_MAX_TEMPLATE + 1];
	char next[64];             /* "<created_at>,<sandboxID>" of the last one given before */
	size_t limit;
};

static int states_parse(const char *v, struct list_query *q, struct cordon_err *err)
{
	q->running = q->paused = !v || !*v;
	for (const char *p = v; p && *p;) {
		size_t n = strcspn(p, ",");
		if (n == 7 && strncmp(p, "running", 7) == 0)
			q->running = true;
		else if (n == 6 && strncmp(p, "paused", 6) == 0)
			q->paused = true;
		else
			return cordon_err_setf(err, -EINVAL, "state: expected running or paused");
		p += n + (p[n] == ',');
	}
	return 0;
}

static int list_query_parse(struct ctx *c, struct list_query *q, struct cordon_err *err)
{
	char md[8192], st[64], lim[16];
	const char *v = query_get(c, "metadata", md, sizeof(md));
	if (v && *v && evhttp_parse_query_str(v, &q->metadata) < 0)
		return cordon_err_setf(err, -EINVAL, "metadata: expected key=value&...");
	if (states_parse(query_get(c, "state", st, sizeof(st)), q, err) < 0)
		return -EINVAL;
	v = query_get(c, "template", q->tpl, sizeof(q->tpl));
	if (!v)
		q->tpl[0] = '\0';
	v = query_get(c, "nextToken", q->next, sizeof(q->next));
	if (!v)
		q->next[0] = '\0';
	v = query_get(c, "limit", lim, sizeof(lim));
	char *end = NULL;
	unsigned long n = v ? strtoul(v, &end, 10) : LIST_DEFAULT;
	if (v && (!*v || *end || n == 0 || n > LIST_MAX))
		return cordon_err_setf(err, -EINVAL, "limit: must be 1..%d", LIST_MAX);
	q->limit = n;
	return 0;
}

static bool list_match(const struct list_query *q, const json_t *sb)
{
	const json_t *md = json_object_get(sb, "metadata");
	bool paused = strcmp(v1_str(sb, "state"), "paused") == 0;
	if ((paused && !q->paused) || (!paused && !q->running))
		return false;
	if (q->tpl[0] && strcmp(q->tpl, v1_str(sb, "templateID")) != 0)
		return false;
	for (const struct evkeyval *kv = q->metadata.tqh_first; kv; kv = kv->next.tqe_next) {
		/* The SDK encodes each key and value before it encodes the pairs (and the query
		 * the whole): one decoding more than the pairs had, two for a key (libevent's
		 * query parser decodes values only). */
		_cleanup_free_ char *k1 = evhttp_uridecode(kv->key, 0, NULL);
		_cleanup_free_ char *k = k1 ? evhttp_uridecode(k1, 0, NULL) : NULL;
		_cleanup_free_ char *v = evhttp_uridecode(kv->value, 0, NULL);
		const char *have = k ? json_string_value(json_object_get(md, k)) : NULL;
		if (!have || !v || strcmp(have, v) != 0)
			return false;
	}
	return true;
}

/* Newest first: by startedAt, then by id, both descending. */
static int newer_first(const void *a, const void *b)
{
	const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
	int r = strcmp(v1_str(y, "startedAt"), v1_str(x, "startedAt"));
	return r ? r : strcmp(v1_str(y, "sandboxID"), v1_str(x, "sandboxID"));
}

/* Whether @sb comes after the page that ended at token @next. */
static bool after_token(const char *next, const json_t *sb)
{
	char key[64];
	if (!*next)
		return true;
	snprintf(key, sizeof(key), "%s,%s", v1_str(sb, "startedAt"), v1_str(sb, "sandboxID"));
	return strcmp(key, next) < 0;
}

/* The matching sandboxes of @who, newest first, as E2B's ListedSandbox. */
static size_t list_sorted(const struct svc_caller *who, const struct list_query *q, json_t ***ret)
{
	const struct api_filter any = {};
	_cleanup_(json_decrefp) json_t *all = svc_sandbox_list(who, &any);
	json_t *arr = json_object_get(all, "sandboxes");
	size_t n = 0, i;
	json_t *sb;
	json_t **v = calloc(json_array_size(arr) + 1, sizeof(*v));
	json_array_foreach(arr, i, sb) {
		json_t *e = v ? e2b_sandbox_json(sb, true, false, false) : NULL;
		if (e && list_match(q, e) && after_token(q->next, e))
			v[n++] = e;
		else
			json_decref(e);
	}
	if (n)
		qsort(v, n, sizeof(*v), newer_first);
	*ret = v;
	return n;
}

static void e2b_list(struct ctx *c, bool paged)
{
	struct list_query q = {};
	struct cordon_err perr = {};
	struct svc_caller who = {NULL};
	TAILQ_INIT(&q.metadata);
	if (!(who.principal = e2b_auth(c)))
		return;
	if (list_query_parse(c, &q, &perr) < 0) {
		evhttp_clear_headers(&q.metadata);
		reply_errno(c->req, -EINVAL, perr.msg);
		return;
	}
	json_t **v = NULL;
	size_t n = list_sorted(&who, &q, &v), take = paged && n > q.limit ? q.limit : n;
	json_t *out = json_array();
	for (size_t i = 0; i < n; i++)
		if (i < take)
			json_array_append_new(out, v[i]);
		else
			json_decref(v[i]);
	if (take < n) {
		char tok[64];
		json_t *last = json_array_get(out, take - 1);
		snprintf(tok, sizeof(tok), "%s,%s", v1_str(last, "startedAt"), v1_str(last, "sandboxID"));
		evhttp_add_header(evhttp_request_get_output_headers(c->req), "X-Next-Token", tok);
	}
	free(v);
	evhttp_clear_headers(&q.metadata);
	reply_json(c->req, 200, out);
}

static void e2b_list_v1(struct ctx *c)
{
	e2b_list(c, false);
}

static void e2b_list_v2(struct ctx *c)
{
	e2b_list(c, true);
}

/* ---- the table ---- */

/* E2B's error body: {"code": <the HTTP status>, "message": ...}. */
char *e2b_render_status(int status, const char *message)
{
	_cleanup_(json_decrefp) json_t *j = json_pack("{s:i, s:s}", "code", status, "message", message);
	return j ? json_dumps(j, JSON_COMPACT) : NULL;
}

char *e2b_render_error(enum api_error e, const char *message)
{
	return e2b_render_status(api_error_status(e), message);
}

#define GET EVHTTP_REQ_GET
#define POST EVHTTP_REQ_POST
#define DELETE EVHTTP_REQ_DELETE
#define SB "/sandboxes/{id}"

static const struct route e2b_api_routes[] = {
	{POST, "/sandboxes", e2b_create},
	{GET, "/sandboxes", e2b_list_v1},
	{GET, "/v2/sandboxes", e2b_list_v2},
	{GET, SB, e2b_info},
	{DELETE, SB, e2b_kill},
	{POST, SB "/timeout", e2b_timeout},
	{POST, SB "/connect", e2b_connect},
	{POST, SB "/resume", e2b_connect},
	{POST, SB "/pause", e2b_pause},
	{GET, SB "/metrics", e2b_metrics},
};

const struct surface e2b_surface = {
	"e2b", e2b_api_routes, ELEMENTSOF(e2b_api_routes), e2b_render_error, 1u << LISTEN_E2B,
	.keyed = true,
};
