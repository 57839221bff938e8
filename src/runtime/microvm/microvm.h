/* Internals of the microvm runtime: the sandbox object (microvm.c), the host's QEMU, guest
 * kernel and accelerator (probe.c), the guest's disks and initramfs (image.c), QEMU's
 * command line and its start (qemu.c) and the one-shot stdio pump (pump.c). */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <cordon/cordon.h>

#include "lib/initproto.h"
#include "runtime/runtime.h"

#define MICROVM_PROBE_MS 10000 /* the KVM probe: a guest that hangs there is killed */
#define MICROVM_BOOT_MS	 20000 /* QEMU exec to the guest's hello (TCG: 4-7 s); tried twice */
#define MICROVM_TOOL_MS	 600000 /* mkfs.erofs of a template (the host's /usr: GiBs) */
#define MICROVM_KILL_MS	 5000
#define MICROVM_MEM_DEFAULT (512ULL << 20)
/* QEMU (and TCG's translation cache) on top of the guest's RAM, in the sandbox's cgroup. */
#define MICROVM_MEM_EXTRA (256ULL << 20)
#define MICROVM_ARGS_MAX  (256u << 10) /* cordon-init's argv and environment on the wire */

/* The guest's virtio-serial ports, by name (the guest finds them in
 * /sys/class/virtio-ports/ * /name): fd 3 of cordon-init (the agent or the one-shot status,
 * after the args block the host sends first), then the one-shot command's 0, 1 and 2. */
#define MICROVM_PORT_CHANNEL "cordon.channel"
#define MICROVM_PORT_STDIN   "cordon.stdin"
#define MICROVM_PORT_STDOUT  "cordon.stdout"
#define MICROVM_PORT_STDERR  "cordon.stderr"
/* Who the guest is (struct vm_control): before the boot and after each restore. */
#define MICROVM_PORT_CONTROL "cordon.control"
#define MICROVM_CONTROL_MS   5000 /* a restored guest's answer to it */
/* The guest's disks, by their virtio-blk serial. */
#define MICROVM_DISK_ROOT    "cordon-root"
#define MICROVM_DISK_SCRATCH "cordon-scratch"
/* The byte the guest's stage sends on the channel once cordon-init is about to run. */
#define MICROVM_HELLO 'H'

/* What the host found (probe.c): the paths and the accelerator. */
struct microvm_host {
	char qemu[256];
	char kernel[256];   /* vmlinuz */
	char modules[256];  /* the directory of the guest's .ko files */
	const char *accel;  /* "kvm" or "tcg" */
	char why_tcg[200];  /* why not KVM */
	unsigned tsc_khz;   /* the host's TSC rate, 0 if unknown (probe.c) */
};

/* The modules the guest loads, in this order (each after what it depends on). */
extern const char *const microvm_modules[];
extern const size_t microvm_modules_n;

/* What one VM is made of (microvm.c fills it, qemu.c turns it into a command line). */
struct microvm_vm {
	const struct microvm_host *host;
	char dir[128]; /* <base>/s<slot>: console.log, qemu.log, scratch.ext4 */
	char initrd[256];
	char rootfs[256];
	char scratch[160];
	unsigned cpus;
	uint64_t memory_bytes;
	bool oneshot; /* the stdio ports too */
	uid_t uid;    /* QEMU runs as it (vmm.c): the slot's, or 0 under KVM */
	uint8_t mac[6];
	/* The guest's RAM is a file: the VM's own <dir>/mem, shared (share=on: a snapshot
	 * copies it), or, restored, a snapshot's @mem mapped copy-on-write (share=off) from a
	 * read-only fd (@shim preloaded: qemu-ro.c), QEMU waiting for the state (-incoming). */
	bool restore;
	char mem[256];
	char shim[256];
};

