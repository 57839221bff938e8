/* See reqhead.h. evhttp 2.1's reading, mirrored: the request line is three fields split by
 * single spaces; a header line is NAME ":" value, the name exact (case aside), the value
 * trimmed of blanks; Content-Length is digits only; Transfer-Encoding is "chunked" or the
 * request is refused. */
#include <stddef.h>
#include <string.h>
#include <strings.h>

#include <event2/http.h>

#include "basic/cleanup.h"
#include "daemon/reqhead.h"

static const struct {
	const char *name;
	enum evhttp_cmd_type m;
} methods[] = {
	{"GET", EVHTTP_REQ_GET}, {"POST", EVHTTP_REQ_POST}, {"PUT", EVHTTP_REQ_PUT},
	{"DELETE", EVHTTP_REQ_DELETE}, {"HEAD", EVHTTP_REQ_HEAD}, {"OPTIONS", EVHTTP_REQ_OPTIONS},
	{"TRACE", EVHTTP_REQ_TRACE}, {"CONNECT", EVHTTP_REQ_CONNECT}, {"PATCH", EVHTTP_REQ_PATCH},
};

static int method_of(const char *s, size_t len)
{
	for (size_t i = 0; i < ELEMENTSOF(methods); i++)
		if (strlen(methods[i].name) == len && memcmp(methods[i].name, s, len) == 0)
			return methods[i].m;
	return -1;
}

static bool request_line(const char *l, size_t len, struct reqhead *h)
{
	const char *end = l + len;
	const char *sp1 = memchr(l, ' ', len);
	const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', end - sp1 - 1) : NULL;
	if (!sp1 || !sp2 || sp1 == l || sp2 == sp1 + 1 || memchr(sp2 + 1, ' ', end - sp2 - 1))
		return false;
	size_t vlen = end - sp2 - 1;
	if (vlen != 8 || (memcmp(sp2 + 1, "HTTP/1.1", 8) != 0 && memcmp(sp2 + 1, "HTTP/1.0", 8) != 0))
		return false;
	h->method = method_of(l, sp1 - l);
	size_t plen = 0;
	for (const char *t = sp1 + 1; t < sp2 && *t != '?' && *t != '#'; t++)
		plen++;
	if (plen >= sizeof(h->path))
		plen = sizeof(h->path) - 1; /* a path this long is refused by the router */
	memcpy(h->path, sp1 + 1, plen);
	h->path[plen] = '\0';
	const char *q = memchr(sp1 + 1, '?', sp2 - sp1 - 1);
	if (q) {
		const char *qe = memchr(q + 1, '#', sp2 - q - 1);
		h->query = q + 1;
		h->query_len = (qe ? qe : sp2) - q - 1;
	}
	return true;
}

static bool blank(char c)
{
	return c == ' ' || c == '\t';
}

/* Whether line @l is header @name; its trimmed value in @ret_v, @ret_len. */
static bool header_is(const char *l, size_t len, const char *name, const char **ret_v, size_t *ret_len)
{
	size_t n = strlen(name);
	if (len <= n || l[n] != ':' || strncasecmp(l, name, n) != 0)
		return false;
	const char *v = l + n + 1, *e = l + len;
	while (v < e && blank(*v))
		v++;
	while (e > v && blank(e[-1]))
		e--;
	*ret_v = v;
	*ret_len = e - v;
	return true;
}

static const char *content_length(const char *v, size_t vl, struct reqhead *h)
{
	uint64_t n = 0;
	if (h->has_cl)
		return "repeated Content-Length";
	if (vl == 0 || vl > 18)
		return "bad Content-Length";
	for (size_t i = 0; i < vl; i++) {
		if (v[i] < '0' || v[i] > '9')
			return "bad Content-Length";
		n = n * 10 + (uint64_t)(v[i] - '0');
	}
	h->has_cl = true;
	h->cl = n;
	return NULL;
}

/* The headers whose value the head keeps (the last of each), where. */
static const struct {
	const char *name;
	size_t v, n;
} kept_headers[] = {
	{"Authorization", offsetof(struct reqhead, auth), offsetof(struct reqhead, auth_len)},
	{"X-API-KEY", offsetof(struct reqhead, api_key), offsetof(struct reqhead, api_key_len)},
	{"Host", offsetof(struct reqhead, host), offsetof(struct reqhead, host_len)},
	{"E2b-Sandbox-Id", offsetof(struct reqhead, sandbox_id), offsetof(struct reqhead, sandbox_id_len)},
	{"X-Access-Token", offsetof(struct reqhead, access_token),
	 offsetof(struct reqhead, access_token_len)},
	{"E2b-Traffic-Access-Token", offsetof(struct reqhead, traffic_token),
	 offsetof(struct reqhead, traffic_token_len)},
};

static void kept(const char *l, size_t len, struct reqhead *h)
{
	const char *v;
	size_t vl;
	for (size_t i = 0; i < ELEMENTSOF(kept_headers); i++)
		if (header_is(l, len, kept_headers[i].name, &v, &vl)) {
			*(const char **)((char *)h + kept_headers[i].v) = v;
			*(size_t *)((char *)h + kept_headers[i].n) = vl;
			return;
		}
}

static const char *header(const char *l, size_t len, struct reqhead *h)
{
	const char *v;
	size_t vl;
	if (blank(l[0]))
		return "folded header lines are not accepted";
	if (!memchr(l, ':', len))
		return "a header line without a colon";
	if (header_is(l, len, "Content-Length", &v, &vl))
		return content_length(v, vl, h);
	if (header_is(l, len, "Transfer-Encoding", &v, &vl)) {
		if (h->chunked || vl != 7 || strncasecmp(v, "chunked", 7) != 0)
			return "Transfer-Encoding other than one 'chunked'";
		h->chunked = true;
	} else {
		kept(l, len, h);
	}
	return NULL;
}

size_t reqhead_end(const char *p, size_t len)
{
	for (const char *nl = p; (nl = memchr(nl, '\n', p + len - nl)); nl++) {
		const char *q = nl + 1;
		if (q < p + len && *q == '\r')
			q++;
		if (q < p + len && *q == '\n')
			return q + 1 - p;
	}
	return 0;
}

void reqhead_parse(const char *p, size_t len, struct reqhead *h)
{
	const char *end = p + len;
	*h = (struct reqhead){.method = -1};
	for (const char *l = p; l < end && !h->bad;) {
		const char *nl = memchr(l, '\n', end - l);
		size_t ll = (nl ? nl : end) - l;
		if (ll && l[ll - 1] == '\r')
			ll--;
		if (ll == 0)
			break;
		if (l == p && !request_line(l, ll, h))
			h->bad = "malformed request line (METHOD TARGET HTTP/1.x)";
		else if (l != p)
			h->bad = header(l, ll, h);
		l = nl ? nl + 1 : end;
	}
	if (!h->bad && h->path[0] == '\0')
		h->bad = "no request line";
	if (!h->bad && h->chunked && h->has_cl)
		h->bad = "both Content-Length and Transfer-Encoding";
}
