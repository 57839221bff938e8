/* The `jail` runtime: Linux namespaces, cgroups, seccomp and Landlock around cordon-init.
 *
 * The host side clones the child into new user, pid, mount, net, ipc and uts namespaces, maps
 * its ids, puts it in its cgroup and says "go" on a sync socket. The child builds the rest of
 * the boundary in DESIGN.md section 5's order (child.c) and execs cordon-init from a sealed
 * memfd. Any failure in the child comes back as one struct cordon_err on the sync socket, and
 * the host then tears down everything it made: nothing is left half-made.
 *
 * This file is the jail's entry of the runtime registry (jail_ops, runtime.h): the verbs
 * map onto PID 1 (its pidfd is the exit fd) and the sync socket (the setup fd); the slot,
 * cgroup and link are host.c's, the public API and the deadline runtime.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <unistd.h>
#include <linux/sched.h>

#include "basic/cleanup.h"
#include "basic/fdwatch.h"
#include "basic/fileio.h"
#include "lib/cgroup.h"
#include "lib/idmap.h"
#include "lib/overlay.h"
#include "runtime/volume.h"
#include "lib/initproto.h"
#include "runtime/jail/jail.h"
#include "runtime/initargs.h"
#include "runtime/runtime.h"

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

static int host_prepare(struct jail *j, const struct cordon_spec *spec, struct jail_child *c,
			struct cordon_err *err)
{
	struct runtime_host *h = &j->sb.host;
	int r;

	if ((r = runtime_host_acquire(h, spec, err)) < 0)
		return r;
	/* A volume's files are shown through the sandbox's own id range: root's to give. */
	if (spec->n_volumes && (!h->privileged || spec->overlay))
		return cordon_err_setf(err, -EPERM, "volumes: only root can mount them, and not in "
				       "build mode");
	/* The disk before clone(): the copy and the mount are what takes time, and none of it
	 * needs the child. A build's root is its own overlay. */
	if (h->privileged && !spec->overlay &&
	    (r = scratch_open(&j->scratch, h->slot.slot, spec->disk_bytes, err)) < 0)
		return r;
	if (h->privileged) {
		/* The resolver is named even without a link, so that a link attached later
		 * (cordon_sandbox_attach_net) needs nothing changed inside. */
		inet_ntop(AF_INET, &h->link.host, c->resolv_conf + 11, 16);
		memcpy(c->resolv_conf, "nameserver ", 11);
		strcat(c->resolv_conf, "\n");
	}
	if (spec->net == CORDON_NET_EGRESS) {
		c->has_link = true;
		c->link = h->link;
	}
	if (h->cg && (r = cgroup_open_join_fds(h->cg, c->cg_join_fds, &c->n_cg_join_fds)) < 0)
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
	}
	return 0;
}

