/* src/daemon/util.c: UTF-8 sanitising of sandbox output, base64, sandbox ids, timestamps. */
#include <ctype.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include "daemon/daemon.h"

#define FFFD "\xef\xbf\xbd"

/* json_from_bytes_utf8(@in) must be the string @want (both with explicit lengths). */
static void check_utf8(const char *in, size_t in_len, const char *want, size_t want_len)
{
	json_t *j = json_from_bytes_utf8(in, in_len);
	assert_non_null(j);
	assert_true(json_is_string(j));
	size_t n = json_string_length(j);
	const char *s = json_string_value(j);
	if (n != want_len || memcmp(s, want, n) != 0) {
		char hex[512] = "";
		for (size_t i = 0; i < n && i < 100; i++)
			snprintf(hex + strlen(hex), sizeof(hex) - strlen(hex), "%02x ", (uint8_t)s[i]);
		fail_msg("input of %zu bytes gave %zu bytes: %s", in_len, n, hex);
	}
	/* whatever comes out is valid UTF-8 for jansson's own checker */
	json_t *checked = json_stringn(s, n);
	assert_non_null(checked);
	json_decref(checked);
	json_decref(j);
}

#define UTF8(in, want) check_utf8(in, sizeof(in) - 1, want, sizeof(want) - 1)

static void test_utf8_valid_kept(void **state)
{
	UTF8("", "");
	UTF8("hello, world\n\t\x7f", "hello, world\n\t\x7f");
	UTF8("\xc3\xa9", "\xc3\xa9");                         /* é, 2 bytes */
	UTF8("\xc2\x80", "\xc2\x80");                         /* U+0080, smallest 2-byte */
	UTF8("\xdf\xbf", "\xdf\xbf");                         /* U+07FF */
	UTF8("\xe0\xa0\x80", "\xe0\xa0\x80");                 /* U+0800, smallest 3-byte */
	UTF8("\xe2\x82\xac", "\xe2\x82\xac");                 /* € */
	UTF8("\xed\x9f\xbf", "\xed\x9f\xbf");                 /* U+D7FF, below the surrogates */
	UTF8("\xee\x80\x80", "\xee\x80\x80");                 /* U+E000, above them */
	UTF8("\xef\xbf\xbd", "\xef\xbf\xbd");                 /* U+FFFD itself */
	UTF8("\xef\xbf\xbf", "\xef\xbf\xbf");                 /* U+FFFF */
	UTF8("\xf0\x90\x80\x80", "\xf0\x90\x80\x80");         /* U+10000, smallest 4-byte */
	UTF8("\xf0\x9f\x98\x80", "\xf0\x9f\x98\x80");         /* 😀 */
	UTF8("\xf4\x8f\xbf\xbf", "\xf4\x8f\xbf\xbf");         /* U+10FFFF, the last */
	UTF8("a\xc3\xa9" "b\xf0\x9f\x98\x80" "c", "a\xc3\xa9" "b\xf0\x9f\x98\x80" "c");
}

static void test_utf8_invalid_replaced(void **state)
{
	/* stray bytes */
	UTF8("\x80", FFFD);
	UTF8("\xbf", FFFD);
	UTF8("\xff", FFFD);
	UTF8("\xfe", FFFD);
	UTF8("a\xff" "b", "a" FFFD "b");
	UTF8("\xf8\x88\x80\x80\x80", FFFD FFFD FFFD FFFD FFFD); /* 5-byte form */
	/* truncated sequences, at the end and followed by ASCII */
	UTF8("\xc3", FFFD);
	UTF8("\xe2\x82", FFFD FFFD);
	UTF8("\xf0\x9f\x98", FFFD FFFD FFFD);
	UTF8("\xe2\x82x", FFFD FFFD "x");
	UTF8("\xc3\xc3\xa9", FFFD "\xc3\xa9");
	/* NUL */
	check_utf8("a\0b", 3, "a" FFFD "b", 5);
	check_utf8("\0", 1, FFFD, 3);
	/* U+0000 written long is NUL too */
	UTF8("\xc0\x80", FFFD FFFD);
}

