/* What cordon-init tells the host in one-shot mode, on fd 3, just before it exits: how the
 * command ended. The host trusts none of it beyond choosing an exit code (the sandbox is
 * already hostile territory), and it clamps every value. */
#pragma once

#include <stdint.h>
#include <linux/capability.h>

#define INIT_STATUS_FD 3
#define INIT_AGENT_FD  3

enum init_status_kind {
	INIT_EXITED = 1,      /* value: exit code */
	INIT_SIGNALED = 2,    /* value: signal number */
	INIT_EXEC_FAILED = 3, /* value: errno of execve */
	INIT_CWD_FAILED = 4,  /* value: errno of chdir */
};

struct init_status {
	int32_t kind;
	int32_t value;
};

/* The jail grants root inside this set and cordon-init hands it to root processes only: one
 * definition for both sides of the contract. */
#define CAP_BIT(c) (UINT64_C(1) << (c))

/* What root inside a sandbox holds, in the sandbox's own user namespace only (`--user root`,
 * exec as root, a build step): Docker's default set without mknod, raw sockets and audit,
 * which is what dpkg, apt, pip and debootstrap's second stage need (chown, setuid to _apt,
 * chroot "/"). Over the sandbox's own files and ids: none of them reaches the host's. */
/* What cordon-init keeps in agent mode: starting processes as "user" or root, and signalling
 * them. CAP_SETPCAP lets it empty the bounding set of what it starts. */
#define CAPS_INIT_AGENT                                                                            \
	(CAP_BIT(CAP_SETUID) | CAP_BIT(CAP_SETGID) | CAP_BIT(CAP_KILL) | CAP_BIT(CAP_SETPCAP))

#define CAPS_SANDBOX_ROOT                                                                          \
	(CAP_BIT(CAP_CHOWN) | CAP_BIT(CAP_DAC_OVERRIDE) | CAP_BIT(CAP_FOWNER) |                    \
	 CAP_BIT(CAP_FSETID) | CAP_BIT(CAP_KILL) | CAP_BIT(CAP_SETGID) | CAP_BIT(CAP_SETUID) |     \
	 CAP_BIT(CAP_SETPCAP) | CAP_BIT(CAP_NET_BIND_SERVICE) | CAP_BIT(CAP_SYS_CHROOT) |          \
	 CAP_BIT(CAP_SETFCAP))

/* The microVM's command block (runtime/microvm -> init/vm.c), the first bytes on the channel
 * port: this head, then argc + envc NUL-terminated strings (@bytes in all), then @filter_len
 * classic BPF instructions (struct sock_filter). The guest's PID 1 gives cordon-init what the
 * jail's child gives it: a bounding and permitted set of @caps, no_new_privs, and the
 * sandbox's seccomp filter, the host's own program; cordon-init --run then runs as @uid. */
struct vm_args_head {
	uint32_t bytes, argc, envc, uid;
	uint32_t time_lo, time_hi; /* the host's CLOCK_REALTIME seconds: the guest has no RTC */
	uint32_t caps_lo, caps_hi;
	uint32_t filter_len;
};

/* The microVM's control message (runtime/microvm -> init/vm.c), on the virtio-serial port
 * "cordon.control": who the guest is now. The host sends it before the boot (the guest's
 * stage applies it before its hello) and after every restore from a memory snapshot (the
 * guest's PID 1 applies it and answers VM_CONTROL_ACK): the clock, fresh entropy for the
 * kernel's RNG, the hostname, and eth0's MAC, address and gateway (net: 0, no link). */
#define VM_CONTROL_MAGIC 0x43564d31u /* "CVM1" */
#define VM_CONTROL_ACK	 'R'
struct vm_control {
	uint32_t magic;
	uint32_t net;
	uint64_t time_ns; /* CLOCK_REALTIME */
	uint8_t mac[6];
	uint8_t prefix;
	uint8_t pad;
	uint32_t ip, gw; /* network order */
	char hostname[64];
	uint8_t seed[64];
};
