/* Capabilities and resource limits of a sandbox's first process. Async-signal-safe. */
#pragma once

#include <stdint.h>
#include <linux/capability.h>

#include <cordon/err.h>

#define CAP_BIT(c) (UINT64_C(1) << (c))

/* What root inside a sandbox holds, in the sandbox's own user namespace only (`--user root`,
 * exec as root, a build step): Docker's default set without mknod, raw sockets and audit,
 * which is what dpkg, apt, pip and debootstrap's second stage need (chown, setuid to _apt,
 * chroot "/"). Over the sandbox's own files and ids: none of them reaches the host's. */
#define CAPS_SANDBOX_ROOT                                                                          \
	(CAP_BIT(CAP_CHOWN) | CAP_BIT(CAP_DAC_OVERRIDE) | CAP_BIT(CAP_FOWNER) |                    \
	 CAP_BIT(CAP_FSETID) | CAP_BIT(CAP_KILL) | CAP_BIT(CAP_SETGID) | CAP_BIT(CAP_SETUID) |     \
	 CAP_BIT(CAP_SETPCAP) | CAP_BIT(CAP_NET_BIND_SERVICE) | CAP_BIT(CAP_SYS_CHROOT) |          \
	 CAP_BIT(CAP_SETFCAP))

/* Drops every capability not in @keep from the bounding and ambient sets. Needs CAP_SETPCAP:
 * call it before giving up root. */
int caps_drop_bounding(uint64_t keep, struct cordon_err *err);

/* Sets the permitted and effective sets to @keep and the inheritable set to nothing. */
int caps_set(uint64_t keep, struct cordon_err *err);

struct rlimit_spec {
	uint64_t nofile, nproc, fsize, core, memlock, msgqueue, sigpending;
};

int rlimits_apply(const struct rlimit_spec *r, struct cordon_err *err);
