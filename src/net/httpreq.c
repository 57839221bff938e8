/* HTTP/1.1 request framing (httpreq.h): a strict reading of RFC 9112's request head, refusing
 * what is ambiguous rather than guessing. */
#include <errno.h>
#include <string.h>
#include <strings.h>

#include "net/httpreq.h"

#define CHUNK_LINE_MAX 1024 /* a chunk-size line with its extensions, a trailer line */

static bool is_tchar(uint8_t ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

/* The end of the head (just past CRLFCRLF) within @len, or 0. */
static size_t head_end(const uint8_t *p, size_t len)
{
	for (size_t i = 3; i < len; i++)
		if (p[i] == '\n' && p[i - 1] == '\r' && p[i - 2] == '\n' && p[i - 3] == '\r')
			return i + 1;
	return 0;
}

static bool span_is(const uint8_t *p, struct httpreq_span s, const char *word)
{
	return s.len == strlen(word) && strncasecmp((const char *)p + s.off, word, s.len) == 0;
}

/* "GET /path HTTP/1.1": method, origin-form target, version. */
static int parse_request_line(const uint8_t *p, size_t end, struct httpreq *r)
{
	size_t i = 0;
	while (i < end && is_tchar(p[i]))
		i++;
	if (i == 0 || i >= end || p[i] != ' ')
		return -EBADMSG;
	r->method = (struct httpreq_span){0, (uint32_t)i};
	size_t t = ++i;
	while (i < end && p[i] > ' ' && p[i] < 0x7f)
		i++;
	if (i == t || i >= end || p[i] != ' ' || p[t] != '/')
		return -EBADMSG;
	r->target = (struct httpreq_span){(uint32_t)t, (uint32_t)(i - t)};
	i++;
	if (end - i != 8 || (memcmp(p + i, "HTTP/1.1", 8) != 0 && memcmp(p + i, "HTTP/1.0", 8) != 0))
		return -EBADMSG;
	if (span_is(p, r->method, "CONNECT"))
		return -EBADMSG;
	return 0;
}

static int parse_length(const uint8_t *p, struct httpreq_span v, uint64_t *ret)
{
	uint64_t n = 0;
	if (v.len == 0 || v.len > 15)
		return -EBADMSG;
	for (uint32_t i = 0; i < v.len; i++) {
		uint8_t ch = p[v.off + i];
		if (ch < '0' || ch > '9')
			return -EBADMSG;
		n = n * 10 + (ch - '0');
	}
	*ret = n;
	return 0;
}

/* The headers that decide framing and routing. */
static int note_header(const uint8_t *p, struct httpreq *r, const struct httpreq_header *h)
{
	if (span_is(p, h->name, "host")) {
		if (r->host.len || h->value.len == 0)
			return -EBADMSG;
		r->host = h->value;
	} else if (span_is(p, h->name, "content-length")) {
		uint64_t n;
		if (parse_length(p, h->value, &n) < 0 || (r->has_length && n != r->content_length))
			return -EBADMSG;
		r->has_length = true;
		r->content_length = n;
	} else if (span_is(p, h->name, "transfer-encoding")) {
		if (r->chunked || !span_is(p, h->value, "chunked"))
			return -EBADMSG;
		r->chunked = true;
	} else if (span_is(p, h->name, "upgrade")) {
		r->upgrade = true;
	}
	return 0;
}

/* One "Name: value" line in [@i, @eol); OWS around the value is trimmed. */
static int parse_header(const uint8_t *p, size_t i, size_t eol, struct httpreq *r)
{
	size_t n = i;
	while (n < eol && is_tchar(p[n]))
		n++;
	if (n == i || n >= eol || p[n] != ':')
		return -EBADMSG;
	size_t v = n + 1, ve = eol;
	while (v < ve && (p[v] == ' ' || p[v] == '\t'))
		v++;
	while (ve > v && (p[ve - 1] == ' ' || p[ve - 1] == '\t'))
		ve--;
	for (size_t k = v; k < ve; k++)
		if ((p[k] < ' ' && p[k] != '\t') || p[k] == 0x7f)
			return -EBADMSG;
	if (r->n_headers >= HTTPREQ_HEADERS_MAX)
		return -E2BIG;
	struct httpreq_header *h = &r->headers[r->n_headers++];
	*h = (struct httpreq_header){{(uint32_t)i, (uint32_t)(n - i)}, {(uint32_t)v, (uint32_t)(ve - v)}};
	return note_header(p, r, h);
}

int httpreq_parse(const uint8_t *buf, size_t len, struct httpreq *ret)
{
	size_t end = head_end(buf, len < HTTPREQ_HEAD_MAX ? len : HTTPREQ_HEAD_MAX);
	if (!end)
		return len >= HTTPREQ_HEAD_MAX ? -E2BIG : -EAGAIN;
	struct httpreq r = {.head_len = end};
	/* Every LF ends a CRLF: a bare LF or CR is read differently by different servers. */
	for (size_t i = 0; i < end; i++)
		if ((buf[i] == '\n' && (i == 0 || buf[i - 1] != '\r')) ||
		    (buf[i] == '\r' && (i + 1 >= end || buf[i + 1] != '\n')))
			return -EBADMSG;
	const uint8_t *eol = memchr(buf, '\r', end);
	int e = parse_request_line(buf, (size_t)(eol - buf), &r);
	for (size_t i = (size_t)(eol - buf) + 2; e == 0 && i < end - 2;) {
		const uint8_t *nl = memchr(buf + i, '\r', end - i);
		if (buf[i] == ' ' || buf[i] == '\t')
			return -EBADMSG; /* obs-fold */
		e = parse_header(buf, i, (size_t)(nl - buf), &r);
		i = (size_t)(nl - buf) + 2;
	}
	if (e < 0)
		return e;
	if (!r.host.len || (r.chunked && r.has_length))
		return -EBADMSG;
	*ret = r;
	return 0;
}

bool httpreq_host_is(const uint8_t *buf, const struct httpreq *req, const char *host, uint16_t port)
{
	const char *v = (const char *)buf + req->host.off;
	size_t n = req->host.len, hl = strlen(host);
	if (n < hl || strncasecmp(v, host, hl) != 0)
		return false;
	if (n == hl)
		return true;
	if (v[hl] != ':' || n - hl - 1 == 0 || n - hl - 1 > 5)
		return false;
	unsigned p = 0;
	for (size_t i = hl + 1; i < n; i++) {
		if (v[i] < '0' || v[i] > '9')
			return false;
		p = p * 10 + (unsigned)(v[i] - '0');
	}
	return p == port;
}

enum { CH_SIZE, CH_EXT, CH_SIZE_LF, CH_DATA, CH_DATA_CR, CH_DATA_LF, CH_TRAILER, CH_TRAILER_LF, CH_DONE };

static int hexval(uint8_t ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	ch |= 0x20;
	return ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
}

/* One byte of framing (everything but chunk data); -EBADMSG on a violation. */
static int chunked_byte(struct httpreq_chunked *st, uint8_t ch)
{
	if (++st->line > CHUNK_LINE_MAX)
		return -EBADMSG;
	switch (st->state) {
	case CH_SIZE:
		if (hexval(ch) >= 0) {
			if (++st->digits > 15)
				return -EBADMSG;
			st->left = st->left * 16 + (uint64_t)hexval(ch);
			return 0;
		}
		if (st->digits == 0)
			return -EBADMSG;
		st->state = ch == '\r' ? CH_SIZE_LF : CH_EXT;
		return ch == ';' || ch == '\r' || ch == ' ' || ch == '\t' ? 0 : -EBADMSG;
	case CH_EXT:
		if (ch == '\r')
			st->state = CH_SIZE_LF;
		else if (ch < ' ' && ch != '\t')
			return -EBADMSG;
		return 0;
	case CH_SIZE_LF:
		if (ch != '\n')
			return -EBADMSG;
		st->line = 0;
		st->state = st->left ? CH_DATA : CH_TRAILER;
		return 0;
	case CH_DATA_CR:
		st->state = CH_DATA_LF;
		return ch == '\r' ? 0 : -EBADMSG;
	case CH_DATA_LF:
		st->state = CH_SIZE;
		st->digits = 0;
		st->line = 0;
		return ch == '\n' ? 0 : -EBADMSG;
	case CH_TRAILER:
		/* An empty line ends the body; any other is a trailer field, skipped. */
		if (ch == '\r')
			st->state = CH_TRAILER_LF;
		else if (ch == '\n' || (ch < ' ' && ch != '\t'))
			return -EBADMSG;
		return 0;
	case CH_TRAILER_LF:
		if (ch != '\n')
			return -EBADMSG;
		st->state = st->line == 2 ? CH_DONE : CH_TRAILER;
		st->line = 0;
		return 0;
	}
	return -EBADMSG;
}

long httpreq_chunked_feed(struct httpreq_chunked *st, const uint8_t *buf, size_t len, bool *done)
{
	size_t i = 0;
	*done = false;
	while (i < len && st->state != CH_DONE) {
		if (st->state == CH_DATA) {
			size_t n = len - i < st->left ? len - i : (size_t)st->left;
			st->left -= n;
			i += n;
			if (!st->left)
				st->state = CH_DATA_CR;
			continue;
		}
		if (chunked_byte(st, buf[i++]) < 0)
			return -EBADMSG;
	}
	*done = st->state == CH_DONE;
	return (long)i;
}

/* The path as the server will read it, into @out (at least @len + 1 bytes): percent-escapes
 * decoded, empty, "." and ".." segments resolved (RFC 3986 5.2.4), so that "/v1/%63harges",
 * "//v1/charges", "/v1;x/charges" and "/v1/x/../charges" are all "/v1/charges" (a ";"
 * parameter is left out of its segment, as servlet containers read it). -1 for an escape that is not
 * one, or that is a control byte: the caller then holds the request (a rule must not be dodged by a path it cannot read). */
int httpreq_path_normalize(const uint8_t *t, size_t len, char *out)
{
	size_t o = 0;
	bool param = false; /* after a ";" in this segment: left out, as Java servers do */
	for (size_t i = 0; i < len; i++) {
		uint8_t c = t[i];
		if (c == '%') {
			int hi = i + 2 < len ? hexval(t[i + 1]) : -1, lo = i + 2 < len ? hexval(t[i + 2]) : -1;
			if (hi < 0 || lo < 0)
				return -1;
			c = (uint8_t)(hi << 4 | lo);
			i += 2;
			if (c < 0x20 || c == 0x7f)
				return -1; /* a NUL would end the string the segments are read in */
		}
		if (c == ';')
			param = true;
		if (param && c != '/' && c != '\\')
			continue;
		param = false;
		if (c == '/' || c == '\\') {
			out[o] = '\0';
			/* The segment just ended: "", "." or ".." (back to the slash before). */
			char *seg = o ? strrchr(out, '/') : NULL;
			if (seg && (strcmp(seg, "/") == 0 || strcmp(seg, "/.") == 0)) {
				o = (size_t)(seg - out);
			} else if (seg && strcmp(seg, "/..") == 0) {
				*seg = '\0';
				char *up = strrchr(out, '/');
				o = up ? (size_t)(up - out) : 0;
			}
			out[o++] = '/';
			continue;
		}
		out[o++] = (char)c;
	}
	out[o] = '\0';
	/* A last segment of "." or "..". */
	char *seg = strrchr(out, '/');
	if (seg && (strcmp(seg, "/.") == 0 || strcmp(seg, "/..") == 0)) {
		bool up = seg[2] == '.';
		*seg = '\0';
		char *prev = up ? strrchr(out, '/') : NULL;
		if (prev)
			*prev = '\0';
		o = strlen(out);
		out[o++] = '/';
		out[o] = '\0';
	}
	return (int)o;
}
