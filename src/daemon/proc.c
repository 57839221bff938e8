/* Processes in a sandbox: run-and-wait (/exec) and started processes whose events stream as
 * NDJSON to any number of readers. Each process is one agent channel; the agent's frames on
 * it (SPAWNED, STDOUT, STDERR, EXIT, or ERROR when it could not start) are checked against
 * what we asked for, and a process the agent does not end by its timeout plus a grace period
 * ends the sandbox: a stuck agent never holds a client forever.
 */
#include <errno.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "audit/audit.h"
#include "daemon/daemon.h"
#include "daemon/service.h"
#include "lib/frame.h"

#define MAX_PROCS       FRAME_MAX_PROCS /* running at once in one sandbox: the agent's limit too */
#define MAX_EXITED_KEPT 64   /* exited processes remembered for reattach */
#define STRINGIFY_BACKLOG "8 MiB" /* SUBSCRIBER_BACKLOG, for people */
_Static_assert(SUBSCRIBER_BACKLOG == 8u << 20, "STRINGIFY_BACKLOG says 8 MiB");

/* Back-pressure: above PAUSE_AT bytes queued to any reader of a process, the agent is asked
 * to stop reading that process's output (PAUSE), so the process blocks on its pipe; below
 * RESUME_AT for every reader it goes on (RESUME). What is in flight when PAUSE is sent (the
 * agent's 256 KiB queue, socket buffers) stays far below SUBSCRIBER_BACKLOG, past which a
 * reader is cut off with a "lagged" event. */
#define PAUSE_AT  (1u << 20)
#define RESUME_AT (256u << 10)

/* A reader of a process's events, through the sink its surface gave (service.h). */
struct sub {
	struct stream_sink *k;
	struct proc *p;
	struct sub *next;
};

struct proc {
	struct chan ch; /* ch.id: the agent channel, and the "process" of its audit records */
	struct sbx *s;
	uint32_t pid; /* inside the sandbox, once SPAWNED */
	bool exec;    /* run and wait */
	bool exited, spawned, stdin_closed;
	bool base64;  /* exec: stdout and stderr returned as base64 */
	bool paused;  /* PAUSE sent: a reader is behind */
	bool pty;     /* on a pseudo-terminal: its output is "stdout", RESIZE applies */
	struct svc_reply *exec_rep;  /* an exec's client, until the exit */
	struct svc_reply *start_rep; /* a started process's client, until SPAWNED or ERROR */
	struct evbuffer *out[2];
	bool trunc[2];
	uint64_t bytes_out;
	uint64_t started_ms, t0_ms;
	json_t *argv;
	char *cwd, *tag;
	enum cordon_user user;
	struct frame_exit ex;
	bool oom;
	/* A template's READY: told whether it exited 0, which decides whether the sandbox is
	 * handed out (create.c; a pointer, so that processes know nothing of creation). */
	void (*ready_exit)(struct sbx *s, bool ok);
	struct sub *subs;
	struct event *watchdog;
	/* The daemon's own (proc_spawn_own): hidden from the API; @hooks NULL once killed. */
	bool own;
	const struct proc_hooks *hooks;
	json_t *record; /* a pooled sandbox's: its process.start, written at the claim */
	struct proc *next;
};

static struct frame_spawn spawn_msg; /* 41 KiB; one thread, so one is enough */

static struct proc *proc_by_pid(struct sbx *s, const char *pid_s)
{
	char *end;
	unsigned long pid = pid_s ? strtoul(pid_s, &end, 10) : 0;
	if (!pid_s || *end || pid == 0 || pid > UINT32_MAX)
		return NULL;
	for (struct proc *p = s->procs; p; p = p->next)
		if (p->spawned && p->pid == pid && !p->own)
			return p;
	return NULL;
}

static size_t sub_backlog(const struct sub *sub)
{
	return sub->k->backlog(sub->k);
}

static void flow_update(struct proc *p);

/* The reader took some of its backlog: the process may go on. */
static void on_sub_drain(void *arg)
{
	struct sub *sub = arg;
	if (sub->p->paused)
		flow_update(sub->p);
}

