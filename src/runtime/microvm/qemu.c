/* QEMU's command line for a sandbox, and its start as our child.
 *
 * The machine is `microvm` with ACPI on (Debian's kernel finds the virtio-mmio devices only
 * in its DSDT: CONFIG_VIRTIO_MMIO_CMDLINE_DEVICES is off) and the PIT on (under TCG, without
 * it or tsc_early_khz= the kernel finds no timer and hangs). The channel and the stdio ports
 * are virtio-serial ports on chardevs of inherited socketpair ends (no socket path, no race
 * on connect): fds MICROVM_FD_CHANNEL.. in the child. `-sandbox` turns QEMU's own seccomp
 * filter on: no spawn, no privilege change, no obsolete calls.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "basic/cleanup.h"
#include "runtime/microvm/microvm.h"

struct argv_buf {
	const char *v[96];
	size_t n;
	char store[4096];
	size_t used;
};

static void add(struct argv_buf *a, const char *s)
{
	if (a->n < ELEMENTSOF(a->v) - 1)
		a->v[a->n++] = s;
}

static void addf(struct argv_buf *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void addf(struct argv_buf *a, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(a->store + a->used, sizeof(a->store) - a->used, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(a->store) - a->used)
		return;
	add(a, a->store + a->used);
	a->used += n + 1;
}

static void add_port(struct argv_buf *a, int fd, const char *name)
{
	add(a, "-chardev");
	addf(a, "socket,id=p%d,fd=%d", fd, fd);
	add(a, "-device");
	addf(a, "virtserialport,chardev=p%d,name=%s", fd, name);
}

static void add_disk(struct argv_buf *a, const char *id, const char *file, bool ro)
{
	add(a, "-drive");
	addf(a, "id=%s,file=%s,format=raw,if=none,readonly=%s", id, file, ro ? "on" : "off");
	add(a, "-device");
	addf(a, "virtio-blk-device,drive=%s,serial=%s", id, ro ? MICROVM_DISK_ROOT : MICROVM_DISK_SCRATCH);
}

static void build_argv(struct argv_buf *a, const struct microvm_vm *vm)
{
	const struct microvm_host *h = vm->host;
	bool kvm = strcmp(h->accel, "kvm") == 0;
	add(a, h->qemu);
	/* TCG with a known TSC rate: no PIT, the rate given (probe.c's host_tsc_khz()). */
	bool tsc = !kvm && h->tsc_khz;
	const char *const fixed[] = {
	    "-accel", h->accel, "-cpu", kvm ? "host" : "max", "-nodefaults", "-no-user-config",
	    "-display", "none", "-no-reboot", "-sandbox",
	    "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny", "-device",
	    "virtio-rng-device", "-device", "virtio-serial-device,max_ports=8"};
	for (size_t i = 0; i < ELEMENTSOF(fixed); i++)
		add(a, fixed[i]);
	add(a, "-M");
	addf(a, "microvm,x-option-roms=off,pit=%s,pic=off,rtc=off,isa-serial=on,memory-backend=mem",
	     tsc ? "off" : "on");
	add(a, "-object");
	addf(a, "memory-backend-file,id=mem,size=%lluM,mem-path=%s,share=%s",
	     (unsigned long long)(vm->memory_bytes >> 20),
	     vm->restore ? MICROVM_JAIL_MEM : MICROVM_JAIL_DIR "/mem", vm->restore ? "off" : "on");
	add(a, "-chardev");
	addf(a, "socket,id=qmp,fd=%d", MICROVM_FD_QMP);
	add(a, "-mon");
	add(a, "chardev=qmp,mode=control");
	if (vm->restore) {
		add(a, "-incoming");
		add(a, "defer");
	}
	add(a, "-append");
	if (tsc)
		addf(a, "console=ttyS0 quiet panic=-1 tsc_early_khz=%u", h->tsc_khz);
	else
		add(a, "console=ttyS0 quiet panic=-1");
	add(a, "-smp");
	addf(a, "%u", vm->cpus);
	add(a, "-m");
	addf(a, "%llu", (unsigned long long)(vm->memory_bytes >> 20));
	add(a, "-kernel");
	add(a, MICROVM_JAIL_KERNEL);
	add(a, "-initrd");
	add(a, MICROVM_JAIL_INITRD);
	add(a, "-serial");
	add(a, "file:" MICROVM_JAIL_DIR "/console.log");
	add_disk(a, "root", MICROVM_JAIL_ROOTFS, true);
	add_disk(a, "scratch", MICROVM_JAIL_DIR "/scratch.ext4", false);
	add_port(a, MICROVM_FD_CHANNEL, MICROVM_PORT_CHANNEL);
	if (vm->oneshot) {
		add_port(a, MICROVM_FD_CHANNEL + 1, MICROVM_PORT_STDIN);
		add_port(a, MICROVM_FD_CHANNEL + 2, MICROVM_PORT_STDOUT);
		add_port(a, MICROVM_FD_CHANNEL + 3, MICROVM_PORT_STDERR);
	}
	add_port(a, MICROVM_FD_CONTROL, MICROVM_PORT_CONTROL);
	add(a, "-netdev");
	addf(a, "tap,id=n0,fd=%d", MICROVM_FD_TAP);
	add(a, "-device");
	addf(a, "virtio-net-device,netdev=n0,mac=%02x:%02x:%02x:%02x:%02x:%02x", vm->mac[0],
	     vm->mac[1], vm->mac[2], vm->mac[3], vm->mac[4], vm->mac[5]);
	a->v[a->n] = NULL;
}

