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
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <event2/buffer.h>

#include "basic/log.h"
#include "daemon/code.h"

_Static_assert(CODE_MAX_LINE < SUBSCRIBER_BACKLOG, "a cell's whole output fits a reader's backlog");

/* ---- contexts ---- */

struct code_ctx *code_ctx_find(struct code *c, const char *id)
{
	for (struct code_ctx *x = c->ctxs; x; x = x->next)
		if (strcmp(x->id, id) == 0)
			return x;
	return NULL;
}

json_t *code_ctx_json(const struct code_ctx *x)
{
	return json_pack("{s:s, s:s, s:s}", "id", x->id, "language", api_language_name(x->lang),
			 "cwd", x->cwd);
}

void code_ctx_free(struct code *c, struct code_ctx *x)
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

int code_send(struct code *c, json_t *msg)
{
	_cleanup_(json_decrefp) json_t *m = msg;
	_cleanup_free_ char *line = m ? json_dumps(m, JSON_COMPACT) : NULL;
	if (!line)
		return -ENOMEM;
	size_t n = strlen(line);
	line[n++] = '\n'; /* over the NUL: json_dumps leaves no room after it */
	if (!c->p)
		return -EPIPE;
	if (n > CODE_MAX_REQUEST)
		return -E2BIG;
	if (evbuffer_get_length(c->pending) + n > CODE_MAX_PENDING)
		return -ENOBUFS;
	if (evbuffer_add(c->pending, line, n) < 0)
		return -ENOMEM;
	code_flush(c);
	return 0;
}

/* Whole lines, while the window has room (or nothing is unread: one line alone always
 * fits the agent's queue). Until SPAWNED nothing: the agent has no process to give stdin to
 * (it would answer ERROR). */
void code_flush(struct code *c)
{
	while (c->p && c->up && evbuffer_get_length(c->pending)) {
		struct evbuffer_ptr eol = evbuffer_search_eol(c->pending, NULL, NULL, EVBUFFER_EOL_LF);
		size_t n = (size_t)eol.pos + 1; /* every line ends with its \n */
		if (eol.pos < 0 || (c->unacked && c->unacked + n > CODE_WINDOW))
			return;
		if (proc_own_write(c->p, evbuffer_pullup(c->pending, (ssize_t)n), n) < 0) {
			code_server_kill(c, "could not write to the code interpreter");
			return;
		}
		c->unacked += n;
		evbuffer_drain(c->pending, n);
	}
}

static int send_create(struct code *c, uint64_t id, const struct code_ctx *x)
{
	return code_send(c, json_pack("{s:I, s:s, s:s, s:s, s:s}", "id", (json_int_t)id, "op", "create",
				      "ctx", x->id, "language", api_language_name(x->lang), "cwd", x->cwd));
}

/* ---- requests in flight ---- */

static void on_op_timeout(evutil_socket_t fd, short what, void *arg);

void code_op_free(struct code_op *op)
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

static struct code_op *op_find(struct code *c, uint64_t id);

/* A cell whose client went, named by ids (the op may be gone by the time this runs). */
struct interrupt {
	char sbx[SBX_ID_LEN + 1], ctx[API_MAX_CONTEXT_ID + 1];
	uint64_t cell;
};

/* Run from the loop, not from inside the surface's gone(): the server is told to interrupt
 * the cell if it is still in flight. */
static void send_interrupt(evutil_socket_t fd, short what, void *arg)
{
	_cleanup_free_ struct interrupt *q = arg;
	struct sbx *s = sbx_find(NULL, q->sbx);
	struct code *c = s ? s->code : NULL;
	if (!c || !c->p || !op_find(c, q->cell))
		return;
	struct code_op *op = code_op_new(c, OP_QUIET, q->ctx, NULL, CODE_CTL_MS);
	if (op && code_send(c, json_pack("{s:I, s:s, s:s, s:I}", "id", (json_int_t)op->id, "op",
					 "interrupt", "ctx", q->ctx, "cell", (json_int_t)q->cell)) < 0)
		code_op_free(op);
}

