/* Installs the jail's seccomp filter, compiled at build time from policy/seccomp.policy.
 *
 * Call it in the sandbox child between clone() and exec(), after
 * prctl(PR_SET_NO_NEW_PRIVS, 1) (without it, or CAP_SYS_ADMIN, the kernel refuses with
 * -EACCES) and after every other setup step, since the filter denies mount and friends:
 *
 *     if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || (r = seccomp_apply()) < 0)
 *             fail(...);
 *     execve(...);
 *
 * No allocation, no stdio, no locks: safe after clone() and in a signal handler.
 */
#pragma once

/* Installs the filter on the calling thread. Returns 0 or -errno. */
int seccomp_apply(void);
