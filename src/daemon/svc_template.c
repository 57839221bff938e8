/* The template service (service.h): list, inspect, remove, and build. No HTTP here: the
 * route table (v1.c) parses and renders; a removal answers through a svc_reply, a build's
 * events go to a stream_sink.
 *
 * Reads (GET) go to the store (image/store.h) directly: they read small files. What changes
 * the store runs as a child, `cordon-template build|rm`, so that nothing here waits for the
 * store's lock or for a tree to be deleted: a build takes minutes, a removal of a large
 * template seconds, and a `cordon template gc` holds the store's lock as long as it likes.
 *
 * A build (POST /v1/templates) writes the recipe into a private directory (0700, under the
 * runtime directory), which is also the build's context: COPY through the API sees the
 * recipe and nothing else. The builder's --json events are passed on line by line as an
 * application/x-ndjson stream, then {"event":"exit","status":N}. The pipe is read from the
 * event loop without blocking; a reader that lags more than SUBSCRIBER_BACKLOG behind stops
 * the reading (the builder then blocks on its pipe) until the sink drains: no line is
 * dropped. A client that goes away (the sink's gone(), told at once of a hang-up) takes its
 * build with it: SIGTERM to the builder's process group, SIGKILL BUILD_KILL_GRACE_S later.
 * At most BUILD_MAX builds run at once.
 *
 * Building and removing change what every tenant's sandboxes run, so they are the unix
 * socket's alone; API keys (tenants) may read.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "basic/fdwatch.h"
#include "basic/fileio.h"
#include "basic/helper.h"
#include "basic/log.h"
#include "basic/tree.h"
#include "audit/audit.h"
#include "daemon/daemon.h"
#include "daemon/service.h"
#include "image/recipe.h"
#include "image/store.h"

/* Told when a template's name may point elsewhere (a build or removal ended, the store's
 * directory changed): the pool (create.c, through templates_watch()), which this file does
 * not otherwise know. */
static void (*on_names_changed)(void);

static void names_changed(void)
{
	if (on_names_changed)
		on_names_changed();
}

#define BUILD_MAX          2u          /* builds at once */
#define REMOVE_MAX         4u          /* removals at once */
#define CONTEXT_FILE       "context.tar"
#define BUILD_MAX_ARGS     API_MAX_KV  /* build_args entries (api_build_parse() checks) */
_Static_assert(API_MAX_RECIPE == RECIPE_MAX_BYTES, "the API takes what the builder reads");
#define BUILD_LINE_MAX     (1u << 20)  /* bytes of one event line from the builder */
#define BUILD_DRAIN_MAX    (4u << 20)  /* bytes read from the pipe after the builder exits */
#define BUILD_KILL_GRACE_S 5
#define REMOVE_OUTPUT_MAX  4096u       /* bytes of `cordon-template rm` output kept */
#define PIPE_READ          65536
#define RECIPE_FILE        "Cordonfile"
#define NAME_RULE          "must match ^[a-z0-9][a-z0-9._-]{0,63}$ and not be '" STORE_RESERVED "'"

enum job_kind { JOB_BUILD, JOB_REMOVE, _JOB_MAX };

/* One `cordon-template` child and the client it answers. */
struct job {
	enum job_kind kind;
	struct svc_reply *reply;    /* remove: the answer owed; NULL once given or its client gone */
	struct stream_sink *sink;   /* build: the events; NULL once ended or its reader gone */
	pid_t pid;                  /* 0 once reaped; also its process group */
	int pidfd, out;             /* out: read end of its stdout */
	struct event *exit_ev, *out_ev, *kill_ev;
	struct evbuffer *in;        /* output read and not yet passed on */
	struct evbuffer *pending;   /* build: whole lines the sink has not taken (its reader lags) */
	bool paused, eof, saw_error, overflow;
	char name[STORE_NAME_MAX + 1];
	char dir[PATH_MAX];         /* build: the recipe's private directory, removed with the job */
};

static unsigned n_jobs[_JOB_MAX];

/* ---- the child ---- */

static void job_remove_dir(struct job *j)
{
	if (!j->dir[0])
		return;
	int r = tree_remove_at(AT_FDCWD, j->dir, TREE_MAX_DEPTH);
	if (r < 0)
		log_warning("template %s: cannot remove %s: %s", j->name, j->dir, strerror(-r));
	j->dir[0] = '\0';
}

