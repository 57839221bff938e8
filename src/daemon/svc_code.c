/* The code interpreter: cells run in Jupyter kernels through a server inside the sandbox
 * (recipes/code-interpreter/code-interpreter), one per sandbox, started on first use through
 * the process service (proc_spawn_own) as the sandbox's user. We keep its stdin and stdout
 * and multiplex every request of the sandbox over them as line-delimited JSON, each request
 * with an id its answers carry (the protocol is in the server's docstring).
 *
 * Everything the server prints is hostile: code in the sandbox can write into its stdout. A
 * line is at most CODE_MAX_LINE bytes, must be one JSON object of a known type for a request
 * in flight, with fields of the right types; we rebuild every event from the fields we know,
 * never forward the server's bytes. A bad line ends the cells in flight with an error event
 * (we can no longer tell whose output is whose) and raises agent.violation; after
 * CODE_MAX_VIOLATIONS the server is killed, and the next request starts a new one, which
 * gets the contexts again (empty: their state went with the old kernels). A cell the server
 * does not end by its timeout plus CODE_GRACE_MS ends here, and the server with it.
 *
 * cordond owns the list of contexts (their ids are ours); the server only runs kernels. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>

#include <event2/buffer.h>

#include "basic/log.h"
#include "daemon/daemon.h"
#include "daemon/service.h"

#define CODE_SERVER		"/usr/lib/cordon/code-interpreter"
#define CODE_DEFAULT_CONTEXT	"default"
#define CODE_MAX_CONTEXTS	8	     /* per sandbox, the default one included */
#define CODE_MAX_INFLIGHT	64	     /* requests waiting for the server, per sandbox */
#define CODE_MAX_OUTPUT		API_MAX_CODE_OUTPUT /* bytes of events one cell streams */
#define CODE_MAX_LINE		API_MAX_CODE_LINE   /* one line of the server */
#define CODE_MAX_VIOLATIONS	3
#define CODE_DEFAULT_TIMEOUT_S	300
#define CODE_GRACE_MS		20000 /* past a cell's timeout: the interrupt, then a restart */
#define CODE_CTL_MS		90000 /* a kernel's start or restart */
_Static_assert(CODE_MAX_LINE < SUBSCRIBER_BACKLOG, "a cell's whole output fits a reader's backlog");

struct code_ctx {
	char id[API_MAX_CONTEXT_ID + 1];
	enum api_language lang;
	char *cwd;
	struct code_ctx *next;
};

enum op_kind { OP_EXEC, OP_CREATE, OP_RESTART, OP_QUIET /* no client: a default or re-made context */ };

/* A request to the server, until its last answer ("end", "ok" or "fail"). */
struct code_op {
	uint64_t id;
	enum op_kind kind;
	struct code *c;
	struct svc_reply *rep;	/* its client's answer, until it is given (an exec's: the stream) */
	struct stream_sink *k;	/* an exec's stream, once open */
	char ctx[API_MAX_CONTEXT_ID + 1];
	size_t bytes;
	bool truncated;
	struct event *watchdog;
	struct code_op *next;
};

struct code {
	struct sbx *s;
	struct proc *p; /* the server; NULL: not running */
	struct proc_hooks hooks;
	bool up;	/* the agent started it */
	bool none;	/* the template has no interpreter */
	struct evbuffer *line;
	struct evbuffer *pending; /* requests written before the agent started the server */
	bool skipping;	/* the rest of a line past CODE_MAX_LINE */
	unsigned violations;
	uint64_t next_id;
	size_t n_ctx, n_ops;
	struct code_ctx *ctxs;
	struct code_op *ops;
};

/* ---- contexts ---- */

static struct code_ctx *ctx_find(struct code *c, const char *id)
{
	for (struct code_ctx *x = c->ctxs; x; x = x->next)
		if (strcmp(x->id, id) == 0)
			return x;
	return NULL;
}

static json_t *ctx_json(const struct code_ctx *x)
{
	return json_pack("{s:s, s:s, s:s}", "id", x->id, "language", api_language_name(x->lang),
			 "cwd", x->cwd);
}

static void ctx_free(struct code *c, struct code_ctx *x)
{
	for (struct code_ctx **q = &c->ctxs; *q; q = &(*q)->next)
		if (*q == x) {
			*q = x->next;
			c->n_ctx--;
			break;
		}
	free(x->cwd);
	free(x);
}

/* ---- lines to the server ---- */

