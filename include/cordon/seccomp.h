/* A classic BPF seccomp program: what seccomp-compile makes of a policy file (src/policy),
 * what a spec names for its sandbox (cordon/spec.h) and what seccomp_apply() installs. Plain
 * data: the policy layer sees this header and nothing else of the public API. */
#pragma once

struct sock_filter;

struct cordon_seccomp {
	const struct sock_filter *filter;
	unsigned short len;
};