/* PAUSE or RESUME the process as its readers' backlogs say. */
static void flow_update(struct proc *p)
{
	bool behind = false, caught_up = true;
	for (struct sub *sub = p->subs; sub; sub = sub->next) {
		behind |= sub_backlog(sub) > PAUSE_AT;
		caught_up &= sub_backlog(sub) <= RESUME_AT;
	}
	if (p->exited || p->exec || (p->paused ? !caught_up : !behind))
		return;
	if (sbx_send(p->s, p->paused ? FRAME_RESUME : FRAME_PAUSE, p->ch.id, NULL) == 0)
		p->paused = !p->paused;
}

static void sub_drop(struct proc *p, struct sub *sub)
{
	for (struct sub **q = &p->subs; *q; q = &(*q)->next)
		if (*q == sub) {
			*q = sub->next;
			break;
		}
	free(sub);
	if (p->paused)
		flow_update(p); /* the one that was behind may be this one */
}

/* The reader went away (its sink is freed next). */
static void on_sub_gone(void *arg)
{
	struct sub *sub = arg;
	sub_drop(sub->p, sub);
}

/* Ends @sub's stream, with @last (a line, or NULL) as its last bytes. */
static void sub_end(struct proc *p, struct sub *sub, const char *last, size_t len)
{
	sub->k->end(sub->k, last, len);
	sub_drop(p, sub);
}

