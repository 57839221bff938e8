/* Installs a seccomp filter: a classic BPF program that the caller chooses (the sandbox's,
 * compiled from policy/seccomp.policy, is cordon_seccomp_sandbox; the egress proxy has its
 * own), so that this module binds no policy.
 *
 * Call it in the sandbox child between clone() and exec(), after
 * prctl(PR_SET_NO_NEW_PRIVS, 1) (without it, or CAP_SYS_ADMIN, the kernel refuses with
 * -EACCES) and after every other setup step, since the filter denies mount and friends:
 *
 *     if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
 *         (r = seccomp_apply(spec->seccomp->filter, spec->seccomp->len)) < 0)
 *             fail(...);
 *     execve(...);
 *
 * No allocation, no stdio, no locks: safe after clone() and in a signal handler.
 */
#pragma once

#include <linux/filter.h>

/* Installs the @len instructions of @filter on the calling thread. Returns 0 or -errno. */
int seccomp_apply(const struct sock_filter *filter, unsigned short len);
