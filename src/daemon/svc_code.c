/* The code interpreter's service (service.h): cells and contexts of a sandbox over its
 * interpreter server (code.h, code.c), and the warm pool's kernels: a pooled sandbox of a
 * template with the interpreter starts its server and default kernel before it is claimed. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit/audit.h"
#include "daemon/code.h"

/* ---- the service ---- */

static int send_failed(int r, struct svc_err *err)
{
	if (r == -E2BIG)
		return svc_fail(err, API_ERR_PAYLOAD_TOO_LARGE, "code: over %u KiB as the interpreter's "
				"JSON (a control character counts six bytes)", CODE_MAX_REQUEST >> 10);
	if (r == -ENOBUFS)
		return svc_fail(err, API_ERR_QUOTA_EXCEEDED, "too many cells wait for the code interpreter");
	return svc_fail(err, API_ERR_INTERNAL, "could not reach the code interpreter");
}

/* The cell's record, before it is sent: its context, size, hash and code (cut if long), and
 * the names of the variables it is given (@env; their values may be secrets). */
static int audit_cell(struct sbx *s, const char *ctx, const struct api_code *req, const json_t *env)
{
	char sha[AUDIT_SHA256_HEX];
	const char *k;
	json_t *v, *names = env ? json_array() : NULL;
	audit_sha256_hex(req->code, req->code_len, sha);
	json_t *rec = json_pack("{s:s, s:s, s:I, s:s, s:s%}", "context", ctx, "language",
				api_language_name(req->language), "bytes", (json_int_t)req->code_len,
				"sha256", sha, "code", req->code, req->code_len);
	json_object_foreach((json_t *)env, k, v)
		json_array_append_new(names, json_string(k));
	if (rec && names)
		json_object_set(rec, "env", names);
	json_decref(names);
	return sbx_audit_rc(s, AUDIT_CODE_RUN, rec);
}

/* The server is asked to stop a cell's output at 15/16 of our bound: its lines carry ids. */
static int run_cell(struct sbx *s, const struct api_code *req, const json_t *env,
		    bool stop_when_gone, struct svc_reply *rp, struct svc_err *err)
{
	struct code *c = code_ready(s, err);
	struct code_ctx *x = NULL;
	if (!c)
		return -1;
	const char *id = req->context ? req->context : api_language_default_context(req->language);
	enum api_language lang = req->language;
	bool made_on_use = api_default_context_language(id, &lang); /* a language's default */
	if (!(x = code_ctx_find(c, id)) && !made_on_use)
		return svc_fail(err, API_ERR_NOT_FOUND, "no code context %s in sandbox %s", id, s->id);
	if (req->language_set && (x ? x->lang : lang) != req->language)
		return svc_fail(err, API_ERR_INVALID_FIELD, "language: context %s is %s", id,
				api_language_name(x ? x->lang : lang));
	if (!x && (code_ctx_add(c, id, lang, NULL, &x, err) < 0 ||
		   code_ctx_start(c, x, OP_QUIET, NULL, err) < 0))
		return -1;
	uint32_t t = req->timeout_s ? req->timeout_s : CODE_DEFAULT_TIMEOUT_S;
	struct code_op *op = code_op_new(c, OP_EXEC, id, rp, (uint64_t)t * 1000 + CODE_GRACE_MS);
	json_t *m = op ? json_pack("{s:I, s:s, s:s, s:s%, s:I, s:I}", "id", (json_int_t)op->id,
				   "op", "exec", "ctx", id, "code", req->code, req->code_len,
				   "timeout_ms", (json_int_t)t * 1000, "max_bytes",
				   (json_int_t)(CODE_MAX_OUTPUT - CODE_MAX_OUTPUT / 16)) : NULL;
	if (m && env && json_object_size(env))
		json_object_set_new(m, "env", json_deep_copy(env));
	int r = op ? audit_cell(s, id, req, json_object_size(env) ? env : NULL) : -ENOMEM;
	if (r < 0) { /* nothing runs unrecorded */
		json_decref(m);
		if (op) {
			op->rep = NULL;
			code_op_free(op);
		}
		return svc_fail_audit(err, r);
	}
	r = code_send(c, m);
	if (r < 0) {
		if (op) {
			op->rep = NULL; /* the caller answers */
			code_op_free(op);
		}
		return send_failed(r, err);
	}
	if (stop_when_gone)
		code_op_stop_when_gone(op);
	if (c->up)
		code_op_open(op);
	return 0;
}

int svc_code_run(struct sbx *s, const struct api_code *req, struct svc_reply *rp,
		 struct svc_err *err)
{
	return run_cell(s, req, NULL, false, rp, err);
}

int svc_code_run_attended(struct sbx *s, const struct api_code *req, const json_t *env,
			  struct svc_reply *rp, struct svc_err *err)
{
	return run_cell(s, req, env, true, rp, err);
}