/* Everything the host must do between clone() and "go": ids, cgroup, link. */
static int host_adopt(struct jail *j, const struct cordon_spec *spec, struct cordon_err *err)
{
	struct runtime_host *h = &j->sb.host;
	uid_t inside = spec->user == CORDON_USER_ROOT || !spec->argv ? 0 : 1000;
	int r = idmap_write(j->sb.pid, h->privileged ? &h->slot : NULL, inside, err);
	if (r < 0)
		return r;
	/* v2 children were born in their cgroup (clone3), v1 children join it themselves. */
	if (h->cg && j->cg_attach_needed && (r = cgroup_attach(h->cg, j->sb.pid, err)) < 0)
		return r;
	if (spec->net != CORDON_NET_EGRESS)
		return 0;
	return runtime_host_link(h, j->sb.pid, spec->net_hook, spec->net_hook_data, err);
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
/* Build mode: the overlay root, its layers idmapped into the child's user namespace. The
 * upper directory's root becomes the sandbox root's, so that it may write at the top. */
static int overlay_root(struct jail *j, const struct cordon_overlay *ov, struct cordon_err *err)
{
	uid_t base = idmap_slot_base(&j->sb.host.slot);
	_cleanup_close_ int userns = open_userns(j->sb.pid);
	if (userns < 0)
		return cordon_err_set(err, userns, "overlay: open the sandbox's user namespace");
	if (chown(ov->upper, base, base) < 0)
		return cordon_err_set(err, -errno, "overlay: chown '%s'", ov->upper);
	return overlay_tree(ov->lower, ov->n_lower, ov->upper, ov->work, userns, ov->stage, err);
}

/* The trees of the disk-backed scratch, made now that the child's user namespace exists. */
static int scratch_make(struct jail *j, const struct cordon_spec *spec, struct scratch_trees *t,
			struct cordon_err *err)
{
	if (j->scratch.mnt < 0)
		return j->restore_fd < 0 ? 0 : cordon_err_setf(err, -EOPNOTSUPP,
			"restore: a snapshot needs the disk-backed scratch, which this host cannot give");
	_cleanup_close_ int userns = open_userns(j->sb.pid);
	if (userns < 0)
		return cordon_err_set(err, userns, "scratch: open the sandbox's user namespace");
	int r = scratch_trees(&j->scratch, userns, idmap_slot_base(&j->sb.host.slot), spec->rootfs,
			      j->restore_fd, t, err);
	j->disk_fd = TAKE_FD(j->scratch.img); /* the mount stays for snapshots */
	return r;
}

/* The volumes' trees, idmapped through the child's user namespace, appended to @fds. */
static int volume_trees(struct jail *j, const struct cordon_spec *spec, int *fds, int *n,
			struct cordon_err *err)
{
	if (spec->n_volumes == 0)
		return 0;
	_cleanup_close_ int userns = open_userns(j->sb.pid);
	if (userns < 0)
		return cordon_err_set(err, userns, "volumes: open the sandbox's user namespace");
	for (size_t i = 0; i < spec->n_volumes; i++) {
		const struct cordon_volume *v = &spec->volumes[i];
		int t = volume_tree(v->source, userns, v->read_only, err);
		if (t < 0) {
			while (i-- > 0)
				close(fds[--*n]);
			return t;
		}
		fds[(*n)++] = t;
	}
	return 0;
}

/* "go", with the trees (SCM_RIGHTS) the child mounts: struct jail_go. */
static int host_go(struct jail *j, const struct cordon_spec *spec, struct cordon_err *err)
{
	struct jail_go go = {0};
	struct iovec iov = {&go, sizeof(go)};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int) * JAIL_GO_MAX_FDS)];
	} u = {0};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	struct scratch_trees t = SCRATCH_TREES_NONE;
	int fds[JAIL_GO_MAX_FDS], n = 0, r;

	if ((r = scratch_make(j, spec, &t, err)) < 0)
		return r;
	go.image_writable = t.image >= 0;
	_cleanup_close_ int tree = t.image >= 0 ? TAKE_FD(t.image)
			       : j->sb.host.privileged && spec->rootfs ?
					   idmapped_tree(j->sb.pid, spec->rootfs) : -1;
	if (spec->overlay && (tree = overlay_root(j, spec->overlay, err)) < 0) {
		scratch_trees_close(&t);
		return tree;
	}
	if (tree >= 0) {
		go.image = 1;
		fds[n++] = tree;
	}
	if (t.root >= 0) {
		go.root = 1;
		fds[n++] = t.root;
	}
	for (size_t i = 0; i < ROOTFS_HOST_TREES_N; i++)
		if (t.host[i] >= 0) {
			go.host_mask |= 1u << i;
			fds[n++] = t.host[i];
		}
	int first_vol = n;
	if ((r = volume_trees(j, spec, fds, &n, err)) < 0) {
		scratch_trees_close(&t);
		return r;
	}
	go.n_volumes = (uint8_t)(n - first_vol);
	if (n > 0) {
		msg.msg_control = u.buf;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * n);
		struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * n);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
	}
	r = sendmsg(j->sync_fd, &msg, MSG_NOSIGNAL) == sizeof(go) ? 0 : -errno;
	for (int i = first_vol; i < n; i++)
		close(fds[i]);
	scratch_trees_close(&t);
	if (r < 0)
		return cordon_err_set(err, r, "sandbox: start child");
	return 0;
}

/* Reads the child's verdict without blocking: a JAIL_MSG_OK before exec, then EOF when exec
 * closed the CLOEXEC socket. Anything else is the child's error. -EAGAIN: not yet. */
