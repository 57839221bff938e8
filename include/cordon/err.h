/* The error object of libcordon.
 *
 * Functions that fail return a negative errno. Where a person must read why (spec validation,
 * sandbox setup, policy loading) they also take an optional caller-owned struct cordon_err and
 * fill it with one line. It lives on the caller's stack: no heap, so it is usable between
 * clone() and exec(), and it can be copied over a socket as it is.
 */
#pragma once

#include <stddef.h>

struct cordon_err {
	int code;      /* negative errno, 0 when unset */
	char msg[512]; /* one line, no trailing newline */
};

/* Fills @err (may be NULL) with "@fmt: strerror(-code)" and returns @code, so that callers
 * can write `return cordon_err_set(err, -errno, "mount '%s'", dst);`. errno is preserved. */
int cordon_err_set(struct cordon_err *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Like cordon_err_set() without the strerror suffix, for errors that are not errno values
 * (a bad option, a policy violation). */
int cordon_err_setf(struct cordon_err *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
