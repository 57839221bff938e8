/* The `jail` runtime: Linux namespaces, cgroups, seccomp and Landlock around cordon-init.
 *
 * The host side clones the child into new user, pid, mount, net, ipc and uts namespaces, maps
 * its ids, puts it in its cgroup and says "go" on a sync socket. The child builds the rest of
 * the boundary in DESIGN.md section 5's order (child.c) and execs cordon-init from a sealed
 * memfd. Any failure in the child comes back as one struct cordon_err on the sync socket, and
 * the host then tears down everything it made: nothing is left half-made.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>
#include <linux/sched.h>

#include "basic/cleanup.h"
#include "basic/fdwatch.h"
#include "basic/fileio.h"
#include "lib/cgroup.h"
#include "lib/idmap.h"
#include "lib/overlay.h"
#include "lib/initproto.h"
#include "runtime/jail/jail.h"

void cordon_spec_init(struct cordon_spec *spec)
{
	*spec = (struct cordon_spec){
		.memory_bytes = 512ULL << 20,
		.cpus_milli = 1000,
		.pids = 256,
		.disk_bytes = 1ULL << 30,
		.timeout_ms = 300 * 1000,
		.user = CORDON_USER_USER,
		.net = CORDON_NET_NONE,
		.agent_fd = -1,
	};
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int check_spec(const struct cordon_spec *spec, struct cordon_err *err)
{
	if (spec->memory_bytes < (8ULL << 20))
		return cordon_err_setf(err, -EINVAL, "memory: at least 8M is needed");
	if (spec->cpus_milli < 10)
		return cordon_err_setf(err, -EINVAL, "cpus: at least 0.01 is needed");
	if (spec->pids < 2)
		return cordon_err_setf(err, -EINVAL, "pids: at least 2 are needed");
	if (spec->disk_bytes < (1ULL << 20))
		return cordon_err_setf(err, -EINVAL, "disk: at least 1M is needed");
	if (spec->n_binds > CORDON_MAX_BINDS || spec->n_env > CORDON_MAX_ENV)
		return cordon_err_setf(err, -E2BIG, "too many binds or environment entries");
	for (size_t i = 0; i < spec->n_binds; i++) {
		int r = rootfs_check_sandbox_path(spec->binds[i].sandbox, err);
		if (r < 0)
			return r;
	}
	if (spec->net == CORDON_NET_EGRESS && geteuid() != 0)
		return cordon_err_setf(err, -EPERM, "network: only root can give a sandbox a network");
	if (spec->net == CORDON_NET_EGRESS && !spec->net_hook)
		return cordon_err_setf(err, -EINVAL, "network: no egress proxy");
	if (spec->overlay && (geteuid() != 0 || spec->rootfs || !spec->overlay->upper ||
			      !spec->overlay->work || !spec->overlay->stage || spec->overlay->n_lower == 0))
		return cordon_err_setf(err, -EINVAL, "overlay root: needs root, an upper and a work "
				       "directory and at least one layer, and no rootfs");
	if (spec->workdir && spec->workdir[0] != '/')
		return cordon_err_setf(err, -EINVAL, "workdir '%s': not an absolute path", spec->workdir);
	return 0;
}

/* Opens a host path for a read-only bind: a regular file or a directory, nothing else. */
int jail_open_bind_source(const char *path, struct cordon_err *err)
{
	if (!path || path[0] != '/')
		return cordon_err_setf(err, -EINVAL, "bind source '%s': not an absolute path",
				       path ? path : "");
	int fd = open(path, O_PATH | O_CLOEXEC);
	if (fd < 0)
		return cordon_err_set(err, -errno, "bind source '%s'", path);
	struct stat st;
	if (fstat(fd, &st) < 0 || !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))) {
		close(fd);
		return cordon_err_setf(err, -EPERM,
				       "bind source '%s': only regular files and directories can be "
				       "shared (not sockets, devices or fifos)", path);
	}
	return fd;
}

/* fd_close(): an event loop above may watch these (the pidfd, the setup and agent fds), and
 * must have let go of them first (fdwatch.h). */
static void close_fds(int *fds, size_t n)
{
	for (size_t i = 0; i < n; i++)
		fd_close(fds[i]);
}