/* Answers the client waiting on *@rp, if any, with an error. */
static void rep_fail(struct svc_reply **rp, enum api_error code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void rep_fail(struct svc_reply **rp, enum api_error code, const char *fmt, ...)
{
	struct svc_err err = {.code = code};
	va_list ap;
	if (!*rp)
		return;
	va_start(ap, fmt);
	vsnprintf(err.msg, sizeof(err.msg), fmt, ap);
	va_end(ap);
	(*rp)->error(*rp, &err);
	*rp = NULL;
}

static void proc_free(struct proc *p)
{
	rep_fail(&p->start_rep, API_ERR_CONFLICT, "the sandbox was destroyed");
	p->exited = true; /* no RESUME from a reader's drop now */
	while (p->subs)
		sub_end(p, p->subs, NULL, 0);
	for (struct proc **q = &p->s->procs; *q; q = &(*q)->next)
		if (*q == p) {
			*q = p->next;
			break;
		}
	sbx_chan_del(p->s, &p->ch);
	if (p->watchdog)
		event_free(p->watchdog);
	for (int i = 0; i < 2; i++)
		if (p->out[i])
			evbuffer_free(p->out[i]);
	json_decref(p->argv);
	json_decref(p->record);
	free(p->cwd);
	free(p->tag);
	free(p);
}

/* The sandbox is destroyed (chan_ops.close). */
static void proc_close(struct chan *ch)
{
	struct proc *p = OWNER_OF(ch, struct proc, ch);
	if (p->hooks)
		p->hooks->exited(p->hooks->arg);
	rep_fail(&p->exec_rep, API_ERR_CONFLICT, "the sandbox was destroyed");
	proc_free(p);
}

static void on_exec_gone(void *arg)
{
	struct proc *p = arg;
	p->exec_rep = NULL; /* the client left; the process runs on to its end */
}

static void on_start_gone(void *arg)
{
	struct proc *p = arg;
	p->start_rep = NULL; /* the client left before the process started; it runs on */
}

/* ---- events to stream readers ---- */

/* The last line to a reader that fell SUBSCRIBER_BACKLOG behind: said, never silent, so that
 * a client cannot mistake the end of its stream for the end of the process. It is queued past
 * the backlog (one line more), and the stream ends after it. */
static void end_lagged(struct proc *p, struct sub *sub)
{
	_cleanup_(json_decrefp) json_t *e = json_pack(
		"{s:s, s:I, s:s}", "type", "lagged", "pid", (json_int_t)p->pid, "message",
		"this reader fell more than " STRINGIFY_BACKLOG " behind the process's output; "
		"its stream ends here and the process runs on");
	_cleanup_free_ char *line = e ? json_dumps(e, JSON_COMPACT) : NULL;
	size_t n = line ? strlen(line) : 0;
	if (line)
		line[n++] = '\n'; /* over the NUL: json_dumps leaves no room after it */
	sub_end(p, sub, line, n);
	metric_inc(M_HTTP_ERRORS);
}

static void broadcast(struct proc *p, json_t *ev)
{
	_cleanup_(json_decrefp) json_t *e = ev;
	_cleanup_free_ char *line = e ? json_dumps(e, JSON_COMPACT) : NULL;
	if (!line)
		return;
	size_t n = strlen(line);
	line[n] = '\n'; /* json_dumps leaves room for nothing more: send n+1 with the NUL as \n */
	for (struct sub *sub = p->subs, *next; sub; sub = next) {
		next = sub->next;
		if (sub->k->write(sub->k, line, n + 1) < 0)
			end_lagged(p, sub);
	}
}

static json_t *exit_event(const struct proc *p)
{
	return json_pack("{s:s, s:I, s:i, s:i, s:b, s:b, s:I}", "type", "exit", "pid",
			 (json_int_t)p->pid, "exit_code", p->ex.signal ? -1 : (int)p->ex.code,
			 "signal", (int)p->ex.signal, "timed_out", p->ex.timed_out != 0, "oom", p->oom,
			 "duration_ms", (json_int_t)(now_ms() - p->started_ms));
}

static json_t *start_event(const struct proc *p)
{
	json_t *e = json_pack("{s:s, s:I}", "type", "start", "pid", (json_int_t)p->pid);
	if (e && p->tag)
		json_object_set_new(e, "tag", json_string(p->tag));
	return e;
}

/* @k reads @p's events from now on, as @sub. */
static void subscribe(struct proc *p, struct sub *sub, struct stream_sink *k)
{
	*sub = (struct sub){.k = k, .p = p, .next = p->subs};
	p->subs = sub;
	k->gone = on_sub_gone;
	k->gone_arg = sub;
	k->watch(k, on_sub_drain, sub);
}

/* The answer to @rp becomes @p's event stream (200, NDJSON); false, with @rp answered 500,
 * without memory. */
static bool open_stream(struct proc *p, struct svc_reply *rp)
{
	struct sub *sub = calloc(1, sizeof(*sub));
	struct stream_sink *k = sub ? rp->stream(rp, "application/x-ndjson") : NULL;
	if (!k) {
		free(sub);
		rep_fail(&rp, API_ERR_INTERNAL, "out of memory");
		return false;
	}
	subscribe(p, sub, k);
	return true;
}

/* The answer to POST .../processes, once the agent has said whether the process started: the
 * event stream (200), which the start event or the failure's stderr and exit then open. */
static void start_answer(struct proc *p)
{
	struct svc_reply *rp = p->start_rep;
	p->start_rep = NULL;
	if (rp)
		open_stream(p, rp);
}

/* ---- the end of a process ---- */

static void forget_old_exited(struct sbx *s)
{
	size_t n = 0;
	struct proc *oldest = NULL;
	for (struct proc *p = s->procs; p; p = p->next)
		if (p->exited) {
			n++;
			if (!oldest)
				oldest = p;
		}
	if (n > MAX_EXITED_KEPT && oldest)
		proc_free(oldest);
}

/* An exec's output as the request asked: text (U+FFFD for invalid UTF-8 and NUL) or base64. */
static json_t *output_json(const struct proc *p, int which)
{
	const void *data = evbuffer_pullup(p->out[which], -1);
	size_t len = evbuffer_get_length(p->out[which]), n;
	if (!p->base64)
		return json_from_bytes_utf8(data, len);
	_cleanup_free_ char *b64 = base64_encode(data, len, &n);
	return b64 ? json_stringn(b64, n) : NULL;
}

static void exec_reply(struct proc *p)
{
	json_t *r = json_pack("{s:i, s:i, s:o, s:o, s:b, s:b, s:b, s:b, s:I}", "exit_code",
			      p->ex.signal ? -1 : (int)p->ex.code, "signal", (int)p->ex.signal,
			      "stdout", output_json(p, 0), "stderr", output_json(p, 1),
			      "stdout_truncated", p->trunc[0], "stderr_truncated", p->trunc[1],
			      "timed_out", p->ex.timed_out != 0, "oom", p->oom, "duration_ms",
			      (json_int_t)(now_ms() - p->started_ms));
	metric_observe(H_EXEC, (now_ms() - p->t0_ms) / 1000.0);
	if (r && p->base64)
		json_object_set_new(r, "encoding", json_string("base64"));
	if (!r) { /* as reply_json() would: NULL is no memory, not no body */
		rep_fail(&p->exec_rep, API_ERR_INTERNAL, "out of memory");
		return;
	}
	p->exec_rep->json(p->exec_rep, 200, r);
	p->exec_rep = NULL;
}

static void proc_exited(struct proc *p)
{
	struct sbx *s = p->s;
	uint64_t oom = cordon_sandbox_oom_kills(s->rt);
	p->oom = p->ex.signal == SIGKILL && oom > s->oom_base;
	if (oom > s->oom_base) {
		metric_inc(M_OOM_KILLS);
		event_raise(EVK_OOM, s, json_pack("{s:I, s:I, s:b}", "process", (json_int_t)p->ch.id, "pid",
						  (json_int_t)p->pid, "killed", p->oom));
	}
	s->oom_base = oom;
	if (p->ex.timed_out) {
		metric_inc(M_PROC_TIMEOUTS);
		event_raise(EVK_TIMEOUT, s, json_pack("{s:s, s:I, s:I}", "what", "process", "process",
						      (json_int_t)p->ch.id, "pid", (json_int_t)p->pid));
	}
	p->exited = true;
	if (p->watchdog)
		evtimer_del(p->watchdog);
	sbx_audit(s, AUDIT_PROCESS_EXIT,
		  json_pack("{s:I, s:I, s:i, s:i, s:b, s:b, s:I, s:I}", "process", (json_int_t)p->ch.id,
			    "pid", (json_int_t)p->pid, "code",
			    p->ex.signal ? -1 : (int)p->ex.code, "signal", (int)p->ex.signal, "oom",
			    p->oom, "timed_out", p->ex.timed_out != 0, "duration_ms",
			    (json_int_t)(now_ms() - p->started_ms), "bytes_out",
			    (json_int_t)p->bytes_out));
	if (p->exec_rep)
		exec_reply(p);
	broadcast(p, exit_event(p));
	while (p->subs)
		sub_end(p, p->subs, NULL, 0);
	void (*ready_exit)(struct sbx *, bool) = p->ready_exit;
	bool ok = !p->ex.signal && p->ex.code == 0;
	if (p->hooks)
		p->hooks->exited(p->hooks->arg);
	if (p->exec || p->own)
		proc_free(p);
	else
		forget_old_exited(s);
	if (ready_exit)
		ready_exit(s, ok); /* last: it may destroy the sandbox */
}

static void on_watchdog(evutil_socket_t fd, short what, void *arg)
{
	struct proc *p = arg;
	if (!sbx_watchdog_defer(p->s, p->watchdog))
		sbx_agent_failed(p->s, "a process outlived its timeout");
}

/* ---- frames from the agent ---- */

static void output(struct proc *p, int which, const struct frame *f)
{
	struct frame_data d;
	if (frame_msg_parse(f->type, f->payload, f->len, &d) < 0)
		return;
	p->bytes_out += d.len;
	if (p->own) {
		if (p->hooks)
			p->hooks->output(p->hooks->arg, which, d.data, d.len);
		return;
	}
	if (p->exec) {
		size_t have = evbuffer_get_length(p->out[which]);
		size_t room = have < D.cfg.max_output ? D.cfg.max_output - have : 0;
		evbuffer_add(p->out[which], d.data, d.len < room ? d.len : room);
		p->trunc[which] |= d.len > room;
		return;
	}
	if (!p->subs)
		return;
	size_t n;
	_cleanup_free_ char *b64 = base64_encode(d.data, d.len, &n);
	if (b64)
		broadcast(p, json_pack("{s:s, s:I, s:s}", "type", which ? "stderr" : "stdout", "pid",
				       (json_int_t)p->pid, "data", b64));
	flow_update(p);
}

/* Whether the agent could not start a process for want of a resource the sandbox is limited
 * in (its pids limit, open files): that is the quota, answered as such, not an exit code. */
static bool spawn_quota(uint32_t errnum)
{
	return errnum == EAGAIN || errnum == EMFILE || errnum == ENFILE;
}

static void spawn_failed(struct proc *p, const struct frame *f)
{
	struct frame_error e;
	if (frame_msg_parse(f->type, f->payload, f->len, &e) < 0)
		e = (struct frame_error){.errnum = EIO};
	const char *msg = e.message ? e.message : strerror(e.errnum);
	if (p->hooks)
		p->hooks->spawned(p->hooks->arg, e.errnum ? (int)e.errnum : EIO);
	if (spawn_quota(e.errnum))
		rep_fail(p->exec ? &p->exec_rep : &p->start_rep, API_ERR_QUOTA_EXCEEDED,
			 "no room for another process in sandbox %s (%s): at most %u run at once, "
			 "and limits.pids (%u) counts every process and thread in it",
			 p->s->id, msg, MAX_PROCS, (unsigned)p->s->spec.pids);
	evbuffer_add_printf(p->out[1], "cordon: %s\n", msg);
	start_answer(p);
	if (!p->exec && p->subs) {
		size_t n;
		char line[FRAME_MAX_MESSAGE + 16];
		int len = snprintf(line, sizeof(line), "cordon: %s\n", msg);
		_cleanup_free_ char *b64 = base64_encode(line, len > 0 ? (size_t)len : 0, &n);
		if (b64)
			broadcast(p, json_pack("{s:s, s:I, s:s}", "type", "stderr", "pid", (json_int_t)0, "data", b64));
	}
	p->ex = (struct frame_exit){.code = e.errnum == ENOENT ? 127 : 126};
	proc_exited(p);
}

static int proc_frame(struct chan *ch, const struct frame *f)
{
	struct proc *p = OWNER_OF(ch, struct proc, ch);
	/* Nothing may follow EXIT but the ERROR of a STDIN or SIGNAL that crossed it on the way
	 * (the agent answers those ESRCH once the process is reaped). */
	if (p->exited)
		return f->type == FRAME_ERROR ? 0 : -EPROTO;
	switch (f->type) {
	case FRAME_SPAWNED: {
		struct frame_spawned sp;
		if (p->spawned || frame_msg_parse(f->type, f->payload, f->len, &sp) < 0 || sp.pid == 0)
			return -EPROTO;
		p->pid = sp.pid;
		p->spawned = true;
		if (p->hooks)
			p->hooks->spawned(p->hooks->arg, 0);
		else if (p->own) /* killed before it started */
			proc_own_kill(p);
		start_answer(p); /* only now is the answer 200 */
		broadcast(p, start_event(p));
		return 0;
	}
	case FRAME_STDOUT:
	case FRAME_STDERR:
		if (!p->spawned)
			return -EPROTO;
		output(p, f->type == FRAME_STDERR, f);
		return 0;
	case FRAME_EXIT:
		if (!p->spawned || frame_msg_parse(f->type, f->payload, f->len, &p->ex) < 0 ||
		    p->ex.signal > 64 || p->ex.code > 255)
			return -EPROTO;
		proc_exited(p);
		return 0;
	case FRAME_ERROR:
		if (!p->spawned)
			spawn_failed(p, f);
		else if (p->hooks)
			p->hooks->refused(p->hooks->arg); /* its stdin was: what it missed is lost */
		return 0; /* a refused STDIN or SIGNAL: the process goes on */
	default:
		return -EPROTO;
	}
}

static const struct chan_ops proc_chan = {.frame = proc_frame, .close = proc_close};

/* ---- starting ---- */

static size_t running(const struct sbx *s)
{
	size_t n = 0;
	for (const struct proc *p = s->procs; p; p = p->next)
		n += !p->exited;
	return n;
}

static bool env_named(const char *const *env, size_t n, const char *kv)
{
	size_t len = strcspn(kv, "=") + 1;
	for (size_t i = 0; i < n; i++)
		if (env[i] && strncmp(env[i], kv, len) == 0)
			return true;
	return false;
}

/* The environment of a process: its request's, then the sandbox's, then the defaults; the
 * first of a name wins (glibc's getenv reads the first). */
static size_t build_env(const struct sbx *s, const struct api_exec *e, const char **out)
{
	const char *defaults[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
				  e->user == CORDON_USER_ROOT ? "HOME=/root" : "HOME=/home/user",
				  "LANG=C.UTF-8", e->pty_set ? "TERM=xterm-256color" : "TERM=dumb"};
	size_t n = 0;
	for (size_t i = 0; i < e->env.n && n < FRAME_MAX_ENV; i++)
		out[n++] = e->env_strv[i];
	for (size_t i = 0; i < s->n_env && n < FRAME_MAX_ENV; i++)
		if (!env_named(out, n, s->env[i]))
			out[n++] = s->env[i];
	for (size_t i = 0; i < ELEMENTSOF(defaults) && n < FRAME_MAX_ENV; i++)
		if (!env_named(out, n, defaults[i]))
			out[n++] = defaults[i];
	out[n] = NULL;
	return n;
}

static json_t *env_names(const char *const *env, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_stringn(env[i], strcspn(env[i], "=")));
	return a;
}