static void test_utf8_overlong(void **state)
{
	UTF8("\xc0\xaf", FFFD FFFD);                 /* '/' in 2 bytes */
	UTF8("\xc1\xbf", FFFD FFFD);                 /* U+007F in 2 bytes */
	UTF8("\xe0\x80\xaf", FFFD FFFD FFFD);        /* '/' in 3 bytes */
	UTF8("\xe0\x9f\xbf", FFFD FFFD FFFD);        /* U+07FF in 3 bytes */
	UTF8("\xf0\x80\x80\xaf", FFFD FFFD FFFD FFFD); /* '/' in 4 bytes */
	UTF8("\xf0\x8f\xbf\xbf", FFFD FFFD FFFD FFFD); /* U+FFFF in 4 bytes */
}

static void test_utf8_surrogates_and_range(void **state)
{
	UTF8("\xed\xa0\x80", FFFD FFFD FFFD); /* U+D800 */
	UTF8("\xed\xaf\xbf", FFFD FFFD FFFD); /* U+DBFF */
	UTF8("\xed\xb0\x80", FFFD FFFD FFFD); /* U+DC00 */
	UTF8("\xed\xbf\xbf", FFFD FFFD FFFD); /* U+DFFF */
	/* a CESU-8 pair for U+1F600 */
	UTF8("\xed\xa0\xbd\xed\xb8\x80", FFFD FFFD FFFD FFFD FFFD FFFD);
	UTF8("\xf4\x90\x80\x80", FFFD FFFD FFFD FFFD); /* U+110000 */
	UTF8("\xf5\x80\x80\x80", FFFD FFFD FFFD FFFD);
	UTF8("\xf7\xbf\xbf\xbf", FFFD FFFD FFFD FFFD);
}

/* Random bytes: the output is always valid UTF-8, and valid input comes back unchanged. */
static void test_utf8_random(void **state)
{
	uint8_t buf[256];
	srand(1);
	for (int round = 0; round < 20000; round++) {
		size_t len = (size_t)rand() % sizeof(buf);
		for (size_t i = 0; i < len; i++)
			buf[i] = (uint8_t)(round & 1 ? rand() : 0x80 | rand()); /* many lead bytes */
		json_t *j = json_from_bytes_utf8(buf, len);
		assert_non_null(j);
		const char *s = json_string_value(j);
		size_t n = json_string_length(j);
		json_t *checked = json_stringn(s, n);
		assert_non_null(checked);
		json_decref(checked);
		assert_true(n <= 3 * len);
		assert_null(memchr(s, 0, n));
		json_t *valid = json_stringn((const char *)buf, len);
		if (valid && !memchr(buf, 0, len)) {
			assert_int_equal(n, len);
			assert_memory_equal(s, buf, len);
		}
		json_decref(valid);
		json_decref(j);
	}
}

static void check_b64(const char *in, size_t len, const char *want)
{
	size_t n = 12345;
	char *s = base64_encode(in, len, &n);
	assert_non_null(s);
	assert_string_equal(s, want);
	assert_int_equal(n, strlen(want));
	free(s);
}

/* RFC 4648 section 10, and binary. */
static void test_base64_vectors(void **state)
{
	check_b64("", 0, "");
	check_b64("f", 1, "Zg==");
	check_b64("fo", 2, "Zm8=");
	check_b64("foo", 3, "Zm9v");
	check_b64("foob", 4, "Zm9vYg==");
	check_b64("fooba", 5, "Zm9vYmE=");
	check_b64("foobar", 6, "Zm9vYmFy");
	check_b64("\xff\xfe\xfd", 3, "//79");
	check_b64("\xfb\xff", 2, "+/8=");
	check_b64("\0", 1, "AA==");
	check_b64("\0\0\0", 3, "AAAA");
}

/* Against OpenSSL's encoder on random inputs of every length up to 300. */
static void test_base64_openssl(void **state)
{
	uint8_t in[300];
	char want[401];
	srand(2);
	for (size_t len = 0; len <= sizeof(in); len++) {
		for (size_t i = 0; i < len; i++)
			in[i] = (uint8_t)rand();
		int wn = EVP_EncodeBlock((unsigned char *)want, in, (int)len);
		size_t n;
		char *s = base64_encode(in, len, &n);
		assert_non_null(s);
		assert_int_equal(n, (size_t)wn);
		assert_string_equal(s, want);
		free(s);
	}
}