int svc_code_context_create(struct sbx *s, const struct api_code_context *req,
			    struct svc_reply *rp, struct svc_err *err)
{
	char id[API_MAX_CONTEXT_ID + 1];
	struct code_ctx *x;
	struct code *c = code_ready(s, err);
	if (!c)
		return -1;
	make_id(id); /* "sb-..." : the sandbox's form, a context's prefix */
	memcpy(id, "cx", 2);
	if (code_ctx_add(c, id, req->language, req->cwd, &x, err) < 0)
		return -1;
	if (code_ctx_start(c, x, OP_CREATE, rp, err) < 0) {
		code_ctx_free(c, x);
		return -1;
	}
	return 0;
}

int svc_code_context_list(struct sbx *s, json_t **ret, struct svc_err *err)
{
	struct code *c = code_get(s, err);
	if (!c)
		return -1;
	if (c->none)
		return code_no_interpreter(s, err);
	json_t *a = json_array();
	for (struct code_ctx *x = c->ctxs; x && a; x = x->next)
		json_array_append_new(a, code_ctx_json(x));
	*ret = json_pack("{s:o}", "contexts", a);
	return *ret ? 0 : svc_fail(err, API_ERR_INTERNAL, "out of memory");
}

static struct code_ctx *ctx_named(struct sbx *s, const char *id, struct svc_err *err)
{
	struct code *c = code_get(s, err);
	struct code_ctx *x = c && !c->none ? code_ctx_find(c, id) : NULL;
	if (c && c->none)
		code_no_interpreter(s, err);
	else if (c && !x)
		svc_fail(err, API_ERR_NOT_FOUND, "no code context %.64s in sandbox %s", id, s->id);
	return x;
}

int svc_code_context_delete(struct sbx *s, const char *id, struct svc_err *err)
{
	struct code_ctx *x = ctx_named(s, id, err);
	if (!x)
		return -1;
	struct code *c = s->code;
	struct code_op *op = c->p ? code_op_new(c, OP_QUIET, x->id, NULL, CODE_CTL_MS) : NULL;
	/* The kernel goes after the cells queued before it; its "ok" is awaited. */
	if (op && code_send(c, json_pack("{s:I, s:s, s:s}", "id", (json_int_t)op->id, "op",
					 "delete", "ctx", x->id)) < 0)
		code_op_free(op); /* not sent: the server, if it runs on, keeps an idle kernel */
	code_ctx_free(c, x);
	return 0;
}

int svc_code_context_restart(struct sbx *s, const char *id, struct svc_reply *rp,
			     struct svc_err *err)
{
	struct code_ctx *x = ctx_named(s, id, err);
	if (!x || !code_ready(s, err))
		return -1;
	/* A server started just now made the context already; a restart then costs little. */
	return code_ctx_start(s->code, x, OP_RESTART, rp, err);
}

/* ---- the sandbox goes ---- */

static void code_down(struct sbx *s)
{
	s->code = code_free(s->code);
}

/* ---- the warm pool ---- */

/* A pooled sandbox is up: with the interpreter, its server and the default context's kernel
 * start now, as the template's USER with its ENV and WORKDIR (the claim applies them to the
 * sandbox later), so that the first cell after the claim finds a warm kernel. */
static void code_pooled(struct sbx *s)
{
	struct store_config cfg;
	struct svc_err err = {};
	struct code_ctx *x;
	struct code *c;
	if (!code_template_has_server(s) || store_config_read(s->version, &cfg, NULL) < 0)
		return; /* no interpreter, or none to start yet */
	if ((c = code_get(s, &err)) &&
	    code_server_spawn(c, cfg.user, cfg.env, cfg.n_env, cfg.workdir, &err) == 0 &&
	    code_ctx_add(c, CODE_DEFAULT_CONTEXT, API_LANG_PYTHON, cfg.workdir, &x, &err) == 0)
		code_ctx_start(c, x, OP_QUIET, NULL, &err);
	store_config_done(&cfg);
}

void code_claimed(struct sbx *s)
{
	struct code *c = s->code;
	if (!c->p)
		return;
	if (proc_own_record(c->p) < 0) { /* nothing runs unrecorded */
		code_server_kill(c, "the code interpreter's audit record could not be written");
		return;
	}
	json_t *env = json_object();
	for (size_t i = 0; env && i < s->n_env; i++) {
		const char *eq = strchr(s->env[i], '=');
		if (eq && (size_t)(eq - s->env[i]) < 256) {
			char k[256];
			snprintf(k, sizeof(k), "%.*s", (int)(eq - s->env[i]), s->env[i]);
			json_object_set_new(env, k, json_string(eq + 1));
		}
	}
	struct code_op *op = env ? code_op_new(c, OP_QUIET, CODE_DEFAULT_CONTEXT, NULL, CODE_CTL_MS) : NULL;
	if (!op)
		json_decref(env);
	if (!op || code_send(c, json_pack("{s:I, s:s, s:s, s:o}", "id", (json_int_t)op->id, "op",
					  "env", "ctx", "*", "env", env)) < 0)
		code_server_kill(c, "could not give the code interpreter its environment");
}

static const struct sbx_hooks code_hooks = {.down = code_down, .pooled = code_pooled};

void code_start(void)
{
	sbx_hooks_add(&code_hooks);
}

