/* The SNI and Host sniffers: real ClientHellos from openssl s_client (TLS 1.2 and 1.3, with
 * and without SNI, with an IP literal), each truncated at every length and re-split into
 * records of every small size, a lie in every length field; hand-built hellos for the
 * server_name corner cases and the size limits; HTTP requests, table-driven. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "net/sniff.h"

#define BUF_MAX (SNIFF_TLS_WAIT_MAX * 8)

static size_t load(const char *name, uint8_t *buf, size_t cap)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", EGRESS_DATA_DIR, name);
	FILE *f = fopen(path, "rb");
	if (!f)
		fail_msg("open %s", path);
	size_t n = fread(buf, 1, cap, f);
	fclose(f);
	assert_true(n > 9 && n < cap);
	return n;
}

static int sni(const uint8_t *buf, size_t len, char *name)
{
	return sniff_tls_sni(buf, len, name, 256);
}

/* Every strict prefix wants more; the whole gives @want. */
static void check_prefixes(const uint8_t *buf, size_t len, int want, const char *want_name)
{
	char name[256];

	for (size_t i = 0; i < len; i++) {
		int r = sni(buf, i, name);
		if (r != -EAGAIN)
			fail_msg("prefix %zu of %zu: %d", i, len, r);
	}
	assert_int_equal(sni(buf, len, name), want);
	if (want == 0)
		assert_string_equal(name, want_name);
}

/* The handshake message of a single-record hello, re-cut into records of @step bytes. */
static size_t resplit(const uint8_t *hello, size_t len, size_t step, uint8_t *out)
{
	const uint8_t *msg = hello + 5;
	size_t mlen = len - 5, n = 0;

	for (size_t off = 0; off < mlen; off += step) {
		size_t k = mlen - off < step ? mlen - off : step;
		out[n++] = 22;
		out[n++] = 3;
		out[n++] = 1;
		out[n++] = (uint8_t)(k >> 8);
		out[n++] = (uint8_t)k;
		memcpy(out + n, msg + off, k);
		n += k;
	}
	return n;
}

static const struct {
	const char *file;
	int ret;
	const char *name;
} captured[] = {
	{ "hello-tls12.bin", 0, "x.test" },
	{ "hello-tls13.bin", 0, "x.test" },
	{ "hello-case.bin", 0, "api.example.com" },
	{ "hello-nosni.bin", -ENOENT, NULL },
	{ "hello-ipsni.bin", -EBADMSG, NULL },
};

static void test_captured(void **state)
{
	static uint8_t buf[4096], split[BUF_MAX];

	for (size_t i = 0; i < sizeof(captured) / sizeof(captured[0]); i++) {
		size_t len = load(captured[i].file, buf, sizeof(buf));
		check_prefixes(buf, len, captured[i].ret, captured[i].name);
		for (size_t step = 1; step < 64; step++) {
			size_t n = resplit(buf, len, step, split);
			check_prefixes(split, n, captured[i].ret, captured[i].name);
		}
		/* bytes after the hello (early data, a second record) do not matter */
		memset(buf + len, 0x17, 100);
		char name[256];
		assert_int_equal(sni(buf, len + 100, name), captured[i].ret);
	}
}

/* Offsets of every length field of a single-record hello, found by walking it. */
struct field {
	size_t off, size;
};

static size_t get(const uint8_t *p, size_t size)
{
	size_t v = 0;
	for (size_t i = 0; i < size; i++)
		v = v << 8 | p[i];
	return v;
}

static void put(uint8_t *p, size_t size, size_t v)
{
	for (size_t i = size; i-- > 0; v >>= 8)
		p[i] = (uint8_t)v;
}

static size_t hello_fields(const uint8_t *h, struct field *f)
{
	size_t n = 0, o = 5 + 4 + 2 + 32;

	f[n++] = (struct field){ o, 1 }; /* session id */
	o += 1 + h[o];
	f[n++] = (struct field){ o, 2 }; /* cipher suites */
	o += 2 + get(h + o, 2);
	f[n++] = (struct field){ o, 1 }; /* compression */
	o += 1 + h[o];
	f[n++] = (struct field){ o, 2 }; /* extensions */
	size_t end = o + 2 + get(h + o, 2);
	for (o += 2; o < end; o += 4 + get(h + o + 2, 2)) {
		f[n++] = (struct field){ o + 2, 2 };
		if (get(h + o, 2) == 0) {
			f[n++] = (struct field){ o + 4, 2 }; /* server name list */
			f[n++] = (struct field){ o + 7, 2 }; /* host_name */
		}
	}
	return n;
}