static int host_sync_step(struct jail *j, struct cordon_err *err)
{
	while (j->setup_stage < 2) {
		struct jail_msg m;
		ssize_t n = recv(j->sync_fd, &m, sizeof(m), MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return -EAGAIN;
		if (n == 0 && j->setup_stage == 1) {
			j->setup_stage = 2; /* exec'd */
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
		if (m.kind != JAIL_MSG_OK || j->setup_stage != 0)
			return cordon_err_setf(err, -EPROTO, "sandbox: bad message from child");
		j->setup_stage = 1;
	}
	return 0;
}

#define CLONE_FLAGS                                                                                \
	(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | \
	 CLONE_PIDFD)

/* The fork-like clone of a host where jail_spawn() cannot be: the child runs on a copy of
 * our stack and memory. */
static pid_t clone_copy(struct jail *j, int cgfd)
{
	if (cgfd >= 0) {
		struct clone_args args = {
			.flags = CLONE_FLAGS | CLONE_INTO_CGROUP,
			.pidfd = (uint64_t)(uintptr_t)&j->pidfd,
			.exit_signal = SIGCHLD,
			.cgroup = (uint64_t)cgfd,
		};
		pid_t pid = syscall(SYS_clone3, &args, sizeof(args));
		if (pid >= 0 || (errno != ENOSYS && errno != E2BIG && errno != EINVAL))
			return pid;
		j->cg_attach_needed = true; /* older kernel: the host moves the child */
	}
	return syscall(SYS_clone, CLONE_FLAGS | SIGCHLD, NULL, &j->pidfd, NULL, NULL);
}

/* The child, started in our memory where the host can (spawn.c: no copy of this process's
 * page tables, whatever its size), else in a copy of it. Takes @c on success (*@c is then
 * NULL). CLONE_NEWCGROUP and the time namespace come later, in the child: the first after
 * the cgroup move, the second because clone() has no flag bit left for it. On cgroup v2 the
 * child is born in its cgroup (CLONE_INTO_CGROUP, 5.7+), which skips the slow migration
 * path. */
static pid_t clone_child(struct jail *j, struct jail_child **c)
{
	int cgfd = j->sb.host.cg ? cgroup_clone_fd(j->sb.host.cg) : -1;
	bool into = false;
	pid_t pid = jail_spawn(*c, CLONE_FLAGS, cgfd, &j->pidfd, &into);
	if (pid >= 0) {
		*c = NULL;
		j->cg_attach_needed = cgfd >= 0 && !into;
		return pid;
	}
	if (pid != -ENOSYS) {
		errno = -pid;
		return -1;
	}
	pid = clone_copy(j, cgfd);
	if (pid == 0)
		jail_child_main(*c); /* never returns */
	return pid;
}

/* start and restore: @from is a snapshot's directory to fill the scratch from, or -1. */
static int start_from(struct cordon_sandbox *sb, const struct cordon_spec *spec, int from,
		      struct cordon_err *err)
{
	struct jail *j = jail_of(sb);
	j->pidfd = j->agent_fd = j->status_fd = j->sync_fd = -1;
	j->scratch.mnt = j->scratch.img = j->disk_fd = -1;
	j->restore_fd = from;

	struct jail_child *c = jail_child_new(spec, sb->host.privileged);
	int sync[2] = {-1, -1}, chan[2] = {-1, -1};
	int r;
	if (!c) {
		r = cordon_err_setf(err, -ENOMEM, "out of memory");
		goto fail;
	}
	if ((r = host_prepare(j, spec, c, err)) < 0)
		goto fail;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sync) < 0 ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, chan) < 0) {
		r = cordon_err_set(err, -errno, "socketpair");
		goto fail;
	}
	c->sync_fd = sync[1];
	c->chan_fd = chan[1];
	c->host_fds[0] = sync[0];
	c->host_fds[1] = chan[0];
	c->host_fds[2] = sb->host.slot.lock_fd;
	if ((r = jail_child_env(c, spec, err)) < 0)
		goto fail;

	sb->pid = clone_child(j, &c);
	if (sb->pid < 0) {
		r = cordon_err_set(err, -errno, "clone namespaces");
		goto fail;
	}
	close(TAKE_FD(sync[1]));
	close(TAKE_FD(chan[1]));
	j->sync_fd = TAKE_FD(sync[0]);
	if ((r = host_adopt(j, spec, err)) < 0 || (r = host_go(j, spec, err)) < 0)
		goto fail;
	jail_child_free(c);
	j->restore_fd = -1; /* the caller's, used during start only */
	if (spec->argv)
		j->status_fd = TAKE_FD(chan[0]);
	else
		j->agent_fd = TAKE_FD(chan[0]);
	return 0;

