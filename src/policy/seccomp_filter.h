/* The seccomp filter of a jail, compiled at build time from policy/seccomp.policy.
 *
 * seccomp-compile (src/policy/seccomp_compile.c) turns the policy into a classic BPF program
 * with libseccomp and writes it out as C; the runtime installs it with seccomp_apply()
 * (src/lib/seccomp.h) and never parses a policy nor links libseccomp. x86_64 only.
 */
#pragma once

#include <linux/filter.h>

extern const struct sock_filter cordon_seccomp_filter[];
extern const unsigned short cordon_seccomp_filter_len;
