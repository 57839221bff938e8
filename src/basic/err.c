#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <cordon/err.h>

static int err_vset(struct cordon_err *err, int code, bool with_errno, const char *fmt, va_list ap)
{
	int saved = errno;

	if (err) {
		int n = vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
		if (with_errno && n >= 0 && (size_t)n < sizeof(err->msg))
			snprintf(err->msg + n, sizeof(err->msg) - n, ": %s", strerror(-code));
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
