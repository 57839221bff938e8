#include <stdio.h>
#include <time.h>

#include "basic/clock.h"

static uint64_t clock_ms(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t now_ms(void) { return clock_ms(CLOCK_REALTIME); }

uint64_t mono_ms(void) { return clock_ms(CLOCK_MONOTONIC); }

char *iso_time(uint64_t ms, char buf[40])
{
	time_t t = ms / 1000;
	struct tm tm;
	if (!gmtime_r(&t, &tm)) {
		snprintf(buf, 40, "1970-01-01T00:00:00.000Z");
		return buf;
	}
	size_t n = strftime(buf, 40, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf + n, 40 - n, ".%03uZ", (unsigned)(ms % 1000));
	return buf;
}
