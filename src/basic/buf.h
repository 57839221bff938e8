/* A growable byte buffer: appended at the end, consumed from the front. What the CLI reads a
 * response body into, the recipe lexer builds words in and the agent queues frames and stdin
 * in. */
#pragma once

#include <stddef.h>

struct buf {
	char *p; /* the data is p[head, head + len), NUL-terminated once appended to */
	size_t head, len, cap;
};

/* Room for @n more bytes after the data and a NUL, moving the data to the front before
 * growing (doubling, from 64 bytes). 0 or -ENOMEM. */
int buf_reserve(struct buf *b, size_t n);

/* Where the next bytes go: write up to the reserved @n there, then add them to len. */
static inline void *buf_tail(struct buf *b) { return b->p + b->head + b->len; }

/* Appends @n bytes of @s and the NUL after them. 0 or -ENOMEM. */
int buf_add(struct buf *b, const void *s, size_t n);
static inline int buf_addc(struct buf *b, char c) { return buf_add(b, &c, 1); }

/* Drops @n bytes from the front. */
void buf_consume(struct buf *b, size_t n);

/* Hands the data over as a string ("" when nothing was appended; NULL when out of memory),
 * leaving @b empty. */
char *buf_take(struct buf *b);

/* Frees the data, leaving @b empty (a _cleanup_ function). */
void buf_done(struct buf *b);
