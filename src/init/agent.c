/* cordon-init --agent: the in-sandbox end of the host<->agent protocol.
 *
 * One poll() loop over the host stream, a signalfd for SIGCHLD, and the pipes of every process
 * it started. Memory is bounded by backpressure rather than by dropping data: while the queue
 * towards the host holds more than OUT_SOFT bytes the agent stops reading host frames, child
 * pipes and files, so a host that does not read stalls its own sandbox and nothing else. */
#ifndef _GNU_SOURCE
#endif
#include "init/agent.h"
#include "init/agent-int.h"
#include "init/preload.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/openat2.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/fsuid.h>
#include <sys/socket.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/statvfs.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "basic/buf.h"
#include "basic/clock.h"
#include "basic/tartree.h"
#include "lib/frame.h"
#include "lib/initproto.h"

/* ---- small helpers ---- */

void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

/* ---- output towards the host ---- */

/* Queues a frame. Running out of memory is fatal: the agent cannot keep its promises. */
void emit(struct agent *a, uint16_t type, uint32_t chan, const void *msg)
{
	ssize_t n = frame_build_size(type, msg);

	if (n < 0 || buf_reserve(&a->out, (size_t)n) < 0) {
		a->fatal = true;
		return;
	}
	n = frame_build(buf_tail(&a->out), (size_t)n, type, chan, msg);
	if (n < 0) {
		a->fatal = true;
		return;
	}
	a->out.len += (size_t)n;
}

void emit_error(struct agent *a, uint32_t chan, int err, const char *what)
{
	char msg[256];
	struct frame_error e = {.errnum = (uint32_t)err, .message = msg};

	snprintf(msg, sizeof(msg), "%s: %s", what, strerror(err));
	emit(a, FRAME_ERROR, chan, &e);
}

/* Reads up to @max bytes from @fd (at @off unless it is -1) straight into the output queue as
 * one @type frame. Returns the bytes read, 0 at EOF, or -errno. */
ssize_t emit_from_fd(struct agent *a, uint16_t type, uint32_t chan, int fd, size_t max,
			    off_t off)
{
	ssize_t n;

	if (buf_reserve(&a->out, FRAME_HDR_SIZE + max) < 0) {
		a->fatal = true;
		return -ENOMEM;
	}
	uint8_t *p = buf_tail(&a->out);
	do
		n = off < 0 ? read(fd, p + FRAME_HDR_SIZE, max)
			    : pread(fd, p + FRAME_HDR_SIZE, max, off);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n > 0) {
		frame_hdr_write(p, type, chan, (uint32_t)n);
		a->out.len += FRAME_HDR_SIZE + (size_t)n;
	}
	return n;
}

static void flush_out(struct agent *a)
{
	while (a->out.len > 0 && !a->host_gone) {
		ssize_t n = write(a->fd, a->out.p + a->out.head, a->out.len);
		if (n > 0) {
			buf_consume(&a->out, (size_t)n);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		a->host_gone = true; /* EPIPE, ECONNRESET: nobody is listening any more */
	}
}

bool out_room(const struct agent *a)
{
	return a->out.len < OUT_SOFT;
}

/* ---- processes ---- */

static struct proc *proc_find(struct agent *a, uint32_t chan)
{
	for (struct proc *p = a->procs; p; p = p->next)
		if (p->chan == chan)
			return p;
	return NULL;
}

static void proc_free(struct agent *a, struct proc *p)
{
	for (struct proc **pp = &a->procs; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	close_fd(&p->out_fd);
	close_fd(&p->err_fd);
	close_fd(&p->in_fd);
	close_fd(&p->pty_fd);
	buf_done(&p->inq);
	free(p);
	a->n_procs--;
}

/* Signals the process group (every spawn is a session leader), then the process itself in
 * case it left its group. Never called after the leader was reaped: its pid may be reused. */
static int proc_kill(struct proc *p, int signo)
{
	if (p->exited)
		return -ESRCH;
	int r = kill(-p->pid, signo);
	if (kill(p->pid, signo) < 0 && r < 0)
		return -errno;
	return 0;
}

/* The session of @sid (a PTY process): a shell's jobs are process groups of their own, so
 * SIGKILL goes to every process whose session is @sid, found in /proc. A process that made a
 * session of its own left it, as it could leave a group. */
static void session_kill(pid_t sid, int signo)
{
	DIR *d = opendir("/proc");
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		char path[64], stat[512];
		int fd, pid = atoi(e->d_name);
		if (pid <= 1 || pid == sid)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/stat", pid);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		ssize_t n = fd >= 0 ? read(fd, stat, sizeof(stat) - 1) : -1;
		if (fd >= 0)
			close(fd);
		/* "pid (comm) state ppid pgrp session": comm may hold anything, so after the last ')' */
		char *rp = n > 0 ? (stat[n] = '\0', strrchr(stat, ')')) : NULL;
		int ppid, pgrp, session;
		char st;
		if (rp && sscanf(rp + 1, " %c %d %d %d", &st, &ppid, &pgrp, &session) == 4 &&
		    session == sid)
			(void)kill(pid, signo);
	}
	closedir(d);
}

static int proc_signal(struct proc *p, int signo)
{
	int r = proc_kill(p, signo);
	if (r == 0 && p->pty_fd >= 0 && signo == SIGKILL)
		session_kill(p->pid, signo);
	return r;
}

struct exec_failure {
	int step;
	int err;
};

enum { STEP_STDIO = 1, STEP_CREDS, STEP_CWD, STEP_EXEC };
static const char *const step_names[] = {"", "stdio", "credentials", "chdir", "execve"};

/* The capabilities of our bounding set: one PR_CAPBSET_READ each up to the kernel's last,
 * read once. agent_setup() reads it, so that each child drops from it rather than reading 41
 * capabilities again on every exec (a child runs in our memory: it must find it read). */
static uint64_t bounding_set(void)
{
	static uint64_t set;
	static bool known;
	if (known)
		return set;
	for (int c = 0; c < 64; c++) {
		int in = prctl(PR_CAPBSET_READ, c, 0, 0, 0);
		if (in < 0)
			break; /* past the kernel's last capability */
		if (in == 1)
			set |= CAP_BIT(c);
	}
	known = true;
	return set;
}

int init_creds_drop(uid_t uid, gid_t gid, uint64_t keep)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[2] = {0};

	/* setgroups is denied in a user namespace whose setgroups file says "deny"; the
	 * groups are then fixed by whoever built the namespace. */
	if (setgroups(0, NULL) < 0 && errno != EPERM)
		return -errno;
	/* Narrow the bounding set while CAP_SETPCAP is still ours, dropping only what is there
	 * (each drop is a credential change). EPERM: we hold no SETPCAP (tests outside a jail,
	 * as a user). */
	uint64_t drop = bounding_set() & ~keep;
	for (int c = 0; c < 64; c++)
		if ((drop & CAP_BIT(c)) && prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EPERM)
			break;
	if (setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0)
		return -errno;
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -errno;
	(void)prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
	/* uid 0 keeps its capabilities through setresuid: set them to @keep exactly. */
	d[0].permitted = d[0].effective = (uint32_t)keep;
	d[1].permitted = d[1].effective = (uint32_t)(keep >> 32);
	if (syscall(SYS_capset, &h, d) < 0) {
		/* We do not hold them (not in a jail): then nothing at all. */
		memset(d, 0, sizeof(d));
		if (syscall(SYS_capset, &h, d) < 0)
			return -errno;
	}
	return 0;
}

static int drop_privileges(uint32_t user)
{
	bool root = user == FRAME_USER_ROOT;
	/* Root gets the sandbox root's set (the jail left it to us beside our own), "user"
	 * nothing: what we start never holds more, even as uid 0 across exec. */
	return init_creds_drop(root ? 0 : FRAME_USER_UID, root ? 0 : FRAME_USER_GID,
			       root ? CAPS_SANDBOX_ROOT : 0);
}

