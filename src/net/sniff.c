/* TLS SNI and HTTP Host sniffers. See sniff.h. References: RFC 8446 4.1.2 (ClientHello),
 * RFC 5246 6.2.1 (records, fragmentation), RFC 6066 3 (server_name), RFC 9112 3 and 5
 * (request line, field syntax), RFC 9110 7.2 (Host). */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "net/sniff.h"
#include "policy/egress.h"

/* ---- a bounds-checked reader ---- */

struct cur {
	const uint8_t *p;
	size_t n;
};

static bool take(struct cur *c, size_t k, const uint8_t **ret)
{
	if (c->n < k)
		return false;
	if (ret)
		*ret = c->p;
	c->p += k;
	c->n -= k;
	return true;
}

static bool get_uint(struct cur *c, size_t bytes, size_t *ret)
{
	const uint8_t *p;

	if (!take(c, bytes, &p))
		return false;
	*ret = 0;
	for (size_t i = 0; i < bytes; i++)
		*ret = *ret << 8 | p[i];
	return true;
}

/* A vector with a @bytes-long length prefix, carved out of @c into @ret. */
static bool get_vec(struct cur *c, size_t bytes, struct cur *ret)
{
	size_t n;

	if (!get_uint(c, bytes, &n) || !take(c, n, &ret->p))
		return false;
	ret->n = n;
	return true;
}

/* Checks a host name and copies it out lowercase without its trailing dot. */
static int copy_name(const char *name, size_t len, char *ret, size_t size)
{
	if (len > 0 && name[len - 1] == '.')
		len--;
	if (!egress_name_valid(name, len, false) || egress_name_is_ip_literal(name, len))
		return -EBADMSG;
	if (len >= size)
		return -ENOBUFS;
	for (size_t i = 0; i < len; i++)
		ret[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] + 32 : name[i]);
	ret[len] = '\0';
	return 0;
}

/* ---- TLS ---- */

#define TLS_RECORD_HANDSHAKE 22
#define TLS_RECORD_MAX 16384 /* plaintext fragment, RFC 8446 5.1 */
#define TLS_CLIENT_HELLO 1
#define TLS_EXT_SERVER_NAME 0
#define TLS_NAME_HOST 0

static int tls_more(size_t len)
{
	return len >= SNIFF_TLS_WAIT_MAX ? -EBADMSG : -EAGAIN;
}

/* Gathers the first handshake message out of the records at @buf into @hs. Returns its
 * length, -EAGAIN or -EBADMSG. The message must be complete within SNIFF_TLS_WAIT_MAX bytes
 * of input, however much the caller passes. */
static int tls_gather(const uint8_t *buf, size_t len, uint8_t *hs)
{
	size_t off = 0, have = 0, need = 4;

	if (len > SNIFF_TLS_WAIT_MAX)
		len = SNIFF_TLS_WAIT_MAX;

	while (have < need) {
		/* judge the header bytes there are, so that non-TLS fails early */
		if (len > off && buf[off] != TLS_RECORD_HANDSHAKE)
			return -EBADMSG;
		if (len > off + 1 && buf[off + 1] != 3)
			return -EBADMSG;
		if (len < off + 5)
			return tls_more(len);
		size_t rlen = (size_t)buf[off + 3] << 8 | buf[off + 4];
		if (buf[off + 2] > 4 || rlen == 0 || rlen > TLS_RECORD_MAX)
			return -EBADMSG;
		off += 5;
		size_t avail = len - off < rlen ? len - off : rlen;
		while (avail > 0 && have < need) {
			size_t k = need - have < avail ? need - have : avail;
			memcpy(hs + have, buf + off, k);
			have += k;
			off += k;
			avail -= k;
			rlen -= k;
			if (have == 4 && need == 4) {
				need += (size_t)hs[1] << 16 | (size_t)hs[2] << 8 | hs[3];
				if (hs[0] != TLS_CLIENT_HELLO || need > SNIFF_TLS_MAX)
					return -EBADMSG;
			}
		}
		if (have < need && rlen > 0)
			return tls_more(len); /* this record is not all here yet */
		off += rlen; /* bytes after the message in its record (none from real clients) */
	}
	return (int)need;
}

