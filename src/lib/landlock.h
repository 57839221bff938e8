/* Landlock as a second fence on the filesystem: read and execute everywhere, write only under
 * the sandbox's writable directories. The ABI is probed at run time; a kernel without
 * Landlock (or with it disabled) is reported, not an error: the mount namespace is the first
 * fence. Async-signal-safe. */
#pragma once

#include <cordon/err.h>

/* The kernel's Landlock ABI version, 0 if none. */
int landlock_abi(void);

/* Restricts the calling thread; the paths are opened now. Needs no_new_privs. Returns the ABI
 * used (0: not available, nothing done) or -errno. */
int landlock_apply(const char *const *writable, struct cordon_err *err);
