/* cordon-qemu-ro.so: preloaded into a QEMU that restores a memory snapshot (qemu.c), so that
 * it maps the snapshot's memory file from a read-only fd.
 *
 * The child maps the file copy-on-write (memory-backend-file share=off: MAP_PRIVATE), which
 * needs only a read-only fd; but QEMU 7.2 opens mem-path O_RDWR whatever `share` says
 * (physmem.c file_ram_open; later QEMUs fall back to O_RDONLY themselves). The file is every
 * sibling's memory: the child must not be able to write it, so it is root's, bound
 * read-only into the jail, and this shim turns QEMU's O_RDWR open of exactly
 * $CORDON_QEMU_RO_PATH into O_RDONLY. Nothing else changes. */
/* The real names, not the build's redirects: open stays open, open64 open64. */
#undef _FILE_OFFSET_BITS
#undef _FORTIFY_SOURCE
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static int ro_flags(const char *path, int flags)
{
	const char *ro = getenv("CORDON_QEMU_RO_PATH");
	if (ro && path && strcmp(path, ro) == 0 && (flags & O_ACCMODE) == O_RDWR)
		return (flags & ~(O_ACCMODE | O_CREAT | O_TRUNC)) | O_RDONLY;
	return flags;
}

#define WRAP(name)                                                                                 \
	int name(const char *path, int flags, ...)                                                 \
	{                                                                                          \
		static int (*real)(const char *, int, ...);                                        \
		va_list ap;                                                                        \
		va_start(ap, flags);                                                               \
		mode_t m = (flags & O_CREAT) ? va_arg(ap, mode_t) : 0;                             \
		va_end(ap);                                                                        \
		if (!real)                                                                         \
			real = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, #name);           \
		return real(path, ro_flags(path, flags), m);                                       \
	}
WRAP(open)
WRAP(open64)

/* _FORTIFY_SOURCE makes QEMU's open() with flags it computes a call of __open64_2. */
int __open64_2(const char *path, int flags);
int __open64_2(const char *path, int flags)
{
	static int (*real)(const char *, int);
	if (!real)
		real = (int (*)(const char *, int))dlsym(RTLD_NEXT, "__open64_2");
	return real(path, ro_flags(path, flags));
}