static void test_lies(void **state)
{
	static const char *const files[] = { "hello-tls12.bin", "hello-tls13.bin",
					     "hello-nosni.bin" };
	uint8_t orig[4096], buf[4096];
	struct field f[64];
	char name[256];

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		size_t len = load(files[i], orig, sizeof(orig));
		size_t n = hello_fields(orig, f);
		char want_name[256];
		int want = sni(orig, len, want_name);
		assert_true(n > 8);
		for (size_t j = 0; j < n; j++) {
			static const int delta[] = { -1, 1, 2, -2, 255 };
			for (size_t d = 0; d < sizeof(delta) / sizeof(delta[0]); d++) {
				size_t v = get(orig + f[j].off, f[j].size) + (size_t)delta[d];
				if (v >= (size_t)1 << (8 * f[j].size))
					continue;
				memcpy(buf, orig, len);
				put(buf + f[j].off, f[j].size, v);
				int r = sni(buf, len, name);
				/* a lie in one extension's length can leave a list that
				 * is still consistent (the TLV walk just lands elsewhere);
				 * the server walks it the same way, so what matters is
				 * that it never yields another name */
				if (r != -EBADMSG && (r != want || (r == 0 &&
								  strcmp(name, want_name))))
					fail_msg("%s: field at %zu %+d: %d", files[i], f[j].off,
						 delta[d], r);
			}
		}
		/* the outer lengths: more than there is means wait; beyond the limits, refuse.
		 * A record longer than its message does not matter once the message is in. */
		memcpy(buf, orig, len);
		put(buf + 3, 2, len - 5 + 1);
		assert_int_equal(sni(buf, len, name), want);
		put(buf + 3, 2, 16385);
		assert_int_equal(sni(buf, len, name), -EBADMSG);
		put(buf + 3, 2, 0);
		assert_int_equal(sni(buf, len, name), -EBADMSG);
		memcpy(buf, orig, len);
		put(buf + 6, 3, get(orig + 6, 3) + 1);
		assert_int_equal(sni(buf, len, name), -EAGAIN);
		put(buf + 6, 3, get(orig + 6, 3) - 1);
		assert_int_equal(sni(buf, len, name), -EBADMSG);
		put(buf + 6, 3, SNIFF_TLS_MAX - 3);
		assert_int_equal(sni(buf, len, name), -EBADMSG);
		put(buf + 6, 3, 0xffffff);
		assert_int_equal(sni(buf, len, name), -EBADMSG);
		memcpy(buf, orig, len);
		put(buf + 3, 2, len - 5 - 1); /* the last byte becomes a record header */
		assert_int_equal(sni(buf, len, name), -EBADMSG);
	}
}

/* ---- hand-built hellos ---- */

struct hello {
	uint8_t b[SNIFF_TLS_MAX + 64];
	size_t n;
};

static void add(struct hello *h, const void *p, size_t n)
{
	memcpy(h->b + h->n, p, n);
	h->n += n;
}

static void add_u(struct hello *h, size_t v, size_t size)
{
	put(h->b + h->n, size, v);
	h->n += size;
}

/* A single-record ClientHello with @exts (NULL: no extensions block at all). */
static void build(struct hello *h, const uint8_t *exts, size_t elen)
{
	static const uint8_t fixed[] = { 3, 3 };
	static const uint8_t random[32];

	h->n = 0;
	add(h, "\x16\x03\x01\x00\x00\x01\x00\x00\x00", 9);
	add(h, fixed, 2);
	add(h, random, 32);
	add(h, "\x00\x00\x02\x13\x01\x01\x00", 7);
	if (exts) {
		add_u(h, elen, 2);
		add(h, exts, elen);
	}
	put(h->b + 3, 2, h->n - 5);
	put(h->b + 6, 3, h->n - 9);
}

/* A server_name extension with @n entries (host_name, or @types[i]), into @out. */
static size_t sni_ext(uint8_t *out, const char *const *names, const uint8_t *types, size_t n)
{
	size_t o = 6;
	for (size_t i = 0; i < n; i++) {
		size_t l = strlen(names[i]);
		out[o] = types ? types[i] : 0;
		put(out + o + 1, 2, l);
		memcpy(out + o + 3, names[i], l);
		o += 3 + l;
	}
	put(out, 2, 0);
	put(out + 2, 2, o - 4);
	put(out + 4, 2, o - 6);
	return o;
}