static int send_line(struct code *c, json_t *msg)
{
	_cleanup_(json_decrefp) json_t *m = msg;
	_cleanup_free_ char *line = m ? json_dumps(m, JSON_COMPACT) : NULL;
	if (!line)
		return -ENOMEM;
	size_t n = strlen(line);
	line[n] = '\n'; /* over the NUL: json_dumps leaves no room after it */
	if (!c->p)
		return -EPIPE;
	/* Until SPAWNED the agent has no process to give stdin to (it would answer ERROR). */
	if (!c->up)
		return evbuffer_add(c->pending, line, n + 1);
	return proc_own_write(c->p, line, n + 1);
}

static int send_create(struct code *c, uint64_t id, const struct code_ctx *x)
{
	return send_line(c, json_pack("{s:I, s:s, s:s, s:s, s:s}", "id", (json_int_t)id, "op", "create",
				      "ctx", x->id, "language", api_language_name(x->lang), "cwd", x->cwd));
}

/* ---- requests in flight ---- */

static void on_op_timeout(evutil_socket_t fd, short what, void *arg);

static void op_free(struct code_op *op)
{
	struct code *c = op->c;
	for (struct code_op **q = &c->ops; *q; q = &(*q)->next)
		if (*q == op) {
			*q = op->next;
			c->n_ops--;
			break;
		}
	if (op->watchdog)
		event_free(op->watchdog);
	free(op);
}

static void on_rep_gone(void *arg)
{
	struct code_op *op = arg;
	op->rep = NULL; /* the client left; the request runs on */
}

static void on_sink_gone(void *arg)
{
	struct code_op *op = arg;
	op->k = NULL;
}

static struct code_op *op_new(struct code *c, enum op_kind kind, const char *ctx,
			      struct svc_reply *rp, uint64_t ms)
{
	struct code_op *op = calloc(1, sizeof(*op));
	if (!op)
		return NULL;
	*op = (struct code_op){.id = ++c->next_id, .kind = kind, .c = c, .rep = rp, .next = c->ops};
	snprintf(op->ctx, sizeof(op->ctx), "%s", ctx);
	op->watchdog = evtimer_new(D.base, on_op_timeout, op);
	if (!op->watchdog) {
		free(op);
		return NULL;
	}
	struct timeval tv = {ms / 1000, ms % 1000 * 1000};
	evtimer_add(op->watchdog, &tv);
	c->ops = op;
	c->n_ops++;
	if (rp) {
		rp->gone = on_rep_gone;
		rp->gone_arg = op;
	}
	return op;
}

static struct code_op *op_find(struct code *c, uint64_t id)
{
	for (struct code_op *op = c->ops; op; op = op->next)
		if (op->id == id)
			return op;
	return NULL;
}

/* An exec's stream opens (200) once the server runs: before, a missing interpreter is still
 * a 409. */
static void op_open(struct code_op *op)
{
	if (op->kind != OP_EXEC || !op->rep)
		return;
	struct svc_reply *rp = op->rep;
	op->rep = NULL;
	op->k = rp->stream(rp, "application/x-ndjson");
	if (!op->k) {
		struct svc_err e = {.code = API_ERR_INTERNAL};
		snprintf(e.msg, sizeof(e.msg), "out of memory");
		rp->error(rp, &e);
		return;
	}
	op->k->gone = on_sink_gone;
	op->k->gone_arg = op;
}

/* One event to an exec's reader; @last ends the stream. A reader that fell behind is let go. */
static void op_emit(struct code_op *op, json_t *ev, bool last)
{
	_cleanup_(json_decrefp) json_t *e = ev;
	_cleanup_free_ char *line = e ? json_dumps(e, JSON_COMPACT) : NULL;
	if (!op->k)
		return;
	size_t n = line ? strlen(line) : 0;
	if (line)
		line[n++] = '\n';
	if (last || (line && op->k->write(op->k, line, n) < 0)) {
		op->k->end(op->k, last ? line : NULL, last ? n : 0);
		op->k = NULL;
	}
}

static json_t *end_event(const struct code_op *op, json_int_t count, bool truncated, bool timed_out)
{
	return json_pack("{s:s, s:I, s:b, s:b}", "type", "end", "execution_count", count,
			 "truncated", truncated || op->truncated, "timed_out", timed_out);
}

/* Ends @op with @code: an exec whose stream is open with an error event and the end; any
 * other's client with the error. @op is freed. */
