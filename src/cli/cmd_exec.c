/* cordon exec [OPTIONS] ID -- CMD [ARGS...]: run a command in a sandbox with live output.
 *
 * One streamed POST .../processes carries the process's events; beside it, on connections
 * of their own, our stdin goes to POST .../stdin and our SIGINT/SIGTERM/SIGHUP/SIGQUIT to
 * POST .../signal. The exit status is the command's. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include <cordon/cordon.h>

#include "basic/base64.h"
#include "basic/cleanup.h"
#include "basic/fileio.h"
#include "basic/log.h"
#include "basic/sigfd.h"
#include "cli/cli.h"
#include "cli/client.h"
#include "cli/tty.h"

#define STDIN_CHUNK (48 * 1024) /* 64 KiB of base64: well under the 1 MiB body limit */

struct exec_state {
	struct client c;
	char base[256]; /* /v1/sandboxes/<id>/processes */
	long long pid;	/* 0 until the start event */
	bool forward_stdin, stdin_open;
	bool tty; /* -t: a PTY inside, our terminal raw, SIGWINCH a resize */
	int pending_signal;
	bool exited;
	int timed_out, oom; /* jansson's "b" fills an int */
	int exit_code, signal;
};

/* ---- the side requests ---- */

/* POST .../<pid>/<what> with @req (borrowed); false when it failed (said why unless 409). */
static bool side_request(struct exec_state *st, const char *what, json_t *req)
{
	_cleanup_(client_response_done) struct client_response res = {};
	char path[320];

	snprintf(path, sizeof(path), "%s/%lld/%s", st->base, st->pid, what);
	int r = req ? client_json(&st->c, "POST", path, req, &res) : -ENOMEM;
	if (r < 0) {
		client_fail(&st->c, r);
		return false;
	}
	if (res.status == 409) /* the process is gone or closed its stdin: nothing to tell */
		return false;
	if (res.status >= 300) {
		client_api_error(&res);
		return false;
	}
	return true;
}

static void send_stdin(struct exec_state *st, const char *data, size_t len, bool eof)
{
	_cleanup_free_ char *b64 = malloc(4 * ((len + 2) / 3) + 1);
	_cleanup_(json_decrefp) json_t *req = NULL;

	if (!b64)
		return;
	base64_encode_to(data, len, b64);
	req = len ? json_pack("{s:s, s:b}", "data", b64, "eof", eof) : json_pack("{s:b}", "eof", 1);
	if (!side_request(st, "stdin", req) || eof)
		st->stdin_open = false;
}

static void send_signal(struct exec_state *st, int sig)
{
	_cleanup_(json_decrefp) json_t *req = json_pack("{s:i}", "signal", sig);
	side_request(st, "signal", req);
}

static void send_resize(struct exec_state *st)
{
	struct winsize ws;
	tty_size(STDIN_FILENO, &ws);
	_cleanup_(json_decrefp) json_t *req =
		json_pack("{s:i, s:i}", "cols", (int)ws.ws_col, "rows", (int)ws.ws_row);
	side_request(st, "resize", req);
}

static void pump_stdin(struct exec_state *st)
{
	_cleanup_free_ char *buf = malloc(STDIN_CHUNK);
	ssize_t n;

	if (!buf)
		return;
	do
		n = read(STDIN_FILENO, buf, STDIN_CHUNK);
	while (n < 0 && errno == EINTR);
	if (n < 0 && errno == EAGAIN)
		return;
	send_stdin(st, buf, n > 0 ? (size_t)n : 0, n <= 0);
}

/* ---- the event stream ---- */

static int on_output(const char *b64, int fd)
{
	size_t len = strlen(b64);
	_cleanup_free_ char *buf = malloc(len / 4 * 3 + 1);
	if (!buf)
		return -ENOMEM;
	ssize_t n = base64_decode_to(b64, len, buf);
	if (n < 0)
		return -EBADMSG;
	/* A closed stdout (| head) must not stop the process's other stream. */
	(void)write_all(fd, buf, (size_t)n);
	return 0;
}

static void on_start(struct exec_state *st, long long pid)
{
	st->pid = pid;
	/* Without our stdin the process reads EOF, as under `docker exec` without -i. */
	if (!st->forward_stdin)
		send_stdin(st, NULL, 0, true);
	if (st->pending_signal)
		send_signal(st, st->pending_signal);
}