static int sni_of(const char *name, char *ret, size_t size)
{
	static struct hello h;
	uint8_t ext[600];
	const char *names[] = { name };
	size_t elen = sni_ext(ext, names, NULL, 1);
	build(&h, ext, elen);
	return sniff_tls_sni(h.b, h.n, ret, size);
}

static const struct {
	const char *name;
	int ret;
	const char *want;
} names[] = {
	{ "example.com", 0, "example.com" },
	{ "EXAMPLE.com.", 0, "example.com" },
	{ "a-b.example", 0, "a-b.example" },
	{ "localhost", 0, "localhost" }, /* a name; policy refuses it */
	{ "", -EBADMSG, NULL },
	{ ".", -EBADMSG, NULL },
	{ "a..b", -EBADMSG, NULL },
	{ "-a.example", -EBADMSG, NULL },
	{ "_a.example", -EBADMSG, NULL },
	{ "a b.example", -EBADMSG, NULL },
	{ "a/b.example", -EBADMSG, NULL },
	{ "203.0.113.7", -EBADMSG, NULL },
	{ "127.1", -EBADMSG, NULL },
	{ "0x7f000001", -EBADMSG, NULL },
	{ "[::1]", -EBADMSG, NULL },
	{ "::1", -EBADMSG, NULL },
	{ "ex\xc3\xa4mple.com", -EBADMSG, NULL },
};

static void test_names(void **state)
{
	char ret[256];

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		int r = sni_of(names[i].name, ret, sizeof(ret));
		if (r != names[i].ret)
			fail_msg("'%s': %d", names[i].name, r);
		if (r == 0)
			assert_string_equal(ret, names[i].want);
	}

	/* a NUL inside the name */
	static struct hello h;
	uint8_t ext[64];
	const char *one[] = { "evil.com.example.com" };
	size_t elen = sni_ext(ext, one, NULL, 1);
	ext[9 + 8] = '\0';
	build(&h, ext, elen);
	assert_int_equal(sniff_tls_sni(h.b, h.n, ret, sizeof(ret)), -EBADMSG);

	/* 253 bytes fit, 254 do not; the output buffer must hold name and NUL */
	char big[300];
	memset(big, 'a', sizeof(big));
	for (size_t i = 63; i < 253; i += 64)
		big[i] = '.';
	big[253] = '\0';
	assert_int_equal(sni_of(big, ret, sizeof(ret)), 0);
	assert_int_equal(strlen(ret), 253);
	assert_int_equal(sni_of(big, ret, 253), -ENOBUFS);
	assert_int_equal(sni_of(big, ret, 254), 0);
	big[253] = 'a';
	big[254] = '\0';
	assert_int_equal(sni_of(big, ret, sizeof(ret)), -EBADMSG);
}

static void test_server_name_ext(void **state)
{
	static struct hello h;
	uint8_t ext[1024];
	char ret[256];
	size_t elen;

	/* two host_names, or another name type, or an empty list */
	const char *two[] = { "a.example", "b.example" };
	elen = sni_ext(ext, two, NULL, 2);
	build(&h, ext, elen);
	assert_int_equal(sniff_tls_sni(h.b, h.n, ret, sizeof(ret)), -EBADMSG);
	static const uint8_t type1[] = { 1 };
	elen = sni_ext(ext, two, type1, 1);
	build(&h, ext, elen);
	assert_int_equal(sniff_tls_sni(h.b, h.n, ret, sizeof(ret)), -EBADMSG);
	build(&h, (const uint8_t *)"\x00\x00\x00\x02\x00\x00", 6);
	assert_int_equal(sniff_tls_sni(h.b, h.n, ret, sizeof(ret)), -EBADMSG);
	build(&h, (const uint8_t *)"\x00\x00\x00\x00", 4); /* empty, as servers send it */
	assert_int_equal(sniff_tls_sni(h.b, h.n, ret, sizeof(ret)), -EBADMSG);

	/* two server_name extensions, the second elsewhere */
	elen = sni_ext(ext, two, NULL, 1);
	memcpy(ext + elen, "\x00\x2b\x00\x03\x02\x03\x04", 7);
	elen += 7;
	elen += sni_ext(ext + elen, two + 1, NULL, 1);
	build(&h, ext, elen);
	assert_int_equal(sniff_tls_sni(h.b, h.n, ret, sizeof(ret)), -EBADMSG);

	/* no extensions block, an empty one, one without server_name: no SNI */
	build(&h, NULL, 0);
	assert_int_equal(sniff_tls_sni(h.b, h.n, ret, sizeof(ret)), -ENOENT);
	build(&h, ext, 0);
	assert_int_equal(sniff_tls_sni(h.b, h.n, ret, sizeof(ret)), -ENOENT);
	build(&h, (const uint8_t *)"\x00\x2b\x00\x03\x02\x03\x04", 7);
	assert_int_equal(sniff_tls_sni(h.b, h.n, ret, sizeof(ret)), -ENOENT);
	/* a truncated extension header */
	build(&h, (const uint8_t *)"\x00\x2b\x00", 3);
	assert_int_equal(sniff_tls_sni(h.b, h.n, ret, sizeof(ret)), -EBADMSG);
	/* 33 bytes of session id */
	build(&h, NULL, 0);
	h.b[43] = 33;
	assert_int_equal(sniff_tls_sni(h.b, h.n, ret, sizeof(ret)), -EBADMSG);
}