static int send_stdin(struct sbx *s, uint32_t chan, const uint8_t *data, size_t len, bool eof)
{
	for (size_t off = 0; off < len;) {
		size_t n = len - off < FRAME_MAX_DATA ? len - off : FRAME_MAX_DATA;
		struct frame_data d = {data + off, (uint32_t)n};
		int r = sbx_send(s, FRAME_STDIN, chan, &d);
		if (r < 0)
			return r;
		off += n;
	}
	return eof ? sbx_send(s, FRAME_STDIN_CLOSE, chan, NULL) : 0;
}

/* Starts @e in @s: the record, then SPAWN; NULL with @err set if it could not be. */
static struct proc *proc_start(struct sbx *s, const struct api_exec *e, bool exec,
			       bool defer_record, struct svc_err *err)
{
	const char *home = e->user == CORDON_USER_ROOT ? "/root" : "/home/user";
	if (!e->cwd && s->workdir)
		home = s->workdir; /* the template's WORKDIR */
	struct proc *p = calloc(1, sizeof(*p));
	if (!p) {
		svc_fail(err, API_ERR_INTERNAL, "out of memory");
		return NULL;
	}
	*p = (struct proc){.s = s, .exec = exec, .user = e->user, .started_ms = now_ms(),
			   .t0_ms = now_ms(), .pty = e->pty_set && !exec};
	sbx_chan_add(s, &p->ch, &proc_chan);
	p->argv = json_array();
	for (size_t i = 0; i < e->argc; i++)
		json_array_append_new(p->argv, json_string(e->argv[i]));
	p->cwd = strdup(e->cwd ? e->cwd : home);
	p->tag = e->tag ? strdup(e->tag) : NULL;
	p->out[0] = evbuffer_new();
	p->out[1] = evbuffer_new();
	p->watchdog = evtimer_new(D.base, on_watchdog, p);
	p->next = s->procs;
	s->procs = p;
	if (!p->argv || !p->cwd || !p->out[0] || !p->out[1] || !p->watchdog ||
	    (e->tag && !p->tag)) {
		proc_free(p);
		svc_fail(err, API_ERR_INTERNAL, "out of memory");
		return NULL;
	}

	struct frame_spawn *sp = &spawn_msg;
	memset(sp, 0, sizeof(*sp));
	for (size_t i = 0; i < e->argc && i < FRAME_MAX_ARGV; i++)
		sp->argv[i] = e->argv[i];
	sp->argc = e->argc;
	sp->envc = build_env(s, e, sp->envp);
	sp->cwd = p->cwd;
	sp->user = e->user == CORDON_USER_ROOT ? FRAME_USER_ROOT : FRAME_USER_USER;
	sp->want_stdin = (!exec && !e->stdin_none) || e->stdin_data;
	p->stdin_closed = !sp->want_stdin;
	sp->timeout_ms = (uint64_t)e->timeout_s * 1000;
	if (p->pty) {
		sp->cols = e->pty.cols;
		sp->rows = e->pty.rows;
	}

	/* The record first: nothing runs that the audit log does not already show. */
	json_t *fields = json_pack("{s:I, s:O, s:s, s:s, s:o}", "process", (json_int_t)p->ch.id,
				   "argv", p->argv, "cwd", p->cwd, "user",
				   e->user == CORDON_USER_ROOT ? "root" : "user", "env_names",
				   env_names(sp->envp, sp->envc));
	if (fields && p->tag)
		json_object_set_new(fields, "tag", json_string(p->tag));
	if (fields && p->pty)
		json_object_set_new(fields, "pty", json_true());
	if (defer_record && !(p->record = fields)) {
		proc_free(p);
		svc_fail(err, API_ERR_INTERNAL, "out of memory");
		return NULL;
	}
	int r = defer_record ? 0 : sbx_audit_rc(s, AUDIT_PROCESS_START, fields);
	if (r < 0) { /* nothing runs unrecorded */
		proc_free(p);
		svc_fail_audit(err, r);
		return NULL;
	}
	r = sbx_send(s, FRAME_SPAWN, p->ch.id, sp);
	if (r >= 0 && exec && e->stdin_data)
		r = send_stdin(s, p->ch.id, (const uint8_t *)e->stdin_data, e->stdin_len, true);
	if (r < 0) {
		proc_free(p);
		svc_fail(err, api_error_from_errno(r), "could not start the process");
		return NULL;
	}
	metric_inc(M_EXECS);
	s->used = true;
	if (e->timeout_s) {
		uint64_t ms = (uint64_t)e->timeout_s * 1000 + AGENT_GRACE_MS;
		struct timeval tv = {ms / 1000, ms % 1000 * 1000};
		evtimer_add(p->watchdog, &tv);
	}
	return p;
}

