#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "basic/buf.h"

int buf_reserve(struct buf *b, size_t n)
{
	if (b->cap - b->head - b->len > n)
		return 0;
	if (b->head > 0) {
		memmove(b->p, b->p + b->head, b->len);
		b->head = 0;
		if (b->cap - b->len > n)
			return 0;
	}
	if (n >= SIZE_MAX / 2 - b->len)
		return -ENOMEM;
	size_t cap = b->cap ? b->cap : 64;
	while (cap - b->len <= n)
		cap *= 2;
	char *p = realloc(b->p, cap);
	if (!p)
		return -ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

int buf_add(struct buf *b, const void *s, size_t n)
{
	int r = buf_reserve(b, n);
	if (r < 0)
		return r;
	memcpy(buf_tail(b), s, n);
	b->len += n;
	b->p[b->head + b->len] = '\0';
	return 0;
}

void buf_consume(struct buf *b, size_t n)
{
	b->head += n;
	b->len -= n;
	if (b->len == 0)
		b->head = 0;
}

char *buf_take(struct buf *b)
{
	if (!b->p)
		return strdup("");
	if (b->head > 0)
		memmove(b->p, b->p + b->head, b->len);
	b->p[b->len] = '\0';
	char *s = b->p;
	*b = (struct buf){};
	return s;
}

void buf_done(struct buf *b)
{
	free(b->p);
	*b = (struct buf){};
}
