#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <cordon/err.h>

/* The English message from glibc's table, not strerror(): strerror translates through
 * gettext (a lock, and an allocation for an unknown number), and this runs in the jail child
 * between clone() and exec(), where another thread's lock may be held for ever. */
static const char *err_name(int e, char *buf, size_t size)
{
	const char *s = strerrordesc_np(e);
	if (s)
		return s;
	snprintf(buf, size, "Unknown error %d", e);
	return buf;
}

static int err_vset(struct cordon_err *err, int code, bool with_errno, const char *fmt, va_list ap)
{
	int saved = errno;
	char unknown[32];

	if (err) {
		int n = vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
		if (with_errno && n >= 0 && (size_t)n < sizeof(err->msg))
			snprintf(err->msg + n, sizeof(err->msg) - n, ": %s",
				 err_name(-code, unknown, sizeof(unknown)));
		err->code = code;
	}
	errno = saved;
	return code;
}

int cordon_err_set(struct cordon_err *err, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = err_vset(err, code, true, fmt, ap);
	va_end(ap);
	return r;
}

int cordon_err_setf(struct cordon_err *err, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = err_vset(err, code, false, fmt, ap);
	va_end(ap);
	return r;
}
