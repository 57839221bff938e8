/* E2B's code interpreter (e2b.h), as @e2b/code-interpreter talks to it: the server E2B runs
 * inside its code-interpreter template on port 49999, here served by cordond over the code
 * interpreter's service (svc_code.c). Its requests name their sandbox as envd's do
 * (E2b-Sandbox-Id with E2b-Sandbox-Port: 49999, or the Host 49999-<id>.<domain>) and carry
 * the sandbox's traffic token (E2B-Traffic-Access-Token) or its envd token (X-Access-Token).
 *
 *   POST   /execute {code, context_id, language, env_vars (this cell's)}   JSON lines: stdout, stderr,
 *          result, error, number_of_executions, end_of_execution (keepalive lines between)
 *   POST   /contexts {language, cwd}      the context {id, language, cwd}
 *   GET    /contexts                      [context...]
 *   DELETE /contexts/{id}                  204
 *   POST   /contexts/{id}/restart
 *
 * Errors are E2B's {"code": <HTTP status>, "message"}: the SDK reads the status (404:
 * NotFoundError, 502: TimeoutError, else SandboxError). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/http.h>
#include <openssl/crypto.h>

#include "daemon/connect.h"
#include "daemon/daemon.h"
#include "daemon/e2b.h"
#include "daemon/e2b_envd.h"
#include "daemon/service.h"

/* ---- the sandbox ---- */

static bool traffic_ok(struct ctx *c, const struct sbx *s)
{
	const char *t = evhttp_find_header(evhttp_request_get_input_headers(c->req),
					   "E2B-Traffic-Access-Token");
	char tok[E2B_TOKEN_LEN + 1];
	return t && strlen(t) == E2B_TOKEN_LEN && e2b_traffic_token(s->id, tok) &&
	       CRYPTO_memcmp(t, tok, E2B_TOKEN_LEN) == 0;
}

static struct sbx *code_sbx(struct ctx *c, enum connect_mode mode)
{
	return e2b_port_sbx(c, E2B_CODE_PORT, mode, traffic_ok);
}

/* The body, a JSON object (empty: {}); NULL with 400 answered. */
static json_t *body_object(struct ctx *c)
{
	json_t *m = c->body_len ? json_loadb(c->body, c->body_len, JSON_REJECT_DUPLICATES, NULL)
				: json_object();
	if (!json_is_object(m)) {
		json_decref(m);
		connect_refuse(c->req, CONNECT_MODE_REST, CONNECT_INVALID_ARGUMENT, 400,
			       "the body is not a JSON object");
		return NULL;
	}
	return m;
}

static void refuse(struct ctx *c, const char *msg)
{
	connect_refuse(c->req, CONNECT_MODE_REST, CONNECT_INVALID_ARGUMENT, 400, msg);
}

/* ---- a cell's events, as E2B's server streams them ---- */

/* Cordon's MIME bundle keys, as E2B's Result names them. */
static const struct {
	const char *mime, *field;
} result_fields[] = {
	{"text/plain", "text"},	       {"text/html", "html"},	     {"text/markdown", "markdown"},
	{"image/svg+xml", "svg"},      {"image/png", "png"},	     {"image/jpeg", "jpeg"},
	{"application/pdf", "pdf"},    {"text/latex", "latex"},	     {"application/json", "json"},
	{"application/javascript", "javascript"},
};

/* A repr's quotes go, as E2B's server takes them off ('a' is a). */
static json_t *plain_text(const char *s)
{
	size_t n = strlen(s);
	bool quoted = n >= 2 && (s[0] == '\'' || s[0] == '"') && s[n - 1] == s[0];
	return quoted ? json_stringn(s + 1, n - 2) : json_string(s);
}

/* Cordon's {"type": "result", "is_main", "data": {MIME: S}} as E2B's Result: one field per
 * format, JSON as a value (Cordon carries it as its text), any other MIME in "extra". */