int proc_spawn_template(struct sbx *s, json_t *argv, void (*ready_exit)(struct sbx *s, bool ok))
{
	bool ready_check = ready_exit != NULL;
	const char *args[FRAME_MAX_ARGV + 1];
	size_t n = 0, i;
	json_t *a;
	json_array_foreach(argv, i, a)
		if (json_is_string(a) && n < FRAME_MAX_ARGV)
			args[n++] = json_string_value(a);
	args[n] = NULL;
	if (n == 0)
		return -EINVAL;
	struct api_exec e = {.argv = args, .argc = n, .user = s->user_default,
			     .timeout_s = ready_check ? 10 : 0, .tag = ready_check ? "ready" : "start"};
	struct svc_err err; /* the daemon's own: nobody to tell but the caller */
	struct proc *p = proc_start(s, &e, ready_check, false, &err);
	if (!p)
		return -EIO;
	p->ready_exit = ready_exit;
	return 0;
}

struct proc *proc_spawn_own(struct sbx *s, const struct api_exec *e, const struct proc_hooks *h,
			    struct svc_err *err)
{
	if (running(s) >= MAX_PROCS) {
		svc_fail(err, API_ERR_QUOTA_EXCEEDED, "at most %d processes run at once", MAX_PROCS);
		return NULL;
	}
	struct proc *p = proc_start(s, e, false, s->pooled, err);
	if (p) {
		p->own = true;
		p->hooks = h;
	}
	return p;
}