static bool slot_is_stale(const char *name, void *data)
{
	char *end;
	if (name[0] != 's')
		return false;
	unsigned long slot = strtoul(name + 1, &end, 10);
	if (*end || slot >= CORDON_IDMAP_SLOTS)
		return false;
	struct idmap_slot s;
	if (idmap_slot_try(slot, &s) < 0)
		return false; /* held: a live sandbox */
	/* A dead sandbox's link, should its namespace linger. */
	struct link_addrs a;
	link_addrs_for_slot(slot, &a);
	link_delete(a.host_ifname);
	/* Keep holding it while its cgroup goes; released when the sweep is over. */
	struct idmap_slot *held = data;
	for (size_t i = 0; i < 16; i++)
		if (held[i].lock_fd < 0) {
			held[i] = s;
			return true;
		}
	idmap_slot_release(&s);
	return false;
}

int cordon_prepare(struct cordon_err *err)
{
	cgroup_detect();
	int r = jail_init_memfd(err);
	return r < 0 ? r : 0;
}


int cordon_sweep_stale(void)
{
	if (geteuid() != 0 || cgroup_detect() == CGROUP_NONE)
		return 0;
	struct idmap_slot held[16];
	for (size_t i = 0; i < ELEMENTSOF(held); i++)
		held[i].lock_fd = -1;
	int r = cgroup_sweep(slot_is_stale, held);
	for (size_t i = 0; i < ELEMENTSOF(held); i++)
		idmap_slot_release(&held[i]);
	return r;
}

static int host_prepare(struct cordon_sandbox *sb, const struct cordon_spec *spec,
			struct jail_child *c, struct cordon_err *err)
{
	int r;

	if (sb->privileged) {
		char name[32];
		if ((r = idmap_slot_acquire(&sb->slot, err)) < 0)
			return r;
		snprintf(name, sizeof(name), "s%u", sb->slot.slot);
		struct cgroup_limits lim = {spec->memory_bytes, spec->cpus_milli, spec->pids};
		if ((r = cgroup_create(name, &lim, &sb->cg, err)) < 0)
			return r;
		link_addrs_for_slot(sb->slot.slot, &sb->link);
		/* The resolver is named even without a link, so that a link attached later
		 * (cordon_sandbox_attach_net) needs nothing changed inside. */
		inet_ntop(AF_INET, &sb->link.host, c->resolv_conf + 11, 16);
		memcpy(c->resolv_conf, "nameserver ", 11);
		strcat(c->resolv_conf, "\n");
	}
	if (spec->net == CORDON_NET_EGRESS) {
		inet_ntop(AF_INET, &sb->link.sandbox, sb->ip, sizeof(sb->ip));
		c->link = &sb->link;
	}
	if (sb->cg && (r = cgroup_open_join_fds(sb->cg, c->cg_join_fds, &c->n_cg_join_fds)) < 0)
		return cordon_err_set(err, r, "cgroup: open tasks files");
	if ((r = jail_init_memfd(err)) < 0)
		return r;
	c->init_fd = r;
	/* Checked here for a clear error before anything is made; opened again in the child,
	 * since a bind must come from a mount of the child's own mount namespace. */
	if (spec->rootfs) {
		_cleanup_close_ int fd = open(spec->rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0)
			return cordon_err_set(err, -errno, "rootfs '%s'", spec->rootfs);
	}
	for (size_t i = 0; i < spec->n_binds; i++) {
		r = jail_open_bind_source(spec->binds[i].host, err);
		if (r < 0)
			return r;
		close(r);
		c->binds[i] = (struct rootfs_bind){.src_fd = -1, .dst = spec->binds[i].sandbox};
		c->n_binds++;
	}
	return 0;
}

/* Everything the host must do between clone() and "go": ids, cgroup. */
static int host_adopt(struct cordon_sandbox *sb, const struct cordon_spec *spec,
		      struct cordon_err *err)
{
	uid_t inside = spec->user == CORDON_USER_ROOT || !spec->argv ? 0 : 1000;
	int r = idmap_write(sb->pid, sb->privileged ? &sb->slot : NULL, inside, err);
	if (r < 0)
		return r;
	/* v2 children were born in their cgroup (clone3), v1 children join it themselves. */
	if (sb->cg && sb->cg_attach_needed && (r = cgroup_attach(sb->cg, sb->pid, err)) < 0)
		return r;
	if (spec->net != CORDON_NET_EGRESS)
		return 0;
	/* The redirect to the proxy first, then the link: the interface never exists with a
	 * stale redirect of a dead sandbox of this slot (to a port someone else may hold now). */
	if ((r = spec->net_hook(spec->net_hook_data, sb->ip, sb->link.host_ifname, err)) < 0)
		return r;
	if ((r = link_create(sb->pid, &sb->link, err)) < 0)
		return r;
	sb->linked = true;
	return 0;
}