static int on_event(char *line, size_t len, void *userdata)
{
	struct exec_state *st = userdata;
	_cleanup_(json_decrefp) json_t *ev = json_loadb(line, len, 0, NULL);
	const char *type = NULL, *data = NULL;
	json_int_t pid = 0;

	if (!ev || json_unpack(ev, "{s:s, s:I}", "type", &type, "pid", &pid) < 0)
		return -EBADMSG;
	if (strcmp(type, "start") == 0) {
		on_start(st, pid);
	} else if (strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0) {
		if (json_unpack(ev, "{s:s}", "data", &data) < 0)
			return -EBADMSG;
		fflush(stdout);
		return on_output(data, type[3] == 'o' ? STDOUT_FILENO : STDERR_FILENO);
	} else if (strcmp(type, "exit") == 0) {
		if (json_unpack(ev, "{s:i, s:i, s:b, s:b}", "exit_code", &st->exit_code, "signal",
				&st->signal, "timed_out", &st->timed_out, "oom", &st->oom) < 0)
			return -EBADMSG;
		st->exited = true;
	}
	return 0; /* unknown types: a newer daemon */
}

static void on_signal(struct exec_state *st, int sigfd)
{
	struct signalfd_siginfo si;
	while (read(sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		if (si.ssi_signo == SIGWINCH) {
			if (st->pid)
				send_resize(st);
			continue;
		}
		if (st->pid)
			send_signal(st, (int)si.ssi_signo);
		else
			st->pending_signal = (int)si.ssi_signo;
	}
}

static int block_signals(void)
{
	static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGWINCH};
	return sigfd_block(sigs, ELEMENTSOF(sigs));
}

/* Pumps the stream, our stdin and our signals until the stream ends. */
static int event_loop(struct exec_state *st, struct client_conn *conn, int sigfd)
{
	struct client_lines lines = {.cb = on_event, .userdata = st};
	int r;

	while ((r = client_pump(&st->c, conn, client_lines_sink, &lines)) == 0) {
		bool in = st->forward_stdin && st->stdin_open && st->pid;
		struct pollfd p[3] = {{client_fd(conn), POLLIN, 0},
				      {sigfd, POLLIN, 0},
				      {in ? STDIN_FILENO : -1, POLLIN, 0}};
		if (poll(p, 3, -1) < 0 && errno != EINTR) {
			r = -errno;
			break;
		}
		if (p[1].revents)
			on_signal(st, sigfd);
		if (p[2].revents)
			pump_stdin(st);
	}
	if (r > 0)
		r = client_lines_finish(&lines);
	client_lines_done(&lines);
	return r;
}

static bool stdin_wanted(void)
{
	struct stat st, null;
	if (isatty(STDIN_FILENO) || fstat(STDIN_FILENO, &st) < 0)
		return false;
	return !(S_ISCHR(st.st_mode) && stat("/dev/null", &null) == 0 && st.st_rdev == null.st_rdev);
}

static int exit_status(const struct exec_state *st)
{
	if (!st->exited) {
		log_error("exec: the event stream ended before process %lld exited", st->pid);
		return CLI_EXIT_API;
	}
	if (st->timed_out) {
		log_error("exec: process %lld timed out", st->pid);
		return CORDON_EXIT_TIMEOUT;
	}
	if (st->oom && st->signal == SIGKILL) {
		log_error("exec: out of memory: the sandbox hit its memory limit");
		return CORDON_EXIT_OOM;
	}
	return st->signal ? 128 + st->signal : st->exit_code;
}

static int exec_stream(struct exec_state *st, json_t *req)
{
	_cleanup_(client_conn_freep) struct client_conn *conn = NULL;
	_cleanup_(client_response_done) struct client_response res = {};
	_cleanup_free_ char *body = json_dumps(req, JSON_COMPACT);
	struct client_body b = {"application/json", body, body ? strlen(body) : 0, -1};
	_cleanup_close_ int sigfd = block_signals();

	if (!body || sigfd < 0)
		return CLI_EXIT_API;
	int r = client_open(&st->c, "POST", st->base, &b, &res, &conn);
	if (r < 0)
		return client_fail(&st->c, r);
	if (res.status != 200) {
		r = client_read_body(&st->c, conn, &res);
		return r < 0 ? client_fail(&st->c, r) : client_api_error(&res);
	}
	if (st->tty && tty_raw(STDIN_FILENO) < 0)
		st->tty = false; /* stdin is no terminal: the remote one works all the same */
	r = event_loop(st, conn, sigfd);
	tty_restore();
	fflush(stdout);
	if (r < 0 && r != -EBADMSG && !st->exited)
		return client_fail(&st->c, r);
	if (r == -EBADMSG)
		log_error("exec: malformed event from cordond");
	return exit_status(st);
}