static int tls_server_name(struct cur ext, const uint8_t **ret_name, size_t *ret_len)
{
	struct cur list, name;
	size_t type;
	bool seen = false;

	if (!get_vec(&ext, 2, &list) || ext.n != 0 || list.n == 0)
		return -EBADMSG;
	while (list.n > 0) {
		if (!get_uint(&list, 1, &type) || !get_vec(&list, 2, &name))
			return -EBADMSG;
		/* RFC 6066: one name per type, and host_name is the only type */
		if (type != TLS_NAME_HOST || seen || name.n == 0)
			return -EBADMSG;
		seen = true;
		*ret_name = name.p;
		*ret_len = name.n;
	}
	return 0;
}

static int tls_client_hello(struct cur c, const uint8_t **ret_name, size_t *ret_len)
{
	struct cur session, suites, comp, exts, data;
	size_t version, type;
	bool sni = false;

	if (!get_uint(&c, 2, &version) || version >> 8 != 3 || !take(&c, 32, NULL) ||
	    !get_vec(&c, 1, &session) || session.n > 32 || !get_vec(&c, 2, &suites) ||
	    suites.n < 2 || suites.n % 2 != 0 || !get_vec(&c, 1, &comp) || comp.n < 1)
		return -EBADMSG;
	if (c.n == 0)
		return -ENOENT; /* no extensions at all (SSL 3.0 style) */
	if (!get_vec(&c, 2, &exts) || c.n != 0)
		return -EBADMSG;
	while (exts.n > 0) {
		if (!get_uint(&exts, 2, &type) || !get_vec(&exts, 2, &data))
			return -EBADMSG;
		if (type != TLS_EXT_SERVER_NAME)
			continue;
		if (sni || tls_server_name(data, ret_name, ret_len) < 0)
			return -EBADMSG;
		sni = true;
	}
	return sni ? 0 : -ENOENT;
}

int sniff_tls_sni(const uint8_t *buf, size_t len, char *ret, size_t size)
{
	uint8_t hs[SNIFF_TLS_MAX];
	const uint8_t *name = NULL;
	size_t nlen = 0;
	int r;

	r = tls_gather(buf, len, hs);
	if (r < 0)
		return r;
	r = tls_client_hello((struct cur){ hs + 4, (size_t)r - 4 }, &name, &nlen);
	if (r < 0)
		return r;
	return copy_name((const char *)name, nlen, ret, size);
}

/* ---- HTTP ---- */

#define HTTP_METHOD_MAX 32

