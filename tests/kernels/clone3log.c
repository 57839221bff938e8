/* SPDX-License-Identifier: Apache-2.0 */
/*
 * clone3log.so: an LD_PRELOAD shim for the in-guest kernel suite that tells whether
 * `cordon run` created its sandbox with clone3(CLONE_INTO_CGROUP) or fell back to clone()
 * plus a write to cgroup.procs. It wraps libc's syscall() and openat(), and appends one line
 * per clone3/clone call made through syscall(), and per cgroup.procs opened for writing, to
 * $CLONE3_LOG:
 *
 *   clone3 flags=0x... into_cgroup=1 ret=PID      (or ret=-1 errno=NAME)
 *   clone flags=0x... ret=PID
 *   procs-write ret=FD                            (the host moving a child into its cgroup)
 *
 * The jail's child is cloned by libcordon's own clone3 trampoline where it runs in the
 * host's memory (src/runtime/jail/spawn.c), which no wrapper sees: then the test knows
 * CLONE_INTO_CGROUP by its outcome, the child in its cgroup with no procs-write.
 *
 * Build: gcc -shared -fPIC -O2 -o clone3log.so clone3log.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/sched.h>

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

static void note(const char *fmt, ...)
{
	const char *path = getenv("CLONE3_LOG");
	if (!path)
		return;
	char buf[256];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd >= 0) {
		if (write(fd, buf, n > 0 && n < (int)sizeof(buf) ? n : 0) < 0) {
		}
		close(fd);
	}
}

long syscall(long nr, ...)
{
	static long (*real)(long, ...);
	if (!real)
		real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
	va_list ap;
	va_start(ap, nr);
	long a[6];
	for (int i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	long ret = real(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
	int e = errno;
	if (ret != 0 && nr == SYS_clone3) {
		const struct clone_args *ca = (const void *)a[0];
		unsigned long long fl = ca ? ca->flags : 0;
		if (ret > 0)
			note("clone3 flags=%#llx into_cgroup=%d ret=%ld\n", fl,
			     !!(fl & CLONE_INTO_CGROUP), ret);
		else
			note("clone3 flags=%#llx into_cgroup=%d ret=-1 errno=%s\n", fl,
			     !!(fl & CLONE_INTO_CGROUP), strerrorname_np(e) ? strerrorname_np(e) : "?");
	} else if (ret != 0 && nr == SYS_clone) {
		note("clone flags=%#lx ret=%ld\n", (unsigned long)a[0], ret);
	}
	errno = e;
	return ret;
}

/* cordon is built with _FILE_OFFSET_BITS=64: its openat() is glibc's openat64. */
static int logged_openat(const char *sym, int dirfd, const char *path, int flags, mode_t mode)
{
	int (*real)(int, const char *, int, ...) = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, sym);
	int ret = real(dirfd, path, flags, mode);
	int e = errno;
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	if (strcmp(base, "cgroup.procs") == 0 && (flags & O_ACCMODE) != O_RDONLY)
		note("procs-write ret=%d\n", ret);
	errno = e;
	return ret;
}

static mode_t mode_arg(int flags, va_list ap)
{
	return (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
}

int openat(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t mode = mode_arg(flags, ap);
	va_end(ap);
	return logged_openat("openat", dirfd, path, flags, mode);
}

int openat64(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t mode = mode_arg(flags, ap);
	va_end(ap);
	return logged_openat("openat64", dirfd, path, flags, mode);
}
