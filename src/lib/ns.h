/* Small namespace chores of a sandbox's first process. Async-signal-safe. */
#pragma once

#include <cordon/err.h>

/* Brings up "lo" in the current (new) network namespace. */
int ns_loopback_up(struct cordon_err *err);

/* Enters a new time namespace for the children to come, with the monotonic and boot clocks
 * moved so that the sandbox's uptime starts near zero and says nothing of the host's.
 * @offsets_fd is /proc/self/timens_offsets opened for writing (ns_time_offsets_open())
 * while the caller still owned its /proc/self files. Returns 0 if done, 1 if the kernel has
 * no time namespaces. */
int ns_time_enter(int offsets_fd, struct cordon_err *err);

/* Opens /proc/self/timens_offsets for writing, or -1 (no time namespaces). To call before
 * the caller's ids change: its /proc/self files then belong to the host's root (a process
 * made non-dumpable by the change, the mm it runs on perhaps shared with the host's,
 * runtime/jail/spawn.c), and the write needs the opener's CAP_SYS_TIME over the namespace. */
int ns_time_offsets_open(void);