/* execvpe() searches the PATH of the caller, not of @envp: search the child's own PATH. */
static int exec_search(char *const argv[], char *const envp[])
{
	const char *path = DEFAULT_PATH;
	char buf[PATH_MAX];
	int err = ENOENT;

	if (argv[0][0] == '\0')
		return -ENOENT;
	if (strchr(argv[0], '/')) {
		execve(argv[0], argv, envp);
		return -errno;
	}
	for (size_t i = 0; envp[i]; i++)
		if (strncmp(envp[i], "PATH=", 5) == 0)
			path = envp[i] + 5;
	for (const char *p = path;; p++) {
		const char *e = strchrnul(p, ':');
		int n = snprintf(buf, sizeof(buf), "%.*s%s%s", (int)(e - p), p, e > p ? "/" : "",
				 argv[0]);
		if (n > 0 && (size_t)n < sizeof(buf)) {
			execve(buf, argv, envp);
			if (errno == EACCES)
				err = EACCES;
			else if (errno != ENOENT && errno != ENOTDIR)
				return -errno;
		}
		if (*e == '\0')
			break;
		p = e;
	}
	return -err;
}

/* What the child is given, and where it says how it failed: with CLONE_VM it writes *fail in
 * our memory, and CLONE_VFORK holds us until it has exec'd (then *fail is untouched) or
 * exited. */
struct spawn_child {
	const struct frame_spawn *sp;
	char **envp;
	int in_r, out_w, err_w;
	bool tty;
	struct exec_failure *fail;
};

/* Runs in the child, on spawn_stack, in our memory while we are held: system calls and
 * functions over its own stack only, no allocation (the environment is made before, by
 * spawn_start), no signal handler of ours can run (there are none: SIGCHLD is a signalfd,
 * SIGPIPE ignored). Never returns: exec, or *fail set and _exit. */
static int child_exec(void *arg)
{
	const struct spawn_child *c = arg;
	const struct frame_spawn *sp = c->sp;
	int in_r = c->in_r, out_w = c->out_w, err_w = c->err_w;
	struct exec_failure f = {STEP_STDIO, 0};
	sigset_t none;
	int r = 0;

	signal(SIGPIPE, SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	setsid();

	/* a new session, and the PTY's slave (all three of in_r, out_w, err_w) its terminal */
	if (c->tty && ioctl(in_r, TIOCSCTTY, 0) < 0)
		goto fail;
	/* move everything above 2 first so the dup2()s below cannot clobber each other */
	in_r = fcntl(in_r, F_DUPFD_CLOEXEC, 3);
	out_w = fcntl(out_w, F_DUPFD_CLOEXEC, 3);
	err_w = fcntl(err_w, F_DUPFD_CLOEXEC, 3);
	if (in_r < 0 || out_w < 0 || err_w < 0 || dup2(in_r, 0) < 0 || dup2(out_w, 1) < 0 ||
	    dup2(err_w, 2) < 0)
		goto fail;
	(void)close_range(3, ~0u, CLOSE_RANGE_CLOEXEC);

	f.step = STEP_CREDS;
	r = drop_privileges(sp->user);
	if (r < 0)
		goto fail_r;
	f.step = STEP_CWD;
	if (chdir(sp->cwd ? sp->cwd : "/") < 0)
		goto fail;
	umask(022);
	f.step = STEP_EXEC;
	r = exec_search((char *const *)sp->argv, c->envp);
	goto fail_r;
fail:
	r = -errno;
fail_r:
	f.err = -r;
	*c->fail = f;
	_exit(127);
}

/* The child's stack. One spawn at a time (we are one thread, held until the child execs),
 * so one stack serves them all; exec_search()'s path buffer is the largest thing on it. */
static _Alignas(16) char spawn_stack[64 << 10];

/* A vfork-like start (CLONE_VM | CLONE_VFORK, as posix_spawn does): no copy of our page
 * tables and no copy-on-write faults on either side, where fork() had both on every exec.
 * @slave: the PTY's slave for all of the child's stdio (then no pipes are made), or -1 for
 * pipes (fds: in, out, err, each read end then write end). */
static int spawn_start(const struct frame_spawn *sp, int slave, int fds[6], pid_t *ret_pid,
		       struct exec_failure *ret_fail)
{
	/* No stdin: /dev/null, or a pipe whose write end we close (also EOF) if there is none.
	 * Opened for each process: PID 1 holds nothing but its channel and its signalfd. */
	int nul = slave < 0 && !sp->want_stdin ? open("/dev/null", O_RDONLY | O_CLOEXEC) : -1;
	bool in_pipe = slave < 0 && nul < 0;
	for (int i = 0; slave < 0 && i < 6; i += 2)
		if ((i > 0 || in_pipe) && pipe2(fds + i, O_CLOEXEC) < 0) {
			close_fd(&nul);
			return -errno;
		}
	struct exec_failure fail = {0};
	struct spawn_child c = {.sp = sp, .envp = preload_env((char *const *)sp->envp),
				.in_r = slave >= 0 ? slave : in_pipe ? fds[0] : nul,
				.out_w = slave >= 0 ? slave : fds[3],
				.err_w = slave >= 0 ? slave : fds[5], .tty = slave >= 0, .fail = &fail};
	pid_t pid = clone(child_exec, spawn_stack + sizeof(spawn_stack),
			  CLONE_VM | CLONE_VFORK | SIGCHLD, &c);
	int r = pid < 0 ? -errno : 0;
	preload_env_free(c.envp, (char *const *)sp->envp);
	close_fd(&nul);
	close_fd(&fds[0]);
	close_fd(&fds[3]);
	close_fd(&fds[5]);
	if (r < 0)
		return r;
	*ret_pid = pid;
	if (fail.step != 0) {
		*ret_fail = fail;
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		return -ECHILD;
	}
	return 0;
}

/* Says what could not be run, as a shell would ("command not found: foo"): the host shows it
 * to the person who asked. Names are cut so that the message fits its frame. */
static void spawn_error(struct agent *a, uint32_t chan, const struct frame_spawn *sp,
			const struct exec_failure *fail)
{
	char msg[FRAME_MAX_MESSAGE - 1];
	int err = fail->err > 0 ? fail->err : EIO;
	const char *cmd = sp->argv[0], *cwd = sp->cwd ? sp->cwd : "/";

	if (fail->step == STEP_EXEC && err == ENOENT)
		snprintf(msg, sizeof(msg), "command not found: %.200s", cmd);
	else if (fail->step == STEP_EXEC)
		snprintf(msg, sizeof(msg), "cannot run '%.200s': %s", cmd, strerror(err));
	else if (fail->step == STEP_CWD)
		snprintf(msg, sizeof(msg), "cannot change to directory '%.200s': %s", cwd,
			 strerror(err));
	else
		snprintf(msg, sizeof(msg), "SPAWN %s: %s",
			 fail->step > 0 && fail->step <= STEP_EXEC ? step_names[fail->step] : "?",
			 strerror(err));
	emit(a, FRAME_ERROR, chan, &(struct frame_error){.errnum = (uint32_t)err, .message = msg});
}


#ifndef TIOCGPTPEER
#define TIOCGPTPEER _IO('T', 0x41)
#endif

static int winsize_set(int master, uint32_t cols, uint32_t rows)
{
	struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};

	if (cols == 0 || rows == 0 || cols > FRAME_MAX_PTY_DIM || rows > FRAME_MAX_PTY_DIM)
		return -EINVAL;
	return ioctl(master, TIOCSWINSZ, &ws) < 0 ? -errno : 0;
}