/* A hello padded to a handshake message of @size bytes, in records of at most 16384. */
static size_t big_hello(uint8_t *out, size_t size)
{
	static struct hello h;
	static uint8_t ext[SNIFF_TLS_MAX + 64];
	const char *one[] = { "big.example" };
	size_t elen = sni_ext(ext, one, NULL, 1);
	/* base: 4 + 2 + 32 + 7 + 2 + elen + padding ext (4 + pad) */
	size_t pad = size - (4 + 2 + 32 + 7 + 2 + elen + 4);
	put(ext + elen, 2, 21);
	put(ext + elen + 2, 2, pad);
	memset(ext + elen + 4, 0, pad);
	build(&h, ext, elen + 4 + pad);
	assert_int_equal(h.n - 5, size);
	return resplit(h.b, h.n, 16384, out);
}

static void test_limits(void **state)
{
	static uint8_t buf[BUF_MAX];
	char ret[256];
	size_t n;

	n = big_hello(buf, SNIFF_TLS_MAX);
	assert_int_equal(n, SNIFF_TLS_MAX + 5);
	assert_int_equal(sniff_tls_sni(buf, n, ret, sizeof(ret)), 0);
	assert_string_equal(ret, "big.example");
	assert_int_equal(sniff_tls_sni(buf, n - 1, ret, sizeof(ret)), -EAGAIN);
	n = big_hello(buf, SNIFF_TLS_MAX + 1);
	assert_int_equal(sniff_tls_sni(buf, n, ret, sizeof(ret)), -EBADMSG);
	assert_int_equal(sniff_tls_sni(buf, 20, ret, sizeof(ret)), -EBADMSG);

	/* a big hello in tiny records needs more than the sniffer waits for */
	static uint8_t one[SNIFF_TLS_MAX + 64];
	n = big_hello(one, 12000);
	n = resplit(one, n, 7, buf);
	assert_true(n > SNIFF_TLS_WAIT_MAX);
	assert_int_equal(sniff_tls_sni(buf, SNIFF_TLS_WAIT_MAX - 1, ret, sizeof(ret)), -EAGAIN);
	assert_int_equal(sniff_tls_sni(buf, SNIFF_TLS_WAIT_MAX, ret, sizeof(ret)), -EBADMSG);
	assert_int_equal(sniff_tls_sni(buf, n, ret, sizeof(ret)), -EBADMSG);
}

static const struct {
	const char *bytes;
	size_t len;
} not_tls[] = {
	{ "G", 1 },
	{ "GET / HTTP/1.1\r\n", 16 },
	{ "\x80\x2e\x01\x03\x01", 5 },		   /* SSLv2 hello */
	{ "\x16\x02", 2 },			   /* major version 2 */
	{ "\x16\x03\x05\x00\x10", 5 },		   /* minor 5 */
	{ "\x17\x03\x03\x00\x10", 5 },		   /* application data */
	{ "\x16\x03\x01\x00\x04\x02\x00\x00\x00", 9 }, /* a ServerHello */
	{ "\x16\x03\x01\x00\x00", 5 },		   /* empty record */
	{ "\x16\x03\x01\x00\x02\x01\x00\x15\x03\x03\x00\x02\x02\x28", 14 }, /* alert between */
};

