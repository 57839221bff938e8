/* Small namespace chores of a sandbox's first process. Async-signal-safe. */
#pragma once

#include <cordon/err.h>

/* Brings up "lo" in the current (new) network namespace. */
int ns_loopback_up(struct cordon_err *err);

/* Enters a new time namespace for the children to come, with the monotonic and boot clocks
 * moved so that the sandbox's uptime starts near zero and says nothing of the host's.
 * Returns 0 if done, 1 if the kernel has no time namespaces. */
int ns_time_enter(struct cordon_err *err);
