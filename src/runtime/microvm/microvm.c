/* The `microvm` runtime: cordon-init in a guest of its own, a Linux kernel under QEMU's
 * `microvm` machine (KVM where it runs the guest, TCG otherwise).
 *
 * The guest's disks are the template as a read-only erofs image (made once per template
 * version, image.c) and the sandbox's sparse ext4 scratch; its initramfs is cordon-init,
 * whose guest stage (src/init/vm.c) loads the virtio modules, mounts the overlay and runs
 * cordon-init with fd 3 on the virtio-serial port MICROVM_PORT_CHANNEL: the agent's frame
 * stream in agent mode, the one-shot status otherwise (the jail's contract, initproto.h).
 * cordon-init's argv and environment go first on that channel (microvm_args_send()).
 *
 * QEMU is our child in the sandbox's cgroup; its pidfd is the exit fd. Setup is over when
 * the guest stage's hello arrives on the channel; the setup fd is an epoll of the channel
 * and a timer of MICROVM_BOOT_MS, so a guest that hangs in its boot (about one in 15 under
 * TCG here) is a clear failure, not a wait for ever. One-shot: the command's stdio are
 * three more ports, copied to the caller's fds by a pump process (pump.c); its status is
 * cordon-init's struct init_status on the channel, and the guest powers off after it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "basic/child.h"
#include "basic/cleanup.h"
#include "basic/fdwatch.h"
#include "basic/fileio.h"
#include "lib/cgroup.h"
#include "lib/idmap.h"
#include "runtime/initargs.h"
#include "runtime/microvm/microvm.h"
#include "runtime/runtime.h"

static struct microvm *microvm_of(struct cordon_sandbox *sb)
{
	return (struct microvm *)sb;
}

static const char *const leftovers[] = {"console.log", "qemu.log", "scratch.ext4", "mem", "root"};

static void dir_remove(const char *dir)
{
	_cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	for (size_t i = 0; fd >= 0 && i < ELEMENTSOF(leftovers); i++)
		if (unlinkat(fd, leftovers[i], 0) < 0 && errno == EISDIR)
			(void)unlinkat(fd, leftovers[i], AT_REMOVEDIR);
	(void)rmdir(dir);
}

/* What QEMU, as vm->uid in its jail, opens for writing: the directory it is shown, the
 * scratch disk and the console log; and the empty root of its jail. */