static void job_free(struct job *j)
{
	if (!j)
		return;
	struct event *evs[] = {j->exit_ev, j->out_ev, j->kill_ev};
	for (size_t i = 0; i < ELEMENTSOF(evs); i++)
		loop_event_free(evs[i]);
	if (j->pid > 0) { /* only on a failed start: the child has not been watched yet */
		kill(-j->pid, SIGKILL);
		(void)waitpid(j->pid, NULL, 0);
	}
	fd_close(j->pidfd);
	fd_close(j->out);
	if (j->in)
		evbuffer_free(j->in);
	if (j->pending)
		evbuffer_free(j->pending);
	job_remove_dir(j);
	n_jobs[j->kind]--;
	free(j);
}

static struct job *job_new(enum job_kind kind, const char *name)
{
	struct job *j = calloc(1, sizeof(*j));
	if (!j)
		return NULL;
	*j = (struct job){.kind = kind, .pidfd = -1, .out = -1};
	snprintf(j->name, sizeof(j->name), "%s", name);
	n_jobs[kind]++;
	j->in = evbuffer_new();
	j->pending = evbuffer_new();
	if (!j->in || !j->pending) {
		job_free(j);
		return NULL;
	}
	return j;
}

/* Starts @argv[0] (found as a helper) with stdin /dev/null, stdout a pipe whose read end
 * (non-blocking) is j->out, and stderr that pipe too if @stderr_out, else /dev/null. Nothing
 * else of ours crosses: fds 3 and up are closed, signals are reset, and the child leads a
 * process group of its own, so that a kill reaches what it started. posix_spawn() rather than
 * fork(): cordond has threads. */
static int job_spawn(struct job *j, char *const *argv, bool stderr_out)
{
	char path[PATH_MAX];
	int p[2];
	if (helper_path(argv[0], "CORDON_TEMPLATE", path, sizeof(path)) < 0)
		return -ENOENT;
	_cleanup_close_ int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null < 0 || pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	j->out = p[0];
	_cleanup_close_ int wr = p[1];
	if (fcntl(j->out, F_SETFL, O_NONBLOCK) < 0)
		return -errno;

	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	sigset_t none, all;
	sigemptyset(&none);
	sigfillset(&all);
	posix_spawn_file_actions_init(&fa);
	posix_spawnattr_init(&at);
	posix_spawn_file_actions_adddup2(&fa, null, 0);
	posix_spawn_file_actions_adddup2(&fa, wr, 1);
	posix_spawn_file_actions_adddup2(&fa, stderr_out ? wr : null, 2);
	posix_spawn_file_actions_addclosefrom_np(&fa, 3);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setsigdefault(&at, &all); /* SIGPIPE: we ignore it, the builder must not */
	posix_spawnattr_setpgroup(&at, 0);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
					      POSIX_SPAWN_SETPGROUP);
	int r = posix_spawn(&j->pid, path, &fa, &at, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	if (r != 0) {
		j->pid = 0;
		return -r;
	}
	j->pidfd = (int)syscall(SYS_pidfd_open, j->pid, 0);
	return j->pidfd < 0 ? -errno : 0;
}

static void job_signal(struct job *j, int sig)
{
	if (j->pid > 0) /* not reaped: the group id cannot have been reused */
		kill(-j->pid, sig);
}

static void on_kill_timer(evutil_socket_t fd, short what, void *arg)
{
	job_signal(arg, SIGKILL);
}

/* The client of a build has gone: so does the build. Its recipe directory goes now, not at
 * the reaping, which a stopping daemon does not wait for. */
static void build_abandon(struct job *j)
{
	struct timeval grace = {BUILD_KILL_GRACE_S, 0};
	job_signal(j, SIGTERM);
	if (j->kill_ev)
		evtimer_add(j->kill_ev, &grace);
	job_remove_dir(j);
}

/* ---- build: the builder's lines, as they come ---- */

static bool sink_lags(const struct job *j)
{
	return j->sink->backlog(j->sink) > SUBSCRIBER_BACKLOG;
}

static void pause_reading(struct job *j)
{
	if (!j->paused && j->out_ev) {
		j->paused = true;
		event_del(j->out_ev);
	}
}

/* Hands the pending lines to the sink unless its reader lags; then the pipe is not read
 * until the reader catches up (build_drained). Without a reader they are dropped. */
