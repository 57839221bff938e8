/* The intercepting relay's HTTP/1.1 framing (net/httpreq.c): accepted heads and what is read
 * from them, every refusal that keeps two parsers from reading one request two ways
 * (table-driven), every prefix of a good head asking for more, the size bounds, the Host
 * comparison, and chunked bodies fed whole and a byte at a time. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "net/httpreq.h"

static int parse(const char *s, struct httpreq *r)
{
	return httpreq_parse((const uint8_t *)s, strlen(s), r);
}

/* What an approve rule's path prefix is matched against: the path as the server reads it. */
static void test_path_normalize(void **state)
{
	(void)state;
	static const struct {
		const char *in, *out;
	} cases[] = {
	    {"/v1/charges", "/v1/charges"},
	    {"/v1/%63harges/ch_1", "/v1/charges/ch_1"},
	    {"/v1/%2e%2E/v1/charges", "/v1/charges"},
	    {"//v1//charges", "/v1/charges"},
	    {"/v1/./charges", "/v1/charges"},
	    {"/v1/x/../charges", "/v1/charges"},
	    {"/../../v1/charges", "/v1/charges"},
	    {"/v1%2fcharges", "/v1/charges"},
	    {"/v1\\charges", "/v1/charges"},
	    {"/v1;jsessionid=1/charges;x", "/v1/charges"},
	    {"/v1/..;x/v1/charges", "/v1/charges"},
	    {"/v1/charges/..", "/v1/"},
	    {"/v1/charges/.", "/v1/charges/"},
	    {"/", "/"},
	    {"/a/b/", "/a/b/"},
	};
	char out[64];
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int n = httpreq_path_normalize((const uint8_t *)cases[i].in, strlen(cases[i].in), out);
		if (n < 0 || strcmp(out, cases[i].out) != 0)
			print_error("%s -> %d '%s', want '%s'\n", cases[i].in, n, out, cases[i].out);
		assert_int_equal(n, (int)strlen(cases[i].out));
		assert_string_equal(out, cases[i].out);
	}
	assert_int_equal(httpreq_path_normalize((const uint8_t *)"/v1/%6", 6, out), -1);
	assert_int_equal(httpreq_path_normalize((const uint8_t *)"/v1/%zz", 7, out), -1);
	assert_int_equal(httpreq_path_normalize((const uint8_t *)"/v1/%00/../charges", 18, out), -1);
}

static void test_good(void **state)
{
	(void)state;
	static struct httpreq r;
	const char *s = "POST /v1/x?a=1 HTTP/1.1\r\nHost: API.example.test:443\r\n"
			"Authorization:  Bearer t \r\nContent-Length: 5\r\n\r\nhello";
	assert_int_equal(parse(s, &r), 0);
	assert_int_equal(r.head_len, strlen(s) - 5);
	assert_int_equal(r.method.len, 4);
	assert_memory_equal(s + r.target.off, "/v1/x?a=1", r.target.len);
	assert_int_equal(r.n_headers, 3);
	assert_memory_equal(s + r.headers[1].value.off, "Bearer t", r.headers[1].value.len);
	assert_true(r.has_length && r.content_length == 5 && !r.chunked && !r.upgrade);
	assert_true(httpreq_host_is((const uint8_t *)s, &r, "api.example.test", 443));
	assert_false(httpreq_host_is((const uint8_t *)s, &r, "api.example.test", 8443));
	assert_false(httpreq_host_is((const uint8_t *)s, &r, "api.example.tes", 443));
	assert_false(httpreq_host_is((const uint8_t *)s, &r, "example.test", 443));

	assert_int_equal(parse("GET / HTTP/1.0\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n", &r), 0);
	assert_true(r.chunked && !r.has_length);
	/* Two equal Content-Lengths say one thing. */
	assert_int_equal(parse("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n", &r), 0);
	assert_int_equal(parse("GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n", &r), 0);
	assert_true(r.upgrade);
}

