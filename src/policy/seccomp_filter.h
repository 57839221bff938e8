/* The seccomp filters, compiled at build time from the policy files (policy/).
 *
 * seccomp-compile (src/policy/seccomp_compile.c) turns a policy into a classic BPF program
 * with libseccomp and writes it out as C, one struct cordon_seccomp per program; whoever
 * starts a process installs the one it needs with seccomp_apply() (src/lib/seccomp.h) and
 * never parses a policy nor links libseccomp. x86_64 only.
 */
#pragma once

#include <linux/filter.h>

/* A classic BPF seccomp program (what seccomp-compile makes of a policy file); spec->seccomp
 * points at one. */
struct cordon_seccomp {
	const struct sock_filter *filter;
	unsigned short len;
};

/* policy/seccomp.policy: every sandbox (the runtime's default of spec->seccomp, also declared in cordon.h). */
extern const struct cordon_seccomp cordon_seccomp_sandbox;
/* policy/egress.policy: the egress proxy, cordon-egress. */
extern const struct cordon_seccomp cordon_seccomp_egress;