uid_t cordon_sandbox_host_uid(const struct cordon_sandbox *sb)
{
	return sb->privileged ? idmap_slot_base(&sb->slot) : geteuid();
}

static int open_userns(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/* An idmapped, read-only clone of the --rootfs tree for the child: files owned by host
 * uid N there are owned by sandbox uid N inside (root by root), without copying and without
 * sandbox root being host root. Only the host can make it (CAP_SYS_ADMIN over the file
 * system); it needs the child's user namespace, so it is made after clone(). -errno when
 * the kernel (before 5.12) or the file system cannot: the image is then shown as it is,
 * owned by ids the sandbox does not have. */
static int idmapped_tree(pid_t pid, const char *dir)
{
	_cleanup_close_ int userns = open_userns(pid);
	return userns < 0 ? userns : mount_clone_ro(dir, userns, NULL);
}

/* Build mode: the overlay root, its layers idmapped into the child's user namespace. The
 * upper directory's root becomes the sandbox root's, so that it may write at the top. */
static int overlay_root(struct cordon_sandbox *sb, const struct cordon_overlay *ov,
			struct cordon_err *err)
{
	uid_t base = idmap_slot_base(&sb->slot);
	_cleanup_close_ int userns = open_userns(sb->pid);
	if (userns < 0)
		return cordon_err_set(err, userns, "overlay: open the sandbox's user namespace");
	if (chown(ov->upper, base, base) < 0)
		return cordon_err_set(err, -errno, "overlay: chown '%s'", ov->upper);
	return overlay_tree(ov->lower, ov->n_lower, ov->upper, ov->work, userns, ov->stage, err);
}

/* "go", with the idmapped image tree (SCM_RIGHTS) when there is one. */
static int host_go(struct cordon_sandbox *sb, const struct cordon_spec *spec, struct cordon_err *err)
{
	char go = 1;
	struct iovec iov = {&go, 1};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u = {0};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	_cleanup_close_ int tree = sb->privileged && spec->rootfs ? idmapped_tree(sb->pid, spec->rootfs) : -1;
	if (spec->overlay && (tree = overlay_root(sb, spec->overlay, err)) < 0)
		return tree;
	if (tree >= 0) {
		msg.msg_control = u.buf;
		msg.msg_controllen = sizeof(u.buf);
		struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &tree, sizeof(int));
	}
	if (sendmsg(sb->sync_fd, &msg, MSG_NOSIGNAL) != 1)
		return cordon_err_set(err, -errno, "sandbox: start child");
	return 0;
}

/* Reads the child's verdict without blocking: a JAIL_MSG_OK before exec, then EOF when exec
 * closed the CLOEXEC socket. Anything else is the child's error. -EAGAIN: not yet. */
