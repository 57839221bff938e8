/* libFuzzer target for the TLS relay's HTTP/1.1 framing (net/httpreq.c): request heads and
 * chunked bodies from inside a sandbox, read by the egress proxy before anything is sent on.
 *
 * Checks beyond "no crash": the verdict is a documented one; -EAGAIN only below the bound;
 * an accepted head lies within the input and the bound, its spans within the head, a Host,
 * never Content-Length with chunked; the head alone parses the same; a chunked body fed
 * whole and fed a byte at a time ends at the same place or fails the same way. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "net/httpreq.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_span(struct httpreq_span s, size_t end)
{
	if ((size_t)s.off + s.len > end)
		abort();
}

static void check_head(const uint8_t *data, size_t size, const struct httpreq *r)
{
	if (r->head_len > size || r->head_len > HTTPREQ_HEAD_MAX || r->n_headers > HTTPREQ_HEADERS_MAX ||
	    !r->host.len || (r->chunked && r->has_length))
		abort();
	check_span(r->method, r->head_len);
	check_span(r->target, r->head_len);
	check_span(r->host, r->head_len);
	for (size_t i = 0; i < r->n_headers; i++) {
		check_span(r->headers[i].name, r->head_len);
		check_span(r->headers[i].value, r->head_len);
	}
	static struct httpreq again;
	if (httpreq_parse(data, r->head_len, &again) != 0 || again.head_len != r->head_len ||
	    again.n_headers != r->n_headers)
		abort();
}

/* The target's path as an approve rule reads it: never longer than it was, NUL-terminated,
 * starting with "/" when it did, with no "//", "/./" or "/../" left. */
static void check_path(const uint8_t *data, const struct httpreq *r)
{
	static char out[HTTPREQ_HEAD_MAX + 1];
	const uint8_t *t = data + r->target.off;
	const uint8_t *q = memchr(t, '?', r->target.len);
	size_t len = q ? (size_t)(q - t) : r->target.len;
	int n = httpreq_path_normalize(t, len, out);
	if (n < 0)
		return;
	if ((size_t)n > len || strlen(out) != (size_t)n || (t[0] == '/' && out[0] != '/'))
		abort();
	if (strstr(out, "//") || strstr(out, "/./") || strstr(out, "/../"))
		abort();
}

static void check_chunked(const uint8_t *data, size_t size)
{
	struct httpreq_chunked a = {0}, b = {0};
	bool done_a = false, done_b = false;
	long whole = httpreq_chunked_feed(&a, data, size, &done_a);
	size_t i = 0;
	long r = 0;
	for (; i < size && !done_b; i++)
		if ((r = httpreq_chunked_feed(&b, data + i, 1, &done_b)) < 0)
			break;
	if (whole < 0) {
		if (r >= 0)
			abort();
		return;
	}
	if (r < 0 || done_a != done_b || (done_a && (size_t)whole != i) || (!done_a && (size_t)whole != size))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct httpreq r;
	int v = httpreq_parse(data, size, &r);
	if (v != 0 && v != -EAGAIN && v != -E2BIG && v != -EBADMSG)
		abort();
	if (v == -EAGAIN && size >= HTTPREQ_HEAD_MAX)
		abort();
	if (v == 0) {
		check_head(data, size, &r);
		check_path(data, &r);
		if (r.chunked)
			check_chunked(data + r.head_len, size - r.head_len);
	} else {
		check_chunked(data, size);
	}
	return 0;
}
