/* The `gvisor` runtime: cordon-init as PID 1 of a gVisor sandbox (Debian's runsc), the
 * application's system calls served by the Sentry, a user-space kernel, instead of the host's.
 *
 * start() acquires the host's part (host.c: uid slot, cgroup, link addresses), makes the
 * bundle (bundle.c: the disk, the root with its writable layer, the network namespace, the
 * OCI config of oci.c) and runs `runsc run` as our child in the sandbox's cgroup, so that
 * runsc, its gofer and the Sentry are all bounded by it (--ignore-cgroups: runsc does not
 * move them). In agent mode cordon-init connects to a unix socket we listen on in the
 * bundle (cordon-init --agent --connect, runsc --host-uds=open): the frame protocol's byte
 * stream; the listening socket is the setup fd, and setup is over when cordon-init has
 * connected. In one-shot mode the container's stdio is the caller's, and `runsc run` passes
 * the exit status through; the setup fd is readable at once.
 *
 * The exit fd is the pidfd of `runsc run`; kill is SIGKILL to it (its sandbox and gofer die
 * with it: runsc runs them attached) and the cgroup kill; free is `runsc delete --force` and
 * the bundle's removal. The sweep takes down what the sandboxes of a killed daemon left.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mount.h>
#include <linux/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "basic/child.h"
#include "basic/cleanup.h"
#include "basic/fdwatch.h"
#include "basic/fileio.h"
#include "basic/log.h"
#include "lib/cgroup.h"
#include "lib/idmap.h"
#include "runtime/gvisor/gvisor.h"
#include "runtime/runtime.h"
#include "runtime/scratch.h"

/* runsc takes a container id for any unambiguous prefix of one (`runsc state cordon-s1`
 * means cordon-s14 if that is the only match, and fails as "ambiguous" beside cordon-s186):
 * the ids are of one width, so that none is a prefix of another. */
_Static_assert(CORDON_IDMAP_SLOTS <= 10000, "container ids have four digits");

static void names_for_slot(unsigned slot, char *id, size_t id_size, char *dir, size_t dir_size)
{
	snprintf(id, id_size, "cordon-s%04u", slot);
	snprintf(dir, dir_size, "%s/s%u", gvisor_base(), slot);
}

/* Whether runsc has a container @id (`runsc state`): false only when runsc says it has no
 * such file; any other failure (no answer in time, an id it finds ambiguous) keeps what is
 * left of it from being taken for gone. */
static bool runsc_knows(const char *id)
{
	const char *const args[] = {"state", id, NULL};
	struct cordon_err e = {};
	return gvisor_call(args, GVISOR_CALL_MS, &e) == 0 || !strstr(e.msg, "does not exist");
}

/* `runsc delete --force`: its state entry and whatever of it still runs. 0 once runsc has
 * no container @id, deleted now or gone before; -EBUSY while it still has one. */
static int runsc_delete(const char *id)
{
	const char *const args[] = {"delete", "--force", id, NULL};
	if (gvisor_call(args, GVISOR_CALL_MS, NULL) == 0)
		return 0;
	return runsc_knows(id) ? -EBUSY : 0;
}

/* The bundle goes only after runsc's state entry: a slot with a state entry always has its
 * bundle directory, which is how the next start of the slot and the sweep find what a dead
 * sandbox left, without reading runsc's private state files. 0, or -EBUSY with the bundle
 * kept. */
static int take_down(const char *id, const char *dir)
{
	int r = runsc_delete(id);
	if (r == 0)
		gvisor_bundle_remove(dir);
	return r;
}

/* What a dead sandbox of this slot may have left, before we use its names (we hold the slot:
 * whatever has them is stale): its bundle, and with it runsc's state entry, which would make
 * `runsc run` answer "container already exists". */
static int take_down_stale(const char *id, const char *dir)
{
	struct stat st;
	return stat(dir, &st) == 0 ? take_down(id, dir) : 0;
}