static int give_to_vmm(struct microvm *m, struct cordon_err *err)
{
	struct microvm_vm *vm = &m->vm;
	vm->uid = strcmp(vm->host->accel, "kvm") == 0 ? 0 : runtime_host_uid(&m->sb.host);
	_cleanup_close_ int fd = open(vm->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	_cleanup_close_ int con = fd < 0 ? -1 : openat(fd, "console.log", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0 || con < 0 || mkdirat(fd, "root", 0755) < 0 || fchown(fd, vm->uid, vm->uid) < 0 ||
	    fchown(con, vm->uid, vm->uid) < 0 ||
	    fchownat(fd, "scratch.ext4", vm->uid, vm->uid, AT_SYMLINK_NOFOLLOW) < 0)
		return cordon_err_set(err, -errno, "microvm: QEMU's files in '%s'", vm->dir);
	return 0;
}

static int make_dir(struct microvm *m, struct cordon_err *err)
{
	snprintf(m->vm.dir, sizeof(m->vm.dir), "%s/s%u", microvm_base(), m->sb.host.slot.slot);
	(void)mkdir(microvm_base(), 0700);
	dir_remove(m->vm.dir); /* what a dead holder of this slot left */
	if (mkdir(m->vm.dir, 0700) < 0)
		return cordon_err_set(err, -errno, "microvm: directory '%s'", m->vm.dir);
	m->made = true;
	return 0;
}

/* The guest's shape from the spec, and its three images (a restore's scratch is the
 * snapshot's, @dirfd). */
static int make_images(struct microvm *m, const struct cordon_spec *spec, int dirfd,
		       struct cordon_err *err)
{
	struct microvm_vm *vm = &m->vm;
	vm->cpus = spec->cpus_milli ? (spec->cpus_milli + 999) / 1000 : 1;
	vm->memory_bytes = spec->memory_bytes ? spec->memory_bytes : MICROVM_MEM_DEFAULT;
	vm->oneshot = spec->argv != NULL;
	m->disk_bytes = spec->disk_bytes ? spec->disk_bytes : 1ULL << 30;
	snprintf(vm->scratch, sizeof(vm->scratch), "%s/scratch.ext4", vm->dir);
	int r = microvm_initrd(vm->host, vm->initrd, sizeof(vm->initrd), err);
	if (r == 0)
		r = microvm_rootfs_image(spec->rootfs, !spec->cached_only, vm->rootfs,
					 sizeof(vm->rootfs), err);
	if (r == 0 && dirfd >= 0)
		r = microvm_restore_prepare(m, dirfd, err);
	else if (r == 0)
		r = microvm_scratch_make(vm->scratch, m->disk_bytes, err);
	return r;
}

static int set_limits(struct cordon_sandbox *sb, uint64_t memory_bytes, uint32_t cpus_milli,
		      uint32_t pids)
{
	(void)pids; /* the guest's own processes are not host tasks: QEMU's threads are */
	struct microvm *m = microvm_of(sb);
	uint64_t guest = memory_bytes ? memory_bytes : m->vm.memory_bytes;
	return runtime_host_set_limits(&sb->host, guest + MICROVM_MEM_EXTRA, cpus_milli, 256);
}

/* The boot's end: the channel readable (the hello, or QEMU gone) or the deadline. */
static int watch_boot(struct microvm *m, struct cordon_err *err)
{
	struct itimerspec t = {.it_value = {MICROVM_BOOT_MS / 1000, 0}};
	struct epoll_event ev = {.events = EPOLLIN};
	if (m->setup_fd < 0) {
		m->setup_fd = epoll_create1(EPOLL_CLOEXEC);
		m->timer = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
		if (m->setup_fd < 0 || m->timer < 0 ||
		    epoll_ctl(m->setup_fd, EPOLL_CTL_ADD, m->timer, &ev) < 0)
			return cordon_err_set(err, -errno, "microvm: boot watch");
	}
	if (m->vm.restore) /* the guest's answer to its new identity */
		t.it_value = (struct timespec){MICROVM_CONTROL_MS / 1000, 0};
	if (timerfd_settime(m->timer, 0, &t, NULL) < 0 ||
	    epoll_ctl(m->setup_fd, EPOLL_CTL_ADD, m->vm.restore ? m->ctl : m->chan, &ev) < 0)
		return cordon_err_set(err, -errno, "microvm: boot watch");
	return 0;
}

/* QEMU and, in one-shot mode, the pump; the ends that are theirs closed here. */
static int spawn(struct microvm *m, int guest[MICROVM_FDS], int host_io[3], struct cordon_err *err)
{
	char path[PATH_MAX];
	int go[2];
	snprintf(path, sizeof(path), "%s/qemu.log", m->vm.dir);
	_cleanup_close_ int log = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (log < 0 || pipe2(go, O_CLOEXEC) < 0)
		return cordon_err_set(err, -errno, "microvm: '%s'", path);
	pid_t pid = microvm_qemu_spawn(&m->vm, guest, log, go[0]);
	close(go[0]);
	int r = pid < 0 ? cordon_err_set(err, pid, "microvm: fork QEMU") : 0;
	if (r == 0) {
		m->sb.pid = pid;
		m->pidfd = syscall(SYS_pidfd_open, pid, 0);
		if (m->pidfd < 0)
			r = cordon_err_set(err, -errno, "microvm: pidfd");
		else if (m->sb.host.cg)
			r = cgroup_attach(m->sb.host.cg, pid, err);
	}
	if (r == 0 && write(go[1], "g", 1) != 1)
		r = cordon_err_set(err, -errno, "microvm: start QEMU");
	close(go[1]);
	if (r == 0 && m->vm.oneshot) {
		const int from[2] = {host_io[1], host_io[2]}, out[2] = {m->io[1], m->io[2]};
		m->pump = microvm_pump_spawn(m->io[0], host_io[0], from, out);
		if (m->pump < 0)
			r = cordon_err_set(err, m->pump, "microvm: stdio pump");
	}
	return r;
}

static void close_fds(int *fds, size_t n)
{
	for (size_t i = 0; i < n; i++)
		fd_close(TAKE_FD(fds[i]));
}

/* The channel, the control port and, one-shot, stdin/stdout/stderr: socketpairs, QEMU's
 * ends in @guest. */
static int make_channels(struct microvm *m, int guest[MICROVM_FDS], int host_io[3],
			 struct cordon_err *err)
{
	const int ctl = MICROVM_FD_CONTROL - MICROVM_FD_CHANNEL, qmp = MICROVM_FD_QMP - MICROVM_FD_CHANNEL;
	for (int i = 0; i <= qmp; i++) {
		int sp[2];
		if ((i > 0 && i < ctl && !m->vm.oneshot) || i == MICROVM_FD_TAP - MICROVM_FD_CHANNEL)
			continue;
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
			return cordon_err_set(err, -errno, "microvm: socketpair");
		guest[i] = sp[1];
		int *mine = i == 0 ? &m->chan : i == ctl ? &m->ctl : i == qmp ? &m->qmp : &host_io[i - 1];
		*mine = sp[0];
	}
	return 0;
}

/* Who the guest is, with the clock and a seed of now, on the control port. */
int microvm_send_identity(struct microvm *m, struct cordon_err *err)
{
	microvm_identity_fresh(&m->ident);
	if (m->ident.magic != VM_CONTROL_MAGIC)
		return cordon_err_setf(err, -EIO, "microvm: no fresh entropy for the guest");
	ssize_t n = send(m->ctl, &m->ident, sizeof(m->ident), MSG_DONTWAIT | MSG_NOSIGNAL);
	return n == (ssize_t)sizeof(m->ident) ? 0 : cordon_err_set(err, -errno, "microvm: send the identity");
}

/* One boot: the channels, the args block on ours, QEMU (and the pump), the deadline. */
static int boot(struct microvm *m, struct cordon_err *err)
{
	int guest[MICROVM_FDS], host_io[3] = {-1, -1, -1};
	for (size_t i = 0; i < ELEMENTSOF(guest); i++)
		guest[i] = -1;
	int r = make_channels(m, guest, host_io, err);
	/* A boot gets cordon-init's command and its identity first; a restore runs already. */
	if (r == 0 && !m->vm.restore &&
	    send(m->chan, m->args, m->args_len, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)m->args_len)
		r = cordon_err_set(err, -errno, "microvm: send the command");
	if (r == 0 && !m->vm.restore)
		r = microvm_send_identity(m, err);
	if (r == 0 && (guest[MICROVM_FD_TAP - MICROVM_FD_CHANNEL] = fcntl(m->tap, F_DUPFD_CLOEXEC, 3)) < 0)
		r = cordon_err_set(err, -errno, "microvm: the tap");
	if (r == 0 && m->vm.restore &&
	    (guest[MICROVM_FD_STATE - MICROVM_FD_CHANNEL] = fcntl(m->state, F_DUPFD_CLOEXEC, 3)) < 0)
		r = cordon_err_set(err, -errno, "microvm: the snapshot's state");
	if (r == 0 && (r = spawn(m, guest, host_io, err)) == 0 && m->vm.restore)
		r = microvm_restore_load(m, err);
	if (r == 0)
		r = watch_boot(m, err);
	close_fds(guest, ELEMENTSOF(guest));
	close_fds(host_io, ELEMENTSOF(host_io));
	return r;
}

static int keep_stdio(struct microvm *m, const struct cordon_spec *spec, struct cordon_err *err)
{
	for (int i = 0; i < 3; i++)
		if (spec->argv && spec->stdio[i] >= 0 &&
		    (m->io[i] = fcntl(spec->stdio[i], F_DUPFD_CLOEXEC, 3)) < 0)
			return cordon_err_set(err, -errno, "microvm: stdio");
	return 0;
}

static int make_net(struct microvm *m, const struct cordon_spec *spec, struct cordon_err *err)
{
	m->tap = microvm_net_open(&m->sb.host, spec, &m->netns, err);
	if (m->tap < 0)
		return m->tap;
	microvm_identity(&m->sb.host, spec, &m->ident);
	memcpy(m->vm.mac, m->ident.mac, sizeof(m->vm.mac));
	return 0;
}

/* What a boot and a restore make alike: the slot, cgroup, directory, tap, images. */
static int make_vm(struct microvm *m, const struct cordon_spec *spec, int dirfd,
		   struct cordon_err *err)
{
	struct cordon_sandbox *sb = &m->sb;
	m->pidfd = m->chan = m->ctl = m->qmp = m->tap = m->netns = m->state = -1;
	m->setup_fd = m->timer = m->pump = -1;
	m->io[0] = m->io[1] = m->io[2] = -1;
	int r;
	if (!sb->host.privileged)
		return cordon_err_setf(err, -EPERM, "runtime 'microvm': needs root");
	if ((r = microvm_probe(&m->vm.host, err)) < 0 ||
	    (r = runtime_host_acquire(&sb->host, spec, err)) < 0 || (r = make_dir(m, err)) < 0 ||
	    (r = make_net(m, spec, err)) < 0 || (r = make_images(m, spec, dirfd, err)) < 0 ||
	    (r = give_to_vmm(m, err)) < 0 || (r = keep_stdio(m, spec, err)) < 0)
		return r;
	if (sb->host.cg && (r = set_limits(sb, 0, spec->cpus_milli, spec->pids)) < 0)
		return cordon_err_set(err, r, "microvm: cgroup limits");
	return 0;
}

/* A restore: the snapshot's scratch and RAM, QEMU loads its state, the guest told who it
 * is now; setup is over at its answer. One-shot sandboxes are not snapshotted. */
static int microvm_restore(struct cordon_sandbox *sb, const struct cordon_spec *spec, int dirfd,
			   struct cordon_err *err)
{
	struct microvm *m = microvm_of(sb);
	if (spec->argv)
		return cordon_err_setf(err, -EINVAL, "microvm: a one-shot command cannot restore");
	m->vm.restore = true;
	int r = make_vm(m, spec, dirfd, err);
	return r < 0 ? r : boot(m, err);
}

static int microvm_start(struct cordon_sandbox *sb, const struct cordon_spec *spec,
			 struct cordon_err *err)
{
	struct microvm *m = microvm_of(sb);
	int r = make_vm(m, spec, -1, err);
	if (r < 0)
		return r;
	r = microvm_args_block(spec, &m->args, &m->args_len, err);
	if (r == 0)
		r = microvm_template_use(m, spec, err);
	return r < 0 ? r : boot(m, err); /* on failure runtime.c kills and frees */
}

/* QEMU, the pump and the channel of a boot that did not come up, gone. */
static void stop_vm(struct microvm *m)
{
	if (m->pidfd >= 0 && syscall(SYS_pidfd_send_signal, m->pidfd, SIGKILL, NULL, 0) == 0) {
		siginfo_t si;
		syscall(SYS_waitid, P_PIDFD, m->pidfd, &si, WEXITED, NULL);
	}
	if (m->pump > 0) {
		kill(m->pump, SIGKILL);
		child_wait_deadline(m->pump, MICROVM_KILL_MS, NULL);
	}
	m->pump = -1;
	int fds[] = {m->pidfd, m->chan, m->ctl, m->qmp};
	close_fds(fds, ELEMENTSOF(fds));
	m->pidfd = m->chan = m->ctl = m->qmp = -1;
	m->qmp_ready = false;
}

/* A boot past its deadline is tried once more, on a fresh scratch (the first may have
 * mounted it). */
static int retry_boot(struct microvm *m, struct cordon_err *err)
{
	m->retried = true;
	stop_vm(m);
	(void)unlink(m->vm.scratch);
	int r = microvm_scratch_make(m->vm.scratch, m->disk_bytes, err);
	if (r == 0 && chown(m->vm.scratch, m->vm.uid, m->vm.uid) < 0)
		r = cordon_err_set(err, -errno, "microvm: chown the scratch");
	return r < 0 ? r : boot(m, err);
}

static int microvm_setup_fd(const struct cordon_sandbox *sb)
{
	return ((const struct microvm *)sb)->setup_fd;
}

/* The last lines of @name in the VM's directory (up to 3, on one line), for a failure's
 * message: a guest stage's own error comes just before the kernel's power-off line. */
static const char *last_line(struct microvm *m, const char *name, char *buf, size_t size)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", m->vm.dir, name);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	off_t end = fd < 0 ? 0 : lseek(fd, 0, SEEK_END);
	ssize_t n = fd < 0 ? 0 : pread(fd, buf, size - 1, end > (off_t)size - 1 ? end - (off_t)size + 1 : 0);
	buf[n > 0 ? n : 0] = '\0';
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		buf[--n] = '\0';
	char *p = buf + (n > 0 ? n : 0);
	for (int lines = 0; p > buf && lines < 3;)
		lines += *--p == '\n';
	p += *p == '\n';
	for (char *q = p; *q; q++)
		if (*q == '\n' || *q == '\r')
			*q = ' ';
	return p;
}

