/* The sandbox's first process, from clone() to exec(): DESIGN.md section 5 in order.
 *
 * Everything here allocates nothing and fails closed: the first error is sent to the host as
 * a struct jail_msg and the child exits. It never reaches exec half-jailed.
 *
 * The child runs in the host's memory (spawn.c: CLONE_VM, as posix_spawn's child does) or, on
 * a host where that cannot be, in a fork-like copy of it; the host may have threads (cordond
 * does). So up to exec the child calls only system calls and functions over its own memory,
 * never one that takes a lock of libc's (malloc, stdio, opendir, strerror) or relies on
 * glibc's idea of the process's threads (setuid and friends), and it writes no memory but
 * its own stack: it works on a copy of its struct jail_child, which the host frees after the
 * exec. tests/unit/runtime/check-child-calls.py checks the machine code against a list; add
 * to that list only what is safe so.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/capability.h>

#include "basic/fileio.h"
#include "lib/caps.h"
#include "lib/cgroup.h"
#include "lib/initproto.h"
#include "lib/landlock.h"
#include "lib/ns.h"
#include "lib/seccomp.h"
#include "policy/seccomp_filter.h"
#include "runtime/initargs.h"
#include "runtime/jail/jail.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

#define SYNC_FD 4
#define EXEC_FD 5

static const char *const writable_dirs[] = {"/tmp", "/home", "/root", "/var/tmp", "/run",
					    "/dev", "/proc", NULL};

static _noreturn_ void fail(int sync_fd, const struct cordon_err *err)
{
	struct jail_msg m = {.kind = JAIL_MSG_ERR, .err = *err};
	send(sync_fd, &m, sizeof(m), MSG_NOSIGNAL);
	_exit(CORDON_EXIT_SETUP);
}

/* The kernel's setresgid/setresuid, not glibc's: in a process with threads glibc's wrappers
 * first make every thread it knows of change ids too, and wait for each thread that has not
 * started yet (setxid_mark_thread). We are a clone of a threaded cordond with none of those
 * threads: a thread that pthread_create() had made but not run when we were cloned is waited
 * for in futex_wait for ever (issue 10). We are one thread; the kernel call is what we mean. */
static int set_ids(uid_t id)
{
	if (syscall(SYS_setresgid, id, id, id) < 0 || syscall(SYS_setresuid, id, id, id) < 0)
		return -errno;
	return 0;
}

static int become_root(const struct jail_child *c, struct cordon_err *err)
{
	/* After the id map, become the sandbox's root so that what we create is owned by ids that
	 * exist inside. With a single-uid mapping we already are the only id there is. */
	if (!c->privileged)
		return 0;
	if (set_ids(0) < 0)
		return cordon_err_set(err, -errno, "become root of the user namespace");
	if (syscall(SYS_setgroups, 0, NULL) < 0) /* the kernel's, as above */
		return cordon_err_set(err, -errno, "setgroups");
	/* The uid change made us non-dumpable, which hands /proc/self to the host's (unmapped)
	 * root; nothing else runs in this pid namespace yet, and exec resets it. */
	if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0)
		return cordon_err_set(err, -errno, "set dumpable");
	return 0;
}

/* The command's 0-2 in one-shot mode: the caller's spec->stdio, -1 being /dev/null. In agent
 * mode PID 1 has /dev/null on all three: nothing of the host (cordond's own stdout and
 * stderr) stays open in the sandbox, and cordon-init writes nothing there. At 16 or above,
 * as arrange_fds() lifts the others: /dev/null opened at the lowest free fd could be 3, 4 or
 * 5, which the sync socket's dup then takes (and PID 1's stdin was the sync socket: its
 * exec no longer closed the host's end, and the host waited for ever). */
static int stdio_source(const struct jail_child *c, int i)
{
	int src = c->one_shot ? c->stdio[i] : -1;
	if (src >= 0)
		return fcntl(src, F_DUPFD_CLOEXEC, 16);
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null < 0)
		return -1;
	int fd = fcntl(null, F_DUPFD_CLOEXEC, 16);
	close(null);
	return fd;
}

