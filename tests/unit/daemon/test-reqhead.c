/* src/daemon/reqhead.c: the request head cordond's front checks before evhttp reads a body.
 * What it accepts must be read by evhttp the same way; what evhttp could read otherwise (a
 * second framing, a folded line) is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <event2/http.h>

#include "daemon/reqhead.h"

static struct reqhead parse(const char *s)
{
	struct reqhead h;
	size_t n = reqhead_end(s, strlen(s));
	assert_int_not_equal(n, 0);
	reqhead_parse(s, n, &h);
	return h;
}

static void expect_bad(const char *s, const char *why)
{
	struct reqhead h = parse(s);
	if (!h.bad || !strstr(h.bad, why))
		fail_msg("%s: expected refusal '%s', got '%s'", s, why, h.bad ? h.bad : "(accepted)");
}

static void test_end(void **state)
{
	assert_int_equal(reqhead_end("GET / HTTP/1.1\r\n", 16), 0);
	assert_int_equal(reqhead_end("GET / HTTP/1.1\r\nA: b\r\n\r\nBODY", 28), 24);
	assert_int_equal(reqhead_end("GET / HTTP/1.1\nA: b\n\nBODY", 25), 21);
	assert_int_equal(reqhead_end("GET / HTTP/1.1\r\n\n", 17), 17);
	assert_int_equal(reqhead_end("GET / HTTP/1.1\r\n\r", 17), 0);
	assert_int_equal(reqhead_end("", 0), 0);
}

static void test_simple(void **state)
{
	struct reqhead h = parse("PUT /v1/sandboxes/sb-x/files?path=/a HTTP/1.1\r\nHost: x\r\n"
				 "authorization:  Bearer k123 \r\ncontent-length: 42\r\n\r\n");
	assert_null(h.bad);
	assert_int_equal(h.method, EVHTTP_REQ_PUT);
	assert_string_equal(h.path, "/v1/sandboxes/sb-x/files");
	assert_true(h.has_cl);
	assert_int_equal(h.cl, 42);
	assert_false(h.chunked);
	assert_int_equal(h.auth_len, 11);
	assert_memory_equal(h.auth, "Bearer k123", 11);

	assert_null(h.api_key);

	h = parse("POST /sandboxes HTTP/1.1\r\nx-api-key: e2b_00ff \r\ncontent-length: 2\r\n\r\n");
	assert_null(h.bad);
	assert_null(h.auth);
	assert_int_equal(h.api_key_len, 8);
	assert_memory_equal(h.api_key, "e2b_00ff", 8);

	h = parse("POST /files?path=/a&signature=v1_x#f HTTP/1.1\r\nHost: 49983-abc.e2b.test\r\n"
		  "E2b-Sandbox-Id: abc\r\nX-Access-Token:  t0k \r\ne2b-traffic-access-token: tr\r\n\r\n");
	assert_null(h.bad);
	assert_string_equal(h.path, "/files");
	assert_int_equal(h.query_len, 22);
	assert_memory_equal(h.query, "path=/a&signature=v1_x", 22);
	assert_memory_equal(h.host, "49983-abc.e2b.test", h.host_len);
	assert_memory_equal(h.sandbox_id, "abc", h.sandbox_id_len);
	assert_int_equal(h.access_token_len, 3);
	assert_memory_equal(h.access_token, "t0k", 3);
	assert_int_equal(h.traffic_token_len, 2);
	assert_memory_equal(h.traffic_token, "tr", 2);

	h = parse("POST /v1/sandboxes HTTP/1.0\nTransfer-Encoding: Chunked\n\n");
	assert_null(h.bad);
	assert_int_equal(h.method, EVHTTP_REQ_POST);
	assert_true(h.chunked);
	assert_false(h.has_cl);

	h = parse("BREW /pot#frag HTTP/1.1\r\n\r\n");
	assert_null(h.bad);
	assert_int_equal(h.method, -1);
	assert_string_equal(h.path, "/pot");
}

static void test_framing_refused(void **state)
{
	expect_bad("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", "repeated");
	expect_bad("POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", "both");
	expect_bad("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "Transfer-Encoding");
	expect_bad("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
		   "Transfer-Encoding");
	expect_bad("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", "Content-Length");
	expect_bad("POST / HTTP/1.1\r\nContent-Length: 0x10\r\n\r\n", "Content-Length");
	expect_bad("POST / HTTP/1.1\r\nContent-Length:\r\n\r\n", "Content-Length");
	expect_bad("POST / HTTP/1.1\r\nContent-Length: 1234567890123456789\r\n\r\n", "Content-Length");
	expect_bad("POST / HTTP/1.1\r\nX: a\r\n  Transfer-Encoding: chunked\r\n\r\n", "folded");
	expect_bad("POST / HTTP/1.1\r\nno colon here\r\n\r\n", "colon");
}

static void test_request_line_refused(void **state)
{
	expect_bad("GET /\r\n\r\n", "request line");
	expect_bad("GET  / HTTP/1.1\r\n\r\n", "request line");
	expect_bad("GET / HTTP/1.1 x\r\n\r\n", "request line");
	expect_bad("GET / HTTP/2.0\r\n\r\n", "request line");
	expect_bad(" GET / HTTP/1.1\r\n\r\n", "request line");
}

/* A name that is not exactly the header (a blank before the colon) is not it, for evhttp
 * either: the request then has no framing at all. */
static void test_near_names_ignored(void **state)
{
	struct reqhead h = parse("POST / HTTP/1.1\r\nContent-Length : 5\r\nX-Content-Length: 7\r\n\r\n");
	assert_null(h.bad);
	assert_false(h.has_cl);
}

static void test_long_path_cut(void **state)
{
	char buf[2048] = "GET /";
	memset(buf + 5, 'a', 1000);
	strcpy(buf + 1005, " HTTP/1.1\r\n\r\n");
	struct reqhead h = parse(buf);
	assert_null(h.bad);
	assert_int_equal(strlen(h.path), REQHEAD_PATH_MAX - 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_end),
		cmocka_unit_test(test_simple),
		cmocka_unit_test(test_framing_refused),
		cmocka_unit_test(test_request_line_refused),
		cmocka_unit_test(test_near_names_ignored),
		cmocka_unit_test(test_long_path_cut),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
