/* cordon-init's argv and environment for a spec, the same in every runtime: the caller's
 * entries, then the defaults it did not set (PATH, HOME, LANG, TERM); argv is
 * `cordon-init --agent [--connect SOCKET]` or `cordon-init --run --workdir DIR -- CMD...`.
 * Allocated before the sandbox's process exists (the jail's child allocates nothing). */
#pragma once

#include <stdbool.h>

#include <cordon/cordon.h>

struct init_args {
	char **envp; /* owned, each entry too */
	char **argv; /* owned; its strings are @spec's or literals */
};

/* @agent_socket: the agent connects its channel to this unix socket (a runtime that can
 * hand the sandbox no fd 3), see src/init/init.c; NULL: the channel is fd 3. */
int init_args_make(struct init_args *a, const struct cordon_spec *spec, const char *agent_socket,
		   struct cordon_err *err);
void init_args_free(struct init_args *a);

/* The capabilities cordon-init is started with (its bounding and permitted set), in every
 * runtime: root's set for a one-shot command run as root, nothing for one run as "user",
 * and in agent mode its own (starting processes as either) beside root's, to hand on. */
uint64_t init_caps(const struct cordon_spec *spec);

/* How the one-shot command ended, as cordon-init wrote it on @fd (a socket, not waited on):
 * hostile bytes clamped to an exit code or a signal in @res. 0, or -ENODATA when it said
 * nothing (it died first). */
int init_status_read(int fd, struct cordon_result *res);