/* The slave of @master: TIOCGPTPEER (no path to race), else /dev/pts/N. */
static int pty_slave(int master)
{
	int fd = ioctl(master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
	unsigned n;
	char path[32];

	if (fd >= 0)
		return fd;
	if (ioctl(master, TIOCGPTN, &n) < 0)
		return -errno;
	snprintf(path, sizeof(path), "/dev/pts/%u", n);
	fd = open(path, O_RDWR | O_NOCTTY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/* A PTY of the sandbox's own devpts (the jail mounts a newinstance with ptmxmode=0666),
 * opened with the fsuid of @user so that its slave is that user's. Sets *@ret_slave. */
static int pty_open(struct agent *a, const struct frame_spawn *sp, int *ret_slave)
{
	int master, slave, unlock = 0, r = fs_become(a, sp->user);

	if (r < 0)
		return r;
	master = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
	r = master < 0 ? -errno : 0;
	fs_restore(a);
	if (r < 0)
		return r;
	if (ioctl(master, TIOCSPTLCK, &unlock) < 0 ||
	    (r = winsize_set(master, sp->cols, sp->rows)) < 0 || (r = pty_slave(master)) < 0) {
		r = r < 0 ? r : -errno;
		close(master);
		return r;
	}
	slave = r;
	*ret_slave = slave;
	return master;
}

/* Where the process's stdio goes on our side: a PTY's master serves as its stdout and stdin
 * (dups, so that either can be closed alone), or the pipes' ends. */
static void proc_set_stdio(struct proc *p, const struct frame_spawn *sp, int master, int fds[6])
{
	if (master >= 0) {
		p->pty_fd = master;
		p->out_fd = fcntl(master, F_DUPFD_CLOEXEC, 3);
		p->in_fd = fcntl(master, F_DUPFD_CLOEXEC, 3);
		return;
	}
	p->out_fd = fds[2];
	p->err_fd = fds[4];
	p->in_fd = fds[1];
	if (!sp->want_stdin)
		close_fd(&p->in_fd);
}

static int do_spawn(struct agent *a, uint32_t chan, void *m)
{
	const struct frame_spawn *sp = m;
	int fds[6] = {-1, -1, -1, -1, -1, -1}; /* in, out, err: read, write */
	struct exec_failure fail = {0};
	struct proc *p = NULL;
	pid_t pid = -1;
	int r, master = -1, slave = -1;
	bool tty = sp->cols || sp->rows;

	if (proc_find(a, chan))
		return -EEXIST;
	if (a->n_procs >= MAX_PROCS)
		return -EAGAIN;
	if (sp->user > FRAME_USER_ROOT)
		return -EINVAL;
	if (tty && (master = pty_open(a, sp, &slave)) < 0)
		return master;
	p = calloc(1, sizeof(*p));
	if (!p) {
		close_fd(&master);
		close_fd(&slave);
		return -ENOMEM;
	}

	r = spawn_start(sp, slave, fds, &pid, &fail);
	close_fd(&slave);
	if (r < 0) {
		for (int i = 0; i < 6; i++)
			close_fd(&fds[i]);
		close_fd(&master);
		free(p);
		if (r == -ECHILD) {
			spawn_error(a, chan, sp, &fail);
			return 0;
		}
		return r;
	}

	*p = (struct proc){.chan = chan, .pid = pid, .out_fd = -1, .err_fd = -1, .in_fd = -1,
			   .pty_fd = -1, .status = 0};
	proc_set_stdio(p, sp, master, fds);
	(void)set_nonblock(p->out_fd);
	(void)set_nonblock(p->err_fd);
	if (p->in_fd >= 0)
		(void)set_nonblock(p->in_fd);
	if (sp->timeout_ms > 0)
		p->deadline = mono_ms() + (sp->timeout_ms > UINT32_MAX * 1000ull
						   ? UINT32_MAX * 1000ull : sp->timeout_ms);
	p->next = a->procs;
	a->procs = p;
	a->n_procs++;

	struct frame_spawned s = {.pid = (uint32_t)pid};
	emit(a, FRAME_SPAWNED, chan, &s);
	return 0;
}

static void stdin_flush(struct proc *p)
{
	while (p->in_fd >= 0 && p->inq.len > 0) {
		ssize_t n = write(p->in_fd, p->inq.p + p->inq.head, p->inq.len);
		if (n > 0) {
			buf_consume(&p->inq, (size_t)n);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		/* EPIPE: the process closed its stdin; what was queued can go nowhere */
		buf_done(&p->inq);
		close_fd(&p->in_fd);
	}
	if (p->in_close && p->inq.len == 0)
		close_fd(&p->in_fd);
}

static int do_stdin(struct agent *a, uint32_t chan, void *m)
{
	const struct frame_data *d = m;
	struct proc *p = proc_find(a, chan);

	if (!p)
		return -ESRCH;
	if (p->in_fd < 0 || p->in_close)
		return -EPIPE;
	/* the host paces stdin; refusing is better than holding unbounded memory */
	if (p->inq.len + d->len > STDIN_QUEUE_MAX)
		return -ENOBUFS;
	if (buf_reserve(&p->inq, d->len) < 0)
		return -ENOMEM;
	memcpy(buf_tail(&p->inq), d->data, d->len);
	p->inq.len += d->len;
	stdin_flush(p);
	return 0;
}

static int do_stdin_close(struct agent *a, uint32_t chan, void *m)
{
	struct proc *p = proc_find(a, chan);

	if (!p)
		return -ESRCH;
	p->in_close = true;
	stdin_flush(p);
	return 0;
}

/* PAUSE and RESUME: per-process flow control for a host whose reader of this process is
 * behind. A paused process blocks on its full pipe, and nothing else waits: other processes
 * and file requests share the stream but not the pause. Once the process is reaped its pipes
 * are drained anyway (at most a pipe's worth), so that EXIT is never held back. A process
 * that is gone is no error: its EXIT may be on the way. */
static int pause_set(struct agent *a, uint32_t chan, bool paused)
{
	struct proc *p = proc_find(a, chan);
	struct aport *pt = p ? NULL : port_find(a, chan);
	if (p)
		p->paused = paused;
	if (pt)
		pt->paused = paused;
	return 0;
}

static int do_pause(struct agent *a, uint32_t chan, void *m)
{
	return pause_set(a, chan, true);
}

static int do_resume(struct agent *a, uint32_t chan, void *m)
{
	return pause_set(a, chan, false);
}

static int do_signal(struct agent *a, uint32_t chan, void *m)
{
	const struct frame_signal *s = m;
	struct proc *p = proc_find(a, chan);

	if (!p)
		return -ESRCH;
	if (s->signo < 1 || s->signo >= (uint32_t)NSIG)
		return -EINVAL;
	return proc_signal(p, (int)s->signo);
}

/* RESIZE: the kernel sends SIGWINCH to the terminal's foreground group itself. */
static int do_resize(struct agent *a, uint32_t chan, void *m)
{
	const struct frame_winsize *w = m;
	struct proc *p = proc_find(a, chan);

	if (!p)
		return -ESRCH;
	if (p->pty_fd < 0)
		return -ENOTTY;
	return winsize_set(p->pty_fd, w->cols, w->rows);
}

/* Reads one chunk of a process's stdout (which 0) or stderr (1). Returns 1 if data was read,
 * 0 otherwise; closes the pipe at EOF, on error, and, once the process was reaped, when it
 * is empty (a background grandchild may hold it open for ever). */
static int pipe_read(struct agent *a, struct proc *p, int which)
{
	int *fd = which == 0 ? &p->out_fd : &p->err_fd;
	ssize_t n;

	if (*fd < 0)
		return 0;
	n = emit_from_fd(a, which == 0 ? FRAME_STDOUT : FRAME_STDERR, p->chan, *fd, PIPE_CHUNK,
			 -1);
	if (n > 0)
		return 1;
	if (n == -EAGAIN || n == -EWOULDBLOCK) {
		if (p->exited)
			close_fd(fd);
		return 0;
	}
	close_fd(fd);
	return 0;
}

static void reap(struct agent *a)
{
	struct signalfd_siginfo si;
	int status;
	pid_t pid = -1;

	while (read(a->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
		;
	/* as PID 1 (or subreaper) every orphan lands here: reap it, report only our own */
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		for (struct proc *p = a->procs; p; p = p->next)
			if (p->pid == pid && !p->exited) {
				p->exited = true;
				p->status = status;
				break;
			}
	}
}

/* Sends EXIT for reaped processes once their pipes are drained, and forgets them. */
static void finish_procs(struct agent *a)
{
	struct proc *next;

	for (struct proc *p = a->procs; p; p = next) {
		next = p->next;
		if (!p->exited)
			continue;
		while (out_room(a) && (pipe_read(a, p, 0) || pipe_read(a, p, 1)))
			;
		if (p->out_fd >= 0 || p->err_fd >= 0)
			continue;
		struct frame_exit e = {
			.code = WIFEXITED(p->status) ? (uint32_t)WEXITSTATUS(p->status) : 0,
			.signal = WIFSIGNALED(p->status) ? (uint32_t)WTERMSIG(p->status) : 0,
			.timed_out = p->timed_out,
		};
		emit(a, FRAME_EXIT, p->chan, &e);
		proc_free(a, p);
	}
}

static void check_timeouts(struct agent *a)
{
	uint64_t now = mono_ms();

	for (struct proc *p = a->procs; p; p = p->next)
		if (!p->exited && p->deadline && now >= p->deadline) {
			(void)proc_signal(p, SIGKILL);
			p->timed_out = true;
			p->deadline = 0;
		}
}

/* ---- files ---- */

/* openat2() with RESOLVE_NO_MAGICLINKS: /proc/<pid>/fd/N and friends would let a path escape
 * the permission checks of the user it is resolved for. */
int xopenat(int dirfd, const char *path, int flags, mode_t mode)
{
	static bool no_openat2;
	/* openat2() refuses O_NOCTTY (any flag but a few) together with O_PATH */
	int extra = (flags & O_PATH) ? O_CLOEXEC : O_CLOEXEC | O_NOCTTY;
	struct open_how how = {
		.flags = (uint64_t)(flags | extra),
		.mode = (flags & O_CREAT) ? mode : 0,
		.resolve = RESOLVE_NO_MAGICLINKS,
	};
	int fd;

	if (!no_openat2) {
		fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
		if (fd >= 0)
			return fd;
		if (errno != ENOSYS)
			return -errno;
		no_openat2 = true;
	}
	/* no openat2 (old kernel, or a seccomp policy that hides it): refuse every final
	 * symlink instead */
	fd = openat(dirfd, path, flags | extra | O_NOFOLLOW, mode);
	return fd < 0 ? -errno : fd;
}

int check_path(const char *path)
{
	return path && path[0] == '/' ? 0 : -EINVAL;
}

/* Opens a regular file for reading or writing. A FIFO, device or socket is refused before it
 * is opened for I/O (opening one can block or have side effects) and again after. */
static int open_regular(const char *path, int flags, mode_t mode)
{
	struct stat st;
	int fd, r;

	fd = xopenat(AT_FDCWD, path, O_PATH, 0);
	if (fd >= 0) {
		r = fstat(fd, &st) < 0 ? -errno : 0;
		close(fd);
		if (r < 0)
			return r;
		if (S_ISDIR(st.st_mode))
			return -EISDIR;
		if (!S_ISREG(st.st_mode))
			return -EINVAL;
	} else if (fd != -ENOENT || !(flags & O_CREAT)) {
		return fd;
	}

	fd = xopenat(AT_FDCWD, path, flags | O_NONBLOCK, mode);
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		r = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
		close(fd);
		return r;
	}
	return fd;
}

/* Splits @path into an O_PATH fd of its parent and its last component (in @buf). */
static int open_parent(const char *path, char buf[FRAME_MAX_PATH], const char **ret_name)
{
	size_t n = strlen(path);
	char *slash;
	int fd;

	if (check_path(path) < 0 || n >= FRAME_MAX_PATH)
		return -EINVAL;
	memcpy(buf, path, n + 1);
	while (n > 1 && buf[n - 1] == '/')
		buf[--n] = '\0';
	slash = strrchr(buf, '/');
	*ret_name = slash + 1;
	if (!strcmp(*ret_name, "") || !strcmp(*ret_name, ".") || !strcmp(*ret_name, ".."))
		return -EINVAL;
	if (slash == buf)
		fd = xopenat(AT_FDCWD, "/", O_PATH | O_DIRECTORY, 0);
	else {
		*slash = '\0';
		fd = xopenat(AT_FDCWD, buf, O_PATH | O_DIRECTORY, 0);
	}
	return fd;
}

static uint32_t file_type(mode_t m)
{
	static const struct {
		mode_t fmt;
		uint32_t type;
	} types[] = {
		{S_IFREG, FRAME_FT_FILE},   {S_IFDIR, FRAME_FT_DIR},   {S_IFLNK, FRAME_FT_SYMLINK},
		{S_IFIFO, FRAME_FT_FIFO},   {S_IFSOCK, FRAME_FT_SOCKET}, {S_IFCHR, FRAME_FT_CHAR},
		{S_IFBLK, FRAME_FT_BLOCK},
	};
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if ((m & S_IFMT) == types[i].fmt)
			return types[i].type;
	return FRAME_FT_OTHER;
}

static void emit_info(struct agent *a, uint32_t chan, const char *name, const char *target,
		      const struct stat *st)
{
	struct frame_file_info fi = {
		.name = name,
		.target = target,
		.type = file_type(st->st_mode),
		.mode = st->st_mode & 07777,
		.size = (uint64_t)st->st_size,
		.mtime_ns = (uint64_t)st->st_mtim.tv_sec * 1000000000ull +
			    (uint64_t)st->st_mtim.tv_nsec,
		.uid = st->st_uid,
		.gid = st->st_gid,
	};
	emit(a, FRAME_FILE_INFO, chan, &fi);
}

static int write_all(int fd, const uint8_t *p, size_t n, uint64_t off, bool append)
{
	while (n > 0) {
		ssize_t w = append ? write(fd, p, n) : pwrite(fd, p, n, (off_t)off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		p += w;
		n -= (size_t)w;
		off += (uint64_t)w;
	}
	return 0;
}

static int do_file_write(struct agent *a, uint32_t chan, void *m)
{
	const struct frame_file *f = m;
	int flags = O_WRONLY;
	int fd, r;

	if (check_path(f->path) < 0 || (f->flags & ~FRAME_WRITE_ALL) || f->offset > INT64_MAX)
		return -EINVAL;
	flags |= (f->flags & FRAME_WRITE_CREATE) ? O_CREAT : 0;
	flags |= (f->flags & FRAME_WRITE_EXCL) ? O_CREAT | O_EXCL : 0;
	flags |= (f->flags & FRAME_WRITE_TRUNC) ? O_TRUNC : 0;
	flags |= (f->flags & FRAME_WRITE_APPEND) ? O_APPEND : 0;
	/* no setuid/setgid/sticky through the API */
	fd = open_regular(f->path, flags, f->mode ? (f->mode & 0777) : 0644);
	if (fd < 0)
		return fd;
	r = write_all(fd, f->data, f->data_len, f->offset, f->flags & FRAME_WRITE_APPEND);
	close(fd);
	if (r < 0)
		return r;
	struct frame_ok ok = {.size = f->data_len};
	emit(a, FRAME_OK, chan, &ok);
	return 0;
}

static int do_file_read(struct agent *a, uint32_t chan, void *m)
{
	const struct frame_file *f = m;
	int fd;

	if (check_path(f->path) < 0 || f->offset > INT64_MAX)
		return -EINVAL;
	if (a->n_reads >= MAX_READS)
		return -EBUSY;
	fd = open_regular(f->path, O_RDONLY, 0);
	if (fd < 0)
		return fd;
	a->reads[a->n_reads++] = (struct fread_job){
		.chan = chan, .fd = fd, .off = f->offset,
		.left = f->length ? f->length : UINT64_MAX, .status_fd = -1,
	};
	return 0;
}

static int drop_privileges(uint32_t user);

/* The verdict a child of archive_child() wrote before it exited: 0 or a positive errno. */
static int child_status(int fd)
{
	int32_t st = EIO;
	ssize_t n;
	while ((n = read(fd, &st, sizeof(st))) < 0 && errno == EINTR)
		;
	close(fd);
	return n == sizeof(st) ? st : EIO;
}

/* A child, as @user, that packs (@pack) or unpacks @path through the pipe end @io; its
 * verdict on @status. The agent's own fds are closed in it first. Returns its pid. */
static pid_t archive_child(uint32_t user, bool pack, const char *path, int io, int status)
{
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	if (dup2(io, 0) < 0 || dup2(status, 1) < 0)
		_exit(127);
	if (close_range(2, ~0u, 0) < 0) /* 5.9+; before, the agent's fds below 4096 */
		for (int fd = 2; fd < 4096; fd++)
			close(fd);
	int32_t r = drop_privileges(user);
	if (r == 0)
		r = pack ? tartree_pack(path, 0) : tartree_unpack(path, 0);
	r = -r;
	if (write(1, &r, sizeof(r)) < 0)
		_exit(127);
	_exit(0);
}

/* Two pipes (data, status) and the child between them; the agent's ends in @ret_io and
 * @ret_status. */
static int archive_start(uint32_t user, bool pack, const char *path, int *ret_io, int *ret_status)
{
	int io[2], st[2];
	if (pipe2(io, O_CLOEXEC) < 0)
		return -errno;
	if (pipe2(st, O_CLOEXEC) < 0) {
		close(io[0]);
		close(io[1]);
		return -errno;
	}
	pid_t pid = archive_child(user, pack, path, pack ? io[1] : io[0], st[1]);
	int err = errno;
	close(pack ? io[1] : io[0]);
	close(st[1]);
	if (pid < 0) {
		close(io[0 + !pack]);
		close(st[0]);
		return -err;
	}
	/* The child's pipes are polled with the processes': a child that is stopped or slow
	 * never blocks the agent. */
	if (set_nonblock(pack ? io[0] : io[1]) < 0 || (!pack && set_nonblock(st[0]) < 0)) {
		close(io[0]);
		close(st[0]);
		return -errno;
	}
	*ret_io = pack ? io[0] : io[1];
	*ret_status = st[0];
	return 0; /* reaped by the agent's SIGCHLD loop, as an orphan would be */
}

static int do_archive_read(struct agent *a, uint32_t chan, void *m)
{
	const struct frame_file *f = m;
	int io, st;
	if (check_path(f->path) < 0 || f->user > FRAME_USER_ROOT)
		return -EINVAL;
	if (a->n_reads >= MAX_READS)
		return -EBUSY;
	int r = archive_start(f->user, true, f->path, &io, &st);
	if (r < 0)
		return r;
	a->reads[a->n_reads++] = (struct fread_job){
		.chan = chan, .fd = io, .left = UINT64_MAX, .status_fd = st,
	};
	return 0;
}

static struct awrite_job *write_job(struct agent *a, uint32_t chan)
{
	for (unsigned i = 0; i < a->n_writes; i++)
		if (a->writes[i].chan == chan)
			return &a->writes[i];
	return NULL;
}

/* The child's verdict if it has given it: 0 or a positive errno; -EAGAIN: not yet. */
static int status_try(struct awrite_job *j)
{
	int32_t st;
	ssize_t n;
	while ((n = read(j->status_fd, &st, sizeof(st))) < 0 && errno == EINTR)
		;
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return -EAGAIN;
	close_fd(&j->status_fd);
	return n == sizeof(st) ? st : EIO;
}

static void write_job_drop(struct agent *a, struct awrite_job *j)
{
	close_fd(&j->fd);
	close_fd(&j->status_fd);
	buf_done(&j->q);
	*j = a->writes[--a->n_writes];
}

/* Moves the pending chunk into the child's pipe as far as it takes it, without waiting, and
 * answers it when it can: OK once it is all in (the END chunk: once the child says it is
 * done), ERROR with the child's verdict once it stopped reading. Returns 1 when the job is
 * over (and gone). */
static int write_progress(struct agent *a, struct awrite_job *j)
{
	while (j->q.len > 0 && j->fd >= 0) {
		ssize_t k = write(j->fd, j->q.p + j->q.head, j->q.len);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0; /* poll says when it takes more */
		if (k < 0) {
			close_fd(&j->fd); /* it stopped reading: its verdict says why */
			break;
		}
		buf_consume(&j->q, (size_t)k);
	}
	if (j->fd >= 0 && j->q.len == 0 && j->end)
		close_fd(&j->fd); /* EOF: the child finishes */
	if (j->fd < 0 && j->status_fd >= 0) {
		int st = status_try(j);
		if (st == -EAGAIN)
			return 0;
		j->err = st;
	}
	if (j->fd < 0)
		buf_consume(&j->q, j->q.len); /* nobody reads it any more */
	if (!j->pending || (j->fd >= 0 && j->q.len > 0) || (j->end && j->status_fd >= 0))
		return 0;
	j->pending = false;
	if (j->fd < 0 && j->err)
		emit_error(a, j->chan, j->err, "ARCHIVE_WRITE");
	else
		emit(a, FRAME_OK, j->chan, &(struct frame_ok){.size = j->q_size});
	if (!j->end)
		return 0;
	write_job_drop(a, j);
	return 1;
}

static void pump_writes(struct agent *a)
{
	for (unsigned i = 0; i < a->n_writes;)
		i += write_progress(a, &a->writes[i]) ? 0 : 1;
}

/* One chunk at a time (the host sends the next on this one's OK); the END chunk is answered
 * once the whole archive is unpacked. Nothing here waits for the child: a child its user
 * stopped blocks nobody. */
static int do_archive_write(struct agent *a, uint32_t chan, void *m)
{
	const struct frame_file *f = m;
	struct awrite_job *j = write_job(a, chan);
	if (check_path(f->path) < 0 || f->user > FRAME_USER_ROOT)
		return -EINVAL;
	if (j && j->pending)
		return -EBUSY; /* the host sends a chunk only once the last one is answered */
	if (!j) {
		if (a->n_writes >= MAX_WRITES)
			return -EBUSY;
		j = &a->writes[a->n_writes++];
		*j = (struct awrite_job){.chan = chan, .fd = -1, .status_fd = -1};
		int r = archive_start(f->user, false, f->path, &j->fd, &j->status_fd);
		if (r < 0)
			j->err = -r;
	}
	if (buf_add(&j->q, f->data, f->data_len) < 0) {
		a->fatal = true;
		return -ENOMEM;
	}
	j->q_size = f->data_len;
	j->end = f->flags & FRAME_ARCHIVE_END;
	j->pending = true;
	(void)write_progress(a, j);
	return 0;
}

/* Streams one chunk of every pending FILE_READ while the host keeps up. */
static void pump_reads(struct agent *a)
{
	for (unsigned i = 0; i < a->n_reads && out_room(a);) {
		struct fread_job *j = &a->reads[i];
		size_t max = j->left < FILE_CHUNK ? (size_t)j->left : FILE_CHUNK;
		bool pipe = j->status_fd >= 0;
		ssize_t n = emit_from_fd(a, FRAME_FILE_DATA, j->chan, j->fd, max, pipe ? -1 : (off_t)j->off);
		if (pipe && (n == -EAGAIN || n == -EWOULDBLOCK)) {
			i++; /* nothing yet: poll says when */
			continue;
		}
		if (n > 0) {
			j->off += (uint64_t)n;
			j->left -= (uint64_t)n;
			j->sent += (uint64_t)n;
			if (j->left > 0 && j->off <= INT64_MAX) {
				i++;
				continue;
			}
		}
		int st = pipe ? child_status(j->status_fd) : 0;
		if (n < 0 || st) {
			emit_error(a, j->chan, n < 0 ? (int)-n : st, pipe ? "ARCHIVE_READ" : "FILE_READ");
		} else {
			struct frame_ok ok = {.size = j->sent};
			emit(a, FRAME_OK, j->chan, &ok);
		}
		close(j->fd);
		*j = a->reads[--a->n_reads];
	}
}

static int do_file_stat(struct agent *a, uint32_t chan, void *m)
{
	const struct frame_file *f = m;
	char target[FRAME_MAX_PATH];
	struct stat st;
	int fd, r;

	if (check_path(f->path) < 0)
		return -EINVAL;
	/* The entry itself, as lstat(2) sees it: a symlink is reported, never followed. */
	fd = xopenat(AT_FDCWD, f->path, O_PATH | O_NOFOLLOW, 0);
	if (fd < 0)
		return fd;
	r = fstat(fd, &st) < 0 ? -errno : 0;
	ssize_t t = r == 0 && S_ISLNK(st.st_mode) ? readlinkat(fd, "", target, sizeof(target) - 1) : -1;
	close(fd);
	if (r < 0)
		return r;
	if (t >= 0)
		target[t] = '\0';
	const char *name = strrchr(f->path, '/') + 1;
	emit_info(a, chan, *name ? name : f->path, t >= 0 ? target : NULL, &st);
	return 0;
}

struct list_state {
	char rel[FRAME_MAX_PATH];
	uint64_t skip;   /* entries of the walk before this page (FILE_LIST's OFFSET) */
	uint64_t walked; /* entries the walk passed, skipped or listed */
	uint32_t count;
	size_t bytes;
	bool truncated;
	bool omitted; /* entries walked but not listed: their relative path is over FRAME_MAX_PATH */
};

/* Whether entry @e of @d is a directory, from d_type when the file system fills it in. */
static bool entry_is_dir(DIR *d, const struct dirent *e, const struct stat *st, bool have_st)
{
	struct stat tmp;
	if (have_st)
		return S_ISDIR(st->st_mode);
	if (e->d_type != DT_UNKNOWN)
		return e->d_type == DT_DIR;
	return fstatat(dirfd(d), e->d_name, &tmp, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(tmp.st_mode);
}

/* Emits the FILE_INFO of entry @e (whose path relative to the listed directory is in ls->rel);
 * false if it vanished. */
static bool list_emit(struct agent *a, uint32_t chan, DIR *d, const struct dirent *e,
		      struct list_state *ls, struct stat *st)
{
	char target[FRAME_MAX_PATH];
	const char *tp = NULL;

	if (fstatat(dirfd(d), e->d_name, st, AT_SYMLINK_NOFOLLOW) < 0)
		return false; /* raced with a removal */
	if (S_ISLNK(st->st_mode)) {
		ssize_t t = readlinkat(dirfd(d), e->d_name, target, sizeof(target) - 1);
		if (t >= 0) {
			target[t] = '\0';
			tp = target;
		}
	}
	emit_info(a, chan, ls->rel, tp, st);
	ls->count++;
	ls->bytes += FRAME_HDR_SIZE + 80 + strlen(ls->rel) + (tp ? strlen(tp) : 0);
	return true;
}

/* Walks @dfd depth-first in readdir order, which is stable for a directory nobody changes,
 * so a page can start where the last one stopped by skipping that many entries. */
static void list_dir(struct agent *a, uint32_t chan, int dfd, size_t rel_len, uint32_t depth,
		     struct list_state *ls)
{
	DIR *d = fdopendir(dfd);
	struct dirent *e;

	if (!d) {
		close(dfd);
		return;
	}
	while (!ls->truncated && (e = readdir(d))) {
		struct stat st;
		bool have_st = false;

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (ls->count >= LIST_MAX_ENTRIES || ls->bytes >= LIST_MAX_BYTES) {
			ls->truncated = true;
			break;
		}
		int n = snprintf(ls->rel + rel_len, sizeof(ls->rel) - rel_len, "%s%s",
				 rel_len ? "/" : "", e->d_name);
		ls->walked++;
		if (n < 0 || (size_t)n >= sizeof(ls->rel) - rel_len) {
			ls->rel[rel_len] = '\0'; /* a path no frame can carry: not listed, but said */
			ls->omitted |= ls->walked > ls->skip;
			continue;
		}
		if (ls->walked > ls->skip)
			have_st = list_emit(a, chan, d, e, ls, &st);
		if (depth > 1 && entry_is_dir(d, e, &st, have_st)) {
			int sub = openat(dirfd(d), e->d_name,
					 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub >= 0)
				list_dir(a, chan, sub, rel_len + (size_t)n, depth - 1, ls);
		}
		ls->rel[rel_len] = '\0';
	}
	closedir(d);
}

static int do_file_list(struct agent *a, uint32_t chan, void *m)
{
	const struct frame_file *f = m;
	struct list_state *ls;
	int fd;

	if (check_path(f->path) < 0 || f->depth > FRAME_MAX_LIST_DEPTH)
		return -EINVAL;
	fd = xopenat(AT_FDCWD, f->path, O_RDONLY | O_DIRECTORY, 0);
	if (fd < 0)
		return fd;
	ls = calloc(1, sizeof(*ls));
	if (!ls) {
		close(fd);
		return -ENOMEM;
	}
	ls->skip = f->offset;
	list_dir(a, chan, fd, 0, f->depth ? f->depth : 1, ls);
	/* SIZE: how far past OFFSET the walk got, so OFFSET + SIZE is where the next page starts */
	uint64_t passed = ls->walked > ls->skip ? ls->walked - ls->skip : 0;
	struct frame_ok ok = {.size = passed,
			      .flags = (ls->truncated ? FRAME_OK_TRUNCATED : 0) |
				       (ls->omitted ? FRAME_OK_OMITTED : 0)};
	emit(a, FRAME_OK, chan, &ok);
	free(ls);
	return 0;
}

static int mkdir_parents(const char *path, mode_t mode)
{
	char buf[FRAME_MAX_PATH];
	char *save = NULL;
	int dfd, r = 0;

	if (strlen(path) >= sizeof(buf))
		return -ENAMETOOLONG;
	strcpy(buf, path);
	dfd = xopenat(AT_FDCWD, "/", O_PATH | O_DIRECTORY, 0);
	if (dfd < 0)
		return dfd;
	for (char *c = strtok_r(buf, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
		if (mkdirat(dfd, c, mode) < 0 && errno != EEXIST) {
			r = -errno;
			break;
		}
		int nfd = xopenat(dfd, c, O_PATH | O_DIRECTORY, 0);
		close(dfd);
		dfd = nfd;
		if (dfd < 0)
			return dfd;
	}
	close(dfd);
	return r;
}

static int do_file_mkdir(struct agent *a, uint32_t chan, void *m)
{
	const struct frame_file *f = m;
	mode_t mode = f->mode ? (f->mode & 0777) : 0755;
	char buf[FRAME_MAX_PATH];
	const char *name;
	int dfd, r;

	if (check_path(f->path) < 0 || (f->flags & ~FRAME_MKDIR_PARENTS))
		return -EINVAL;
	if (f->flags & FRAME_MKDIR_PARENTS) {
		r = mkdir_parents(f->path, mode);
	} else {
		dfd = open_parent(f->path, buf, &name);
		if (dfd < 0)
			return dfd;
		r = mkdirat(dfd, name, mode) < 0 ? -errno : 0;
		close(dfd);
	}
	if (r < 0)
		return r;
	emit(a, FRAME_OK, chan, &(struct frame_ok){0});
	return 0;
}

static int do_file_move(struct agent *a, uint32_t chan, void *m)
{
	const struct frame_file *f = m;
	char sbuf[FRAME_MAX_PATH], dbuf[FRAME_MAX_PATH];
	const char *sname, *dname;
	int sfd, dfd, r;

	if (check_path(f->dst) < 0 || (f->flags & ~FRAME_MOVE_NOREPLACE))
		return -EINVAL;
	sfd = open_parent(f->path, sbuf, &sname);
	if (sfd < 0)
		return sfd;
	dfd = open_parent(f->dst, dbuf, &dname);
	if (dfd < 0) {
		close(sfd);
		return dfd;
	}
	if (f->flags & FRAME_MOVE_NOREPLACE)
		r = renameat2(sfd, sname, dfd, dname, RENAME_NOREPLACE);
	else
		r = renameat(sfd, sname, dfd, dname);
	r = r < 0 ? -errno : 0;
	close(sfd);
	close(dfd);
	if (r < 0)
		return r;
	emit(a, FRAME_OK, chan, &(struct frame_ok){0});
	return 0;
}

/* Empties the directory @name under @dfd, never following symlinks. Passes repeat until
 * nothing is left, since removing entries while reading a directory may skip some. */
static int remove_tree(int dfd, const char *name, int depth)
{
	bool again = true;
	int r = 0;

	if (depth > REMOVE_MAX_DEPTH)
		return -ELOOP;
	int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	while (again && r == 0) {
		struct dirent *e;
		again = false;
		rewinddir(d);
		while (r == 0 && (e = readdir(d))) {
			if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
				continue;
			again = true;
			if (unlinkat(fd, e->d_name, 0) == 0)
				continue;
			if (errno != EISDIR && errno != EPERM)
				r = -errno;
			else if ((r = remove_tree(fd, e->d_name, depth + 1)) == 0 &&
				 unlinkat(fd, e->d_name, AT_REMOVEDIR) < 0)
				r = -errno;
		}
	}
	closedir(d);
	return r;
}

static int do_file_remove(struct agent *a, uint32_t chan, void *m)
{
	const struct frame_file *f = m;
	char buf[FRAME_MAX_PATH];
	const char *name;
	int dfd, r = 0;

	if (f->flags & ~FRAME_REMOVE_RECURSIVE)
		return -EINVAL;
	dfd = open_parent(f->path, buf, &name);
	if (dfd < 0)
		return dfd;
	if (unlinkat(dfd, name, 0) < 0) {
		r = -errno;
		if (r == -EISDIR || r == -EPERM) {
			if (f->flags & FRAME_REMOVE_RECURSIVE)
				r = remove_tree(dfd, name, 0);
			else
				r = 0;
			if (r == 0 && unlinkat(dfd, name, AT_REMOVEDIR) < 0)
				r = -errno;
		}
	}
	close(dfd);
	if (r < 0)
		return r;
	emit(a, FRAME_OK, chan, &(struct frame_ok){0});
	return 0;
}

/* STATFS: how big the file system of PATH is and how much of it is used (the sandbox's
 * scratch disk for /tmp or /home/user), for the host's per-sandbox metrics. */
static int do_statfs(struct agent *a, uint32_t chan, void *m)
{
	const struct frame_file *f = m;
	struct statvfs sv;
	int fd = check_path(f->path) < 0 ? -EINVAL : xopenat(AT_FDCWD, f->path, O_PATH, 0);

	if (fd < 0)
		return fd;
	int r = fstatvfs(fd, &sv) < 0 ? -errno : 0;
	close(fd);
	if (r < 0)
		return r;
	struct frame_fs_usage u = {
		.total = (uint64_t)sv.f_blocks * sv.f_frsize,
		.used = (uint64_t)(sv.f_blocks - sv.f_bfree) * sv.f_frsize,
	};
	emit(a, FRAME_FS_USAGE, chan, &u);
	return 0;
}

/* File operations run with the fsuid/fsgid of the requesting user, so the API can touch only
 * what that user could. The agent is single-threaded, so this cannot leak into other work.
 * Where setfsuid() does not take (gVisor's Sentry keeps the fsuid equal to the euid), the
 * effective ids change instead, the saved ones staying root's to come back. */
static bool fs_by_euid;

static int fs_set(uid_t uid, gid_t gid)
{
	if (fs_by_euid)
		return setresgid(-1, gid, -1) < 0 || setresuid(-1, uid, -1) < 0 ? -errno : 0;
	setfsgid(gid);
	setfsuid(uid);
	/* setfsuid() reports no errors; read the values back */
	if ((uid_t)setfsuid((uid_t)-1) == uid && (gid_t)setfsgid((gid_t)-1) == gid)
		return 0;
	return -EPERM;
}

int fs_become(const struct agent *a, uint32_t user)
{
	uid_t uid = user == FRAME_USER_ROOT ? 0 : FRAME_USER_UID;
	gid_t gid = user == FRAME_USER_ROOT ? 0 : FRAME_USER_GID;

	if (user > FRAME_USER_ROOT)
		return -EINVAL;
	int r = fs_set(uid, gid);
	if (r < 0 && !fs_by_euid) {
		fs_by_euid = true;
		fs_set(a->uid, a->gid);
		r = fs_set(uid, gid);
	}
	if (r < 0)
		fs_set(a->uid, a->gid);
	return r;
}

void fs_restore(const struct agent *a)
{
	/* uid first: back to root before the gid may change again */
	if (fs_by_euid) {
		if (setresuid(-1, a->uid, -1) < 0 || setresgid(-1, a->gid, -1) < 0)
			abort(); /* never serve the next request with another user's ids */
		return;
	}
	setfsuid(a->uid);
	setfsgid(a->gid);
}

/* ---- dispatch ---- */

static int do_hello(struct agent *a, uint32_t chan, void *m)
{
	struct frame_hello h = {.version = FRAME_PROTOCOL_VERSION, .max_payload = FRAME_MAX_PAYLOAD};
	emit(a, FRAME_HELLO_OK, chan, &h);
	return 0;
}

static int do_ping(struct agent *a, uint32_t chan, void *m)
{
	emit(a, FRAME_PONG, chan, NULL);
	return 0;
}

static const struct handler {
	uint16_t type;
	bool as_user;
	int (*fn)(struct agent *a, uint32_t chan, void *msg);
} handlers[] = {
	{FRAME_HELLO, false, do_hello},
	{FRAME_PING, false, do_ping},
	{FRAME_SPAWN, false, do_spawn},
	{FRAME_STDIN, false, do_stdin},
	{FRAME_STDIN_CLOSE, false, do_stdin_close},
	{FRAME_SIGNAL, false, do_signal},
	{FRAME_RESIZE, false, do_resize},
	{FRAME_PAUSE, false, do_pause},
	{FRAME_RESUME, false, do_resume},
	{FRAME_FILE_WRITE, true, do_file_write},
	{FRAME_FILE_READ, true, do_file_read},
	{FRAME_FILE_STAT, true, do_file_stat},
	{FRAME_FILE_LIST, true, do_file_list},
	{FRAME_FILE_MKDIR, true, do_file_mkdir},
	{FRAME_FILE_MOVE, true, do_file_move},
	{FRAME_FILE_REMOVE, true, do_file_remove},
	{FRAME_STATFS, true, do_statfs},
	{FRAME_WATCH_OPEN, false, do_watch_open},
	{FRAME_WATCH_CLOSE, false, do_watch_close},
	{FRAME_PORT_OPEN, false, do_port_open},
	{FRAME_PORT_WRITE, false, do_port_write},
	{FRAME_PORT_CLOSE, false, do_port_close},
	/* A child of the agent, with the user's own credentials, does the work. */
	{FRAME_ARCHIVE_READ, false, do_archive_read},
	{FRAME_ARCHIVE_WRITE, false, do_archive_write},
};

/* Handles one host frame. A malformed payload is a protocol error (negative return); a request
 * that fails is answered with ERROR on its channel. */
static int dispatch(struct agent *a, const struct frame *f)
{
	void *msg = f->type == FRAME_SPAWN ? (void *)a->spawn : (void *)&a->msg;
	const struct handler *h = NULL;
	int r;

	for (size_t i = 0; i < sizeof(handlers) / sizeof(handlers[0]); i++)
		if (handlers[i].type == f->type)
			h = &handlers[i];
	if (!h)
		return -EPROTO;
	r = frame_msg_parse(f->type, f->payload, f->len, msg);
	if (r < 0)
		return r;
	if (h->as_user) {
		r = fs_become(a, ((struct frame_file *)msg)->user);
		if (r == 0) {
			r = h->fn(a, f->channel, msg);
			fs_restore(a);
		}
	} else {
		r = h->fn(a, f->channel, msg);
	}
	if (r < 0)
		emit_error(a, f->channel, -r, frame_type_name(f->type));
	return 0;
}

static int pump_host(struct agent *a)
{
	struct frame f;
	int r;

	while (out_room(a) && !a->fatal) {
		r = frame_decoder_next(a->dec, &f);
		if (r <= 0)
			return r;
		r = dispatch(a, &f);
		if (r < 0)
			return r;
	}
	return 0;
}

static void read_host(struct agent *a)
{
	uint8_t *p;
	size_t space = frame_decoder_space(a->dec, &p);
	ssize_t n;

	if (space == 0)
		return;
	n = read(a->fd, p, space);
	if (n > 0)
		frame_decoder_commit(a->dec, (size_t)n);
	else if (n == 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK))
		a->host_gone = true;
}

/* ---- the loop ---- */

static int poll_timeout(const struct agent *a)
{
	uint64_t now = mono_ms(), next = UINT64_MAX;

	for (unsigned i = 0; i < a->n_reads && out_room(a); i++)
		if (a->reads[i].status_fd < 0)
			return 0; /* a file: read it at once; a packer's pipe is polled */
	for (const struct proc *p = a->procs; p; p = p->next) {
		if (p->exited && out_room(a))
			return 0;
		if (!p->exited && p->deadline && p->deadline < next)
			next = p->deadline;
	}
	if (next == UINT64_MAX)
		return -1;
	return next <= now ? 0 : (int)(next - now > INT32_MAX ? INT32_MAX : next - now);
}

static size_t build_pollfds(struct agent *a, struct pollfd *pfd, struct slot *slots)
{
	size_t n = 2;

	pfd[0] = (struct pollfd){.fd = a->fd,
				 .events = (short)((out_room(a) ? POLLIN : 0) |
						   (a->out.len ? POLLOUT : 0))};
	pfd[1] = (struct pollfd){.fd = a->sigfd, .events = POLLIN};
	for (struct proc *p = a->procs; p; p = p->next) {
		int fds[3] = {p->out_fd, p->err_fd, p->in_fd};
		for (int w = 0; w < 3; w++) {
			bool want = w < 2 ? out_room(a) && (!p->paused || p->exited)
					  : p->inq.len > 0;
			if (fds[w] < 0 || !want)
				continue;
			slots[n] = (struct slot){p, w, NULL};
			pfd[n++] = (struct pollfd){.fd = fds[w], .events = w < 2 ? POLLIN : POLLOUT};
		}
	}
	for (unsigned i = 0; i < a->n_reads && out_room(a); i++)
		if (a->reads[i].status_fd >= 0) { /* pump_reads() takes it when it wakes us */
			slots[n] = (struct slot){NULL, 0, NULL};
			pfd[n++] = (struct pollfd){.fd = a->reads[i].fd, .events = POLLIN};
		}
	for (struct aport *p = a->ports; p; p = p->next) {
		short ev = port_events(a, p);
		if (ev) {
			slots[n] = (struct slot){NULL, 0, p};
			pfd[n++] = (struct pollfd){.fd = p->fd, .events = ev};
		}
	}
	for (unsigned i = 0; i < a->n_watches && out_room(a); i++) { /* pump_watches() reads */
		slots[n] = (struct slot){NULL, 0, NULL};
		pfd[n++] = (struct pollfd){.fd = watch_fd(a->watches[i].w), .events = POLLIN};
	}
	for (unsigned i = 0; i < a->n_writes; i++) { /* pump_writes() goes on when woken */
		const struct awrite_job *j = &a->writes[i];
		bool out = j->fd >= 0 && j->q.len > 0, verdict = j->fd < 0 && j->status_fd >= 0;
		if (out || verdict) {
			slots[n] = (struct slot){NULL, 0, NULL};
			pfd[n++] = (struct pollfd){.fd = out ? j->fd : j->status_fd,
						   .events = out ? POLLOUT : POLLIN};
		}
	}
	return n;
}

static void handle_events(struct agent *a, const struct pollfd *pfd, const struct slot *slots,
			  size_t n)
{
	if (pfd[0].revents & POLLIN)
		read_host(a);
	else if (pfd[0].revents & (POLLHUP | POLLERR | POLLNVAL))
		a->host_gone = true;
	if (pfd[1].revents & POLLIN)
		reap(a);
	/* a port's event may free it: only ports still listed are served */
	for (size_t i = 2; i < n; i++)
		for (struct aport *p = a->ports; p && pfd[i].revents && slots[i].port; p = p->next)
			if (p == slots[i].port) {
				port_event(a, p, pfd[i].revents);
				break;
			}
	for (size_t i = 2; i < n; i++) {
		if (!pfd[i].revents || !slots[i].p)
			continue;
		if (slots[i].which < 2)
			(void)pipe_read(a, slots[i].p, slots[i].which);
		else
			stdin_flush(slots[i].p);
	}
}

static void shutdown_all(struct agent *a)
{
	for (struct proc *p = a->procs; p; p = p->next)
		(void)proc_signal(p, SIGKILL);
	/* as PID 1, take down whatever else lives in the namespace too */
	if (getpid() == 1)
		(void)kill(-1, SIGKILL);
	while (a->procs) {
		struct proc *p = a->procs;
		while (!p->exited && waitpid(p->pid, NULL, 0) < 0 && errno == EINTR)
			;
		proc_free(a, p);
	}
	while (a->n_reads > 0)
		close(a->reads[--a->n_reads].fd);
	while (a->n_writes > 0)
		write_job_drop(a, &a->writes[a->n_writes - 1]);
	while (a->n_watches > 0)
		watch_drop(a, &a->watches[a->n_watches - 1]);
	while (a->ports)
		port_free(a, a->ports);
}

/* The paths every program's start walks besides its own: the search path's directories, the
 * dynamic loader and the C library (Debian's multiarch names). */
#if defined(__x86_64__)
#define START_PATHS "/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6"
#elif defined(__aarch64__)
#define START_PATHS "/lib/ld-linux-aarch64.so.1", "/lib/aarch64-linux-gnu/libc.so.6"
#else
#define START_PATHS "/lib"
#endif

/* What the first process's start would pay for, done while the sandbox waits in the pool,
 * before anyone has it: the top of the spawn stack faulted in (what a spawn uses of it, so no
 * page that a process's start would not have touched anyway), and the directories and files
 * that every start walks looked up once, so that their dentries exist in the sandbox's new
 * overlays (on this project's machines the first exec in a sandbox took 0.4 ms more than the
 * next; bench/RESULTS.md). Lookups only: nothing of the sandbox changes, a path the image
 * lacks is passed over. */
#define SPAWN_STACK_USED (16 << 10)

static void prewarm(void)
{
	static const char *const files[] = {START_PATHS};
	char dir[PATH_MAX];
	struct stat st;

	for (size_t i = sizeof(spawn_stack) - SPAWN_STACK_USED; i < sizeof(spawn_stack); i += 4096)
		((volatile char *)spawn_stack)[i] = 0;
	for (const char *p = DEFAULT_PATH;; p++) {
		const char *e = strchrnul(p, ':');
		snprintf(dir, sizeof(dir), "%.*s", (int)(e - p), p);
		(void)stat(dir, &st);
		if (*e == '\0')
			break;
		p = e;
	}
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		(void)stat(files[i], &st);
}

static int agent_setup(struct agent *a, int fd)
{
	sigset_t mask;

	a->fd = fd;
	a->sigfd = -1;
	a->uid = getuid();
	a->gid = getgid();
	if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0 || set_nonblock(fd) < 0)
		return -errno;
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
		return -errno;
	a->sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (a->sigfd < 0)
		return -errno;
	/* outside a PID namespace (tests), orphans must still come to us to be reaped */
	if (getpid() != 1)
		(void)prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
	(void)setgroups(0, NULL);
	(void)bounding_set();
	a->dec = malloc(sizeof(*a->dec));
	a->spawn = malloc(sizeof(*a->spawn));
	if (!a->dec || !a->spawn)
		return -ENOMEM;
	frame_decoder_init(a->dec, FRAME_TO_AGENT);
	prewarm();
	return 0;
}

/* Tells the host why it is being dropped; best effort, the connection closes next. */
static void protocol_error(struct agent *a, int err)
{
	emit_error(a, 0, -err, "protocol error");
	flush_out(a);
}

static int agent_loop(struct agent *a)
{
	size_t max = 2 + 3 * MAX_PROCS + MAX_READS + MAX_WRITES + MAX_WATCHES + MAX_PORTS;
	struct pollfd *pfd = calloc(max, sizeof(*pfd));
	struct slot *slots = calloc(max, sizeof(*slots));
	int ret = 0;

	if (!pfd || !slots)
		a->fatal = true;
	while (!a->fatal) {
		int r = pump_host(a);
		if (r < 0) {
			protocol_error(a, r);
			ret = 1;
			break;
		}
		pump_reads(a);
		pump_writes(a);
		pump_watches(a);
		finish_procs(a);
		flush_out(a);
		if (a->host_gone || a->fatal)
			break;
		size_t n = build_pollfds(a, pfd, slots);
		if (poll(pfd, n, poll_timeout(a)) < 0 && errno != EINTR) {
			a->fatal = true;
			break;
		}
		handle_events(a, pfd, slots, n);
		check_timeouts(a);
	}
	free(pfd);
	free(slots);
	return a->fatal ? 1 : ret;
}

int agent_main(int fd)
{
	struct agent *a = calloc(1, sizeof(*a));
	int ret = 1;

	if (!a) {
		close(fd);
		return 1;
	}
	if (agent_setup(a, fd) == 0)
		ret = agent_loop(a);
	shutdown_all(a);
	close(fd);
	close_fd(&a->sigfd);
	buf_done(&a->out);
	free(a->dec);
	free(a->spawn);
	free(a);
	return ret;
}