static void test_valid_id(void **state)
{
	static const char *const ok[] = {
		"a", "sb-abcdefghijklmnopqrst", "A", "Z9", "_", "-", "my_sandbox-01", "UPPER",
		"0123456789012345678901234567890123456789012345678901234567890123", /* 64 */
	};
	static const char *const bad[] = {
		"", "a/b", "..", "../etc", "a.b", "a b", " a", "a\n", "a\t", "\xc3\xa9", "a%2f",
		"a:b", "a\\b", "a*", "a?", "a=b",
		"01234567890123456789012345678901234567890123456789012345678901234", /* 65 */
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		if (!valid_id(ok[i]))
			fail_msg("'%s' refused", ok[i]);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (valid_id(bad[i]))
			fail_msg("'%s' accepted", bad[i]);
}

static int cmp_id(const void *a, const void *b)
{
	return strcmp(a, b);
}

static void test_make_id(void **state)
{
	enum { N = 10000 };
	char(*ids)[SBX_ID_LEN + 1] = malloc(N * sizeof(*ids));
	assert_non_null(ids);
	unsigned seen[256] = {0};

	for (int i = 0; i < N; i++) {
		memset(ids[i], 'X', sizeof(ids[i]));
		make_id(ids[i]);
		assert_int_equal(strlen(ids[i]), SBX_ID_LEN - 1);
		assert_memory_equal(ids[i], "sb-", 3);
		for (size_t k = 3; k < SBX_ID_LEN - 1; k++) {
			unsigned char ch = (unsigned char)ids[i][k];
			if (!((ch >= 'a' && ch <= 'z') || (ch >= '2' && ch <= '7')))
				fail_msg("'%s': '%c' is not base32", ids[i], ch);
			seen[ch]++;
		}
		assert_true(valid_id(ids[i]));
	}
	qsort(ids, N, sizeof(*ids), cmp_id);
	for (int i = 1; i < N; i++)
		if (strcmp(ids[i - 1], ids[i]) == 0)
			fail_msg("duplicate id %s", ids[i]);
	/* all 32 symbols turn up, none wildly more than the others (200000 draws) */
	const char *alphabet = "abcdefghijklmnopqrstuvwxyz234567";
	for (const char *a = alphabet; *a; a++) {
		unsigned c = seen[(unsigned char)*a];
		if (c < 5000 || c > 7500)
			fail_msg("'%c' drawn %u times of %u", *a, c, N * 20);
	}
	free(ids);
}

static void test_iso_time(void **state)
{
	static const struct {
		uint64_t ms;
		const char *want;
	} c[] = {
		{0, "1970-01-01T00:00:00.000Z"},
		{1, "1970-01-01T00:00:00.001Z"},
		{999, "1970-01-01T00:00:00.999Z"},
		{1000, "1970-01-01T00:00:01.000Z"},
		{951782400000ULL, "2000-02-29T00:00:00.000Z"},
		{1700000000123ULL, "2023-11-14T22:13:20.123Z"},
		{4102444799999ULL, "2099-12-31T23:59:59.999Z"},
		{253402300799999ULL, "9999-12-31T23:59:59.999Z"},
	};
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		char buf[40];
		memset(buf, 'X', sizeof(buf));
		assert_ptr_equal(iso_time(c[i].ms, buf), buf);
		assert_string_equal(buf, c[i].want);
	}
	/* now: the same second as time(2), give or take one */
	char buf[40];
	uint64_t now = now_ms();
	time_t t = time(NULL);
	assert_true(now / 1000 + 1 >= (uint64_t)t && now / 1000 <= (uint64_t)t + 1);
	iso_time(now, buf);
	assert_int_equal(strlen(buf), 24);
	assert_true(buf[4] == '-' && buf[7] == '-' && buf[10] == 'T' && buf[13] == ':' &&
		    buf[16] == ':' && buf[19] == '.' && buf[23] == 'Z');
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_utf8_valid_kept),
		cmocka_unit_test(test_utf8_invalid_replaced),
		cmocka_unit_test(test_utf8_overlong),
		cmocka_unit_test(test_utf8_surrogates_and_range),
		cmocka_unit_test(test_utf8_random),
		cmocka_unit_test(test_base64_vectors),
		cmocka_unit_test(test_base64_openssl),
		cmocka_unit_test(test_valid_id),
		cmocka_unit_test(test_make_id),
		cmocka_unit_test(test_iso_time),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