static json_t *result_line(json_t *ev)
{
	json_t *data = json_object_get(ev, "data"), *v, *extra = json_object();
	json_t *out = json_pack("{s:s, s:b}", "type", "result", "is_main_result",
				json_is_true(json_object_get(ev, "is_main")));
	const char *mime;
	json_object_foreach(data, mime, v) {
		const char *s = json_string_value(v), *field = NULL;
		for (size_t i = 0; i < ELEMENTSOF(result_fields) && !field; i++)
			if (strcmp(mime, result_fields[i].mime) == 0)
				field = result_fields[i].field;
		json_t *val = !s ? NULL
			      : !field ? json_string(s)
			      : strcmp(field, "text") == 0 ? plain_text(s)
			      : strcmp(field, "json") == 0 ? json_loads(s, JSON_DECODE_ANY, NULL)
							   : json_string(s);
		json_object_set_new(field ? out : extra, field ? field : mime, val ? val : json_null());
	}
	if (json_object_size(extra))
		json_object_set(out, "extra", extra);
	json_decref(extra);
	if (json_object_get(ev, "chart")) /* E2B's shape already (checked as the server's line) */
		json_object_set(out, "chart", json_object_get(ev, "chart"));
	return out;
}

static json_t *exec_line(struct connect_call *cc, json_t *ev, bool *ret_end)
{
	const char *type = json_string_value(json_object_get(ev, "type"));
	if (!type)
		return NULL;
	if (strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0 ||
	    strcmp(type, "keepalive") == 0)
		return json_incref(ev);
	if (strcmp(type, "result") == 0)
		return result_line(ev);
	if (strcmp(type, "error") == 0) /* ExecutionError: name, value, traceback */
		return json_pack("{s:s, s:O, s:O, s:O}", "type", "error", "name",
				 json_object_get(ev, "name"), "value", json_object_get(ev, "value"),
				 "traceback", json_object_get(ev, "traceback"));
	if (strcmp(type, "end") != 0)
		return NULL;
	*ret_end = true;
	return json_pack("[{s:s, s:O}, {s:s}]", "type", "number_of_executions", "execution_count",
			 json_object_get(ev, "execution_count"), "type", "end_of_execution");
}

/* A stream cut short (the reader lagged, the sandbox went): an error the SDK shows. */
static json_t *exec_failed(struct connect_call *cc, const char *msg)
{
	return json_pack("[{s:s, s:s, s:s, s:s}, {s:s}]", "type", "error", "name",
			 "UnexpectedEndOfExecution", "value", msg, "traceback", "", "type",
			 "end_of_execution");
}

static const struct connect_ops exec_ops = {.line = exec_line, .failed = exec_failed};

#define MAX_CELL_ENV	  64	     /* variables of env_vars */
#define MAX_CELL_ENV_BYTES (64u << 10) /* their names and values */

/* env_vars: null, or {NAME: value} of strings, names without '=' (1..256 bytes), no NUL. */
static bool cell_env_ok(const json_t *env)
{
	const char *k;
	json_t *v;
	size_t total = 0;
	if (!env || json_is_null(env))
		return true;
	if (!json_is_object(env) || json_object_size(env) > MAX_CELL_ENV)
		return false;
	json_object_foreach((json_t *)env, k, v) {
		size_t kl = strlen(k), vl = json_string_length(v);
		if (!json_is_string(v) || !kl || kl > 256 || strchr(k, '=') ||
		    strlen(json_string_value(v)) != vl)
			return false;
		total += kl + vl;
	}
	return total <= MAX_CELL_ENV_BYTES;
}

/* E2B's ExecutionRequest as Cordon's /code body; NULL with 400 answered. */
static json_t *code_body(struct ctx *c, json_t *m)
{
	json_t *code = json_object_get(m, "code"), *env = json_object_get(m, "env_vars");
	json_t *ctx = json_object_get(m, "context_id"), *lang = json_object_get(m, "language");
	if (!json_is_null(ctx) && ctx && !json_is_null(lang) && lang) {
		refuse(c, "only one of context_id or language can be provided");
		return NULL;
	}
	if (!cell_env_ok(env)) {
		refuse(c, "env_vars: must be an object of at most 64 string values (64 KiB in all), "
			  "names of 1 to 256 bytes without '='");
		return NULL;
	}
	/* E2B's server gives a cell no timeout: its client's going ends it (attended), and
	 * Cordon's longest bounds one that nobody waits for. */
	json_t *b = json_pack("{s:O, s:i}", "code", code ? code : json_null(), "timeout_s",
			      API_MAX_CODE_TIMEOUT);
	if (!b)
		connect_refuse(c->req, CONNECT_MODE_REST, CONNECT_INTERNAL, 500, "out of memory");
	if (b && ctx && !json_is_null(ctx))
		json_object_set(b, "context", ctx); /* checked by Cordon's parser */
	if (b && lang && !json_is_null(lang))
		json_object_set(b, "language", lang);
	return b;
}

