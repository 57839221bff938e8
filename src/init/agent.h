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

int agent_main(int fd);