/* This runsc refuses --network=sandbox when /proc/sys/net/core/rmem_default exists in the
 * network namespace it is given, its sign of the host's own; since Linux 6.x the file exists
 * in every network namespace. runsc then runs in a mount namespace of its own (a slave of
 * ours: nothing goes back) whose /proc/sys is a tmpfs holding the host's directories but
 * net/ (a mount over /proc/sys/net/core would not be seen from another network namespace:
 * its entries are per namespace). */
static int hide_rmem_default(void)
{
	static const char *const keep[] = {"kernel", "vm", "fs", "user", "abi", "dev", "debug"};
	int trees[ELEMENTSOF(keep)];
	char path[32];
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
		return -errno;
	for (size_t i = 0; i < ELEMENTSOF(keep); i++) {
		memcpy(path, "/proc/sys/", 11);
		strcat(path, keep[i]);
		trees[i] = syscall(SYS_open_tree, AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
	}
	if (mount("tmpfs", "/proc/sys", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=16k,mode=0555") < 0)
		return -errno;
	for (size_t i = 0; i < ELEMENTSOF(keep); i++) {
		memcpy(path, "/proc/sys/", 11);
		strcat(path, keep[i]);
		if (trees[i] < 0)
			continue;
		if (mkdir(path, 0555) < 0 ||
		    syscall(SYS_move_mount, trees[i], "", AT_FDCWD, path, MOVE_MOUNT_F_EMPTY_PATH) < 0)
			return -errno;
		close(trees[i]);
	}
	return mount(NULL, "/proc/sys", NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
		     NULL) < 0 ? -errno : 0;
}

/* The child: the sandbox's cgroup (the host moved it there before "go"), its own session,
 * the container's stdio on 0-2 and nothing else. Async-signal-safe only. */
static _noreturn_ void exec_run(const char *const *argv, const int io[3], int go_fd, bool net)
{
	char c;
	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	if (read(go_fd, &c, 1) != 1 || (net && hide_rmem_default() < 0))
		_exit(CORDON_EXIT_SETUP);
	setsid();
	int fds[3];
	for (int i = 0; i < 3; i++)
		if ((fds[i] = fcntl(io[i], F_DUPFD_CLOEXEC, 16)) < 0)
			_exit(CORDON_EXIT_SETUP);
	for (int i = 0; i < 3; i++)
		if (dup2(fds[i], i) < 0)
			_exit(CORDON_EXIT_SETUP);
	syscall(SYS_close_range, 3, ~0U, 0);
	runtime_child_reset_signals();
	execv(argv[0], (char *const *)argv);
	_exit(CORDON_EXIT_SETUP);
}

/* A copy from a pipe to @dst until the container closes it: the Sentry keeps its own offset
 * for each host file it is given, so two fds of one file (`> out 2>&1`) would write over each
 * other; through a pipe, our write(2) moves the file's one offset. */
static pid_t pump_to(int dst, int *ret_wfd)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		char buf[65536];
		ssize_t n;
		if (dup2(p[0], 3) < 0 || dup2(dst, 4) < 0)
			_exit(1);
		syscall(SYS_close_range, 0, 2, 0);
		syscall(SYS_close_range, 5, ~0U, 0);
		while ((n = read(3, buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR))
			if (n > 0 && write_all(4, buf, n) < 0)
				break;
		_exit(0);
	}
	close(p[0]);
	if (pid < 0) {
		close(p[1]);
		return -1;
	}
	*ret_wfd = p[1];
	return pid;
}

static bool same_file(int a, int b)
{
	return syscall(SYS_kcmp, getpid(), getpid(), 0 /* KCMP_FILE */, a, b) == 0;
}

/* One-shot stdout and stderr that are regular files go through a pump (pump_to()); both
 * through the same one when they are the same open file. */
static int pump_files(struct gvisor *g, int io[3], struct cordon_err *err)
{
	bool same = same_file(io[1], io[2]);
	for (int i = 1; i < 3; i++) {
		struct stat st;
		int w = -1;
		if (fstat(io[i], &st) < 0 || !S_ISREG(st.st_mode))
			continue;
		if (i == 2 && same && g->pump[0] > 0)
			w = fcntl(io[1], F_DUPFD_CLOEXEC, 3);
		else if ((g->pump[i - 1] = pump_to(io[i], &w)) < 0)
			w = -1;
		if (w < 0)
			return cordon_err_set(err, -errno, "gvisor: stdio pump");
		close(io[i]);
		io[i] = w;
	}
	return 0;
}

/* The container's 0-2: the caller's in one-shot mode (-1: /dev/null); in agent mode
 * /dev/null, and runsc's own messages on 2, in <dir>/runsc.log. */
static int open_stdio(struct gvisor *g, const struct cordon_spec *spec, int io[3],
		      struct cordon_err *err)
{
	char path[PATH_MAX];
	for (int i = 0; i < 3; i++) {
		int src = spec->argv ? spec->stdio[i] : -1;
		if (src >= 0)
			io[i] = fcntl(src, F_DUPFD_CLOEXEC, 3);
		else if (spec->argv || i < 2)
			io[i] = open("/dev/null", O_RDWR | O_CLOEXEC);
		else {
			snprintf(path, sizeof(path), "%s/runsc.log", g->dir);
			io[i] = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		}
		if (io[i] < 0)
			return cordon_err_set(err, -errno, "gvisor: stdio");
	}
	return spec->argv ? pump_files(g, io, err) : 0;
}

static int spawn_run(struct gvisor *g, const struct cordon_spec *spec, struct cordon_err *err)
{
	char bundle[PATH_MAX];
	snprintf(bundle, sizeof(bundle), "%s/bundle", g->dir);
	const char *const args[] = {"run", "--bundle", bundle, g->id, NULL};
	const char *argv[24];
	int io[3] = {-1, -1, -1}, go[2] = {-1, -1}, r;
	gvisor_argv(argv, ELEMENTSOF(argv), spec->net == CORDON_NET_EGRESS ? "sandbox" : "none",
		    !spec->argv, args);
	if ((r = open_stdio(g, spec, io, err)) < 0)
		goto out;
	if (pipe2(go, O_CLOEXEC) < 0) {
		r = cordon_err_set(err, -errno, "gvisor: pipe");
		goto out;
	}
	pid_t pid = fork();
	if (pid < 0) {
		r = cordon_err_set(err, -errno, "gvisor: fork runsc");
		goto out;
	}
	if (pid == 0)
		exec_run(argv, io, go[0], spec->net == CORDON_NET_EGRESS);
	g->sb.pid = pid;
	g->pidfd = syscall(SYS_pidfd_open, pid, 0);
	if (g->pidfd < 0)
		r = cordon_err_set(err, -errno, "gvisor: pidfd");
	else if (g->sb.host.cg)
		r = cgroup_attach(g->sb.host.cg, pid, err);
	if (r == 0 && write(go[1], "g", 1) != 1)
		r = cordon_err_set(err, -errno, "gvisor: start runsc");
out:
	for (int i = 0; i < 3; i++)
		if (io[i] >= 0)
			close(io[i]);
	if (go[0] >= 0)
		close(go[0]);
	if (go[1] >= 0)
		close(go[1]);
	return r;
}

/* The cgroup holds the Sentry and the gofer on top of the sandbox's programs. */
static int set_limits(struct cordon_sandbox *sb, uint64_t memory_bytes, uint32_t cpus_milli,
		      uint32_t pids)
{
	uint64_t host_pids = GVISOR_HOST_PIDS(pids);
	return runtime_host_set_limits(&sb->host, memory_bytes + GVISOR_MEM_EXTRA, cpus_milli,
				       host_pids > UINT32_MAX ? UINT32_MAX : (uint32_t)host_pids);
}

/* Where cordon-init connects to, listened on before runsc starts. */
static int agent_listen(struct gvisor *g, struct cordon_err *err)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int n = snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/sock/agent.sock", g->dir);
	if (n < 0 || (size_t)n >= sizeof(sa.sun_path))
		return cordon_err_setf(err, -ENAMETOOLONG, "gvisor: socket path too long");
	_cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 1) < 0)
		return cordon_err_set(err, -errno, "gvisor: listen on '%s'", sa.sun_path);
	return TAKE_FD(fd);
}

