/* Unit tests of src/basic/base64.c: the one encoder and strict decoder of cordond, src/spec and
 * the CLI (RFC 4648 section 10 vectors, and what the decoder must refuse). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "basic/base64.h"

static const char *const vectors[][2] = {
	{"", ""},	      {"f", "Zg=="},	     {"fo", "Zm8="},	     {"foo", "Zm9v"},
	{"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"},
};

static void test_vectors(void **state)
{
	for (size_t i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++) {
		const char *raw = vectors[i][0], *enc = vectors[i][1];
		size_t n;
		char *s = base64_encode(raw, strlen(raw), &n);
		assert_non_null(s);
		assert_string_equal(s, enc);
		assert_int_equal(n, base64_encoded_len(strlen(raw)));
		free(s);

		uint8_t *out;
		assert_int_equal(base64_decode(enc, strlen(enc), &out, &n), 0);
		assert_int_equal(n, strlen(raw));
		assert_memory_equal(out, raw, n);
		free(out);
	}
}

static void test_binary_roundtrip(void **state)
{
	uint8_t in[256], back[256];
	char enc[4 * ((sizeof(in) + 2) / 3) + 1];
	for (size_t i = 0; i < sizeof(in); i++)
		in[i] = (uint8_t)(255 - i);
	for (size_t len = 0; len <= sizeof(in); len += 37) {
		size_t n = base64_encode_to(in, len, enc);
		assert_int_equal(n, strlen(enc));
		assert_int_equal(base64_decode_to(enc, n, back), (ssize_t)len);
		assert_memory_equal(back, in, len);
	}
}

static void test_refused(void **state)
{
	static const char *const bad[] = {"Zg", "Zg=", "Z===", "Zg=a", "=Zg=", "Zm9v!A==", "Zm 9",
					  "Zm9\n", "Zg==Zg=="};
	uint8_t out[16];
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(base64_decode_to(bad[i], strlen(bad[i]), out), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_vectors),
		cmocka_unit_test(test_binary_roundtrip),
		cmocka_unit_test(test_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