static void client_went(struct code_op *op)
{
	static const struct timeval now = {0, 0};
	struct interrupt *q = op->stop_when_gone ? calloc(1, sizeof(*q)) : NULL;
	if (!q)
		return; /* the request runs on */
	snprintf(q->sbx, sizeof(q->sbx), "%s", op->c->s->id);
	snprintf(q->ctx, sizeof(q->ctx), "%s", op->ctx);
	q->cell = op->id;
	if (event_base_once(D.base, -1, EV_TIMEOUT, send_interrupt, q, &now) < 0)
		free(q);
}

void code_op_stop_when_gone(struct code_op *op)
{
	op->stop_when_gone = op->kind == OP_EXEC;
}

static void on_rep_gone(void *arg)
{
	struct code_op *op = arg;
	op->rep = NULL; /* the client left */
	client_went(op);
}

static void on_sink_gone(void *arg)
{
	struct code_op *op = arg;
	op->k = NULL;
	client_went(op);
}

struct code_op *code_op_new(struct code *c, enum op_kind kind, const char *ctx,
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
void code_op_open(struct code_op *op)
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
	struct code_ctx *x = op->kind == OP_CREATE ? code_ctx_find(op->c, op->ctx) : NULL;
	if (x)
		code_ctx_free(op->c, x); /* its kernel did not start: it is not made */
	if (op->k) {
		op_emit(op, json_pack("{s:s, s:s, s:s, s:s}", "type", "error", "name",
				      timed_out ? "TimeoutError" : "InterpreterError", "value", e.msg,
				      "traceback", ""), false);
		op_emit(op, end_event(op, 0, false, timed_out), true);
	} else if (op->rep) {
		op->rep->error(op->rep, &e);
	}
	code_op_free(op);
}

void code_fail_all(struct code *c, enum api_error code, const char *msg)
{
	while (c->ops)
		op_fail(c->ops, code, false, "%s", msg);
}

/* ---- the server's life ---- */

void code_server_kill(struct code *c, const char *why)
{
	if (c->p)
		proc_own_kill(c->p);
	c->p = NULL;
	c->up = false;
	c->skipping = false;
	c->waste = 0;
	c->unacked = 0;
	evbuffer_drain(c->line, evbuffer_get_length(c->line));
	evbuffer_drain(c->pending, evbuffer_get_length(c->pending));
	code_fail_all(c, c->none ? API_ERR_NO_INTERPRETER : API_ERR_UNAVAILABLE, why);
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
	for (struct code_op *op = c->ops; op; op = op->next)
		code_op_open(op);
	code_flush(c);
}

static void on_refused(void *arg)
{
	struct code *c = arg;
	code_server_kill(c, "the code interpreter did not take its input in time; it was restarted");
}

static void on_exited(void *arg)
{
	struct code *c = arg;
	c->p = NULL; /* freed after this: no kill */
	code_server_kill(c, c->none ? "this sandbox's template has no code interpreter (" CODE_SERVER
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
		code_server_kill(c, "the code interpreter broke its protocol too often; it was restarted");
	}
}