static int host_sync_step(struct cordon_sandbox *sb, struct cordon_err *err)
{
	while (sb->setup_stage < 2) {
		struct jail_msg m;
		ssize_t n = recv(sb->sync_fd, &m, sizeof(m), MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return -EAGAIN;
		if (n == 0 && sb->setup_stage == 1) {
			sb->setup_stage = 2; /* exec'd */
			break;
		}
		if (n != sizeof(m))
			return cordon_err_setf(err, -EPROTO, "sandbox: child died during setup");
		if (m.kind == JAIL_MSG_ERR) {
			m.err.msg[sizeof(m.err.msg) - 1] = '\0';
			if (err)
				*err = m.err;
			return m.err.code < 0 ? m.err.code : -EPROTO;
		}
		if (m.kind != JAIL_MSG_OK || sb->setup_stage != 0)
			return cordon_err_setf(err, -EPROTO, "sandbox: bad message from child");
		sb->setup_stage = 1;
	}
	return 0;
}

#define CLONE_FLAGS                                                                                \
	(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | \
	 CLONE_PIDFD)

/* A fork-like clone: the child runs on a copy of our stack. CLONE_NEWCGROUP and the time
 * namespace come later, in the child: the first after the cgroup move, the second because
 * clone() has no flag bit left for it. On cgroup v2 the child is born in its cgroup
 * (CLONE_INTO_CGROUP, 5.7+), which skips the slow migration path. */
static pid_t clone_child(struct cordon_sandbox *sb)
{
	int cgfd = sb->cg ? cgroup_clone_fd(sb->cg) : -1;
	if (cgfd >= 0) {
		struct clone_args args = {
			.flags = CLONE_FLAGS | CLONE_INTO_CGROUP,
			.pidfd = (uint64_t)(uintptr_t)&sb->pidfd,
			.exit_signal = SIGCHLD,
			.cgroup = (uint64_t)cgfd,
		};
		pid_t pid = syscall(SYS_clone3, &args, sizeof(args));
		if (pid >= 0 || (errno != ENOSYS && errno != E2BIG && errno != EINVAL))
			return pid;
		sb->cg_attach_needed = true; /* older kernel: the host moves the child */
	}
	return syscall(SYS_clone, CLONE_FLAGS | SIGCHLD, NULL, &sb->pidfd, NULL, NULL);
}

int cordon_sandbox_start(const struct cordon_spec *spec, struct cordon_sandbox **ret_sb,
			 struct cordon_err *err)
{
	int r = check_spec(spec, err);
	if (r < 0)
		return r;

	_cleanup_free_ struct cordon_sandbox *sb = calloc(1, sizeof(*sb));
	if (!sb)
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	*sb = (struct cordon_sandbox){.pid = -1, .pidfd = -1, .agent_fd = -1, .status_fd = -1,
				      .sync_fd = -1, .slot.lock_fd = -1,
				      .privileged = geteuid() == 0};
	sb->start_ms = now_ms();
	sb->deadline_ms = spec->timeout_ms ? sb->start_ms + spec->timeout_ms : 0;

	struct jail_child c = {.spec = spec, .sync_fd = -1, .chan_fd = -1, .image_fd = -1,
			       .image_tree = -1,
			       .host_fds = {-1, -1, -1}, .privileged = sb->privileged};
	int sync[2] = {-1, -1}, chan[2] = {-1, -1};
	if ((r = host_prepare(sb, spec, &c, err)) < 0)
		goto fail;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sync) < 0 ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, chan) < 0) {
		r = cordon_err_set(err, -errno, "socketpair");
		goto fail;
	}
	c.sync_fd = sync[1];
	c.chan_fd = chan[1];
	c.host_fds[0] = sync[0];
	c.host_fds[1] = chan[0];
	c.host_fds[2] = sb->slot.lock_fd;
	if ((r = jail_child_env(&c, spec, err)) < 0)
		goto fail;

	sb->pid = clone_child(sb);
	if (sb->pid < 0) {
		r = cordon_err_set(err, -errno, "clone namespaces");
		goto fail;
	}
	if (sb->pid == 0)
		jail_child_main(&c); /* never returns */

	close(TAKE_FD(sync[1]));
	close(TAKE_FD(chan[1]));
	sb->sync_fd = TAKE_FD(sync[0]);
	if ((r = host_adopt(sb, spec, err)) < 0 || (r = host_go(sb, spec, err)) < 0)
		goto fail;
	jail_child_free(&c);
	if (spec->argv)
		sb->status_fd = TAKE_FD(chan[0]);
	else
		sb->agent_fd = TAKE_FD(chan[0]);
	*ret_sb = TAKE_PTR(sb);
	return 0;

fail:
	close_fds(sync, 2);
	close_fds(chan, 2);
	jail_child_free(&c);
	cordon_sandbox_free(TAKE_PTR(sb));
	return r;
}

int cordon_sandbox_setup_fd(const struct cordon_sandbox *sb)
{
	return sb->sync_fd;
}

/* The setup fd is not closed here: the caller's event loop still watches it, and a close
 * before its unwatch leaves a registration that can fire for the fd number's next owner
 * (fdwatch.h). The caller closes it with cordon_sandbox_setup_close(), or free does. */
int cordon_sandbox_finish(struct cordon_sandbox *sb, struct cordon_err *err)
{
	if (sb->setup_stage == 2)
		return 0;
	if (sb->sync_fd < 0)
		return -EPROTO;
	return host_sync_step(sb, err);
}