static void op_fail(struct code_op *op, enum api_error code, bool timed_out, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void op_fail(struct code_op *op, enum api_error code, bool timed_out, const char *fmt, ...)
{
	struct svc_err e = {.code = code};
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e.msg, sizeof(e.msg), fmt, ap);
	va_end(ap);
	struct code_ctx *x = op->kind == OP_CREATE ? ctx_find(op->c, op->ctx) : NULL;
	if (x)
		ctx_free(op->c, x); /* its kernel did not start: it is not made */
	if (op->k) {
		op_emit(op, json_pack("{s:s, s:s, s:s, s:s}", "type", "error", "name",
				      timed_out ? "TimeoutError" : "InterpreterError", "value", e.msg,
				      "traceback", ""), false);
		op_emit(op, end_event(op, 0, false, timed_out), true);
	} else if (op->rep) {
		op->rep->error(op->rep, &e);
	}
	op_free(op);
}

static void fail_all(struct code *c, enum api_error code, const char *msg)
{
	while (c->ops)
		op_fail(c->ops, code, false, "%s", msg);
}

/* ---- the server's life ---- */

static void server_kill(struct code *c, const char *why)
{
	if (c->p)
		proc_own_kill(c->p);
	c->p = NULL;
	c->up = false;
	c->skipping = false;
	evbuffer_drain(c->line, evbuffer_get_length(c->line));
	evbuffer_drain(c->pending, evbuffer_get_length(c->pending));
	fail_all(c, c->none ? API_ERR_NO_INTERPRETER : API_ERR_UNAVAILABLE, why);
}

/* Started, or not (then its exit follows at once, and on_exited() answers). */
static void on_spawned(void *arg, int errnum)
{
	struct code *c = arg;
	if (errnum) {
		c->none = errnum == ENOENT || errnum == EACCES || errnum == ENOEXEC;
		return;
	}
	c->up = true;
	size_t n = evbuffer_get_length(c->pending);
	if (n && proc_own_write(c->p, evbuffer_pullup(c->pending, -1), n) < 0) {
		server_kill(c, "could not write to the code interpreter");
		return;
	}
	evbuffer_drain(c->pending, n);
	for (struct code_op *op = c->ops; op; op = op->next)
		op_open(op);
}

static void on_refused(void *arg)
{
	struct code *c = arg;
	server_kill(c, "the code interpreter did not take its input in time; it was restarted");
}

static void on_exited(void *arg)
{
	struct code *c = arg;
	c->p = NULL; /* freed after this: no kill */
	server_kill(c, c->none ? "this sandbox's template has no code interpreter (" CODE_SERVER
				 "); use the code-interpreter template"
			       : c->up ? "the code interpreter exited"
				       : "the code interpreter could not be started");
}

/* ---- lines from the server: checked (api_code_line_parse), then rebuilt ---- */

static void violation(struct code *c, const char *why)
{
	c->violations++;
	log_debug("sandbox %s: code interpreter: %s", c->s->id, why);
	event_raise(EVK_AGENT_VIOLATION, c->s, json_pack("{s:s, s:s}", "why", why, "what",
							 "code interpreter"));
	for (struct code_op *op = c->ops, *next; op; op = next) {
		next = op->next;
		if (op->kind == OP_EXEC)
			op_fail(op, API_ERR_INTERNAL, false,
				"the code interpreter broke its protocol (%s); this cell's output "
				"ends here", why);
	}
	if (c->violations >= CODE_MAX_VIOLATIONS) {
		c->violations = 0;
		server_kill(c, "the code interpreter broke its protocol too often; it was restarted");
	}
}

static void op_answer(struct code_op *op, const struct api_code_line *l)
{
	struct code_ctx *x = ctx_find(op->c, op->ctx);
	bool ok = l->kind == API_LINE_OK;
	if (op->rep && ok && x) {
		op->rep->json(op->rep, op->kind == OP_CREATE ? 201 : 200, ctx_json(x));
		op->rep = NULL;
	}
	if (ok && !op->rep)
		op_free(op);
	else if (ok)
		op_fail(op, API_ERR_NOT_FOUND, false, "context %s was removed", op->ctx);
	else
		op_fail(op, API_ERR_UNAVAILABLE, false, "the kernel did not start: %s", l->message);
}