int proc_own_record(struct proc *p)
{
	json_t *f = p->record;
	p->record = NULL;
	if (f)
		json_object_set_new(f, "pooled", json_true());
	return f ? sbx_audit_rc(p->s, AUDIT_PROCESS_START, f) : 0;
}

int proc_own_write(struct proc *p, const void *data, size_t len)
{
	return p->exited ? -EPIPE : send_stdin(p->s, p->ch.id, data, len, false);
}

void proc_own_kill(struct proc *p)
{
	struct frame_signal sig = {.signo = SIGKILL};
	p->hooks = NULL;
	if (p->spawned && !p->exited) /* else SPAWNED sends it, or nothing runs */
		sbx_send(p->s, FRAME_SIGNAL, p->ch.id, &sig);
}

int svc_proc_start(struct sbx *s, struct api_exec *e, bool exec, struct svc_reply *rp,
		   struct svc_err *err)
{
	if (running(s) >= MAX_PROCS)
		return svc_fail(err, API_ERR_QUOTA_EXCEEDED, "at most %d processes run at once",
				MAX_PROCS);
	if (!e->user_given && s->user_default_set)
		e->user = s->user_default; /* the template's USER */
	struct proc *p = proc_start(s, e, exec, false, err);
	if (!p)
		return -1;
	if (exec) {
		p->exec_rep = rp;
		p->base64 = e->encoding == API_ENCODING_BASE64;
	} else {
		p->start_rep = rp; /* answered at SPAWNED (a stream) or ERROR (maybe 429) */
	}
	rp->gone = exec ? on_exec_gone : on_start_gone;
	rp->gone_arg = p;
	return 0;
}