static void code_execute(struct ctx *c)
{
	struct cordon_err perr = {};
	struct svc_err err = {};
	struct api_code *req = NULL;
	struct sbx *s = code_sbx(c, CONNECT_MODE_NDJSON);
	_cleanup_(json_decrefp) json_t *m = s ? body_object(c) : NULL;
	_cleanup_(json_decrefp) json_t *b = m ? code_body(c, m) : NULL;
	_cleanup_free_ char *body = b ? json_dumps(b, JSON_COMPACT) : NULL;
	if (b && !body)
		connect_refuse(c->req, CONNECT_MODE_REST, CONNECT_INTERNAL, 500, "out of memory");
	if (!body)
		return;
	int r = api_code_parse(body, strlen(body), &req, &perr);
	if (r < 0) {
		connect_refuse(c->req, CONNECT_MODE_REST, CONNECT_INVALID_ARGUMENT,
			       r == -EMSGSIZE ? 413 : 400, perr.msg);
		return;
	}
	struct connect_call *cc = connect_call_new(c->req, CONNECT_MODE_NDJSON, &exec_ops, NULL);
	json_t *env = json_object_get(m, "env_vars");
	if (cc && svc_code_run_attended(s, req, json_is_object(env) ? env : NULL, connect_reply(cc),
					&err) < 0)
		connect_answer_svc_err(cc, &err);
	api_code_free(req);
}

/* ---- contexts ---- */

/* E2B's server answers 200 where Cordon's service says 201. */
static void ctx_made(struct connect_call *cc, int status, json_t *body)
{
	connect_answer(cc, 200, body);
}

static const struct connect_ops ctx_ops = {.json = ctx_made};

static void code_ctx_create(struct ctx *c)
{
	struct cordon_err perr = {};
	struct svc_err err = {};
	struct api_code_context *req = NULL;
	struct sbx *s = code_sbx(c, CONNECT_MODE_REST);
	if (!s)
		return;
	if (api_code_context_parse(c->body, c->body_len, &req, &perr) < 0) {
		refuse(c, perr.msg);
		return;
	}
	struct connect_call *cc = connect_call_new(c->req, CONNECT_MODE_REST, &ctx_ops, NULL);
	if (cc && svc_code_context_create(s, req, connect_reply(cc), &err) < 0)
		connect_answer_svc_err(cc, &err);
	api_code_context_free(req);
}

static void refuse_svc(struct ctx *c, const struct svc_err *err)
{
	connect_refuse(c->req, CONNECT_MODE_REST, connect_code_from_api(err->code),
		       api_error_status(err->code), err->msg);
}

static void code_ctx_list(struct ctx *c)
{
	struct svc_err err = {};
	json_t *out = NULL;
	struct sbx *s = code_sbx(c, CONNECT_MODE_REST);
	if (s && svc_code_context_list(s, &out, &err) < 0)
		refuse_svc(c, &err);
	else if (s)
		reply_json(c->req, 200, json_incref(json_object_get(out, "contexts")));
	json_decref(out);
}

static void code_ctx_delete(struct ctx *c)
{
	struct svc_err err = {};
	struct sbx *s = code_sbx(c, CONNECT_MODE_REST);
	if (s && svc_code_context_delete(s, c->params[0], &err) < 0)
		refuse_svc(c, &err);
	else if (s)
		reply_empty(c->req, 204);
}

static void code_ctx_restart(struct ctx *c)
{
	struct svc_err err = {};
	struct sbx *s = code_sbx(c, CONNECT_MODE_REST);
	struct connect_call *cc = s ? connect_call_new(c->req, CONNECT_MODE_REST, &ctx_ops, NULL) : NULL;
	if (cc && svc_code_context_restart(s, c->params[0], connect_reply(cc), &err) < 0)
		connect_answer_svc_err(cc, &err);
}

static const struct route code_routes[] = {
	{EVHTTP_REQ_POST, "/execute", code_execute},
	{EVHTTP_REQ_POST, "/contexts", code_ctx_create},
	{EVHTTP_REQ_GET, "/contexts", code_ctx_list},
	{EVHTTP_REQ_DELETE, "/contexts/{id}", code_ctx_delete},
	{EVHTTP_REQ_POST, "/contexts/{id}/restart", code_ctx_restart},
};

const struct surface e2b_code_surface = {
	"e2b-code", code_routes, ELEMENTSOF(code_routes), e2b_render_error, 1u << LISTEN_E2B,
};