/* The sandbox object (microvm.c; snap.c for the snapshot verbs). */
struct microvm {
	struct cordon_sandbox sb;
	struct microvm_vm vm;
	int pidfd;    /* QEMU's: the exit fd */
	int chan;     /* our end of the channel: the agent's stream, or the one-shot status */
	int ctl;      /* our end of the control port (struct vm_control) */
	int qmp;      /* our end of QEMU's monitor */
	int tap;      /* the virtio-net's host end (net.c), a copy of QEMU's */
	int netns;    /* the tap's network namespace, held */
	int state;    /* restore: the snapshot's device state, until QEMU has it */
	struct vm_control ident; /* who the guest is: sent before the boot, and at a restore */
	int setup_fd; /* epoll of @chan (or @ctl, restored) and @timer until the guest is up */
	int timer;    /* the boot deadline */
	pid_t pump;   /* one-shot stdio, or -1 */
	int sent;     /* the signal we ended QEMU with, or 0 */
	int io[3];    /* one-shot: our copies of the caller's stdio (-1: none) */
	char *args;   /* cordon-init's argv and environment, as sent (a retry sends it again) */
	size_t args_len;
	uint64_t disk_bytes;
	bool hello, made, retried;
	bool qmp_ready; /* its greeting answered (qmp_capabilities) */
};

/* Files of a memory snapshot, in its directory. */
#define MICROVM_SNAP_STATE   "vm-state"	  /* QEMU's device state (x-ignore-shared migration) */
#define MICROVM_SNAP_MEM     "vm-mem"	  /* the guest's RAM */
#define MICROVM_SNAP_DISK    "vm-scratch" /* the scratch disk as the RAM knows it */
#define MICROVM_SNAP_MACHINE "vm-machine" /* what a restore must match */
#define MICROVM_QMP_MS	     10000

/* microvm.c: who the guest is, with the clock and a seed of now, on the control port. */
int microvm_send_identity(struct microvm *m, struct cordon_err *err);

/* snap.c: the runtime's pause, resume, snapshot (the sandbox paused) and restore verbs. */
int microvm_pause(struct cordon_sandbox *sb);
int microvm_resume(struct cordon_sandbox *sb);
int microvm_snapshot(struct cordon_sandbox *sb, int dirfd, struct cordon_snapshot_info *ret,
		     struct cordon_err *err);
/* Fills what a restore needs from @dirfd: the machine checked, the scratch copied to
 * vm->scratch, vm->mem, the state opened into m->state. */
int microvm_restore_prepare(struct microvm *m, int dirfd, struct cordon_err *err);
/* After QEMU started: the state in, the guest running again. */
int microvm_restore_load(struct microvm *m, struct cordon_err *err);

/* A restore from the template's snapshot in the cache (1: set up, boot() restores; made
 * first if there is none, or -EINPROGRESS for a @spec->cached_only start), else 0 (it
 * boots: a one-shot VM, CORDON_MICROVM_TEMPLATES=0, or the VM a snapshot is made of). */
int microvm_template_use(struct microvm *m, const struct cordon_spec *spec, struct cordon_err *err);
/* The template snapshot a start of @spec restores from, made now if it is not (a boot). */
int microvm_template_warm(const struct cordon_spec *spec, struct cordon_err *err);
/* cache.c: what the cache no longer needs, after @fresh (a path in it) was published;
 * @host: @fresh is the `host` template's image, which supersedes the host's others. */
void microvm_cache_sweep(const char *fresh, bool host);

/* A snapshot directory's files and the directory (a template save that did not finish). */
void microvm_snap_dir_remove(int dirfd, const char *name);

/* qmp.c: a command (JSON) on QEMU's monitor @fd, with @pass_fd (-1: none) as SCM_RIGHTS;
 * its answer's line in @reply; -EIO for an error answer, -ETIMEDOUT past @ms. */
int microvm_qmp(int fd, const char *cmd, int pass_fd, char *reply, size_t size, int ms);
int microvm_qmp_hello(int fd, int ms);
/* query-migrate until completed (0), failed (-EIO) or @ms. */
int microvm_qmp_migrated(int fd, int ms, char *reply, size_t size);

