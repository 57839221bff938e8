/* Scope-bound cleanup, in the manner of systemd's macro.h and bubblewrap's utils.h.
 *
 * Declare with a cleanup attribute and an initialiser; hand ownership on with TAKE_PTR/TAKE_FD.
 *
 *     _cleanup_close_ int fd = open(...);
 *     ...
 *     return TAKE_FD(fd);
 */
#pragma once

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define DEFINE_CLEANUP_FUNC(type, func)                                                            \
	static inline void func##p(type *p)                                                        \
	{                                                                                          \
		if (*p)                                                                            \
			func(*p);                                                                  \
	}

static inline void freep(void *p)
{
	free(*(void **)p);
}

/* close() is never retried on EINTR: on Linux the fd is gone either way. errno is kept so
 * that a cleanup on an error path does not clobber the error being reported. */
static inline void closep(int *fd)
{
	if (*fd >= 0) {
		int saved = errno;
		close(*fd);
		errno = saved;
	}
}

DEFINE_CLEANUP_FUNC(FILE *, fclose)
DEFINE_CLEANUP_FUNC(DIR *, closedir)

#define _cleanup_(f)     __attribute__((cleanup(f)))
#define _cleanup_free_   _cleanup_(freep)
#define _cleanup_close_  _cleanup_(closep)
#define _cleanup_fclose_ _cleanup_(fclosep)
#define _cleanup_closedir_ _cleanup_(closedirp)

#define TAKE_PTR(p)                                                                                \
	({                                                                                         \
		__typeof__(p) _p = (p);                                                            \
		(p) = NULL;                                                                        \
		_p;                                                                                \
	})

#define TAKE_FD(fd)                                                                                \
	({                                                                                         \
		int _fd = (fd);                                                                    \
		(fd) = -1;                                                                         \
		_fd;                                                                               \
	})

#define ELEMENTSOF(a) (sizeof(a) / sizeof((a)[0]))
#define _unused_      __attribute__((unused))
#define _noreturn_    __attribute__((noreturn))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
