/* cordon-init's agent mode: serve the host over one byte stream (docs/agent-protocol.md).
 *
 * The agent reads request frames from @fd, starts processes and streams their output, serves
 * file operations, reaps every child (it is PID 1 of the sandbox, or a subreaper when run
 * outside one, as the unit tests do), and returns when the host goes away (0) or breaks the
 * protocol (1). Before it returns it kills every process it started. It uses poll(), no
 * threads, and libc only, so it links into the static cordon-init.
 *
 * Takes ownership of @fd (a connected stream: socketpair, unix socket, vsock, tty). It blocks
 * SIGCHLD and ignores SIGPIPE for the rest of the process's life.
 */
#pragma once

#include <stdint.h>
#include <sys/types.h>

int agent_main(int fd);

/* What a process cordon-init starts is given (its child, before exec; the microVM guest's
 * PID 1 for cordon-init itself): the bounding set narrowed to @keep, the groups dropped, the
 * ids @uid and @gid, no_new_privs, no ambient set, and the permitted and effective sets
 * @keep exactly (uid 0 keeps its own through setresuid), or none where we hold none of them
 * (run outside a jail). 0 or -errno. */
int init_creds_drop(uid_t uid, gid_t gid, uint64_t keep);
