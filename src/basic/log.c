#include <stdarg.h>
#include <stdio.h>

#include "basic/log.h"

int log_max_level = LOG_WARNING;
const char *log_prefix = "cordon";

void log_internal(int level, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	int saved = errno;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	/* One write per line so that concurrent writers do not interleave. */
	dprintf(STDERR_FILENO, "%s: %s\n", log_prefix, buf);
	errno = saved;
}