static void build_flush(struct job *j)
{
	size_t n = evbuffer_get_length(j->pending);
	if (!j->sink || !n) {
		evbuffer_drain(j->pending, n);
		return;
	}
	if (sink_lags(j)) {
		pause_reading(j);
		return;
	}
	int r = j->sink->write(j->sink, evbuffer_pullup(j->pending, -1), n);
	if (r == 0 || j->sink->backlog(j->sink) == 0) /* not watched: nothing to wait for */
		evbuffer_drain(j->pending, n);
	if (r < 0 || sink_lags(j))
		pause_reading(j);
}

static void build_drained(void *arg)
{
	struct job *j = arg;
	if (!j->paused || sink_lags(j))
		return;
	build_flush(j);
	if (!sink_lags(j) && !evbuffer_get_length(j->pending) && !j->eof && j->out_ev) {
		j->paused = false;
		event_add(j->out_ev, NULL);
	}
}

static void build_event(struct job *j, json_t *ev) /* steals @ev */
{
	_cleanup_(json_decrefp) json_t *e = ev;
	_cleanup_free_ char *s = e ? json_dumps(e, JSON_COMPACT) : NULL;
	if (s && j->sink)
		evbuffer_add_printf(j->pending, "%s\n", s);
}

/* Queues every complete line in j->in and flushes. The builder is ours, but what a RUN step
 * prints is not: its lines are JSON-escaped by the builder, and a line is bounded here. */
static void build_output(struct job *j)
{
	char *line;
	size_t len;
	if (!j->sink || j->overflow) {
		evbuffer_drain(j->in, evbuffer_get_length(j->in));
		return;
	}
	while ((line = evbuffer_readln(j->in, &len, EVBUFFER_EOL_LF))) {
		/* Inside a JSON string '"' is escaped: this matches only the key itself. */
		if (strstr(line, "\"event\":\"error\""))
			j->saw_error = true;
		if (len) {
			evbuffer_add(j->pending, line, len);
			evbuffer_add(j->pending, "\n", 1);
		}
		free(line);
	}
	if (evbuffer_get_length(j->in) > BUILD_LINE_MAX) {
		j->overflow = true;
		j->saw_error = true;
		evbuffer_drain(j->in, evbuffer_get_length(j->in));
		build_event(j, json_pack("{s:s, s:s}", "event", "error", "message",
					 "the builder wrote a line over 1 MiB; build stopped"));
		job_signal(j, SIGKILL);
	}
	build_flush(j);
}

/* The last lines, whatever the backlog, and the end of the stream. */
static void build_exited(struct job *j, int status)
{
	char msg[80];
	if (!j->sink)
		return;
	if (status != 0 && !j->saw_error) {
		snprintf(msg, sizeof(msg), "cordon-template ended with status %d", status);
		build_event(j, json_pack("{s:s, s:s}", "event", "error", "message", msg));
	}
	build_event(j, json_pack("{s:s, s:i}", "event", "exit", "status", status));
	size_t n = evbuffer_get_length(j->pending);
	j->sink->end(j->sink, n ? evbuffer_pullup(j->pending, -1) : NULL, n);
	j->sink = NULL;
}

/* The reader has gone: so does the build. Its recipe directory goes now, not at the
 * reaping, which a stopping daemon does not wait for. */
static void build_gone(void *arg)
{
	struct job *j = arg;
	j->sink = NULL;
	build_abandon(j);
}

/* ---- remove: the answer once `cordon-template rm` is done ---- */

static void remove_output(struct job *j)
{
	size_t n = evbuffer_get_length(j->in);
	if (n > REMOVE_OUTPUT_MAX) /* the message that matters is the last line */
		evbuffer_drain(j->in, n - REMOVE_OUTPUT_MAX);
}

