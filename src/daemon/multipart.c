/* multipart/form-data (multipart.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "daemon/multipart.h"

/* RFC 2046's bchars but the space (quoted only, and never last: multipart_boundary()). */
static bool boundary_char(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       strchr("'()+_,-./:=?", c) != NULL;
}

int multipart_boundary(const char *ct, char ret[MULTIPART_MAX_BOUNDARY + 1])
{
	static const char type[] = "multipart/form-data";
	if (!ct || strncasecmp(ct, type, sizeof(type) - 1) != 0)
		return -EINVAL;
	const char *b = strcasestr(ct, "boundary=");
	if (!b)
		return -EINVAL;
	b += 9;
	bool quoted = *b == '"';
	b += quoted;
	size_t n = 0;
	while (b[n] && b[n] != '"' && b[n] != ';' && !(b[n] == ' ' && !quoted))
		n++;
	if (n == 0 || n > MULTIPART_MAX_BOUNDARY || (quoted && b[n] != '"'))
		return -EINVAL;
	for (size_t i = 0; i < n; i++) /* a space inside a quoted one, never last */
		if (!boundary_char(b[i]) && !(quoted && b[i] == ' ' && i + 1 < n))
			return -EINVAL;
	memcpy(ret, b, n);
	ret[n] = '\0';
	return 0;
}

static void init(struct multipart_reader *r, const char *boundary)
{
	r->dlen = (size_t)snprintf(r->delim, sizeof(r->delim), "\r\n--%.*s",
				   MULTIPART_MAX_BOUNDARY, boundary);
}

void multipart_init(struct multipart_reader *r, const char *boundary, const void *body, size_t len)
{
	r->p = body;
	r->fd = -1;
	r->len = len;
	r->off = r->parts = 0;
	r->started = r->done = false;
	init(r, boundary);
}

void multipart_init_fd(struct multipart_reader *r, const char *boundary, int fd, uint64_t len)
{
	multipart_init(r, boundary, NULL, 0);
	r->fd = fd;
	r->len = len;
}

/* Up to @max bytes of the body at @off in *@ret (into the body, or the window): how many,
 * 0 at its end, -EIO when the file cannot be read. */
static ssize_t view(struct multipart_reader *r, uint64_t off, uint64_t max, const uint8_t **ret)
{
	uint64_t n = off < r->len ? r->len - off : 0;
	n = n < max ? n : max;
	if (r->p) {
		*ret = r->p + off;
		return (ssize_t)n;
	}
	n = n < MULTIPART_WINDOW ? n : MULTIPART_WINDOW;
	*ret = r->win;
	for (size_t got = 0; got < n;) {
		ssize_t k = pread(r->fd, r->win + got, (size_t)n - got, (off_t)(off + got));
		if (k <= 0)
			return k < 0 && errno == EINTR ? 0 : -EIO;
		got += (size_t)k;
	}
	return (ssize_t)n;
}

/* The offset of the first delimiter at or after @from, window by window (a delimiter across
 * two windows is found: each next window starts dlen - 1 bytes before the last one ended);
 * -EBADMSG if there is none, -EIO. */
static int64_t find_delim(struct multipart_reader *r, uint64_t from)
{
	while (from + r->dlen <= r->len) {
		const uint8_t *b;
		ssize_t n = view(r, from, r->len - from, &b);
		if (n < 0)
			return n;
		const uint8_t *d = memmem(b, (size_t)n, r->delim, r->dlen);
		if (d)
			return (int64_t)(from + (uint64_t)(d - b));
		if ((size_t)n < r->dlen || from + (uint64_t)n >= r->len)
			break;
		from += (uint64_t)n - (r->dlen - 1);
	}
	return -EBADMSG;
}

