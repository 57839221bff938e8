/* cordon-gvisor-stat.so: preloaded into every program cordon-init starts in a gvisor sandbox
 * (oci.c names it in CORDON_INIT_PRELOAD; src/init/preload.c sets LD_PRELOAD).
 *
 * The Sentry of Debian 12's runsc (2022-12) answers EINVAL to statx(2) and fstatat(2) with
 * AT_NO_AUTOMOUNT, and coreutils 9 passes that flag on every stat: without this, `ls -l`,
 * `stat` and `du` fail on every path. Later gVisor drops the flag itself, since it has no
 * automount points; so does this, and nothing else changes. It links no libc, so that glibc
 * and musl programs both load it: syscall() and errno are the libc's the program has. */
#undef _FILE_OFFSET_BITS
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <sys/syscall.h>

long syscall(long number, ...);

struct stat;
struct statx;

int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *buf);
int fstatat(int dirfd, const char *path, struct stat *buf, int flags);
int fstatat64(int dirfd, const char *path, struct stat *buf, int flags);

int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *buf)
{
	return (int)syscall(SYS_statx, dirfd, path, flags & ~AT_NO_AUTOMOUNT, mask, buf);
}

int fstatat(int dirfd, const char *path, struct stat *buf, int flags)
{
	return (int)syscall(SYS_newfstatat, dirfd, path, buf, flags & ~AT_NO_AUTOMOUNT);
}

int fstatat64(int dirfd, const char *path, struct stat *buf, int flags)
{
	return fstatat(dirfd, path, buf, flags);
}