static int microvm_finish(struct cordon_sandbox *sb, struct cordon_err *err)
{
	struct microvm *m = microvm_of(sb);
	char c, line[240], log[160];
	uint64_t ticks;
	if (m->hello)
		return 0;
	ssize_t n = recv(m->vm.restore ? m->ctl : m->chan, &c, 1, MSG_DONTWAIT);
	if (n == 1 && c == (m->vm.restore ? VM_CONTROL_ACK : MICROVM_HELLO)) {
		m->hello = true;
		return 0;
	}
	if (n == 1)
		return cordon_err_setf(err, -EIO, "microvm: the guest refused its identity ('%c')", c);
	if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
		if (read(m->timer, &ticks, sizeof(ticks)) != sizeof(ticks))
			return -EAGAIN;
		if (!m->retried && !m->vm.restore) {
			int r = retry_boot(m, err);
			return r < 0 ? r : -EAGAIN;
		}
		return cordon_err_setf(err, -ETIMEDOUT,
				       "microvm: the guest did not %s in %d s; its console's last line: '%s'",
				       m->vm.restore ? "answer after its restore" : "start",
				       (m->vm.restore ? MICROVM_CONTROL_MS : MICROVM_BOOT_MS) / 1000,
				       last_line(m, "console.log", line, sizeof(line)));
	}
	return cordon_err_setf(err, -EIO, "microvm: the VM ended before the guest started: '%s' (console: '%s')",
			       last_line(m, "qemu.log", log, sizeof(log)),
			       last_line(m, "console.log", line, sizeof(line)));
}

