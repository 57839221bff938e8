/* Base64 (RFC 4648 section 4, with padding): how bytes travel in JSON bodies. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The encoded length of @len bytes, without the NUL. */
static inline size_t base64_encoded_len(size_t len) { return 4 * ((len + 2) / 3); }

/* Encodes @len bytes of @in into @out, which holds base64_encoded_len(@len) + 1 bytes;
 * NUL-terminates and returns the length written. */
size_t base64_encode_to(const void *in, size_t len, char *out);

/* The same into a new string (free() it); NULL when out of memory. */
char *base64_encode(const void *in, size_t len, size_t *ret_len);

/* Strict decoding: the length a multiple of 4, '=' only as the last one or two characters,
 * nothing outside the alphabet. @out holds @len / 4 * 3 bytes; returns the length written
 * or -EINVAL. */
ssize_t base64_decode_to(const char *in, size_t len, void *out);

/* The same into a new buffer (free() it, NUL-terminated for convenience): 0, -EINVAL or
 * -ENOMEM. */
int base64_decode(const char *in, size_t len, uint8_t **ret, size_t *ret_len);

/* RFC 4648 section 5 (URL and file name safe, '-' and '_'), without padding, as JWTs use it;
 * a new string (free() it), NULL when out of memory. */
char *base64url_encode(const void *in, size_t len);
