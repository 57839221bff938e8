/* HTTP/1.1 request framing for the TLS-terminating relay of the egress proxy: where one
 * request's head ends, which headers it has, and how long its body is, so that each request
 * of a pipelined connection is checked before a byte of it is forwarded.
 *
 * The input comes from a sandbox and is hostile. Everything here is pure (no allocation, no
 * I/O), never reads past @len, and refuses what two parsers could read two ways (request
 * smuggling): Content-Length with Transfer-Encoding, two Content-Lengths, a Transfer-Encoding
 * other than "chunked", obs-fold continuation lines, bare CR or LF, control bytes in a header,
 * a missing or repeated Host. The head is bounded by HTTPREQ_HEAD_MAX and HTTPREQ_HEADERS_MAX.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HTTPREQ_HEAD_MAX 16384
#define HTTPREQ_HEADERS_MAX 64

struct httpreq_span {
	uint32_t off, len; /* in the buffer given to httpreq_parse() */
};

struct httpreq_header {
	struct httpreq_span name, value;
};

struct httpreq {
	struct httpreq_span method, target, host; /* host: the Host header's value */
	struct httpreq_header headers[HTTPREQ_HEADERS_MAX];
	size_t n_headers;
	size_t head_len;  /* request line and headers, the final CRLFCRLF included */
	uint64_t content_length; /* when has_length */
	bool has_length, chunked, upgrade;
};

/* Parses the head at the start of @buf. Returns 0 and fills @ret; -EAGAIN while the head is
 * incomplete and shorter than HTTPREQ_HEAD_MAX; -E2BIG past that or past
 * HTTPREQ_HEADERS_MAX headers; -EBADMSG when malformed or ambiguous (see above), or not
 * HTTP/1.1 or 1.0 with an origin-form target ("/..."): CONNECT and absolute forms are refused. */
int httpreq_parse(const uint8_t *buf, size_t len, struct httpreq *ret);

/* The Host header's value is @host (ASCII case-insensitive), with no port or the port
 * @port. */
bool httpreq_host_is(const uint8_t *buf, const struct httpreq *req, const char *host, uint16_t port);

/* A chunked body, read as it comes. */
struct httpreq_chunked {
	int state;
	uint64_t left; /* bytes of the current chunk's data still to come */
	unsigned digits, line;
};

/* Consumes up to @len bytes of a chunked body. Returns how many bytes belong to the body
 * (@len, or less when it ended inside @buf: then *@done is true), or -EBADMSG (a size that is
 * not hex or has more than 15 digits, a missing CRLF, an over-long extension or trailer line). */
long httpreq_chunked_feed(struct httpreq_chunked *st, const uint8_t *buf, size_t len, bool *done);

/* @t[0..len), a request's path (no query), as a server reads it: percent-escapes decoded,
 * ";" parameters left out of their segments, empty, "." and ".." segments resolved ("/v1/%63harges", "//v1/./charges", "/v1/x/../charges":
 * "/v1/charges"), into @out of at least @len + 1 bytes, NUL-terminated. Its length, or -1 for
 * an escape that is not one or that decodes to a control byte. */
int httpreq_path_normalize(const uint8_t *t, size_t len, char *out);