static json_t *proc_json(const struct proc *p)
{
	char t[40];
	json_t *o = json_pack("{s:I, s:O, s:s, s:s, s:s}", "pid", (json_int_t)p->pid, "argv",
			      p->argv, "cwd", p->cwd, "user",
			      p->user == CORDON_USER_ROOT ? "root" : "user", "started_at",
			      iso_time(p->started_ms, t));
	if (o && p->tag)
		json_object_set_new(o, "tag", json_string(p->tag));
	if (o && p->pty)
		json_object_set_new(o, "pty", json_true());
	return o;
}

json_t *svc_proc_list(struct sbx *s)
{
	json_t *a = json_array();
	for (struct proc *p = s->procs; p; p = p->next)
		if (p->spawned && !p->exited && !p->exec && !p->own)
			json_array_append_new(a, proc_json(p));
	return json_pack("{s:o}", "processes", a);
}

struct proc *svc_proc_find(struct sbx *s, const char *pid, struct svc_err *err)
{
	struct proc *p = proc_by_pid(s, pid);
	if (!p)
		svc_fail(err, API_ERR_NOT_FOUND, "no process %.16s in sandbox %s", pid, s->id);
	return p;
}

int svc_proc_stdin(struct proc *p, const struct api_stdin *in, struct svc_err *err)
{
	if (p->exited || p->stdin_closed)
		return svc_fail(err, API_ERR_CONFLICT, "stdin of process %u is closed", p->pid);
	int r = send_stdin(p->s, p->ch.id, in->data, in->len, in->eof);
	if (r < 0)
		return svc_fail(err, api_error_from_errno(r), "could not write to the process");
	p->stdin_closed = in->eof;
	return 0;
}