static void test_refused(void **state)
{
	(void)state;
	static const char *const bad[] = {
		"GET / HTTP/1.1\r\n\r\n",                                      /* no Host */
		"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",                /* two */
		"GET / HTTP/1.1\r\nHost:\r\n\r\n",                             /* empty */
		"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1 2\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 9999999999999999\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n continued\r\n\r\n",     /* obs-fold */
		"GET / HTTP/1.1\nHost: a\r\n\r\n",                             /* bare LF */
		"GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n",                        /* bare CR */
		"GET / HTTP/1.1\r\nHost: a\r\nX: a\001b\r\n\r\n",              /* control byte */
		"GET / HTTP/1.1\r\nHost: a\r\nBad Name: 1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\n: 1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
		"CONNECT a:443 HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n",                   /* absolute form */
		"GET * HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/2.0\r\nHost: a\r\n\r\n",
		"GET /  HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1 \r\nHost: a\r\n\r\n",
		" GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"G(T / HTTP/1.1\r\nHost: a\r\n\r\n",
		"\r\n\r\n",
	};
	static struct httpreq r;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (parse(bad[i], &r) != -EBADMSG)
			fail_msg("accepted #%zu: %s", i, bad[i]);
}

static void test_prefixes(void **state)
{
	(void)state;
	static struct httpreq r;
	const char *s = "GET /x HTTP/1.1\r\nHost: a.test\r\nAccept: */*\r\n\r\n";
	for (size_t n = 0; n < strlen(s); n++)
		assert_int_equal(httpreq_parse((const uint8_t *)s, n, &r), -EAGAIN);
	assert_int_equal(httpreq_parse((const uint8_t *)s, strlen(s), &r), 0);
}

static void test_limits(void **state)
{
	(void)state;
	static struct httpreq r;
	static uint8_t big[HTTPREQ_HEAD_MAX + 100];
	memset(big, 'a', sizeof(big));
	memcpy(big, "GET /", 5);
	assert_int_equal(httpreq_parse(big, HTTPREQ_HEAD_MAX - 1, &r), -EAGAIN);
	assert_int_equal(httpreq_parse(big, HTTPREQ_HEAD_MAX, &r), -E2BIG);
	assert_int_equal(httpreq_parse(big, sizeof(big), &r), -E2BIG);

	char many[8192];
	size_t n = (size_t)snprintf(many, sizeof(many), "GET / HTTP/1.1\r\nHost: a\r\n");
	for (int i = 0; i < HTTPREQ_HEADERS_MAX; i++)
		n += (size_t)snprintf(many + n, sizeof(many) - n, "X%d: 1\r\n", i);
	snprintf(many + n, sizeof(many) - n, "\r\n");
	assert_int_equal(parse(many, &r), -E2BIG);
}

static long feed_all(const char *s, bool *done)
{
	struct httpreq_chunked st = {0};
	return httpreq_chunked_feed(&st, (const uint8_t *)s, strlen(s), done);
}

static void test_chunked(void **state)
{
	(void)state;
	bool done;
	const char *body = "5\r\nhello\r\n1;ext=1\r\n!\r\n0\r\nTrailer: x\r\n\r\n";
	char buf[256];
	snprintf(buf, sizeof(buf), "%sGET /next", body);
	assert_int_equal(feed_all(buf, &done), (long)strlen(body));
	assert_true(done);
	/* A byte at a time: the same end. */
	struct httpreq_chunked st = {0};
	size_t i = 0;
	for (done = false; !done; i++)
		assert_true(httpreq_chunked_feed(&st, (const uint8_t *)buf + i, 1, &done) == 1);
	assert_int_equal(i, strlen(body));
	assert_int_equal(feed_all("0\r\n\r\n", &done), 5);
	assert_true(done);
	assert_int_equal(feed_all("5\r\nhel", &done), 6);
	assert_false(done);
	static const char *const bad[] = {"x\r\n", "\r\n", "5\r\nhelloX\r\n", "5\nhello\r\n",
					  "1000000000000000\r\n", "0\r\nbad\n\r\n", "5 x\001\r\n"};
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++)
		if (feed_all(bad[k], &done) != -EBADMSG)
			fail_msg("accepted chunked #%zu", k);
	/* An endless extension is cut off. */
	static char ext[2048];
	memset(ext, 'a', sizeof(ext) - 1); /* and a terminator: feed_all() takes a string */
	memcpy(ext, "1;", 2);
	assert_int_equal(feed_all(ext, &done), -EBADMSG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_good),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_prefixes),
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_chunked),
		cmocka_unit_test(test_path_normalize),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