/* The child: our fds @fds (-1: none) at MICROVM_FD_CHANNEL.., QEMU's own output in @log,
 * nothing else. Waits for the parent's "go" (it is in the cgroup then). */
static _Noreturn void exec_qemu(const struct microvm_vm *vm, const struct argv_buf *a,
				const int fds[MICROVM_FDS], int log, int go)
{
	char c;
	int tmp[MICROVM_FDS];
	if (read(go, &c, 1) != 1)
		_exit(127);
	setsid();
	int r = microvm_vmm_enter(vm);
	if (r < 0) {
		dprintf(log, "cordon: QEMU's jail: %s\n", strerror(-r));
		_exit(127);
	}
	/* After the jail: a change of uid clears the parent-death signal (prctl(2)), and QEMU
	 * left running by a killed daemon is what it is for. (getppid() is 0 in our own PID
	 * namespace: a parent that died in the moment before cannot be seen here; the sweep's
	 * cgroup kill is the backstop.) */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
		_exit(127);
	int null = open("/dev/null", O_RDONLY);
	if (null < 0 || dup2(null, 0) < 0 || dup2(log, 1) < 0 || dup2(log, 2) < 0)
		_exit(127);
	for (int i = 0; i < MICROVM_FDS; i++)
		if ((tmp[i] = fds[i] >= 0 ? fcntl(fds[i], F_DUPFD, 32) : -1) < 0 && fds[i] >= 0)
			_exit(127);
	for (int i = 0; i < MICROVM_FDS; i++)
		if (tmp[i] >= 0 && dup2(tmp[i], MICROVM_FD_CHANNEL + i) < 0)
			_exit(127);
	syscall(SYS_close_range, MICROVM_FD_CHANNEL + MICROVM_FDS, ~0U, 0);
	/* Nothing of ours in its environment; the shim for a restore's read-only RAM file. */
	char *const env[] = {"LD_PRELOAD=" MICROVM_JAIL_SHIM, "CORDON_QEMU_RO_PATH=" MICROVM_JAIL_MEM, NULL};
	execve(a->v[0], (char *const *)a->v, vm->restore ? env : env + 2);
	_exit(127);
}

pid_t microvm_qemu_spawn(const struct microvm_vm *vm, const int fds[MICROVM_FDS], int log, int go)
{
	struct argv_buf *a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	build_argv(a, vm);
	/* fork() into new namespaces: QEMU is PID 1 of its own. */
	pid_t pid = syscall(SYS_clone, SIGCHLD | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
					   CLONE_NEWUTS | CLONE_NEWCGROUP,
			    NULL, NULL, NULL, NULL);
	if (pid == 0)
		exec_qemu(vm, a, fds, log, go);
	int r = pid < 0 ? -errno : pid;
	free(a);
	return r;
}
