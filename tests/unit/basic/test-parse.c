/* cordon_parse_size() and cordon_parse_duration_ms(): every unit in both cases, the edges of
 * uint64_t, and what is refused. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "basic/parse.h"

struct ok_case {
	const char *in;
	uint64_t want;
};

struct bad_case {
	const char *in;
	int want;
};

static void check_ok(int (*parse)(const char *, uint64_t *), const struct ok_case *c, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t v = 12345;
		int r = parse(c[i].in, &v);
		if (r != 0 || v != c[i].want)
			fail_msg("'%s': r=%d v=%llu, want 0 and %llu", c[i].in, r,
				 (unsigned long long)v, (unsigned long long)c[i].want);
	}
}

static void check_bad(int (*parse)(const char *, uint64_t *), const struct bad_case *c, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t v = 12345;
		int r = parse(c[i].in, &v);
		if (r != c[i].want || v != 12345)
			fail_msg("'%s': r=%d v=%llu, want %d and the output untouched",
				 c[i].in ? c[i].in : "(null)", r, (unsigned long long)v, c[i].want);
	}
}

static void test_size_units(void **state)
{
	static const struct ok_case c[] = {
		{"0", 0},
		{"1", 1ULL << 20}, /* a bare number is MiB */
		{"1024", 1ULL << 30},
		{"4096b", 4096},
		{"1b", 1},
		{"1B", 1},
		{"1k", 1024},
		{"1K", 1024},
		{"1kb", 1024},
		{"1KB", 1024},
		{"1KiB", 1024},
		{"1kib", 1024},
		{"512m", 512ULL << 20},
		{"512M", 512ULL << 20},
		{"512MB", 512ULL << 20},
		{"512MiB", 512ULL << 20},
		{"2g", 2ULL << 30},
		{"2G", 2ULL << 30},
		{"2gb", 2ULL << 30},
		{"2GiB", 2ULL << 30},
		{"3t", 3ULL << 40},
		{"3T", 3ULL << 40},
		{"007k", 7 << 10},
	};
	check_ok(cordon_parse_size, c, sizeof(c) / sizeof(c[0]));
}

static void test_size_overflow(void **state)
{
	static const struct ok_case ok[] = {
		{"18446744073709551615b", UINT64_MAX},
		{"17592186044415", 17592186044415ULL << 20}, /* (2^64-1)/2^20 MiB */
		{"18014398509481983k", 18014398509481983ULL << 10}, /* (2^64-1)/1024 */
		{"16777215t", 16777215ULL << 40},
	};
	static const struct bad_case bad[] = {
		{"18446744073709551616b", -ERANGE},
		{"17592186044416", -ERANGE}, /* 2^44 MiB = 2^64 */
		{"99999999999999999999999999", -ERANGE},
		{"18014398509481984k", -ERANGE}, /* 2^54 KiB = 2^64 */
		{"16777216t", -ERANGE},
		{"17179869184g", -ERANGE},
		{"17592186044416m", -ERANGE},
	};
	check_ok(cordon_parse_size, ok, sizeof(ok) / sizeof(ok[0]));
	check_bad(cordon_parse_size, bad, sizeof(bad) / sizeof(bad[0]));
}

static void test_size_garbage(void **state)
{
	static const struct bad_case c[] = {
		{NULL, -EINVAL},  {"", -EINVAL},     {"k", -EINVAL},	 {"-1", -EINVAL},
		{"+1", -EINVAL},  {" 1", -EINVAL},   {"1 ", -EINVAL},	 {"1 k", -EINVAL},
		{"1k ", -EINVAL}, {"1x", -EINVAL},   {"1kk", -EINVAL},	 {"1.5g", -EINVAL},
		{"0x10", -EINVAL}, {"1e3", -EINVAL}, {"1p", -EINVAL},	 {"1bb", -EINVAL},
		{"1\n", -EINVAL},  {"1k\n", -EINVAL},  {"abc", -EINVAL},
	};
	check_bad(cordon_parse_size, c, sizeof(c) / sizeof(c[0]));
}

static void test_duration_units(void **state)
{
	static const struct ok_case c[] = {
		{"0", 0},	      {"2", 2000},	  {"300", 300000},     {"90s", 90000},
		{"90S", 90000},	      {"1500ms", 1500},	  {"1500MS", 1500},    {"1500Ms", 1500},
		{"5m", 300000},	      {"5M", 300000},	  {"5min", 300000},    {"5MIN", 300000},
		{"2h", 7200000},      {"2H", 7200000},	  {"0ms", 0},	       {"0h", 0},
	};
	check_ok(cordon_parse_duration_ms, c, sizeof(c) / sizeof(c[0]));
}

static void test_duration_overflow(void **state)
{
	static const struct ok_case ok[] = {
		{"18446744073709551615ms", UINT64_MAX},
		{"18446744073709551", 18446744073709551000ULL}, /* seconds by default */
		{"18446744073709551s", 18446744073709551000ULL},
	};
	static const struct bad_case bad[] = {
		{"18446744073709551616ms", -ERANGE},
		{"18446744073709552", -ERANGE},
		{"18446744073709552s", -ERANGE},
		{"307445734561826m", -ERANGE}, /* > (2^64-1)/60000 */
		{"5124095576031h", -ERANGE}, /* > (2^64-1)/3600000 */
	};
	check_ok(cordon_parse_duration_ms, ok, sizeof(ok) / sizeof(ok[0]));
	check_bad(cordon_parse_duration_ms, bad, sizeof(bad) / sizeof(bad[0]));
}

static void test_duration_garbage(void **state)
{
	static const struct bad_case c[] = {
		{NULL, -EINVAL}, {"", -EINVAL},	     {"s", -EINVAL},	{"-5s", -EINVAL},
		{"5d", -EINVAL}, {"5 s", -EINVAL},   {"5sec", -EINVAL}, {"1.5s", -EINVAL},
		{"5mins", -EINVAL}, {"5us", -EINVAL}, {"5k", -EINVAL},	{" 5", -EINVAL},
		{"5s5", -EINVAL}, {"1h30m", -EINVAL},
	};
	check_bad(cordon_parse_duration_ms, c, sizeof(c) / sizeof(c[0]));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_size_units),	cmocka_unit_test(test_size_overflow),
		cmocka_unit_test(test_size_garbage),	cmocka_unit_test(test_duration_units),
		cmocka_unit_test(test_duration_overflow), cmocka_unit_test(test_duration_garbage),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