void cordon_sandbox_setup_close(struct cordon_sandbox *sb)
{
	fd_close(TAKE_FD(sb->sync_fd));
}

int cordon_sandbox_create(const struct cordon_spec *spec, struct cordon_sandbox **ret_sb,
			  struct cordon_err *err)
{
	struct cordon_sandbox *sb;
	int r = cordon_sandbox_start(spec, &sb, err);
	if (r < 0)
		return r;
	while ((r = cordon_sandbox_finish(sb, err)) == -EAGAIN) {
		struct pollfd p = {sb->sync_fd, POLLIN, 0};
		poll(&p, 1, -1);
	}
	cordon_sandbox_setup_close(sb);
	if (r < 0) {
		cordon_sandbox_free(sb);
		return r;
	}
	*ret_sb = sb;
	return 0;
}

const char *cordon_sandbox_ip(const struct cordon_sandbox *sb)
{
	return sb->ip[0] ? sb->ip : NULL;
}

int cordon_sandbox_agent_fd(const struct cordon_sandbox *sb)
{
	return sb->agent_fd;
}

pid_t cordon_sandbox_pid(const struct cordon_sandbox *sb)
{
	return sb->pid;
}

int cordon_sandbox_pidfd(const struct cordon_sandbox *sb)
{
	return sb->pidfd;
}

int cordon_sandbox_set_limits(struct cordon_sandbox *sb, uint64_t memory_bytes,
			      uint32_t cpus_milli, uint32_t pids)
{
	if (!sb->cg)
		return -ENOTSUP;
	struct cgroup_limits lim = {memory_bytes, cpus_milli, pids};
	return cgroup_set_limits(sb->cg, &lim, NULL);
}

int cordon_sandbox_stats(struct cordon_sandbox *sb, struct cordon_stats *ret)
{
	struct cgroup_stats cs = {};
	if (sb->cg)
		cgroup_stats(sb->cg, &cs);
	*ret = (struct cordon_stats){cs.oom_kills, cs.cpu_usec / 1000, cs.peak_memory_bytes};
	return 0;
}

int cordon_sandbox_attach_net(struct cordon_sandbox *sb, cordon_net_hook hook, void *data,
			      struct cordon_err *err)
{
	char path[64], ip[16];
	int r;
	if (sb->linked)
		return 0;
	if (!sb->privileged || !hook)
		return cordon_err_setf(err, -EPERM, "network: only root can give a sandbox a network");
	inet_ntop(AF_INET, &sb->link.sandbox, ip, sizeof(ip));
	if ((r = hook(data, ip, sb->link.host_ifname, err)) < 0 ||
	    (r = link_create(sb->pid, &sb->link, err)) < 0)
		return r;
	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)sb->pid);
	_cleanup_close_ int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	_cleanup_close_ int target = open(path, O_RDONLY | O_CLOEXEC);
	if (self < 0 || target < 0)
		return cordon_err_set(err, -errno, "network: open network namespaces");
	/* Only this thread enters the sandbox's namespace, for the few ioctls of eth0. */
	if (setns(target, CLONE_NEWNET) < 0)
		return cordon_err_set(err, -errno, "network: enter the sandbox's namespace");
	r = link_configure_inside(&sb->link, err);
	if (setns(self, CLONE_NEWNET) < 0)
		abort(); /* a host thread left in a sandbox's network: never go on */
	if (r < 0)
		return r;
	memcpy(sb->ip, ip, sizeof(ip));
	sb->linked = true;
	return 0;
}

uint64_t cordon_sandbox_oom_kills(struct cordon_sandbox *sb)
{
	return sb->cg ? cgroup_oom_kills(sb->cg) : 0;
}

int cordon_sandbox_kill(struct cordon_sandbox *sb)
{
	/* PID 1 of a pid namespace takes every process of it along when it dies: this reaches
	 * double-forked, setsid'd daemons too. The cgroup kill is the second fence. */
	if (sb->pidfd >= 0 && !sb->reaped)
		syscall(SYS_pidfd_send_signal, sb->pidfd, SIGKILL, NULL, 0);
	if (sb->cg)
		cgroup_kill(sb->cg);
	return 0;
}

