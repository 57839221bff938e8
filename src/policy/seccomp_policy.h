/* The seccomp policy compiler behind seccomp-compile (a build tool, never linked into the
 * runtime).
 *
 *     struct seccomp_policy *p = NULL;
 *     struct cordon_err err = {};
 *     r = seccomp_policy_parse(f, "seccomp.policy", &p, &err);
 *     r = seccomp_policy_compile(p, &insns, &n, &err);
 *
 * The file format is documented at the top of policy/seccomp.policy. Rules fall into three
 * passes, each compiled by libseccomp into its own program, then linked into one: a call
 * that no rule of a pass decides goes on to the next pass, and the last pass ends in the
 * policy's default action. Passes are needed because libseccomp silently drops the
 * conditional rules of a syscall that also has an unconditional one (allow ioctl, but deny
 * TIOCSTI), and cannot express "any other value" of an argument.
 */
#pragma once

#include <linux/filter.h>
#include <stddef.h>
#include <stdio.h>

#include <cordon/err.h>

struct seccomp_policy;

struct seccomp_policy *seccomp_policy_free(struct seccomp_policy *p);

/* Reads a policy from @f (@name is used in messages). The caller owns *@ret_policy. */
int seccomp_policy_parse(FILE *f, const char *name, struct seccomp_policy **ret_policy,
			 struct cordon_err *err);

/* Compiles @p to one BPF program for x86_64. The caller owns (and frees) *@ret_insns. */
int seccomp_policy_compile(const struct seccomp_policy *p, struct sock_filter **ret_insns,
			   size_t *ret_len, struct cordon_err *err);