/* -t: {"pty": {cols, rows}} of our terminal, and our TERM unless -e gave one. */
static int exec_tty(json_t *req, json_t *env)
{
	struct winsize ws;
	const char *term = getenv("TERM");
	tty_size(STDIN_FILENO, &ws);
	if (json_object_set_new(req, "pty", json_pack("{s:i, s:i}", "cols", (int)ws.ws_col, "rows",
						      (int)ws.ws_row)) < 0)
		return -ENOMEM;
	if (term && *term && !json_object_get(env, "TERM") &&
	    (json_object_set_new(env, "TERM", json_string(term)) < 0 ||
	     json_object_set(req, "env", env) < 0))
		return -ENOMEM;
	return 0;
}

/* The request of POST .../processes: the options and the command. */
static json_t *exec_request(const struct cli_values *v, const struct cli_args *a)
{
	_cleanup_(json_decrefp) json_t *req = json_object();
	_cleanup_(json_decrefp) json_t *env = cli_kv_json(&v->env, "env");
	json_t *argv = json_array();
	long long secs;
	int r = cli_seconds("timeout", v->timeout_ms, 0, &secs);

	if (!req || !env || json_object_set_new(req, "argv", argv) < 0 || (r < 0 && r != -ENOENT))
		return NULL;
	if (r == -ENOENT && v->tty) { /* a terminal session lasts as long as the sandbox */
		secs = 0;
		r = 0;
	}
	if ((r == 0 && json_object_set_new(req, "timeout_s", json_integer(secs)) < 0) ||
	    cli_set_string(req, "user", v->user) < 0 || cli_set_string(req, "cwd", v->workdir) < 0 ||
	    cli_set_string(req, "tag", v->tag) < 0 ||
	    (json_object_size(env) && json_object_set(req, "env", env) < 0))
		return NULL;
	for (int i = 0; i < a->n_rest; i++)
		if (json_array_append_new(argv, json_string(a->rest[i])) < 0) {
			log_error("exec: argument %d is not valid UTF-8", i + 1);
			return NULL;
		}
	return v->tty && exec_tty(req, env) < 0 ? NULL : TAKE_PTR(req);
}

int cmd_exec(int argc, char **argv)
{
	struct cli_values v;
	_cleanup_(cli_args_done) struct cli_args a = {};
	struct exec_state st = {.forward_stdin = stdin_wanted(), .stdin_open = true};

	char more[320];
	snprintf(more, sizeof(more),
		 "Options may come before or after ID; CMD starts at -- or at the first word\n"
		 "after ID that is not an option. DURATION: whole seconds here: 60, 90s, 5m.\n\n"
		 "exit status: CMD's; 128+N if it died of signal N; %d timed out, %d out of memory;\n"
		 "1 API error, 2 usage, 3 cordond unreachable.\n",
		 CORDON_EXIT_TIMEOUT, CORDON_EXIT_OOM);
	int r = cli_parse_cmd(CLI_EXEC, "exec [OPTIONS] ID [OPTIONS] [--] CMD [ARGS...]", more, argc,
			      argv, 1, 1, &v, &a);
	if (r != CLI_GO_ON)
		return r;
	if (cli_sandbox_path(st.base, sizeof(st.base), a.pos[0], "/processes") < 0)
		return CORDON_EXIT_USAGE;
	_cleanup_(json_decrefp) json_t *req = exec_request(&v, &a);
	if (!req || client_init(&st.c, v.socket) < 0)
		return CORDON_EXIT_USAGE;
	st.tty = v.tty;
	st.forward_stdin |= v.tty && isatty(STDIN_FILENO);
	return exec_stream(&st, req);
}