/* close_range(@lo, @hi), or one close() each before 5.9. */
static void close_between(int lo, unsigned hi)
{
	if ((unsigned)lo > hi || syscall(SYS_close_range, lo, hi, 0) == 0)
		return;
	for (unsigned fd = lo; fd <= hi && fd < 65536; fd++)
		close((int)fd);
}

/* Every fd above 2 but the few the child reads, closed before anything else. clone() without
 * CLONE_FILES gave the child a copy of the host's whole table, and a file stays open while
 * any table holds it: a client connection cordond closed would get no EOF until the child
 * execs, and the last reference to a sandbox that cordond's teardown let go meanwhile (its
 * disk: the ext4's unmount, the image's blocks freed) would be dropped here, on this
 * sandbox's build and in its cgroup (a tenth of the children's CPU under a sequential load,
 * bench/RESULTS.md). The trees the host sends after the "go" come after this. */
static void close_host_fds(const struct jail_child *c)
{
	int keep[6 + ELEMENTSOF(c->cg_join_fds)];
	size_t n = 0;
	int from = 3;

	keep[n++] = c->sync_fd;
	keep[n++] = c->chan_fd;
	keep[n++] = c->init_fd;
	for (size_t i = 0; i < 3; i++)
		keep[n++] = c->stdio[i];
	for (size_t i = 0; i < c->n_cg_join_fds; i++)
		keep[n++] = c->cg_join_fds[i];
	for (size_t i = 1; i < n; i++) /* insertion sort: qsort may allocate */
		for (size_t j = i; j > 0 && keep[j - 1] > keep[j]; j--) {
			int t = keep[j];
			keep[j] = keep[j - 1];
			keep[j - 1] = t;
		}
	for (size_t i = 0; i < n; i++)
		if (keep[i] >= from) {
			close_between(from, (unsigned)keep[i] - 1);
			from = keep[i] + 1;
		}
	close_between(from, ~0U);
}

/* Leaves exactly: 0, 1, 2 (stdio_source()), the agent channel (or status fd) as 3, and
 * CLOEXEC copies of the sync socket and the init memfd for the last steps. */
static int arrange_fds(struct jail_child *c, struct cordon_err *err)
{
	/* Lift them all out of the way first, so that no dup onto 0..5 clobbers another. */
	int sync = fcntl(c->sync_fd, F_DUPFD_CLOEXEC, 16);
	int init = fcntl(c->init_fd, F_DUPFD_CLOEXEC, 16);
	int chan = fcntl(c->chan_fd, F_DUPFD_CLOEXEC, 16);
	int io[3] = {stdio_source(c, 0), stdio_source(c, 1), stdio_source(c, 2)};
	if (io[0] < 0 || io[1] < 0 || io[2] < 0)
		return cordon_err_set(err, -errno, "stdio");
	if (sync < 0 || init < 0 || chan < 0 || dup3(sync, SYNC_FD, O_CLOEXEC) < 0 ||
	    dup3(init, EXEC_FD, O_CLOEXEC) < 0 || dup2(chan, INIT_STATUS_FD) < 0 ||
	    dup2(io[0], 0) < 0 || dup2(io[1], 1) < 0 || dup2(io[2], 2) < 0)
		return cordon_err_set(err, -errno, "arrange fds");
	c->sync_fd = SYNC_FD;
	c->init_fd = EXEC_FD;
	close_between(EXEC_FD + 1, ~0U);
	return 0;
}

static int switch_user(const struct jail_child *c, struct cordon_err *err)
{
	uid_t id = c->as_user ? 1000 : 0;
	if (!c->privileged)
		return 0; /* the single mapped id is already the one asked for */
	if (set_ids(id) < 0)
		return cordon_err_set(err, -errno, "switch to uid %u", id);
	return 0;
}