/* Where QEMU's jail shows the VM's files (vmm.c); its command line names these. */
#define MICROVM_JAIL_KERNEL "/img/vmlinuz"
#define MICROVM_JAIL_INITRD "/img/initrd"
#define MICROVM_JAIL_ROOTFS "/img/rootfs"
#define MICROVM_JAIL_DIR    "/vm"
#define MICROVM_JAIL_MEM    "/img/mem" /* a snapshot's RAM, restored */
#define MICROVM_JAIL_SHIM   "/img/ro.so"

/* vmm.c: in QEMU's child, cloned into its own namespaces: its root of only its files, no
 * capability, no_new_privs, vm->uid. -errno (the child then exits). */
int microvm_vmm_enter(const struct microvm_vm *vm);

/* QEMU's fds: the channel, then (one-shot) stdin, stdout, stderr, then the control port
 * and the tap. */
enum {
	MICROVM_FD_CHANNEL = 3,
	MICROVM_FD_CONTROL = MICROVM_FD_CHANNEL + 4,
	MICROVM_FD_TAP,
	MICROVM_FD_QMP,
	MICROVM_FD_STATE, /* restore: the device state, `migrate-incoming fd:N` */
	MICROVM_FDS = MICROVM_FD_STATE - MICROVM_FD_CHANNEL + 1,
};

/* qemu.c: forks QEMU for @vm with @fds (the channel, stdin, stdout, stderr, control, tap;
 * -1: none) as its MICROVM_FD_CHANNEL.., its own output to @log; it execs once @go is
 * readable. Returns its pid or -errno. */
pid_t microvm_qemu_spawn(const struct microvm_vm *vm, const int fds[MICROVM_FDS], int log, int go);

/* net.c: the tap for the guest's virtio-net in the sandbox's network namespace (bridged
 * with the slot's veth for CORDON_NET_EGRESS, alone otherwise), which *@ret_ns holds;
 * returns the tap's fd or -errno. */
int microvm_net_open(struct runtime_host *h, const struct cordon_spec *spec, int *ret_ns,
		     struct cordon_err *err);
/* The control message for this sandbox now: the clock, a fresh seed, hostname, MAC
 * (52:54:00:cd + the slot), address and gateway of the slot. */
void microvm_identity(const struct runtime_host *h, const struct cordon_spec *spec,
		      struct vm_control *ret);
/* Its clock and seed now (a restore's). */
void microvm_identity_fresh(struct vm_control *c);

/* pump.c: a process that copies @in (-1: none) to @to_vm and @from_vm[0..1] to @out[0..1]
 * (-1: read and dropped) until both of @from_vm end. Returns its pid or -errno. */
pid_t microvm_pump_spawn(int in, int to_vm, const int from_vm[2], const int out[2]);

/* probe.c: 0 with *@ret filled when QEMU and a guest kernel are here (probed once per
 * process, the accelerator too); else -errno and @err says what is missing. */
int microvm_probe(const struct microvm_host **ret, struct cordon_err *err);
/* $CORDON_MICROVM_DIR, else /run/cordon/microvm: a directory per sandbox. */
const char *microvm_base(void);
/* $CORDON_MICROVM_CACHE, else /var/cache/cordon-microvm: images made once. */
const char *microvm_cache(void);

/* image.c: the initramfs (cordon-init as /init, the modules), made once per cordon-init and
 * kernel, cached; and the read-only erofs image of @rootfs (NULL: the `host` template), made
 * once per template version, unless !@make (-EINPROGRESS when it is not made yet). Both fill
 * @path. */
int microvm_initrd(const struct microvm_host *h, char *path, size_t size, struct cordon_err *err);
int microvm_rootfs_image(const char *rootfs, bool make, char *path, size_t size,
			 struct cordon_err *err);
/* A sparse ext4 image of @bytes at @path, empty, owned by root. */
int microvm_scratch_make(const char *path, uint64_t bytes, struct cordon_err *err);
/* The command block for the channel (malloc'd; struct vm_args_head of lib/initproto.h, which
 * src/init/vm.c reads): cordon-init's argv and envp for @spec, the uid its one-shot command
 * runs as, its capabilities and the spec's seccomp filter. */
int microvm_args_block(const struct cordon_spec *spec, char **ret, size_t *ret_len,
		       struct cordon_err *err);