static void op_answer(struct code_op *op, const struct api_code_line *l)
{
	struct code_ctx *x = code_ctx_find(op->c, op->ctx);
	bool ok = l->kind == API_LINE_OK;
	if (op->rep && ok && x) {
		op->rep->json(op->rep, op->kind == OP_CREATE ? 201 : 200, code_ctx_json(x));
		op->rep = NULL;
	}
	if (ok && !op->rep)
		code_op_free(op);
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
	struct code_op *op = l.kind == API_LINE_READY || l.kind == API_LINE_ACK ? NULL : op_find(c, l.id);
	if (l.kind == API_LINE_READY)
		return;
	if (l.kind == API_LINE_ACK) {
		if (l.bytes > c->unacked)
			return violation(c, "an ack of more than was written");
		c->unacked -= l.bytes;
		return code_flush(c);
	}
	if (!op || api_code_line_for_cell(l.kind) != (op->kind == OP_EXEC))
		return violation(c, "a line for no request in flight, or not of its kind");
	if (l.kind == API_LINE_END) {
		op_emit(op, end_event(op, l.execution_count, l.truncated, l.timed_out), true);
		return code_op_free(op);
	}
	if (l.kind != API_LINE_EVENT)
		return op_answer(op, &l);
	if (op->bytes + len > CODE_MAX_OUTPUT) {
		op->truncated = true;
		c->waste += len; /* parsed for nothing: bounded below */
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
		} else {
			c->waste += n;
		}
		if (c->waste > CODE_MAX_WASTE && c->p) {
			code_server_kill(c, "the code interpreter wrote more than its cells could use");
			break;
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
	code_server_kill(c, "the code interpreter did not answer in time; it was restarted");
}

/* ---- the per-sandbox state ---- */

/* Whether @s's template has the server (a file, not a link the host would follow). */
bool code_template_has_server(const struct sbx *s)
{
	char path[PATH_MAX + sizeof(CODE_SERVER)];
	struct stat st;
	if (!s->version)
		return false;
	snprintf(path, sizeof(path), "%s%s", s->version->rootfs, CODE_SERVER);
	return fstatat(AT_FDCWD, path, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
}


int code_no_interpreter(const struct sbx *s, struct svc_err *err)
{
	return svc_fail(err, API_ERR_NO_INTERPRETER, "sandbox %s: its template has no code interpreter "
			"(" CODE_SERVER "); use the code-interpreter template", s->id);
}

/* @s's state, made on first use: 409 for a sandbox whose template has no interpreter. */
struct code *code_get(struct sbx *s, struct svc_err *err)
{
	if (s->code)
		return s->code;
	if (!code_template_has_server(s)) {
		code_no_interpreter(s, err);
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
int code_server_spawn(struct code *c, enum cordon_user user, const char **env, size_t n_env,
			const char *cwd, struct svc_err *err)
{
	static const char *argv[] = {CODE_SERVER, NULL};
	struct api_exec e = {.argv = argv, .argc = 1, .user = user, .cwd = cwd,
			     .env = {.n = n_env}, .env_strv = env, .tag = "code-interpreter"};
	c->p = proc_spawn_own(c->s, &e, &c->hooks, err);
	return c->p ? 0 : -1;
}

/* The server running (started now if it was not, with every context made again in it). */
int code_server_ensure(struct code *c, struct svc_err *err)
{
	if (c->none)
		return code_no_interpreter(c->s, err);
	if (c->p)
		return 0;
	if (code_server_spawn(c, c->s->user_default, NULL, 0, NULL, err) < 0)
		return -1;
	for (struct code_ctx *x = c->ctxs; x; x = x->next) {
		struct code_op *op = code_op_new(c, OP_QUIET, x->id, NULL, CODE_CTL_MS);
		if (!op || send_create(c, op->id, x) < 0)
			return svc_fail(err, API_ERR_INTERNAL, "could not start the code interpreter");
	}
	return 0;
}

int code_ctx_add(struct code *c, const char *id, enum api_language lang, const char *cwd,
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
struct code *code_ready(struct sbx *s, struct svc_err *err)
{
	struct code *c = code_get(s, err);
	if (!c || code_server_ensure(c, err) < 0)
		return NULL;
	if (c->n_ops >= CODE_MAX_INFLIGHT) {
		svc_fail(err, API_ERR_QUOTA_EXCEEDED, "at most %d code requests at once per sandbox",
			 CODE_MAX_INFLIGHT);
		return NULL;
	}
	return c;
}

/* A context, made new (@x->id fresh) or again: its kernel started; @rp hears of it. */
int code_ctx_start(struct code *c, struct code_ctx *x, enum op_kind kind, struct svc_reply *rp,
		     struct svc_err *err)
{
	struct code_op *op = code_op_new(c, kind, x->id, rp, CODE_CTL_MS);
	int r = op ? (kind == OP_RESTART ? code_send(c, json_pack("{s:I, s:s, s:s}", "id",
					(json_int_t)op->id, "op", "restart", "ctx", x->id))
					 : send_create(c, op->id, x))
		   : -ENOMEM;
	if (r < 0) {
		if (op) {
			op->rep = NULL; /* the caller answers */
			code_op_free(op);
		}
		return svc_fail(err, API_ERR_INTERNAL, "could not reach the code interpreter");
	}
	return 0;
}

/* ---- the end ---- */

struct code *code_free(struct code *c)
{
	if (!c)
		return NULL;
	if (c->p)
		proc_own_kill(c->p); /* its channel closes next, without us */
	c->p = NULL;
	code_fail_all(c, API_ERR_CONFLICT, "the sandbox was destroyed");
	while (c->ctxs)
		code_ctx_free(c, c->ctxs);
	evbuffer_free(c->line);
	evbuffer_free(c->pending);
	free(c);
	return NULL;
}