static int harden(const struct jail_child *c, struct cordon_err *err)
{
	/* cordon-init hands root's set to the root processes it starts (a build step's root
	 * among them), and gives "user" processes nothing. */
	uint64_t keep = c->caps;
	int r;

	if ((r = caps_drop_bounding(keep, err)) < 0 || (r = switch_user(c, err)) < 0 ||
	    (r = caps_set(keep, err)) < 0)
		return r;
	/* After the last credential change: commit_creds() clears the parent-death signal. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
		return cordon_err_set(err, -errno, "set parent-death signal");
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return cordon_err_set(err, -errno, "set no_new_privs");
	/* A build step writes anywhere in its own overlay root, and so does a sandbox anywhere
	 * in its scratch (every write lands on its own disk, bounded by it). */
	if (!c->overlay && c->root_tree < 0 && (r = landlock_apply(writable_dirs, err)) < 0)
		return r;
	if ((r = seccomp_apply(c->filter, c->filter_len)) < 0)
		return cordon_err_set(err, r, "seccomp: load filter");
	return 0;
}

/* The host's "go", and with it the trees it made (struct jail_go). */
static int recv_go(struct jail_child *c)
{
	struct jail_go go;
	struct iovec iov = {&go, sizeof(go)};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int) * JAIL_GO_MAX_FDS)];
	} u;
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf)};
	if (TEMP_FAILURE_RETRY(recvmsg(c->sync_fd, &msg, MSG_CMSG_CLOEXEC)) != sizeof(go))
		return -EPIPE;
	int fds[JAIL_GO_MAX_FDS];
	size_t n = 0, k = 0;
	struct cmsghdr *h = CMSG_FIRSTHDR(&msg);
	if (h && h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS &&
	    h->cmsg_len >= CMSG_LEN(0)) {
		n = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		memcpy(fds, CMSG_DATA(h), n * sizeof(int));
	}
	if (go.image && k < n)
		c->image_tree = fds[k++];
	c->image_writable = go.image_writable && c->image_tree >= 0;
	if (go.root && k < n)
		c->root_tree = fds[k++];
	for (size_t i = 0; i < ROOTFS_HOST_TREES_N; i++)
		if ((go.host_mask & (1u << i)) && k < n)
			c->host_trees[i] = fds[k++];
	/* Each volume is a tree to move into place, as the binds are (rootfs.h). */
	if (go.n_volumes != c->n_volumes || n - k != go.n_volumes)
		return -EPROTO;
	for (size_t i = 0; i < go.n_volumes; i++)
		c->binds[c->n_binds++] = (struct rootfs_bind){.src_fd = fds[k++],
							      .dst = c->volume_dsts[i], .tree = true};
	return 0;
}

/* Opens the image and the bind sources in our own mount namespace (a bind from a mount of
 * another namespace is EINVAL), before the root tmpfs hides the host's /tmp, and with the
 * host's credentials still ours. */