/* One whole line of the server's stdout (without its newline). */
static void line_done(struct code *c, const char *data, size_t len)
{
	struct cordon_err err = {};
	struct api_code_line l;
	if (api_code_line_parse(data, len, &l, &err) < 0)
		return violation(c, err.msg);
	_cleanup_(json_decrefp) json_t *ev = l.event;
	struct code_op *op = l.kind == API_LINE_READY ? NULL : op_find(c, l.id);
	if (l.kind == API_LINE_READY)
		return;
	if (!op || api_code_line_for_cell(l.kind) != (op->kind == OP_EXEC))
		return violation(c, "a line for no request in flight, or not of its kind");
	if (l.kind == API_LINE_END) {
		op_emit(op, end_event(op, l.execution_count, l.truncated, l.timed_out), true);
		return op_free(op);
	}
	if (l.kind != API_LINE_EVENT)
		return op_answer(op, &l);
	if (op->bytes + len > CODE_MAX_OUTPUT) {
		op->truncated = true;
		return;
	}
	op->bytes += len;
	op_emit(op, TAKE_PTR(ev), false);
}

/* The server's stdout, cut into lines; its stderr (a kernel's last words) is nobody's. */
static void on_output(void *arg, int which, const void *data, size_t len)
{
	struct code *c = arg;
	const char *p = data, *end = p + len;
	while (!which && p < end && c->p) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		if (!c->skipping && evbuffer_get_length(c->line) + n > CODE_MAX_LINE) {
			c->skipping = true;
			evbuffer_drain(c->line, evbuffer_get_length(c->line));
			violation(c, "a line longer than its limit (CODE_MAX_LINE)");
		} else if (!c->skipping) {
			evbuffer_add(c->line, p, n);
		}
		if (!nl)
			break;
		size_t have = evbuffer_get_length(c->line);
		if (!c->skipping && c->p)
			line_done(c, (const char *)evbuffer_pullup(c->line, -1), have);
		evbuffer_drain(c->line, evbuffer_get_length(c->line));
		c->skipping = false;
		p = nl + 1;
	}
}

static void on_op_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct code_op *op = arg;
	struct code *c = op->c;
	if (sbx_watchdog_defer(c->s, op->watchdog))
		return; /* paused: a frozen server answers nothing */
	op_fail(op, API_ERR_TIMEOUT, true, "the code interpreter did not answer in time; it was restarted");
	server_kill(c, "the code interpreter did not answer in time; it was restarted");
}

/* ---- the per-sandbox state ---- */

