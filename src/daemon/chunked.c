/* A chunked body's decoder (chunked.h). */
#include <errno.h>
#include <string.h>

#include "daemon/chunked.h"

void chunked_init(struct chunked *c)
{
	c->state = CHUNKED_SIZE;
	c->left = 0;
	c->line_len = 0;
}

bool chunked_done(const struct chunked *c)
{
	return c->state == CHUNKED_DONE;
}

static int hex_digit(char d)
{
	char l = (char)(d | 0x20);
	return d >= '0' && d <= '9' ? d - '0' : l >= 'a' && l <= 'f' ? l - 'a' + 10 : -1;
}

/* A chunk-size line: the size, then nothing, blanks or ';' and extensions. */
static int size_line(struct chunked *c, size_t n)
{
	uint64_t size = 0;
	size_t i = 0;
	for (int v; i < n && i < 16 && (v = hex_digit(c->line[i])) >= 0; i++)
		size = size << 4 | (uint64_t)v;
	if (i == 0 || (i < n && c->line[i] != ';' && c->line[i] != ' ' && c->line[i] != '\t'))
		return -EBADMSG; /* no size, or one of more than 16 digits */
	c->left = size;
	c->state = size ? CHUNKED_DATA : CHUNKED_TRAILER;
	return 0;
}

/* A complete line of the framing (its LF cut off). */
static int framing_line(struct chunked *c)
{
	size_t n = c->line_len;
	if (n && c->line[n - 1] == '\r')
		n--;
	c->line_len = 0;
	switch (c->state) {
	case CHUNKED_DATA_END: /* the line end after a chunk's data */
		c->state = CHUNKED_SIZE;
		return n == 0 ? 0 : -EBADMSG;
	case CHUNKED_TRAILER: /* a trailer field is dropped; an empty line ends the body */
		c->state = n == 0 ? CHUNKED_DONE : CHUNKED_TRAILER;
		return 0;
	default:
		return size_line(c, n);
	}
}

ssize_t chunked_feed(struct chunked *c, const char *p, size_t n,
		     int (*data)(void *arg, const char *p, size_t n), void *arg)
{
	size_t i = 0;
	while (i < n && c->state != CHUNKED_DONE) {
		if (c->state == CHUNKED_DATA) {
			size_t take = n - i < c->left ? n - i : (size_t)c->left;
			int r = data(arg, p + i, take);
			if (r < 0)
				return r;
			c->left -= take;
			i += take;
			c->state = c->left ? CHUNKED_DATA : CHUNKED_DATA_END;
			continue;
		}
		const char *nl = memchr(p + i, '\n', n - i);
		size_t len = nl ? (size_t)(nl - (p + i)) : n - i;
		if (c->line_len + len > sizeof(c->line))
			return -EBADMSG;
		memcpy(c->line + c->line_len, p + i, len);
		c->line_len += len;
		i += len + (nl != NULL);
		if (nl && framing_line(c) < 0)
			return -EBADMSG;
	}
	return (ssize_t)i;
}