/* start and restore: @from is a snapshot's directory to fill the disk from, or -1. */
static int start_from(struct cordon_sandbox *sb, const struct cordon_spec *spec, int from,
		      struct cordon_err *err)
{
	struct gvisor *g = gvisor_of(sb);
	g->pidfd = g->agent_fd = g->setup_fd = -1;
	g->pump[0] = g->pump[1] = -1;
	g->oneshot = spec->argv != NULL;
	int r;
	if (!sb->host.privileged)
		return cordon_err_setf(err, -EPERM, "runtime 'gvisor': needs root");
	if ((r = runtime_host_acquire(&sb->host, spec, err)) < 0)
		return r;
	if (sb->host.cg && (r = set_limits(sb, spec->memory_bytes, spec->cpus_milli, spec->pids)) < 0)
		return cordon_err_set(err, r, "gvisor: cgroup limits");
	names_for_slot(sb->host.slot.slot, g->id, sizeof(g->id), g->dir, sizeof(g->dir));
	if (take_down_stale(g->id, g->dir) < 0)
		return cordon_err_setf(err, -EBUSY, "gvisor: runsc keeps a stale container %s that "
				       "`runsc delete --force` did not remove", g->id);
	struct gvisor_bundle *b = calloc(1, sizeof(*b));
	if (!b)
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	r = gvisor_bundle_make(g, spec, from, b, err);
	free(b);
	if (r < 0)
		return r;
	g->setup_fd = spec->argv ? eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK) : agent_listen(g, err);
	if (g->setup_fd < 0)
		return spec->argv ? cordon_err_set(err, -errno, "gvisor: eventfd") : g->setup_fd;
	return spawn_run(g, spec, err); /* on failure runtime.c kills and frees */
}