int svc_proc_signal(struct proc *p, int signo, struct svc_err *err)
{
	if (p->exited)
		return svc_fail(err, API_ERR_CONFLICT, "process %u has exited", p->pid);
	struct frame_signal sig = {.signo = (uint32_t)signo};
	int r = sbx_send(p->s, FRAME_SIGNAL, p->ch.id, &sig);
	if (r < 0)
		return svc_fail(err, api_error_from_errno(r), "could not signal the process");
	return 0;
}

int svc_proc_resize(struct proc *p, const struct api_winsize *w, struct svc_err *err)
{
	if (!p->pty)
		return svc_fail(err, API_ERR_NOT_A_TERMINAL, "process %u was not started with a pty",
				p->pid);
	if (p->exited)
		return svc_fail(err, API_ERR_CONFLICT, "process %u has exited", p->pid);
	struct frame_winsize ws = {.cols = w->cols, .rows = w->rows};
	int r = sbx_send(p->s, FRAME_RESIZE, p->ch.id, &ws);
	if (r < 0)
		return svc_fail(err, api_error_from_errno(r), "could not resize the terminal");
	return 0;
}

/* One event as an NDJSON line into @k, or into a buffer when @k is NULL. */
static void event_line(json_t *ev, struct stream_sink *k, struct evbuffer *buf)
{
	_cleanup_(json_decrefp) json_t *e = ev;
	_cleanup_free_ char *line = e ? json_dumps(e, JSON_COMPACT) : NULL;
	if (!line)
		return;
	size_t n = strlen(line);
	line[n] = '\n'; /* over the NUL: json_dumps leaves no room after it */
	if (k)
		k->write(k, line, n + 1);
	else if (buf)
		evbuffer_add(buf, line, n + 1);
}

/* An exited process: its exit event, the whole answer. A running one: its start event, then
 * everything it does, as a stream. */
void svc_proc_events(struct proc *p, struct svc_reply *rp)
{
	if (p->exited) {
		struct evbuffer *buf = evbuffer_new();
		event_line(exit_event(p), NULL, buf);
		rp->bytes(rp, "application/x-ndjson", buf);
		if (buf)
			evbuffer_free(buf);
		return;
	}
	if (open_stream(p, rp))
		event_line(start_event(p), p->subs->k, NULL);
}
