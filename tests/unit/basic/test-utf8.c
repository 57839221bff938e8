/* Unit tests of src/basic/utf8.c: what passes as UTF-8 from a sandbox's output into JSON. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "basic/cleanup.h"
#include "basic/utf8.h"

struct sample {
	const char *bytes;
	size_t len; /* 0: strlen */
	int want;
};

static const struct sample samples[] = {
	{"a", 0, 1},
	{"\x7f", 0, 1},
	{"\xc3\xa9", 0, 2},              /* é */
	{"\xe2\x82\xac", 0, 3},          /* € */
	{"\xf0\x9f\x98\x80", 0, 4},      /* U+1F600 */
	{"\xf4\x8f\xbf\xbf", 0, 4},      /* U+10FFFF, the last */
	{"\xc3", 0, 0},                  /* cut short */
	{"\xe2\x82", 0, 0},
	{"\xf0\x9f\x98", 0, 0},
	{"\x80", 0, -1},                 /* a continuation byte alone */
	{"\xc0\xaf", 0, -1},             /* overlong '/' */
	{"\xc1\xbf", 0, -1},
	{"\xe0\x80\xaf", 0, -1},         /* overlong, 3 bytes */
	{"\xf0\x80\x80\xaf", 0, -1},     /* overlong, 4 bytes */
	{"\xed\xa0\x80", 0, -1},         /* a surrogate, U+D800 */
	{"\xed\xbf\xbf", 0, -1},         /* U+DFFF */
	{"\xf4\x90\x80\x80", 0, -1},     /* U+110000 */
	{"\xf5\x80\x80\x80", 0, -1},
	{"\xff", 0, -1},
	{"\xc3\x28", 0, -1},             /* a bad second byte */
	{"\xe2\x28\xa1", 0, -1},
	{"\xe2\x82\x28", 0, -1},         /* a bad third byte */
	{"\xc3\xa9", 1, 0},              /* valid, but only one byte given */
};

static void test_samples(void **state)
{
	for (size_t i = 0; i < ELEMENTSOF(samples); i++) {
		const struct sample *s = &samples[i];
		size_t len = s->len ? s->len : strlen(s->bytes);
		int got = utf8_seq((const uint8_t *)s->bytes, len);
		if (got != s->want)
			fail_msg("sample %zu: got %d, want %d", i, got, s->want);
	}
}

/* Every 2-byte lead with every second byte: only C2..DF + 80..BF pass. */
static void test_two_byte_space(void **state)
{
	for (unsigned a = 0x80; a <= 0xff; a++)
		for (unsigned b = 0; b <= 0xff; b++) {
			uint8_t p[2] = {(uint8_t)a, (uint8_t)b};
			int got = utf8_seq(p, 2);
			bool valid = a >= 0xc2 && a <= 0xdf && b >= 0x80 && b <= 0xbf;
			if (valid)
				assert_int_equal(got, 2);
			else if (a >= 0xc2 && a <= 0xdf)
				assert_int_equal(got, -1);
		}
}

static void test_clean(void **state)
{
	char out[64];
	size_t cut = 99;
	/* invalid bytes become U+FFFD; NUL too unless allowed */
	const uint8_t bad[] = {'a', 0xff, 0, 'b'};
	size_t k = utf8_clean(bad, sizeof(bad), out, false, NULL);
	assert_int_equal(k, 1 + 3 + 3 + 1);
	assert_memory_equal(out, "a\xef\xbf\xbd\xef\xbf\xbd" "b", k);
	k = utf8_clean(bad, sizeof(bad), out, true, NULL);
	assert_int_equal(k, 1 + 3 + 1 + 1);
	assert_memory_equal(out, "a\xef\xbf\xbd\0b", k);
	/* a character cut by the end: left out and counted, or replaced byte by byte */
	const uint8_t cutp[] = {'x', 0xe2, 0x82};
	k = utf8_clean(cutp, sizeof(cutp), out, true, &cut);
	assert_int_equal(k, 1);
	assert_int_equal(cut, 2);
	k = utf8_clean(cutp, sizeof(cutp), out, true, NULL);
	assert_int_equal(k, 1 + 3 + 3);
	/* nothing cut: cut is 0 */
	k = utf8_clean((const uint8_t *)"\xe2\x82\xac", 3, out, false, &cut);
	assert_int_equal(k, 3);
	assert_int_equal(cut, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_samples),
		cmocka_unit_test(test_two_byte_space),
		cmocka_unit_test(test_clean),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
