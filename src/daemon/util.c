#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "basic/utf8.h"
#include "daemon/daemon.h"

uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* "sb-" and 20 characters of base32 (100 random bits): unguessable, URL- and file-safe. */
void make_id(char out[SBX_ID_LEN + 1])
{
	static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz234567";
	uint8_t rnd[20];
	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd)) {
		/* getrandom(2) does not fail for 20 bytes once the pool is initialised; fall back
		 * to the clock so that an id is still unique, if guessable. */
		uint64_t t = now_ms() ^ (uint64_t)clock();
		for (size_t i = 0; i < sizeof(rnd); i++)
			rnd[i] = (uint8_t)(t >> (i % 8 * 8)) ^ (uint8_t)i;
	}
	memcpy(out, "sb-", 3);
	for (size_t i = 0; i < 20; i++)
		out[3 + i] = alphabet[rnd[i] & 31];
	out[SBX_ID_LEN - 1] = '\0';
	out[SBX_ID_LEN] = '\0';
}

bool valid_id(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 64)
		return false;
	return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == n;
}

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

/* A JSON string of @data with every invalid UTF-8 byte (and NUL) replaced by U+FFFD, since
 * what a sandbox prints is arbitrary bytes and JSON strings are not. */
json_t *json_from_bytes_utf8(const void *data, size_t len)
{
	_cleanup_free_ char *out = malloc(len * 3 + 1);
	if (!out)
		return NULL;
	size_t o = utf8_clean(data, len, out, false, NULL);
	return json_stringn_nocheck(out, o);
}

char *base64_encode(const void *data, size_t len, size_t *ret_len)
{
	static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const uint8_t *p = data;
	size_t n = 4 * ((len + 2) / 3);
	char *out = malloc(n + 1);
	if (!out)
		return NULL;
	size_t o = 0, i = 0;
	for (; i + 2 < len; i += 3) {
		uint32_t v = p[i] << 16 | p[i + 1] << 8 | p[i + 2];
		out[o++] = tbl[v >> 18];
		out[o++] = tbl[(v >> 12) & 63];
		out[o++] = tbl[(v >> 6) & 63];
		out[o++] = tbl[v & 63];
	}
	if (i < len) {
		uint32_t v = p[i] << 16 | (i + 1 < len ? p[i + 1] << 8 : 0);
		out[o++] = tbl[v >> 18];
		out[o++] = tbl[(v >> 12) & 63];
		out[o++] = i + 1 < len ? tbl[(v >> 6) & 63] : '=';
		out[o++] = '=';
	}
	out[o] = '\0';
	*ret_len = o;
	return out;
}