static int gvisor_start(struct cordon_sandbox *sb, const struct cordon_spec *spec,
			struct cordon_err *err)
{
	return start_from(sb, spec, -1, err);
}

static int gvisor_setup_fd(const struct cordon_sandbox *sb)
{
	return ((const struct gvisor *)sb)->setup_fd;
}

/* Agent mode: over once cordon-init has connected; the socket's name goes at once (no one
 * else connects to a listener that is closed next). */
static int gvisor_finish(struct cordon_sandbox *sb, struct cordon_err *err)
{
	struct gvisor *g = gvisor_of(sb);
	char path[PATH_MAX];
	if (g->oneshot || g->agent_fd >= 0)
		return 0;
	int fd = accept4(g->setup_fd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return errno == EAGAIN || errno == EINTR ? -EAGAIN
						       : cordon_err_set(err, -errno, "gvisor: accept");
	g->agent_fd = fd;
	snprintf(path, sizeof(path), "%s/sock/agent.sock", g->dir);
	unlink(path);
	return 0;
}

static void gvisor_setup_close(struct cordon_sandbox *sb)
{
	fd_close(TAKE_FD(gvisor_of(sb)->setup_fd));
}

static int gvisor_agent_fd(const struct cordon_sandbox *sb)
{
	return ((const struct gvisor *)sb)->agent_fd;
}

static int gvisor_exit_fd(const struct cordon_sandbox *sb)
{
	return ((const struct gvisor *)sb)->pidfd;
}

/* To the container's init (cordon-init forwards it to the command in one-shot mode). */
static int gvisor_signal(struct cordon_sandbox *sb, int sig)
{
	struct gvisor *g = gvisor_of(sb);
	char s[8];
	snprintf(s, sizeof(s), "%d", sig);
	const char *const args[] = {"kill", g->id, s, NULL};
	return gvisor_call(args, GVISOR_KILL_MS, NULL);
}

static int gvisor_resume(struct cordon_sandbox *sb);

/* `runsc kill --all` first: the Sentry ends the container, and `runsc run` reaps its sandbox
 * and gofer and exits. A SIGKILL to runsc would orphan them to PID 1 of the host, and runsc
 * delete then waits seconds for those zombies to be reaped. SIGKILL (and the cgroup kill,
 * runtime.c) only if that does not end it in time. */
static int gvisor_kill(struct cordon_sandbox *sb)
{
	struct gvisor *g = gvisor_of(sb);
	const char *const args[] = {"kill", "--all", g->id, "KILL", NULL};
	if (g->pidfd < 0)
		return 0;
	/* A paused Sentry would take the signal only once resumed. */
	if (g->paused && gvisor_resume(sb) < 0)
		goto force;
	if (gvisor_call(args, GVISOR_KILL_MS, NULL) == 0) {
		struct pollfd p = {g->pidfd, POLLIN, 0};
		if (poll(&p, 1, GVISOR_KILL_MS) == 1)
			return 0;
	}
force:
	if (syscall(SYS_pidfd_send_signal, g->pidfd, SIGKILL, NULL, 0) < 0)
		return -errno;
	return 0;
}

static int gvisor_reap(struct cordon_sandbox *sb, struct cordon_result *ret)
{
	struct gvisor *g = gvisor_of(sb);
	siginfo_t si = {};
	struct rusage ru = {};
	if (syscall(SYS_waitid, P_PIDFD, g->pidfd, &si, WEXITED, &ru) < 0)
		return -errno;
	/* The pumps end when the last writer (the Sentry) has gone. */
	for (int i = 0; i < 2; i++)
		if (g->pump[i] > 0) {
			child_wait_group_deadline(g->pump[i], GVISOR_KILL_MS, NULL);
			g->pump[i] = -1;
		}
	/* runsc run exits with the container's status: cordon-init's, which is the command's. */
	if (si.si_code == CLD_EXITED)
		ret->exit_code = si.si_status;
	else
		ret->signal = si.si_status;
	ret->cpu_ms = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000 +
		      (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000;
	return 0;
}

/* An agent-mode sandbox that ended before cordon-init connected: runsc's last words, for
 * the daemon's log (its bundle, and with it the file, goes next). */
static void log_early_end(const struct gvisor *g)
{
	char path[PATH_MAX], buf[4096];
	snprintf(path, sizeof(path), "%s/runsc.log", g->dir);
	ssize_t n = read_file_at(AT_FDCWD, path, buf, sizeof(buf));
	while (n > 0 && buf[n - 1] == '\n')
		buf[--n] = '\0';
	if (n <= 0)
		return;
	const char *last = strrchr(buf, '\n');
	log_warning("gvisor: %s ended before its agent connected; runsc said: %.300s", g->id,
		    last ? last + 1 : buf);
}

static void gvisor_free(struct cordon_sandbox *sb)
{
	struct gvisor *g = gvisor_of(sb);
	int fds[] = {g->pidfd, g->agent_fd, g->setup_fd};
	if (g->made && !g->oneshot && g->agent_fd < 0)
		log_early_end(g);
	for (int i = 0; i < 2; i++)
		if (g->pump[i] > 0) {
			kill(g->pump[i], SIGKILL);
			child_wait_group_deadline(g->pump[i], GVISOR_KILL_MS, NULL);
			g->pump[i] = -1;
		}
	for (size_t i = 0; i < ELEMENTSOF(fds); i++)
		fd_close(fds[i]);
	g->pidfd = g->agent_fd = g->setup_fd = -1;
	/* The gofer and the Sentry are in the cgroup: killed before their state goes. */
	runtime_host_kill(&sb->host);
	if (g->made && take_down(g->id, g->dir) < 0) /* the bundle stays for the sweep */
		log_warning("gvisor: runsc did not delete %s; kept %s for the sweep", g->id, g->dir);
	g->made = false;
}

static int gvisor_stats(struct cordon_sandbox *sb, struct cordon_stats *ret)
{
	return runtime_host_stats(&sb->host, ret);
}

static int pause_resume(struct cordon_sandbox *sb, const char *verb, bool paused)
{
	struct gvisor *g = gvisor_of(sb);
	const char *const args[] = {verb, g->id, NULL};
	int r = gvisor_call(args, GVISOR_CALL_MS, NULL);
	if (r == 0)
		g->paused = paused;
	return r;
}

static int gvisor_pause(struct cordon_sandbox *sb)
{
	return pause_resume(sb, "pause", true);
}

static int gvisor_resume(struct cordon_sandbox *sb)
{
	return pause_resume(sb, "resume", false);
}

/* The filesystem only, as the jail: the disk's root/ and upper/ (bundle.c's layout is the
 * scratch's), paused by runtime.c (runsc pause). The Sentry's memory is not kept: "memory":
 * false. */
static int gvisor_snapshot(struct cordon_sandbox *sb, int dirfd, struct cordon_snapshot_info *ret,
			   struct cordon_err *err)
{
	ret->memory = false;
	_cleanup_close_ int fd = gvisor_disk_open(gvisor_of(sb));
	if (fd < 0)
		return cordon_err_set(err, fd, "snapshot: open the sandbox's disk");
	return scratch_dir_snapshot(fd, 0, dirfd, &ret->bytes, err);
}

static int gvisor_restore(struct cordon_sandbox *sb, const struct cordon_spec *spec, int dirfd,
			  struct cordon_err *err)
{
	return start_from(sb, spec, dirfd, err);
}

static int gvisor_available(struct cordon_err *err)
{
	return gvisor_probe(err);
}

/* What the sandboxes of a killed daemon left: for each s<slot> whose slot nobody holds, its
 * runsc state entry (and processes), mounts and directory. Its cgroup and veth are the host
 * sweep's (host.c), which runs after. */
void gvisor_sweep(void)
{
	/* Every `cordon run` sweeps: no probe here, only a look at the directory. */
	if (geteuid() != 0)
		return;
	_cleanup_closedir_ DIR *d = opendir(gvisor_base());
	struct dirent *e;
	while (d && (e = readdir(d))) {
		char *end, id[32], dir[128];
		if (e->d_name[0] != 's')
			continue;
		unsigned long slot = strtoul(e->d_name + 1, &end, 10);
		struct idmap_slot s;
		if (*end || slot >= CORDON_IDMAP_SLOTS || idmap_slot_try(slot, &s) < 0)
			continue;
		names_for_slot(slot, id, sizeof(id), dir, sizeof(dir));
		bool runsc = gvisor_runsc() || gvisor_find_runsc() == 0;
		if (!runsc) /* no runsc, no container of it to delete first */
			gvisor_bundle_remove(dir);
		if (!runsc || take_down(id, dir) == 0)
			rmdir(dir);
		idmap_slot_release(&s);
	}
}

const struct runtime_ops gvisor_ops = {
    .name = "gvisor",
    .strength = 20,
    .caps = CORDON_RUNTIME_CAP_ONESHOT | CORDON_RUNTIME_CAP_AGENT | CORDON_RUNTIME_CAP_EGRESS |
	    CORDON_RUNTIME_CAP_LIMITS | CORDON_RUNTIME_CAP_STATS | CORDON_RUNTIME_CAP_PAUSE |
	    CORDON_RUNTIME_CAP_SNAPSHOT,
    /* A boot is ~230 ms alone; ten at once (a fork) on a busy two-core host take seconds
     * each, past the usual 10 s hello. */
    .setup_ms = 30000,
    .size = sizeof(struct gvisor),
    .available = gvisor_available,
    .start = gvisor_start,
    .setup_fd = gvisor_setup_fd,
    .finish = gvisor_finish,
    .setup_close = gvisor_setup_close,
    .agent_fd = gvisor_agent_fd,
    .exit_fd = gvisor_exit_fd,
    .signal = gvisor_signal,
    .kill = gvisor_kill,
    .reap = gvisor_reap,
    .free = gvisor_free,
    .set_limits = set_limits,
    .stats = gvisor_stats,
    /* No attach_net: the Sentry takes its interfaces when it boots; the link is made at
     * start (spec->net), cordon_runtime_attaches_net() says so. */
    .pause = gvisor_pause,
    .resume = gvisor_resume,
    .snapshot = gvisor_snapshot,
    .restore = gvisor_restore,
    .sweep = gvisor_sweep,
};
