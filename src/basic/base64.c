#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "basic/base64.h"
#include "basic/cleanup.h"

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t base64_encode_to(const void *in, size_t len, char *out)
{
	const uint8_t *p = in;
	size_t o = 0;
	for (size_t i = 0; i < len; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16;
		if (i + 1 < len)
			v |= (uint32_t)p[i + 1] << 8;
		if (i + 2 < len)
			v |= p[i + 2];
		out[o++] = alphabet[v >> 18];
		out[o++] = alphabet[(v >> 12) & 63];
		out[o++] = i + 1 < len ? alphabet[(v >> 6) & 63] : '=';
		out[o++] = i + 2 < len ? alphabet[v & 63] : '=';
	}
	out[o] = '\0';
	return o;
}

char *base64_encode(const void *in, size_t len, size_t *ret_len)
{
	char *out = malloc(base64_encoded_len(len) + 1);
	if (!out)
		return NULL;
	*ret_len = base64_encode_to(in, len, out);
	return out;
}

static int value_of(char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

ssize_t base64_decode_to(const char *in, size_t len, void *out)
{
	uint8_t *o = out;
	if (len % 4)
		return -EINVAL;
	size_t pad = len && in[len - 1] == '=' ? (in[len - 2] == '=' ? 2 : 1) : 0;
	size_t n = 0;
	for (size_t i = 0; i < len; i += 4) {
		uint32_t q = 0;
		for (size_t j = 0; j < 4; j++) {
			bool padding = i + j >= len - pad;
			int b = padding ? 0 : value_of(in[i + j]);
			if (b < 0)
				return -EINVAL;
			q = q << 6 | (uint32_t)b;
		}
		o[n++] = (uint8_t)(q >> 16);
		if (i + 4 < len || pad < 2)
			o[n++] = (uint8_t)(q >> 8);
		if (i + 4 < len || pad < 1)
			o[n++] = (uint8_t)q;
	}
	return (ssize_t)n;
}

int base64_decode(const char *in, size_t len, uint8_t **ret, size_t *ret_len)
{
	_cleanup_free_ uint8_t *out = malloc(len / 4 * 3 + 1);
	if (!out)
		return -ENOMEM;
	ssize_t n = base64_decode_to(in, len, out);
	if (n < 0)
		return (int)n;
	out[n] = 0;
	*ret_len = (size_t)n;
	*ret = TAKE_PTR(out);
	return 0;
}

char *base64url_encode(const void *in, size_t len)
{
	size_t n;
	char *out = base64_encode(in, len, &n);
	if (!out)
		return NULL;
	while (n && out[n - 1] == '=')
		out[--n] = '\0';
	for (size_t i = 0; i < n; i++)
		out[i] = out[i] == '+' ? '-' : out[i] == '/' ? '_' : out[i];
	return out;
}