/* RFC 9110 5.6.2 */
static bool is_tchar(uint8_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool is_field_char(uint8_t c)
{
	return c == '\t' || (c >= 0x20 && c != 0x7f);
}

/* Judges the method there is before the head is complete, so that a TLS hello or other
 * binary on port 80 is refused at once rather than waited for. */
static int http_early(const uint8_t *buf, size_t len)
{
	for (size_t i = 0; i < len && i <= HTTP_METHOD_MAX; i++) {
		if (buf[i] == ' ')
			return i > 0 ? 0 : -EBADMSG;
		if (!is_tchar(buf[i]))
			return -EBADMSG;
	}
	return len > HTTP_METHOD_MAX ? -EBADMSG : 0;
}

/* The next CRLF-terminated line of @c, without its CRLF. */
static bool next_line(struct cur *c, struct cur *ret)
{
	for (size_t i = 0; i + 1 < c->n; i++)
		if (c->p[i] == '\r' && c->p[i + 1] == '\n') {
			*ret = (struct cur){ c->p, i };
			take(c, i + 2, NULL);
			return true;
		}
	return false;
}

struct authority {
	const char *host;
	size_t len;
	uint16_t port;
};

/* "host[:port]", no userinfo, no IP literal; the host is checked by copy_name() later. */
static int parse_authority(const uint8_t *s, size_t n, struct authority *ret)
{
	const uint8_t *colon = memchr(s, ':', n);
	size_t port = 0;

	if (n == 0 || memchr(s, '@', n) || s[0] == '[')
		return -EBADMSG;
	*ret = (struct authority){ (const char *)s, colon ? (size_t)(colon - s) : n, 80 };
	if (!colon)
		return 0;
	size_t plen = n - ret->len - 1;
	if (plen == 0 || plen > 5)
		return -EBADMSG;
	for (size_t i = 0; i < plen; i++) {
		if (colon[1 + i] < '0' || colon[1 + i] > '9')
			return -EBADMSG;
		port = port * 10 + (colon[1 + i] - '0');
	}
	if (port == 0 || port > UINT16_MAX)
		return -EBADMSG;
	ret->port = (uint16_t)port;
	return 0;
}

static bool same_host(const struct authority *a, const struct authority *b)
{
	size_t al = a->len, bl = b->len;

	if (al > 0 && a->host[al - 1] == '.')
		al--;
	if (bl > 0 && b->host[bl - 1] == '.')
		bl--;
	return al == bl && strncasecmp(a->host, b->host, al) == 0 && a->port == b->port;
}

/* "METHOD SP target SP HTTP/1.x"; fills @ret_uri (len 0 for origin-form and "*"). */
static int http_request_line(struct cur line, struct authority *ret_uri)
{
	static const char scheme[] = "http://";
	const uint8_t *sp1 = memchr(line.p, ' ', line.n);
	const uint8_t *sp2;

	*ret_uri = (struct authority){};
	if (!sp1 || sp1 == line.p || line.n < 10)
		return -EBADMSG;
	for (const uint8_t *m = line.p; m < sp1; m++)
		if (!is_tchar(*m))
			return -EBADMSG;
	sp2 = line.p + line.n - 9;
	if (sp2 <= sp1 + 1 || *sp2 != ' ' || memcmp(sp2 + 1, "HTTP/1.", 7) != 0 ||
	    (sp2[8] != '0' && sp2[8] != '1'))
		return -EBADMSG;
	const uint8_t *t = sp1 + 1;
	size_t tlen = (size_t)(sp2 - t);
	for (size_t i = 0; i < tlen; i++)
		if (t[i] <= 0x20 || t[i] >= 0x7f)
			return -EBADMSG;
	if (t[0] == '/' || (tlen == 1 && t[0] == '*'))
		return 0;
	if (tlen <= sizeof(scheme) - 1 || strncasecmp((const char *)t, scheme, sizeof(scheme) - 1))
		return -EBADMSG; /* CONNECT's authority-form, other schemes, junk */
	t += sizeof(scheme) - 1;
	tlen -= sizeof(scheme) - 1;
	size_t alen = 0;
	while (alen < tlen && t[alen] != '/' && t[alen] != '?' && t[alen] != '#')
		alen++;
	return parse_authority(t, alen, ret_uri);
}

/* One "name: value" field; sets @ret_host when it is Host. */
static int http_field(struct cur line, struct cur *ret_host, bool *seen)
{
	const uint8_t *colon = memchr(line.p, ':', line.n);
	size_t nlen = colon ? (size_t)(colon - line.p) : 0;

	if (nlen == 0)
		return -EBADMSG; /* no colon, an obs-fold continuation, or an empty name */
	for (size_t i = 0; i < nlen; i++)
		if (!is_tchar(line.p[i]))
			return -EBADMSG; /* includes space before the colon (RFC 9112 5.1) */
	for (size_t i = nlen + 1; i < line.n; i++)
		if (!is_field_char(line.p[i]))
			return -EBADMSG;
	if (nlen != 4 || strncasecmp((const char *)line.p, "host", 4) != 0)
		return 0;
	if (*seen)
		return -EBADMSG;
	*seen = true;
	struct cur v = { colon + 1, line.n - nlen - 1 };
	while (v.n > 0 && (v.p[0] == ' ' || v.p[0] == '\t'))
		take(&v, 1, NULL);
	while (v.n > 0 && (v.p[v.n - 1] == ' ' || v.p[v.n - 1] == '\t'))
		v.n--;
	*ret_host = v;
	return 0;
}

static const uint8_t *find_head_end(const uint8_t *buf, size_t len)
{
	return memmem(buf, len < SNIFF_HTTP_MAX ? len : SNIFF_HTTP_MAX, "\r\n\r\n", 4);
}

int sniff_http_host(const uint8_t *buf, size_t len, char *ret_host, size_t size,
		    uint16_t *ret_port)
{
	const uint8_t *end = find_head_end(buf, len);
	struct cur head, line, host = {};
	struct authority uri, auth;
	bool seen = false;
	int r;

	if (http_early(buf, len) < 0)
		return -EBADMSG;
	if (!end)
		return len >= SNIFF_HTTP_MAX ? -EBADMSG : -EAGAIN;
	head = (struct cur){ buf, (size_t)(end - buf) + 2 };
	if (!next_line(&head, &line) || (r = http_request_line(line, &uri)) < 0)
		return -EBADMSG;
	while (next_line(&head, &line))
		if ((r = http_field(line, &host, &seen)) < 0)
			return r;
	if (!seen)
		return -ENOENT;
	if (parse_authority(host.p, host.n, &auth) < 0 || (uri.host && !same_host(&uri, &auth)))
		return -EBADMSG;
	r = copy_name(auth.host, auth.len, ret_host, size);
	if (r < 0)
		return r;
	*ret_port = auth.port;
	return 0;
}