static void microvm_setup_close(struct cordon_sandbox *sb)
{
	struct microvm *m = microvm_of(sb);
	fd_close(TAKE_FD(m->setup_fd));
	fd_close(TAKE_FD(m->timer));
}

static int microvm_agent_fd(const struct cordon_sandbox *sb)
{
	const struct microvm *m = (const struct microvm *)sb;
	return m->hello && !m->vm.oneshot ? m->chan : -1;
}

static int microvm_exit_fd(const struct cordon_sandbox *sb)
{
	return ((const struct microvm *)sb)->pidfd;
}

/* One-shot, once the guest runs: the signal's number as one byte on the channel, which the
 * guest's PID 1 hands to cordon-init, which forwards it to the command (the jail's way).
 * Otherwise (agent mode, a guest still booting) a signal ends the VM (QEMU ends on SIGTERM)
 * and the result says which. SIGKILL is always the VM's end. */
static int microvm_signal(struct cordon_sandbox *sb, int sig)
{
	struct microvm *m = microvm_of(sb);
	unsigned char b = (unsigned char)sig;
	if (m->pidfd < 0)
		return 0;
	if (sig != SIGKILL && m->vm.oneshot && m->hello)
		return send(m->chan, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1 ? 0 : -errno;
	m->sent = sig;
	return syscall(SYS_pidfd_send_signal, m->pidfd, sig == SIGKILL ? SIGKILL : SIGTERM, NULL, 0) < 0
		       ? -errno
		       : 0;
}

static int microvm_kill(struct cordon_sandbox *sb)
{
	return microvm_signal(sb, SIGKILL);
}

static int microvm_reap(struct cordon_sandbox *sb, struct cordon_result *ret)
{
	struct microvm *m = microvm_of(sb);
	siginfo_t si = {};
	struct rusage ru = {};
	if (syscall(SYS_waitid, P_PIDFD, m->pidfd, &si, WEXITED, &ru) < 0)
		return -errno;
	/* The pump ends once it has copied what QEMU wrote before it exited. */
	if (m->pump > 0)
		child_wait_deadline(m->pump, MICROVM_KILL_MS, NULL);
	m->pump = -1;
	ret->cpu_ms = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000 +
		      (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000;
	if (m->vm.oneshot && m->hello && init_status_read(m->chan, ret) == 0)
		return 0;
	if (m->sent)
		ret->signal = m->sent;
	else if (si.si_code == CLD_EXITED)
		ret->exit_code = CORDON_EXIT_SETUP; /* the guest powered off without a word */
	else
		ret->signal = si.si_status;
	return 0;
}

static void microvm_free(struct cordon_sandbox *sb)
{
	struct microvm *m = microvm_of(sb);
	if (m->pump > 0) {
		kill(m->pump, SIGKILL);
		child_wait_deadline(m->pump, MICROVM_KILL_MS, NULL);
		m->pump = -1;
	}
	int fds[] = {m->pidfd,	  m->chan,  m->ctl,   m->qmp,	m->tap,	  m->netns,
		     m->state,	  m->setup_fd, m->timer, m->io[0], m->io[1], m->io[2]};
	close_fds(fds, ELEMENTSOF(fds));
	m->pidfd = m->chan = m->ctl = m->qmp = m->tap = m->netns = m->state = -1;
	m->setup_fd = m->timer = -1;
	m->io[0] = m->io[1] = m->io[2] = -1;
	free(TAKE_PTR(m->args));
	runtime_host_kill(&sb->host);
	if (m->made)
		dir_remove(m->vm.dir);
	m->made = false;
}

static int microvm_stats(struct cordon_sandbox *sb, struct cordon_stats *ret)
{
	return runtime_host_stats(&sb->host, ret);
}

/* What the VMs of a killed daemon left: the directory of each s<slot> whose slot nobody
 * holds (their QEMUs died with the daemon: PR_SET_PDEATHSIG; the cgroup is the host
 * sweep's, which runs after). */
/* Image files (*.tmp.<tid>), template snapshots (vm-template-*.tmp.<tid>/) and staging
 * directories (stage.<tid>) of a maker that died:
 * an erofs image of the host may be gigabytes. */
static void sweep_cache(void)
{
	_cleanup_closedir_ DIR *d = opendir(microvm_cache());
	struct dirent *e;
	while (d && (e = readdir(d))) {
		const char *dot = strrchr(e->d_name, '.');
		bool tmp = strstr(e->d_name, ".tmp.") != NULL, stage = strncmp(e->d_name, "stage.", 6) == 0;
		char *end;
		long tid = dot ? strtol(dot + 1, &end, 10) : 0;
		if ((!tmp && !stage) || tid <= 0 || *end || kill((pid_t)tid, 0) == 0 || errno != ESRCH)
			continue;
		if (unlinkat(dirfd(d), e->d_name, stage ? AT_REMOVEDIR : 0) < 0 && errno == EISDIR)
			microvm_snap_dir_remove(dirfd(d), e->d_name); /* a template's, half saved */
	}
}

static void microvm_sweep(void)
{
	if (geteuid() != 0)
		return;
	sweep_cache();
	_cleanup_closedir_ DIR *d = opendir(microvm_base());
	struct dirent *e;
	while (d && (e = readdir(d))) {
		char *end, dir[256];
		unsigned long slot = e->d_name[0] == 's' ? strtoul(e->d_name + 1, &end, 10) : ULONG_MAX;
		struct idmap_slot s;
		if (slot >= CORDON_IDMAP_SLOTS || *end || idmap_slot_try(slot, &s) < 0)
			continue;
		snprintf(dir, sizeof(dir), "%.200s/%.32s", microvm_base(), e->d_name);
		dir_remove(dir);
		idmap_slot_release(&s);
	}
}

static int microvm_available(struct cordon_err *err)
{
	return microvm_probe(NULL, err);
}

/* The images a start of @spec needs and its template's memory snapshot, made now if they
 * are not (a thread of the caller's own: the host's erofs takes minutes, a boot seconds). */
static int microvm_warm(const struct cordon_spec *spec, struct cordon_err *err)
{
	const struct microvm_host *h;
	char path[PATH_MAX];
	int r = microvm_probe(&h, err);
	if (r == 0)
		r = microvm_initrd(h, path, sizeof(path), err);
	if (r == 0)
		r = microvm_rootfs_image(spec->rootfs, true, path, sizeof(path), err);
	return r < 0 ? r : microvm_template_warm(spec, err);
}

static bool microvm_auto_ok(void)
{
	const struct microvm_host *h;
	return microvm_probe(&h, NULL) == 0 && strcmp(h->accel, "kvm") == 0;
}

static const char *microvm_mode(char *why, size_t size)
{
	const struct microvm_host *h;
	if (microvm_probe(&h, NULL) < 0)
		return "";
	snprintf(why, size, "%s", h->why_tcg);
	return h->accel;
}

const struct runtime_ops microvm_ops = {
    .name = "microvm",
    .strength = 30,
    .caps = CORDON_RUNTIME_CAP_ONESHOT | CORDON_RUNTIME_CAP_AGENT | CORDON_RUNTIME_CAP_LIMITS |
	    CORDON_RUNTIME_CAP_STATS | CORDON_RUNTIME_CAP_EGRESS | CORDON_RUNTIME_CAP_PAUSE |
	    CORDON_RUNTIME_CAP_SNAPSHOT,
    .size = sizeof(struct microvm),
    .setup_ms = 2 * MICROVM_BOOT_MS + 5000, /* a boot, its retry, and the agent's hello */
    .fixed_shape = true,
    .available = microvm_available,
    .mode = microvm_mode,
    .auto_ok = microvm_auto_ok,
    .warm = microvm_warm,
    .start = microvm_start,
    .setup_fd = microvm_setup_fd,
    .finish = microvm_finish,
    .setup_close = microvm_setup_close,
    .agent_fd = microvm_agent_fd,
    .exit_fd = microvm_exit_fd,
    .signal = microvm_signal,
    .kill = microvm_kill,
    .reap = microvm_reap,
    .free = microvm_free,
    .set_limits = set_limits,
    .stats = microvm_stats,
    .pause = microvm_pause,
    .resume = microvm_resume,
    .snapshot = microvm_snapshot,
    .restore = microvm_restore,
    .sweep = microvm_sweep,
};