fail:
	j->restore_fd = -1;
	scratch_close(&j->scratch);
	if (j->scratch.img >= 0)
		close(TAKE_FD(j->scratch.img));
	close_fds(sync, 2);
	close_fds(chan, 2);
	jail_child_free(c);
	return r; /* runtime.c frees the sandbox */
}

static int jail_start(struct cordon_sandbox *sb, const struct cordon_spec *spec,
		      struct cordon_err *err)
{
	return start_from(sb, spec, -1, err);
}

static int jail_setup_fd(const struct cordon_sandbox *sb)
{
	return jail_of_const(sb)->sync_fd;
}

/* The setup fd is not closed here: the caller's event loop still watches it, and a close
 * before its unwatch leaves a registration that can fire for the fd number's next owner.
 * The caller closes it with cordon_sandbox_setup_close(), or free does. */
static int jail_finish(struct cordon_sandbox *sb, struct cordon_err *err)
{
	struct jail *j = jail_of(sb);
	if (j->setup_stage == 2)
		return 0;
	if (j->sync_fd < 0)
		return -EPROTO;
	return host_sync_step(j, err);
}

static void jail_setup_close(struct cordon_sandbox *sb)
{
	struct jail *j = jail_of(sb);
	fd_close(TAKE_FD(j->sync_fd));
}

static int jail_agent_fd(const struct cordon_sandbox *sb)
{
	return jail_of_const(sb)->agent_fd;
}

static int jail_exit_fd(const struct cordon_sandbox *sb)
{
	return jail_of_const(sb)->pidfd;
}

static int jail_signal(struct cordon_sandbox *sb, int sig)
{
	if (syscall(SYS_pidfd_send_signal, jail_of(sb)->pidfd, sig, NULL, 0) < 0)
		return -errno;
	return 0;
}

/* PID 1 of a pid namespace takes every process of it along when it dies: this reaches
 * double-forked, setsid'd daemons too. The cgroup kill (runtime.c) is the second fence. */
static int jail_kill(struct cordon_sandbox *sb)
{
	return jail_of(sb)->pidfd >= 0 ? jail_signal(sb, SIGKILL) : 0;
}

/* The command's end as cordon-init reported it on the status fd, else PID 1's own. */
static void fill_result(struct jail *j, const siginfo_t *si, const struct rusage *ru,
			struct cordon_result *res)
{
	res->cpu_ms = (ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) * 1000 +
		      (ru->ru_utime.tv_usec + ru->ru_stime.tv_usec) / 1000;
	if (j->status_fd >= 0 && init_status_read(j->status_fd, res) == 0) {
		/* cordon-init's word */
	} else if (si->si_code == CLD_EXITED) {
		res->exit_code = si->si_status;
	} else {
		res->signal = si->si_status;
	}
}

static int jail_reap(struct cordon_sandbox *sb, struct cordon_result *ret)
{
	struct jail *j = jail_of(sb);
	siginfo_t si = {};
	struct rusage ru = {};
	if (syscall(SYS_waitid, P_PIDFD, j->pidfd, &si, WEXITED, &ru) < 0)
		return -errno;
	fill_result(j, &si, &ru, ret);
	return 0;
}

static void jail_free(struct cordon_sandbox *sb)
{
	struct jail *j = jail_of(sb);
	int fds[] = {j->pidfd, j->agent_fd, j->status_fd, j->sync_fd, j->disk_fd};
	close_fds(fds, ELEMENTSOF(fds));
	scratch_close(&j->scratch);
}

/* The freezer of the sandbox's cgroup: every process stops where it is. */
static int jail_pause(struct cordon_sandbox *sb)
{
	return runtime_host_freeze(&sb->host, true);
}