/* Whether @s's template has the server (a file, not a link the host would follow). */
static bool template_has_server(const struct sbx *s)
{
	char path[PATH_MAX + sizeof(CODE_SERVER)];
	struct stat st;
	if (!s->version)
		return false;
	snprintf(path, sizeof(path), "%s%s", s->version->rootfs, CODE_SERVER);
	return fstatat(AT_FDCWD, path, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
}


static int no_interpreter(const struct sbx *s, struct svc_err *err)
{
	return svc_fail(err, API_ERR_NO_INTERPRETER, "sandbox %s: its template has no code interpreter "
			"(" CODE_SERVER "); use the code-interpreter template", s->id);
}

/* @s's state, made on first use: 409 for a sandbox whose template has no interpreter. */
static struct code *code_of(struct sbx *s, struct svc_err *err)
{
	if (s->code)
		return s->code;
	if (!template_has_server(s)) {
		no_interpreter(s, err);
		return NULL;
	}
	struct code *c = calloc(1, sizeof(*c));
	if (c && (!(c->line = evbuffer_new()) || !(c->pending = evbuffer_new()))) {
		if (c->line)
			evbuffer_free(c->line);
		free(c);
		c = NULL;
	}
	if (!c) {
		svc_fail(err, API_ERR_INTERNAL, "out of memory");
		return NULL;
	}
	c->s = s;
	c->hooks = (struct proc_hooks){on_output, on_spawned, on_exited, on_refused, c};
	return s->code = c;
}

/* Starts the server as @user with @env (beside the sandbox's) in @cwd (NULL: the user's home). */
static int server_spawn(struct code *c, enum cordon_user user, const char **env, size_t n_env,
			const char *cwd, struct svc_err *err)
{
	static const char *argv[] = {CODE_SERVER, NULL};
	struct api_exec e = {.argv = argv, .argc = 1, .user = user, .cwd = cwd,
			     .env = {.n = n_env}, .env_strv = env, .tag = "code-interpreter"};
	c->p = proc_spawn_own(c->s, &e, &c->hooks, err);
	return c->p ? 0 : -1;
}

/* The server running (started now if it was not, with every context made again in it). */
static int server_ensure(struct code *c, struct svc_err *err)
{
	if (c->none)
		return no_interpreter(c->s, err);
	if (c->p)
		return 0;
	if (server_spawn(c, c->s->user_default, NULL, 0, NULL, err) < 0)
		return -1;
	for (struct code_ctx *x = c->ctxs; x; x = x->next) {
		struct code_op *op = op_new(c, OP_QUIET, x->id, NULL, CODE_CTL_MS);
		if (!op || send_create(c, op->id, x) < 0)
			return svc_fail(err, API_ERR_INTERNAL, "could not start the code interpreter");
	}
	return 0;
}

static int ctx_add(struct code *c, const char *id, enum api_language lang, const char *cwd,
		   struct code_ctx **ret, struct svc_err *err)
{
	if (c->n_ctx >= CODE_MAX_CONTEXTS)
		return svc_fail(err, API_ERR_QUOTA_EXCEEDED, "at most %d code contexts per sandbox",
				CODE_MAX_CONTEXTS);
	struct code_ctx *x = calloc(1, sizeof(*x));
	const char *home = c->s->workdir ? c->s->workdir : "/home/user";
	if (!x || !(x->cwd = strdup(cwd ? cwd : home))) {
		free(x);
		return svc_fail(err, API_ERR_INTERNAL, "out of memory");
	}
	snprintf(x->id, sizeof(x->id), "%s", id);
	x->lang = lang;
	x->next = c->ctxs;
	c->ctxs = x;
	c->n_ctx++;
	*ret = x;
	return 0;
}

/* Room for one request more, with the server running. */
static struct code *code_ready(struct sbx *s, struct svc_err *err)
{
	struct code *c = code_of(s, err);
	if (!c || server_ensure(c, err) < 0)
		return NULL;
	if (c->n_ops >= CODE_MAX_INFLIGHT) {
		svc_fail(err, API_ERR_QUOTA_EXCEEDED, "at most %d code requests at once per sandbox",
			 CODE_MAX_INFLIGHT);
		return NULL;
	}
	return c;
}

/* A context, made new (@x->id fresh) or again: its kernel started; @rp hears of it. */
static int ctx_start(struct code *c, struct code_ctx *x, enum op_kind kind, struct svc_reply *rp,
		     struct svc_err *err)
{
	struct code_op *op = op_new(c, kind, x->id, rp, CODE_CTL_MS);
	int r = op ? (kind == OP_RESTART ? send_line(c, json_pack("{s:I, s:s, s:s}", "id",
					(json_int_t)op->id, "op", "restart", "ctx", x->id))
					 : send_create(c, op->id, x))
		   : -ENOMEM;
	if (r < 0) {
		if (op) {
			op->rep = NULL; /* the caller answers */
			op_free(op);
		}
		return svc_fail(err, API_ERR_INTERNAL, "could not reach the code interpreter");
	}
	return 0;
}

/* ---- the service ---- */

int svc_code_run(struct sbx *s, const struct api_code *req, struct svc_reply *rp,
		 struct svc_err *err)
{
	struct code *c = code_ready(s, err);
	struct code_ctx *x = NULL;
	if (!c)
		return -1;
	const char *id = req->context ? req->context : CODE_DEFAULT_CONTEXT;
	if (!(x = ctx_find(c, id)) && req->context)
		return svc_fail(err, API_ERR_NOT_FOUND, "no code context %s in sandbox %s", id, s->id);
	if (!x && (ctx_add(c, id, req->language, NULL, &x, err) < 0 ||
		   ctx_start(c, x, OP_QUIET, NULL, err) < 0))
		return -1;
	if (x->lang != req->language)
		return svc_fail(err, API_ERR_INVALID_FIELD, "language: context %s is %s", id,
				api_language_name(x->lang));
	uint32_t t = req->timeout_s ? req->timeout_s : CODE_DEFAULT_TIMEOUT_S;
	struct code_op *op = op_new(c, OP_EXEC, id, rp, (uint64_t)t * 1000 + CODE_GRACE_MS);
	json_t *m = op ? json_pack("{s:I, s:s, s:s, s:s%, s:I, s:I}", "id", (json_int_t)op->id,
				   "op", "exec", "ctx", id, "code", req->code, req->code_len,
				   "timeout_ms", (json_int_t)t * 1000, "max_bytes",
				   (json_int_t)(CODE_MAX_OUTPUT - CODE_MAX_OUTPUT / 16)) : NULL;
	if (!op || send_line(c, m) < 0) {
		if (op) {
			op->rep = NULL; /* the caller answers */
			op_free(op);
		}
		return svc_fail(err, API_ERR_INTERNAL, "could not reach the code interpreter");
	}
	if (c->up)
		op_open(op);
	return 0;
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
	if (ctx_add(c, id, req->language, req->cwd, &x, err) < 0)
		return -1;
	if (ctx_start(c, x, OP_CREATE, rp, err) < 0) {
		ctx_free(c, x);
		return -1;
	}
	return 0;
}

int svc_code_context_list(struct sbx *s, json_t **ret, struct svc_err *err)
{
	struct code *c = code_of(s, err);
	if (!c)
		return -1;
	if (c->none)
		return server_ensure(c, err); /* its 409 */
	json_t *a = json_array();
	for (struct code_ctx *x = c->ctxs; x && a; x = x->next)
		json_array_append_new(a, ctx_json(x));
	*ret = json_pack("{s:o}", "contexts", a);
	return *ret ? 0 : svc_fail(err, API_ERR_INTERNAL, "out of memory");
}

static struct code_ctx *ctx_named(struct sbx *s, const char *id, struct svc_err *err)
{
	struct code *c = code_of(s, err);
	struct code_ctx *x = c && !c->none ? ctx_find(c, id) : NULL;
	if (c && c->none)
		no_interpreter(s, err);
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
	struct code_op *op = c->p ? op_new(c, OP_QUIET, x->id, NULL, CODE_CTL_MS) : NULL;
	if (op) /* the kernel goes after the cells queued before it; its "ok" is awaited */
		send_line(c, json_pack("{s:I, s:s, s:s}", "id", (json_int_t)op->id, "op", "delete",
				       "ctx", x->id));
	ctx_free(c, x);
	return 0;
}

int svc_code_context_restart(struct sbx *s, const char *id, struct svc_reply *rp,
			     struct svc_err *err)
{
	struct code_ctx *x = ctx_named(s, id, err);
	if (!x || !code_ready(s, err))
		return -1;
	/* A server started just now made the context already; a restart then costs little. */
	return ctx_start(s->code, x, OP_RESTART, rp, err);
}

/* ---- the sandbox goes ---- */

static void code_down(struct sbx *s)
{
	struct code *c = s->code;
	if (!c)
		return;
	if (c->p)
		proc_own_kill(c->p); /* its channel closes next, without us */
	c->p = NULL;
	fail_all(c, API_ERR_CONFLICT, "the sandbox was destroyed");
	while (c->ctxs)
		ctx_free(c, c->ctxs);
	evbuffer_free(c->line);
	evbuffer_free(c->pending);
	free(c);
	s->code = NULL;
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
	if (!template_has_server(s) || store_config_read(s->version, &cfg, NULL) < 0)
		return; /* no interpreter, or none to start yet */
	if ((c = code_of(s, &err)) &&
	    server_spawn(c, cfg.user, cfg.env, cfg.n_env, cfg.workdir, &err) == 0 &&
	    ctx_add(c, CODE_DEFAULT_CONTEXT, API_LANG_PYTHON, cfg.workdir, &x, &err) == 0)
		ctx_start(c, x, OP_QUIET, NULL, &err);
	store_config_done(&cfg);
}

void code_claimed(struct sbx *s)
{
	struct code *c = s->code;
	if (!c->p)
		return;
	if (proc_own_record(c->p) < 0) { /* nothing runs unrecorded */
		server_kill(c, "the code interpreter's audit record could not be written");
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
	struct code_op *op = env ? op_new(c, OP_QUIET, CODE_DEFAULT_CONTEXT, NULL, CODE_CTL_MS) : NULL;
	if (!op)
		json_decref(env);
	if (!op || send_line(c, json_pack("{s:I, s:s, s:s, s:o}", "id", (json_int_t)op->id, "op",
					  "env", "ctx", "*", "env", env)) < 0)
		server_kill(c, "could not give the code interpreter its environment");
}

static const struct sbx_hooks code_hooks = {.down = code_down, .pooled = code_pooled};

void code_start(void)
{
	sbx_hooks_add(&code_hooks);
}