static int open_sources(struct jail_child *c, struct cordon_err *err)
{
	if (c->overlay && c->image_tree < 0)
		return cordon_err_setf(err, -EPROTO, "overlay root: not received from the host");
	if (c->rootfs && c->image_tree < 0) {
		c->image_fd = open(c->rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (c->image_fd < 0)
			return cordon_err_set(err, -errno, "rootfs '%s'", c->rootfs);
	}
	for (size_t i = 0; i < c->n_bind_hosts; i++) {
		int fd = jail_open_bind_source(c->bind_hosts[i], err);
		if (fd < 0)
			return fd;
		c->binds[i].src_fd = fd;
	}
	return 0;
}

static int build(struct jail_child *c, struct cordon_err *err)
{
	int r;

	/* The host's ends among them: holding the host's end of the sync socket would hide the
	 * host's death from us. */
	close_host_fds(c);
	/* Die with the host from the start; set again after every credential change. Should the
	 * host already be gone, the recv below sees EOF. */
	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	if ((r = recv_go(c)) == -EPROTO)
		return cordon_err_setf(err, r, "volumes: not received from the host");
	if (r < 0)
		_exit(CORDON_EXIT_SETUP); /* the host went away */
	if ((r = cgroup_join_self(c->cg_join_fds, c->n_cg_join_fds)) < 0)
		return cordon_err_set(err, r, "cgroup: join");
	if ((r = open_sources(c, err)) < 0)
		return r;
	c->timens_fd = ns_time_offsets_open(); /* while /proc/self is still ours */
	if ((r = become_root(c, err)) < 0)
		return r;
	if (unshare(CLONE_NEWCGROUP) < 0)
		return cordon_err_set(err, -errno, "unshare cgroup namespace");
	struct rootfs_config rc = {
		.image_fd = c->image_fd,
		.image_tree = c->image_tree,
		.image_writable = c->image_writable,
		.root_tree = c->root_tree,
		.image_is_root = c->overlay,
		.disk_bytes = c->disk_bytes,
		.hostname = c->hostname,
		.ids_mapped = c->privileged,
		.binds = c->binds,
		.n_binds = c->n_binds,
		.resolv_conf = c->resolv_conf[0] ? c->resolv_conf : NULL,
	};
	memcpy(rc.host_trees, c->host_trees, sizeof(rc.host_trees));
	if ((r = rootfs_setup(&rc, err)) < 0)
		return r;
	if (sethostname(rc.hostname, strlen(rc.hostname)) < 0)
		return cordon_err_set(err, -errno, "sethostname");
	if ((r = ns_loopback_up(err)) < 0 || (c->has_link && (r = link_configure_inside(&c->link, err)) < 0) ||
	    (r = ns_time_enter(c->timens_fd, err)) < 0)
		return r;
	close(c->timens_fd); /* a file of the host's /proc: never past this point */
	c->timens_fd = -1;
	if (setsid() < 0)
		return cordon_err_set(err, -errno, "setsid");
	/* No RLIMIT_FSIZE: the writable tmpfs' size is the ceiling, and ENOSPC is what programs
	 * expect at it, not SIGXFSZ. */
	struct rlimit_spec rl = {
		.nofile = 1024, .nproc = c->pids, .fsize = RLIM_INFINITY, .core = 0,
		.memlock = 64 << 10, .msgqueue = 800 << 10, .sigpending = 4096,
	};
	/* The fds first: a host process may hold more than the sandbox may (cordond has
	 * thousands), and every one of them goes before the limit applies. */
	if ((r = arrange_fds(c, err)) < 0 || (r = rlimits_apply(&rl, err)) < 0)
		return r;
	return harden(c, err);
}

void jail_child_main(struct jail_child *host_copy)
{
	/* Ours to change: the host's is read again once we are gone (jail_child_free()). */
	struct jail_child local = *host_copy, *c = &local;
	struct cordon_err err = {};

	runtime_child_reset_signals();
	if (build(c, &err) < 0)
		fail(c->sync_fd, &err);
	struct jail_msg ok = {.kind = JAIL_MSG_OK};
	if (send(c->sync_fd, &ok, sizeof(ok), MSG_NOSIGNAL) < 0)
		_exit(CORDON_EXIT_SETUP);
	/* cordon-init from the sealed memfd: /proc/1/exe names no host file, and the file cannot
	 * be written (CVE-2019-5736's class of attack). */
	syscall(SYS_execveat, c->init_fd, "", c->init_argv, c->envp, AT_EMPTY_PATH);
	cordon_err_set(&err, -errno, "exec cordon-init");
	fail(c->sync_fd, &err);
}

/* ---- host side: everything the child will need, allocated before clone() ---- */

static bool copy_str(char **dst, const char *src)
{
	return !src || (*dst = strdup(src)) != NULL;
}

static bool copy_spec(struct jail_child *c, const struct cordon_spec *spec)
{
	c->one_shot = spec->argv != NULL;
	c->as_user = c->one_shot && spec->user == CORDON_USER_USER;
	c->overlay = spec->overlay != NULL;
	memcpy(c->stdio, spec->stdio, sizeof(c->stdio));
	c->pids = spec->pids;
	c->disk_bytes = spec->disk_bytes;
	c->caps = init_caps(spec);
	if (!copy_str(&c->rootfs, spec->rootfs) ||
	    !copy_str(&c->hostname, spec->hostname ? spec->hostname : "cordon"))
		return false;
	for (size_t i = 0; i < spec->n_binds; i++) {
		c->binds[c->n_binds++] = (struct rootfs_bind){.src_fd = -1,
							      .dst = strdup(spec->binds[i].sandbox)};
		c->bind_hosts[c->n_bind_hosts++] = strdup(spec->binds[i].host);
		if (!c->binds[i].dst || !c->bind_hosts[i])
			return false;
	}
	for (; c->n_volumes < spec->n_volumes; c->n_volumes++)
		if (!copy_str(&c->volume_dsts[c->n_volumes], spec->volumes[c->n_volumes].sandbox))
			return false;
	size_t bytes = (size_t)spec->seccomp->len * sizeof(struct sock_filter);
	if (!(c->filter = malloc(bytes)))
		return false;
	memcpy(c->filter, spec->seccomp->filter, bytes);
	c->filter_len = spec->seccomp->len;
	return true;
}

struct jail_child *jail_child_new(const struct cordon_spec *spec, bool privileged)
{
	struct jail_child *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->privileged = privileged;
	c->sync_fd = c->chan_fd = c->init_fd = c->image_fd = c->image_tree = c->root_tree = -1;
	c->timens_fd = -1;
	for (size_t i = 0; i < ROOTFS_HOST_TREES_N; i++)
		c->host_trees[i] = -1;
	for (size_t i = 0; i < ELEMENTSOF(c->host_fds); i++)
		c->host_fds[i] = -1;
	if (!copy_spec(c, spec)) {
		jail_child_free(c);
		return NULL;
	}
	return c;
}

/* cordon-init's argv points into the spec (the command, its workdir): each string copied. */
int jail_child_env(struct jail_child *c, const struct cordon_spec *spec, struct cordon_err *err)
{
	struct init_args a = {};
	int r = init_args_make(&a, spec, NULL, err);
	c->envp = TAKE_PTR(a.envp);
	if (r < 0) {
		free(a.argv);
		return r;
	}
	size_t n = 0;
	while (a.argv[n])
		n++;
	c->init_argv = calloc(n + 1, sizeof(char *));
	for (size_t i = 0; c->init_argv && i < n; i++)
		if (!(c->init_argv[i] = strdup(a.argv[i])))
			break;
	r = c->init_argv && (n == 0 || c->init_argv[n - 1]) ? 0
		: cordon_err_setf(err, -ENOMEM, "out of memory");
	free(a.argv);
	return r;
}

static void strv_free(char **v)
{
	for (char **p = v; p && *p; p++)
		free(*p);
	free(v);
}

void jail_child_free(struct jail_child *c)
{
	if (!c)
		return;
	strv_free(c->envp);
	strv_free(c->init_argv);
	/* The child's own fds were opened in its fd table, never in ours: -1 here. */
	if (c->image_fd >= 0)
		close(c->image_fd);
	for (size_t i = 0; i < c->n_binds; i++) {
		if (c->binds[i].src_fd >= 0)
			close(c->binds[i].src_fd);
		free((char *)c->binds[i].dst);
	}
	for (size_t i = 0; i < c->n_cg_join_fds; i++)
		close(c->cg_join_fds[i]);
	for (size_t i = 0; i < c->n_bind_hosts; i++)
		free(c->bind_hosts[i]);
	for (size_t i = 0; i < c->n_volumes; i++)
		free(c->volume_dsts[i]);
	free(c->rootfs);
	free(c->hostname);
	free(c->filter);
	free(c);
}
