#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "basic/cleanup.h"
#include "basic/parse.h"

struct unit {
	const char *suffix;
	uint64_t factor;
};

/* A bare number is MiB, as memory and disk are thought of (E2B, Modal); "b" says bytes. */
static const struct unit size_units[] = {
	{"", 1ULL << 20},  {"b", 1},	     {"k", 1ULL << 10}, {"kb", 1ULL << 10}, {"kib", 1ULL << 10},
	{"m", 1ULL << 20}, {"mb", 1ULL << 20}, {"mib", 1ULL << 20}, {"g", 1ULL << 30},
	{"gb", 1ULL << 30}, {"gib", 1ULL << 30}, {"t", 1ULL << 40},
};

static const struct unit duration_units[] = {
	{"", 1000}, {"s", 1000}, {"ms", 1}, {"m", 60 * 1000}, {"min", 60 * 1000}, {"h", 3600 * 1000},
};

static int parse_with_units(const char *s, const struct unit *units, size_t n, uint64_t *ret)
{
	if (!s || !isdigit((unsigned char)*s))
		return -EINVAL;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno)
		return -ERANGE;
	for (size_t i = 0; i < n; i++) {
		if (strcasecmp(end, units[i].suffix) != 0)
			continue;
		if (v > UINT64_MAX / units[i].factor)
			return -ERANGE;
		*ret = v * units[i].factor;
		return 0;
	}
	return -EINVAL;
}

int cordon_parse_size(const char *s, uint64_t *ret)
{
	return parse_with_units(s, size_units, ELEMENTSOF(size_units), ret);
}

int cordon_parse_duration_ms(const char *s, uint64_t *ret)
{
	return parse_with_units(s, duration_units, ELEMENTSOF(duration_units), ret);
}

static bool is_name_start(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

bool env_name_valid(const char *s, size_t len)
{
	if (len == 0 || !is_name_start(s[0]))
		return false;
	for (size_t i = 1; i < len; i++)
		if (!is_name_start(s[i]) && !(s[i] >= '0' && s[i] <= '9'))
			return false;
	return true;
}
