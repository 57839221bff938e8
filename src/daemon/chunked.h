/* A chunked request body (RFC 9112 7.1) decoded as it arrives: sizes in hex (at most 16
 * digits), chunk extensions and trailer fields dropped, lines ending in LF or CRLF. Pure:
 * no allocation; the data goes to the caller's callback as it is found.
 *
 *   struct chunked c;
 *   chunked_init(&c);
 *   ssize_t k = chunked_feed(&c, p, n, write_cb, arg);  // k < 0: -EBADMSG or write_cb's
 *   if (chunked_done(&c)) ... the body ended; p + k onwards is the next request's
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CHUNKED_LINE_MAX 256 /* a chunk-size line with its extensions, a trailer line */

enum chunked_state { CHUNKED_SIZE, CHUNKED_DATA, CHUNKED_DATA_END, CHUNKED_TRAILER, CHUNKED_DONE };

struct chunked {
	enum chunked_state state;
	uint64_t left; /* of the current chunk's data */
	size_t line_len;
	char line[CHUNKED_LINE_MAX];
};

void chunked_init(struct chunked *c);

/* Decodes @n bytes at @p, handing each run of body data to @data (a negative return stops
 * the decoding and is returned). Returns the bytes taken: all of them, unless the body ended
 * among them; -EBADMSG when the framing is broken. */
ssize_t chunked_feed(struct chunked *c, const char *p, size_t n,
		     int (*data)(void *arg, const char *p, size_t n), void *arg);

bool chunked_done(const struct chunked *c);
