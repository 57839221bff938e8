/* Included (-include) only when cordon-init is built against musl (Debian 12 ships 1.2.3),
 * for the few Linux calls whose libc wrappers musl does not have yet. */
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif

static inline int close_range(unsigned int first, unsigned int last, int flags)
{
	return syscall(SYS_close_range, first, last, flags);
}

static inline int renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath,
			    unsigned int flags)
{
	return syscall(SYS_renameat2, olddirfd, oldpath, newdirfd, newpath, flags);
}
