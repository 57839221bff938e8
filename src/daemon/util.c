#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "basic/clock.h"
#include "basic/utf8.h"
#include "daemon/daemon.h"
#include "daemon/service.h"

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

/* The services' error, for every domain file (service.h). */
int svc_fail(struct svc_err *err, enum api_error code, const char *fmt, ...)
{
	va_list ap;
	err->code = code;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	return -1;
}

int svc_fail_audit(struct svc_err *err, int r)
{
	return svc_fail(err, API_ERR_AUDIT_UNAVAILABLE,
			"the audit log cannot be written (%s): nothing was done", strerror(-r));
}

char *json_ndjson_line(json_t *ev, size_t *ret_len)
{
	_cleanup_(json_decrefp) json_t *e = ev;
	char *line = e ? json_dumps(e, JSON_COMPACT) : NULL;
	if (!line)
		return NULL;
	size_t n = strlen(line);
	line[n] = '\n'; /* over the NUL: json_dumps leaves no room after it */
	*ret_len = n + 1;
	return line;
}