static void fill_result(struct cordon_sandbox *sb, const siginfo_t *si, const struct rusage *ru)
{
	struct cordon_result *res = &sb->result;
	struct init_status st = {};

	*res = (struct cordon_result){.exit_code = -1, .timed_out = sb->timed_out};
	res->wall_ms = now_ms() - sb->start_ms;
	res->cpu_ms = (ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) * 1000 +
		      (ru->ru_utime.tv_usec + ru->ru_stime.tv_usec) / 1000;
	if (sb->status_fd >= 0 &&
	    recv(sb->status_fd, &st, sizeof(st), MSG_DONTWAIT) == (ssize_t)sizeof(st)) {
		/* Hostile bytes: clamp to what an exit code and a signal can be. */
		if (st.kind == INIT_EXITED)
			res->exit_code = st.value & 0xff;
		else if (st.kind == INIT_SIGNALED && st.value > 0 && st.value < 65)
			res->signal = st.value;
		else if (st.kind == INIT_EXEC_FAILED)
			res->exit_code = st.value == ENOENT ? CORDON_EXIT_NOTFOUND : CORDON_EXIT_NOEXEC;
		else if (st.kind == INIT_CWD_FAILED)
			res->exit_code = CORDON_EXIT_SETUP;
	} else if (si->si_code == CLD_EXITED) {
		res->exit_code = si->si_status;
	} else {
		res->signal = si->si_status;
	}
	if (sb->cg) {
		struct cgroup_stats cs;
		if (cgroup_stats(sb->cg, &cs) == 0) {
			res->oom_killed = cs.oom_kills > 0;
			res->cpu_ms = cs.cpu_usec / 1000;
			res->peak_memory_bytes = cs.peak_memory_bytes;
		}
	}
}

static int reap(struct cordon_sandbox *sb)
{
	siginfo_t si = {};
	struct rusage ru = {};
	if (syscall(SYS_waitid, P_PIDFD, sb->pidfd, &si, WEXITED, &ru) < 0)
		return -errno;
	sb->reaped = true;
	fill_result(sb, &si, &ru);
	return 0;
}

static void forward_signal(struct cordon_sandbox *sb, int sigfd)
{
	struct signalfd_siginfo ssi;
	if (read(sigfd, &ssi, sizeof(ssi)) != sizeof(ssi))
		return;
	int sig = ssi.ssi_signo;
	if ((sig == SIGINT || sig == SIGTERM) && sb->signals_forwarded++ > 0) {
		cordon_sandbox_kill(sb);
		return;
	}
	syscall(SYS_pidfd_send_signal, sb->pidfd, sig, NULL, 0);
}

int cordon_sandbox_wait(struct cordon_sandbox *sb, int sigfd, struct cordon_result *ret)
{
	while (!sb->reaped) {
		struct pollfd p[2] = {{sb->pidfd, POLLIN, 0}, {sigfd, POLLIN, 0}};
		int timeout = -1;
		if (sb->deadline_ms) {
			uint64_t now = now_ms();
			timeout = now >= sb->deadline_ms ? 0 : (int)(sb->deadline_ms - now);
		}
		int n = poll(p, sigfd >= 0 ? 2 : 1, timeout);
		if (n < 0 && errno != EINTR)
			return -errno;
		if (n == 0) {
			sb->timed_out = true;
			cordon_sandbox_kill(sb);
			sb->deadline_ms = 0;
			continue;
		}
		if (n > 0 && sigfd >= 0 && (p[1].revents & POLLIN))
			forward_signal(sb, sigfd);
		if (n > 0 && (p[0].revents & POLLIN)) {
			int r = reap(sb);
			if (r < 0)
				return r;
		}
	}
	*ret = sb->result;
	return 0;
}

struct cordon_sandbox *cordon_sandbox_free(struct cordon_sandbox *sb)
{
	if (!sb)
		return NULL;
	if (sb->pid > 0 && !sb->reaped) {
		cordon_sandbox_kill(sb);
		reap(sb);
	}
	/* The cgroup goes before the slot: whoever takes the slot next must not find it. The
	 * veth pair went with the sandbox's network namespace; its redirect is the controller's. */
	cgroup_free(sb->cg);
	idmap_slot_release(&sb->slot);
	int fds[] = {sb->pidfd, sb->agent_fd, sb->status_fd, sb->sync_fd};
	close_fds(fds, ELEMENTSOF(fds));
	free(sb);
	return NULL;
}