static int jail_resume(struct cordon_sandbox *sb)
{
	return runtime_host_freeze(&sb->host, false);
}

/* The filesystem only: a jail's memory is its processes', which no kernel interface of
 * ours can save (the snapshot says "memory": false). */
static int jail_snapshot(struct cordon_sandbox *sb, int dirfd, struct cordon_snapshot_info *ret,
			 struct cordon_err *err)
{
	ret->memory = false;
	return scratch_snapshot(&jail_of(sb)->scratch, runtime_host_uid(&sb->host), dirfd,
				&ret->bytes, err);
}

static int jail_restore(struct cordon_sandbox *sb, const struct cordon_spec *spec, int dirfd,
			struct cordon_err *err)
{
	return start_from(sb, spec, dirfd, err);
}

static uint64_t jail_disk_used(const struct cordon_sandbox *sb)
{
	return scratch_disk_used(jail_of_const(sb)->disk_fd);
}

static int jail_set_limits(struct cordon_sandbox *sb, uint64_t memory_bytes, uint32_t cpus_milli,
			   uint32_t pids)
{
	return runtime_host_set_limits(&sb->host, memory_bytes, cpus_milli, pids);
}

static int jail_stats(struct cordon_sandbox *sb, struct cordon_stats *ret)
{
	return runtime_host_stats(&sb->host, ret);
}

/* The link, then eth0 configured inside (host.c). */
static int jail_attach_net(struct cordon_sandbox *sb, cordon_net_hook hook, void *data,
			   struct cordon_err *err)
{
	int r = runtime_host_link(&sb->host, sb->pid, hook, data, err);
	return r < 0 ? r : runtime_host_link_inside(&sb->host, sb->pid, err);
}

/* Namespaces are what the jail needs of the kernel; as a user, also the right to make a user
 * namespace (a distribution's sysctl may deny it). Read once: the answer does not change
 * while we run, and auto asks at every start. */
static int jail_available(struct cordon_err *err)
{
	static int cached = 1; /* 1: not probed yet */
	if (cached == 1) {
		int r = access("/proc/self/ns/user", F_OK) < 0 ? -EOPNOTSUPP : 0;
		uint64_t max = 1;
		if (r == 0 && geteuid() != 0 &&
		    read_u64_at(AT_FDCWD, "/proc/sys/user/max_user_namespaces", &max) >= 0 && max == 0)
			r = -EPERM;
		cached = r;
	}
	if (cached == -EOPNOTSUPP)
		return cordon_err_setf(err, cached, "the kernel has no user namespaces");
	if (cached < 0)
		return cordon_err_setf(err, cached, "user namespaces are disabled "
				       "(/proc/sys/user/max_user_namespaces is 0)");
	return 0;
}

static int jail_prepare(struct cordon_err *err)
{
	int r = jail_init_memfd(err);
	return r < 0 ? r : 0;
}

const struct runtime_ops jail_ops = {
    .name = "jail",
    .strength = 10,
    .caps = CORDON_RUNTIME_CAP_ONESHOT | CORDON_RUNTIME_CAP_AGENT | CORDON_RUNTIME_CAP_EGRESS |
	    CORDON_RUNTIME_CAP_LIMITS | CORDON_RUNTIME_CAP_STATS | CORDON_RUNTIME_CAP_OVERLAY |
	    CORDON_RUNTIME_CAP_PAUSE | CORDON_RUNTIME_CAP_SNAPSHOT,
    .size = sizeof(struct jail),
    .available = jail_available,
    .prepare = jail_prepare,
    .start = jail_start,
    .setup_fd = jail_setup_fd,
    .finish = jail_finish,
    .setup_close = jail_setup_close,
    .agent_fd = jail_agent_fd,
    .exit_fd = jail_exit_fd,
    .signal = jail_signal,
    .kill = jail_kill,
    .reap = jail_reap,
    .free = jail_free,
    .set_limits = jail_set_limits,
    .stats = jail_stats,
    .disk_used = jail_disk_used,
    .attach_net = jail_attach_net,
    .pause = jail_pause,
    .resume = jail_resume,
    .snapshot = jail_snapshot,
    .restore = jail_restore,
};
