/* The head of an HTTP/1.x request as cordond's front reads it, before evhttp does.
 *
 *   size_t n = reqhead_end(buf, len);         0: not complete yet
 *   struct reqhead h;
 *   reqhead_parse(buf, n, &h);                h.bad: why it is refused, or NULL
 *
 * Pure: no allocation, no state; @buf need not be NUL-terminated. It reads what decides whether
 * and how a body follows (method, Content-Length, Transfer-Encoding) and who asks
 * (Authorization; X-API-KEY for the E2B surface), as evhttp 2.1 will read them, and refuses what evhttp could read otherwise
 * than we do: folded lines, repeated or malformed framing headers, both framings at once, a
 * request line that is not METHOD SP TARGET SP HTTP/1.x, a header line without a colon.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define REQHEAD_PATH_MAX 520

struct reqhead {
	int method;			/* enum evhttp_cmd_type, or -1 for a method it does not know */
	char path[REQHEAD_PATH_MAX];	/* the target up to '?' or '#', cut (not refused) if longer */
	const char *auth;		/* the Authorization value, trimmed, inside the buffer */
	size_t auth_len;
	const char *api_key;		/* the X-API-KEY value (E2B's), trimmed, inside the buffer */
	size_t api_key_len;
	/* For the E2B surface's admission of an upload (e2b_envd.c), inside the buffer too: */
	const char *query;		/* the target after '?', up to '#' */
	size_t query_len;
	const char *host, *sandbox_id, *access_token; /* Host, E2b-Sandbox-Id, X-Access-Token */
	size_t host_len, sandbox_id_len, access_token_len;
	const char *traffic_token;	/* E2b-Traffic-Access-Token: a port's, by host (e2b_envd.c) */
	size_t traffic_token_len;
	bool has_cl, chunked;
	uint64_t cl;
	const char *bad;		/* NULL, or why the head is refused */
};

/* Bytes of the head at the start of @p, through its empty line; lines end in LF or CRLF. */
size_t reqhead_end(const char *p, size_t len);
void reqhead_parse(const char *p, size_t len, struct reqhead *ret);