/* The last line of what the child printed, without the "cordon: template: " of its log. */
static const char *remove_message(struct job *j, char *buf, size_t size)
{
	size_t n = evbuffer_get_length(j->in);
	evbuffer_copyout(j->in, buf, n < size ? n : size - 1);
	buf[n < size ? n : size - 1] = '\0';
	for (char *e = buf + strlen(buf); e > buf && (e[-1] == '\n' || e[-1] == ' '); e--)
		e[-1] = '\0';
	char *line = strrchr(buf, '\n') ? strrchr(buf, '\n') + 1 : buf;
	char *tail = strstr(line, "template: ");
	if (tail)
		line = tail + strlen("template: ");
	for (char *p = line; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
	return *line ? line : "cordon-template rm failed";
}

static void remove_exited(struct job *j, int status)
{
	char buf[REMOVE_OUTPUT_MAX + 1];
	struct cordon_err e = {};
	struct svc_err err = {};
	json_t *meta = NULL;
	if (!j->reply)
		return;
	if (status == 0)
		j->reply->json(j->reply, 204, NULL);
	else if (store_read(j->name, &meta, &e) == -ENOENT) /* gone meanwhile */
		svc_fail(&err, API_ERR_NOT_FOUND, "no template '%s'", j->name);
	else
		svc_fail(&err, API_ERR_INTERNAL, "remove template '%s': %s", j->name,
			 remove_message(j, buf, sizeof(buf)));
	if (status != 0)
		j->reply->error(j->reply, &err);
	json_decref(meta);
	j->reply = NULL;
}

static void remove_gone(void *arg)
{
	((struct job *)arg)->reply = NULL;
}

static const struct job_ops {
	void (*output)(struct job *j);           /* new bytes in j->in */
	void (*exited)(struct job *j, int status); /* answers the client, if still there */
} job_ops[_JOB_MAX] = {
	[JOB_BUILD] = {build_output, build_exited},
	[JOB_REMOVE] = {remove_output, remove_exited},
};

/* ---- the job in the event loop ---- */

enum read_result { READ_DATA, READ_AGAIN, READ_END };

/* Reads once from the pipe and hands what came to the job's kind. */
static enum read_result job_read(struct job *j)
{
	int n = evbuffer_read(j->in, j->out, PIPE_READ);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return READ_AGAIN;
	if (n <= 0) {
		j->eof = true;
		if (j->out_ev)
			event_del(j->out_ev);
		return READ_END;
	}
	job_ops[j->kind].output(j);
	return READ_DATA;
}

static void on_out(evutil_socket_t fd, short what, void *arg)
{
	job_read(arg);
}

/* What the child wrote before it exited may be in the pipe still. A grandchild that holds
 * the pipe open could write on, so this stops at what is there now, and at BUILD_DRAIN_MAX. */
static void job_drain(struct job *j)
{
	for (size_t total = 0; !j->eof && total < BUILD_DRAIN_MAX; total += PIPE_READ)
		if (job_read(j) != READ_DATA)
			break;
}

static void on_exit_ev(evutil_socket_t fd, short what, void *arg)
{
	struct job *j = arg;
	int st = 0;
	if (waitpid(j->pid, &st, WNOHANG) <= 0)
		return;
	j->pid = 0;
	job_drain(j);
	int status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	log_debug("template %s: cordon-template %s ended with status %d", j->name,
		  j->kind == JOB_BUILD ? "build" : "rm", status);
	job_ops[j->kind].exited(j, status);
	job_free(j);
	names_changed(); /* pooled sandboxes of the version a build or removal replaced retire */
}

/* Takes the started child into the loop. */
static int job_watch(struct job *j)
{
	j->exit_ev = loop_event_new(j->pidfd, EV_READ | EV_PERSIST, on_exit_ev, j);
	j->out_ev = loop_event_new(j->out, EV_READ | EV_PERSIST, on_out, j);
	j->kill_ev = evtimer_new(D.base, on_kill_timer, j);
	if (!j->exit_ev || !j->out_ev || !j->kill_ev || event_add(j->exit_ev, NULL) < 0 ||
	    event_add(j->out_ev, NULL) < 0)
		return -ENOMEM;
	return 0;
}

/* ---- the service ---- */

int svc_template_may_change(const struct svc_caller *who, const char *what, struct svc_err *err)
{
	if (!who->principal)
		return 0;
	return svc_fail(err, API_ERR_FORBIDDEN, "only the unix socket may %s templates", what);
}

static int name_check(const char *name, struct svc_err *err)
{
	if (name && store_name_valid(name))
		return 0;
	return svc_fail(err, API_ERR_INVALID_FIELD, "name: " NAME_RULE);
}

/* Records the request in the daemon-wide audit log, where there is one, before it is acted
 * on; -1 with @err set if the record could not be written (then nothing is done). */
static int template_audit(const struct svc_caller *who, const char *name, struct svc_err *err)
{
	if (!D.daemon_audit)
		return 0;
	_cleanup_(json_decrefp) json_t *f = json_pack(
		"{s:s, s:s, s:s, s:s}", "principal", who->principal ? who->principal->name : "local",
		"method", who->method, "path", who->path, "template", name);
	if (!f || audit_append(D.daemon_audit, NULL, AUDIT_API_CALL, f) < 0)
		return svc_fail(err, API_ERR_AUDIT_UNAVAILABLE, "cannot write the audit record");
	return 0;
}

int svc_template_list(json_t **ret, struct svc_err *err)
{
	struct cordon_err e = {};
	if (store_list(ret, &e) < 0)
		return svc_fail(err, API_ERR_INTERNAL, "%s", e.msg);
	return 0;
}

int svc_template_get(const char *name, json_t **ret, struct svc_err *err)
{
	struct cordon_err e = {};
	if (name_check(name, err) < 0)
		return -1;
	int r = store_read(name, ret, &e);
	if (r == -ENOENT)
		return svc_fail(err, API_ERR_NOT_FOUND, "no template '%s'", name);
	if (r < 0)
		return svc_fail(err, API_ERR_INTERNAL, "%s", e.msg);
	return 0;
}

static int remove_start(struct job *j, const char *name)
{
	char *argv[] = {"cordon-template", "rm", (char *)name, NULL};
	int r = job_spawn(j, argv, true);
	return r < 0 ? r : job_watch(j);
}

int svc_template_delete(const struct svc_caller *who, const char *name, struct svc_reply *rp,
			struct svc_err *err)
{
	struct cordon_err e = {};
	json_t *meta = NULL;
	if (svc_template_may_change(who, "remove", err) < 0 || name_check(name, err) < 0)
		return -1;
	int r = store_read(name, &meta, &e); /* a damaged template.json may still be removed */
	json_decref(meta);
	if (r == -ENOENT)
		return svc_fail(err, API_ERR_NOT_FOUND, "no template '%s'", name);
	if (n_jobs[JOB_REMOVE] >= REMOVE_MAX)
		return svc_fail(err, API_ERR_CAPACITY, "at most %u template removals run at once",
				REMOVE_MAX);
	if (template_audit(who, name, err) < 0)
		return -1;
	struct job *j = job_new(JOB_REMOVE, name);
	r = j ? remove_start(j, name) : -ENOMEM;
	if (r < 0) {
		job_free(j);
		return svc_fail(err, API_ERR_INTERNAL, "cannot run cordon-template: %s", strerror(-r));
	}
	j->reply = rp;
	rp->gone = remove_gone;
	rp->gone_arg = j;
	return 0;
}

/* ---- the build's child ---- */

/* The recipe into a new private directory under the runtime directory (the job's from now
 * on); its path into @path. */
static int write_recipe(struct job *j, const struct api_build *b, char *path, size_t size)
{
	if ((size_t)snprintf(j->dir, sizeof(j->dir), "%s/template-build-XXXXXX",
			     D.cfg.runtime_dir) >= sizeof(j->dir)) {
		j->dir[0] = '\0';
		return -ENAMETOOLONG;
	}
	if (!mkdtemp(j->dir)) { /* mode 0700 */
		j->dir[0] = '\0';
		return -errno;
	}
	if (b->context) {
		char ctx[sizeof(j->dir) + sizeof("/" CONTEXT_FILE)];
		snprintf(ctx, sizeof(ctx), "%s/" CONTEXT_FILE, j->dir);
		_cleanup_close_ int cfd = open(ctx, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		int r = cfd < 0 ? -errno : write_all(cfd, b->context, b->context_len);
		if (r < 0)
			return r;
	}
	snprintf(path, size, "%s/" RECIPE_FILE, j->dir);
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	return write_all(fd, b->recipe, strlen(b->recipe));
}

/* `cordon-template build NAME -f PATH --json --source api [--build-arg K=V]... [--no-cache]`. The
 * "K=V" strings are allocated into @kv (BUILD_MAX_ARGS entries), the caller's to free. */
static int build_argv(const struct api_build *b, const char *path, char **argv, char **kv,
		      char *ctx, size_t ctx_size)
{
	size_t n = 0, i = 0;
	argv[n++] = "cordon-template";
	argv[n++] = "build";
	argv[n++] = (char *)b->name;
	argv[n++] = "-f";
	argv[n++] = (char *)path;
	argv[n++] = "--json";
	argv[n++] = "--source";
	argv[n++] = "api"; /* the recipe's temporary path would name nothing */
	argv[n++] = "--confine"; /* no host path but the context's */
	for (; i < b->build_args.n; i++) {
		if (asprintf(&kv[i], "%s=%s", b->build_args.items[i].key, b->build_args.items[i].value) < 0) {
			kv[i] = NULL;
			return -ENOMEM;
		}
		argv[n++] = "--build-arg";
		argv[n++] = kv[i];
	}
	if (b->no_cache)
		argv[n++] = "--no-cache";
	if (b->context) {
		/* the archive beside the recipe, unpacked by the builder (libarchive, hostile-safe) */
		snprintf(ctx, ctx_size, "%.*s/" CONTEXT_FILE, (int)(strrchr(path, '/') - path), path);
		argv[n++] = "--context-tar";
		argv[n++] = ctx;
	}
	argv[n] = NULL;
	return 0;
}

static int build_start(const struct api_build *b, struct job *j)
{
	char path[sizeof(j->dir) + sizeof("/" RECIPE_FILE)];
	char ctx[sizeof(j->dir) + sizeof("/" CONTEXT_FILE)];
	char *argv[14 + 2 * BUILD_MAX_ARGS] = {NULL};
	char *kv[BUILD_MAX_ARGS] = {NULL};
	int r = write_recipe(j, b, path, sizeof(path));
	if (r >= 0)
		r = build_argv(b, path, argv, kv, ctx, sizeof(ctx));
	if (r >= 0)
		r = job_spawn(j, argv, false);
	for (size_t i = 0; i < BUILD_MAX_ARGS; i++)
		free(kv[i]);
	return r < 0 ? r : job_watch(j);
}

/* The build's events become @rp's stream, told at once when its reader hangs up. */
static int build_stream(struct job *j, struct svc_reply *rp)
{
	struct stream_sink *k = rp->stream(rp, "application/x-ndjson");
	if (!k)
		return -ENOMEM;
	j->sink = k;
	k->gone = build_gone;
	k->gone_arg = j;
	(void)k->watch(k, build_drained, j); /* without it: never paused */
	if (k->watch_hangup)
		k->watch_hangup(k);
	return 0;
}

int svc_template_build(const struct svc_caller *who, const struct api_build *b,
		       struct svc_reply *rp, struct svc_err *err)
{
	if (svc_template_may_change(who, "build", err) < 0)
		return -1;
	if (n_jobs[JOB_BUILD] >= BUILD_MAX)
		return svc_fail(err, API_ERR_CAPACITY, "at most %u template builds run at once",
				BUILD_MAX);
	if (template_audit(who, b->name, err) < 0)
		return -1;
	struct job *j = job_new(JOB_BUILD, b->name);
	int r = j ? build_start(b, j) : -ENOMEM;
	if (r >= 0)
		r = build_stream(j, rp);
	if (r < 0) {
		job_free(j);
		log_warning("template %s: cannot start the build: %s", b->name, strerror(-r));
		return svc_fail(err, API_ERR_INTERNAL, "cannot start the build: %s", strerror(-r));
	}
	return 0;
}

/* ---- the store's names, watched ----
 *
 * A rebuild or removal by the CLI (not through us) changes where a name points: the pool's
 * sandboxes of the old version are retired as soon as the store's top directory says so
 * (inotify), not only at the next create. A store that does not exist yet is looked for
 * again each time the pool is filled (one failing inotify_add_watch()). */

static void on_store_change(evutil_socket_t fd, short what, void *arg)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	bool names = false;
	ssize_t n;
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		for (ssize_t off = 0; off + (ssize_t)sizeof(struct inotify_event) <= n;) {
			const struct inotify_event *e = (const void *)(buf + off);
			names |= (e->mask & IN_Q_OVERFLOW) || (e->len && store_name_valid(e->name));
			off += sizeof(*e) + e->len;
		}
	if (names)
		names_changed();
}

void templates_watch(void (*changed)(void))
{
	on_names_changed = changed;
	static int fd = -1; /* both for the daemon's life */
	static struct event *ev;
	char dir[PATH_MAX];
	if (ev)
		return;
	if (fd < 0 && (fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) < 0)
		return;
	if (store_dir(dir, sizeof(dir)) < 0 ||
	    inotify_add_watch(fd, dir, IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_ONLYDIR) < 0)
		return; /* no store yet */
	ev = event_new(D.base, fd, EV_READ | EV_PERSIST, on_store_change, NULL);
	if (ev && event_add(ev, NULL) < 0) {
		event_free(ev);
		ev = NULL;
	}
}