static void test_not_tls(void **state)
{
	char ret[256];

	for (size_t i = 0; i < sizeof(not_tls) / sizeof(not_tls[0]); i++) {
		int r = sniff_tls_sni((const uint8_t *)not_tls[i].bytes, not_tls[i].len, ret,
				      sizeof(ret));
		if (r != -EBADMSG)
			fail_msg("case %zu: %d", i, r);
	}
	assert_int_equal(sniff_tls_sni((const uint8_t *)"", 0, ret, sizeof(ret)), -EAGAIN);
	assert_int_equal(sniff_tls_sni(NULL, 0, ret, sizeof(ret)), -EAGAIN);
}

/* ---- HTTP ---- */

static const struct {
	const char *req;
	int ret;
	const char *host;
	uint16_t port;
} http[] = {
	{ "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n", 0, "example.com", 80 },
	{ "GET /a?b#c HTTP/1.0\r\nhost:Example.COM.\r\nAccept: */*\r\n\r\nbody", 0, "example.com", 80 },
	{ "POST /x HTTP/1.1\r\nUser-Agent: t\r\nHOST: \t api.example.com:8080 \t\r\n\r\n", 0,
	  "api.example.com", 8080 },
	{ "OPTIONS * HTTP/1.1\r\nHost: example.com\r\n\r\n", 0, "example.com", 80 },
	{ "GET http://example.com/x HTTP/1.1\r\nHost: example.com\r\n\r\n", 0, "example.com", 80 },
	{ "GET HTTP://EXAMPLE.com:80 HTTP/1.1\r\nHost: example.com.\r\n\r\n", 0, "example.com", 80 },
	{ "GET http://example.com:8080?q HTTP/1.1\r\nHost: example.com:8080\r\n\r\n", 0,
	  "example.com", 8080 },
	{ "GET / HTTP/1.1\r\nX-Host: evil.com\r\nHost: example.com\r\nHosts: x\r\n\r\n", 0,
	  "example.com", 80 },
	{ "GET / HTTP/1.1\r\nX: \x80\xff\r\nHost: example.com\r\n\r\n", 0, "example.com", 80 },
	/* no Host */
	{ "GET / HTTP/1.0\r\n\r\n", -ENOENT, NULL, 0 },
	{ "GET / HTTP/1.1\r\nAccept: */*\r\n\r\n", -ENOENT, NULL, 0 },
	/* not a name */
	{ "GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "GET / HTTP/1.1\r\nHost: [2001:db8::1]\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "GET / HTTP/1.1\r\nHost: 203.0.113.7\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "GET / HTTP/1.1\r\nHost: 0x7f000001\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "GET / HTTP/1.1\r\nHost: user@example.com\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "GET / HTTP/1.1\r\nHost: ex_ample.com\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "GET / HTTP/1.1\r\nHost: example.com:\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "GET / HTTP/1.1\r\nHost: example.com:0\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "GET / HTTP/1.1\r\nHost: example.com:65536\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "GET / HTTP/1.1\r\nHost: example.com:80:80\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "GET / HTTP/1.1\r\nHost: example.com:8o\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "GET / HTTP/1.1\r\nHost: \r\n\r\n", -EBADMSG, NULL, 0 },
	{ "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", -EBADMSG, NULL, 0 },
	/* two Hosts, smuggling shapes */
	{ "GET / HTTP/1.1\r\nHost: example.com\r\nHost: example.com\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "GET / HTTP/1.1\r\nHost: example.com\r\nhost: evil.com\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "GET / HTTP/1.1\r\nHost : evil.com\r\nHost: example.com\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "GET / HTTP/1.1\r\nHost: example.com\r\n evil.com\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "GET / HTTP/1.1\r\nHost: example.com\nHost: evil.com\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "GET / HTTP/1.1\r\nHost: example.com\rX: y\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "GET / HTTP/1.1\r\nNoColon\r\nHost: example.com\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "GET / HTTP/1.1\r\n: x\r\nHost: example.com\r\n\r\n", -EBADMSG, NULL, 0 },
	/* absolute form */
	{ "GET http://evil.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "GET http://example.com:81/ HTTP/1.1\r\nHost: example.com\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "GET http://a@example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "GET http:///x HTTP/1.1\r\nHost: example.com\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "GET http:// HTTP/1.1\r\nHost: example.com\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "GET https://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com\r\n\r\n", -EBADMSG, NULL, 0 },
	/* request line */
	{ "GET / HTTP/2.0\r\nHost: example.com\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "GET / HTTP/1.1 \r\nHost: example.com\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "GET  / HTTP/1.1\r\nHost: example.com\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "GET /\x01 HTTP/1.1\r\nHost: example.com\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "GET / x HTTP/1.1\r\nHost: example.com\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "GET /\r\nHost: example.com\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "\r\nGET / HTTP/1.1\r\nHost: example.com\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "G(T / HTTP/1.1\r\nHost: example.com\r\n\r\n", -EBADMSG, NULL, 0 },
	{ "\x16\x03\x01\x02\x00\x01", -EBADMSG, NULL, 0 },
	{ "ABCDEFGHIJKLMNOPQRSTUVWXYZABCDEFGHIJ", -EBADMSG, NULL, 0 },
	/* not complete yet */
	{ "", -EAGAIN, NULL, 0 },
	{ "GE", -EAGAIN, NULL, 0 },
	{ "GET / HTTP/1.1\r\nHost: example.com\r\n", -EAGAIN, NULL, 0 },
	{ "GET / HTTP/1.1\r\nHost: example.com\r\n\r", -EAGAIN, NULL, 0 },
};

static void test_http(void **state)
{
	for (size_t i = 0; i < sizeof(http) / sizeof(http[0]); i++) {
		char host[256] = "";
		uint16_t port = 0;
		size_t len = strlen(http[i].req);
		int r = sniff_http_host((const uint8_t *)http[i].req, len, host, sizeof(host), &port);
		if (r != http[i].ret)
			fail_msg("case %zu '%s': %d", i, http[i].req, r);
		if (r == 0) {
			assert_string_equal(host, http[i].host);
			assert_int_equal(port, http[i].port);
		}
	}

	static const char nul[] = "GET / HTTP/1.1\r\nX: a\0b\r\nHost: example.com\r\n\r\n";
	char host[256];
	uint16_t port;
	assert_int_equal(sniff_http_host((const uint8_t *)nul, sizeof(nul) - 1, host, sizeof(host),
					 &port),
			 -EBADMSG);
}

static void test_http_prefixes(void **state)
{
	static const char req[] = "GET http://api.example.com:8080/path HTTP/1.1\r\n"
				  "User-Agent: curl/7.88\r\nHost: API.example.com:8080\r\n"
				  "Accept: */*\r\n\r\n";
	char host[256];
	uint16_t port;
	size_t len = strlen(req);

	for (size_t i = 0; i < len; i++)
		if (sniff_http_host((const uint8_t *)req, i, host, sizeof(host), &port) != -EAGAIN)
			fail_msg("prefix %zu", i);
	assert_int_equal(sniff_http_host((const uint8_t *)req, len, host, sizeof(host), &port), 0);
	assert_string_equal(host, "api.example.com");
	assert_int_equal(port, 8080);
	assert_int_equal(sniff_http_host((const uint8_t *)req, len, host, 15, &port), -ENOBUFS);
}

static void test_http_limit(void **state)
{
	static uint8_t buf[SNIFF_HTTP_MAX + 100];
	static const char start[] = "GET / HTTP/1.1\r\nHost: example.com\r\nX: ";
	char host[256];
	uint16_t port;

	memset(buf, 'a', sizeof(buf));
	memcpy(buf, start, strlen(start));
	/* the head ends exactly at the limit: fine; one byte more: refused */
	memcpy(buf + SNIFF_HTTP_MAX - 4, "\r\n\r\n", 4);
	assert_int_equal(sniff_http_host(buf, sizeof(buf), host, sizeof(host), &port), 0);
	assert_int_equal(sniff_http_host(buf, SNIFF_HTTP_MAX - 1, host, sizeof(host), &port),
			 -EAGAIN);
	memset(buf + SNIFF_HTTP_MAX - 4, 'a', 4);
	memcpy(buf + SNIFF_HTTP_MAX - 3, "\r\n\r\n", 4);
	assert_int_equal(sniff_http_host(buf, sizeof(buf), host, sizeof(host), &port), -EBADMSG);
	assert_int_equal(sniff_http_host(buf, SNIFF_HTTP_MAX - 1, host, sizeof(host), &port),
			 -EAGAIN);
	assert_int_equal(sniff_http_host(buf, SNIFF_HTTP_MAX, host, sizeof(host), &port), -EBADMSG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_captured),
		cmocka_unit_test(test_lies),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_server_name_ext),
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_not_tls),
		cmocka_unit_test(test_http),
		cmocka_unit_test(test_http_prefixes),
		cmocka_unit_test(test_http_limit),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