/* The value of parameter @key in a Content-Disposition line [@v, @end), decoded into @out. */
static int param(const char *v, const char *end, const char *key, char *out, size_t size)
{
	size_t klen = strlen(key);
	for (const char *p = v; p + klen + 1 < end; p++) {
		bool at_start = p == v || p[-1] == ';' || p[-1] == ' ' || p[-1] == '\t';
		if (!at_start || strncasecmp(p, key, klen) != 0 || p[klen] != '=')
			continue;
		p += klen + 1;
		size_t n = 0;
		if (*p != '"') { /* a token */
			while (p < end && *p != ';' && *p != ' ' && n + 1 < size)
				out[n++] = *p++;
			out[n] = '\0';
			return (p < end && *p != ';' && *p != ' ') ? -EBADMSG : 1;
		}
		for (p++; p < end && *p != '"'; p++) {
			char c = *p;
			if (c == '\\' && p + 1 < end)
				c = *++p;
			else if (c == '%' && end - p >= 3 && (!strncmp(p, "%0A", 3) || !strncmp(p, "%0D", 3) || !strncmp(p, "%22", 3)))
				c = p[2] == 'A' ? '\n' : p[2] == 'D' ? '\r' : '"', p += 2;
			if (n + 1 >= size || c == '\0')
				return -EBADMSG;
			out[n++] = c;
		}
		out[n] = '\0';
		return p < end ? 1 : -EBADMSG;
	}
	return 0;
}

/* The part's headers [@h, @end): only Content-Disposition matters. */
static int part_head(const char *h, const char *end, struct multipart_part *ret)
{
	static const char cd[] = "content-disposition:";
	while (h < end) {
		const char *eol = memmem(h, (size_t)(end - h), "\r\n", 2);
		const char *le = eol ? eol : end;
		if ((size_t)(le - h) >= sizeof(cd) - 1 && strncasecmp(h, cd, sizeof(cd) - 1) == 0) {
			const char *v = h + sizeof(cd) - 1;
			int r = param(v, le, "name", ret->name, sizeof(ret->name));
			int f = r < 0 ? r : param(v, le, "filename", ret->filename, sizeof(ret->filename));
			if (f < 0)
				return -EBADMSG;
			ret->has_filename = f > 0;
		}
		h = eol ? eol + 2 : end;
	}
	return 0;
}

/* Past the first delimiter: the body may begin with it (no CRLF before) or a preamble. */
static int skip_preamble(struct multipart_reader *r)
{
	const uint8_t *b;
	ssize_t n = view(r, 0, r->dlen - 2, &b);
	if (n < 0)
		return (int)n;
	if ((size_t)n == r->dlen - 2 && memcmp(b, r->delim + 2, r->dlen - 2) == 0) {
		r->off = r->dlen - 2;
		return 0;
	}
	int64_t d = find_delim(r, 0);
	if (d < 0)
		return (int)d;
	r->off = (uint64_t)d + r->dlen;
	return 0;
}

/* The part whose delimiter ends at r->off: its headers into @ret, the offset of its data. */
static int64_t part_start(struct multipart_reader *r, struct multipart_part *ret)
{
	const uint8_t *b;
	ssize_t n = view(r, r->off, MULTIPART_WINDOW, &b);
	if (n < 0)
		return n;
	const char *p = (const char *)b, *end = p + n;
	if (end - p >= 2 && p[0] == '-' && p[1] == '-') { /* the close delimiter */
		r->done = true;
		return 0;
	}
	while (p < end && (*p == ' ' || *p == '\t')) /* transport padding */
		p++;
	if (end - p < 2 || p[0] != '\r' || p[1] != '\n')
		return -EBADMSG;
	p += 2;
	if (++r->parts > MULTIPART_MAX_PARTS)
		return -E2BIG;
	size_t look = (size_t)(end - p) < MULTIPART_MAX_HEAD + 4 ? (size_t)(end - p) : MULTIPART_MAX_HEAD + 4;
	bool bare = end - p >= 2 && p[0] == '\r' && p[1] == '\n'; /* a part without headers */
	const char *hend = bare ? p : memmem(p, look, "\r\n\r\n", 4);
	if (!hend)
		return -EBADMSG;
	*ret = (struct multipart_part){};
	if (hend > p && part_head(p, hend, ret) < 0)
		return -EBADMSG;
	return (int64_t)(r->off + (uint64_t)(hend + (hend == p ? 2 : 4) - (const char *)b));
}

int multipart_next(struct multipart_reader *r, struct multipart_part *ret)
{
	if (r->done)
		return 0;
	if (!r->started) {
		int e = skip_preamble(r);
		if (e < 0)
			return e == -EIO ? e : -EBADMSG;
		r->started = true;
	}
	int64_t data = part_start(r, ret);
	if (data <= 0)
		return (int)data;
	int64_t d = find_delim(r, (uint64_t)data);
	if (d < 0)
		return (int)d;
	ret->data = r->p ? r->p + data : NULL;
	ret->off = (uint64_t)data;
	ret->len = (uint64_t)(d - data);
	r->off = (uint64_t)d + r->dlen;
	return 1;
}
