/* src/daemon/chunked.c: the chunked body decoder of cordond's upload spool. The body's bytes
 * come out whatever the pieces it arrives in; the framing's errors are -EBADMSG; what follows
 * the last chunk is not taken. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/chunked.h"

struct out {
	char buf[4096];
	size_t len;
	int fail_with;
};

static int collect(void *arg, const char *p, size_t n)
{
	struct out *o = arg;
	if (o->fail_with)
		return o->fail_with;
	assert_true(o->len + n <= sizeof(o->buf));
	memcpy(o->buf + o->len, p, n);
	o->len += n;
	return 0;
}

/* @s fed @step bytes at a time; the total taken, or the first error. */
static ssize_t feed(const char *s, size_t step, struct out *o, struct chunked *c)
{
	size_t n = strlen(s), off = 0;
	chunked_init(c);
	*o = (struct out){0};
	while (off < n && !chunked_done(c)) {
		size_t k = n - off < step ? n - off : step;
		ssize_t r = chunked_feed(c, s + off, k, collect, o);
		if (r < 0)
			return r;
		off += (size_t)r;
	}
	return (ssize_t)off;
}

static void test_body_in_any_pieces(void **state)
{
	const char *s = "4;name=v\r\nwiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nX-T: 1\r\n\r\nNEXT";
	for (size_t step = 1; step < 80; step++) {
		struct out o;
		struct chunked c;
		ssize_t k = feed(s, step, &o, &c);
		assert_true(chunked_done(&c));
		assert_int_equal(k, strlen(s) - 4); /* "NEXT" is the next request's */
		assert_int_equal(o.len, 23);
		assert_memory_equal(o.buf, "wikipedia in\r\n\r\nchunks.", 23);
	}
}

static void test_bare_lf_and_upper_hex(void **state)
{
	struct out o;
	struct chunked c;
	assert_int_equal(feed("A\nabcdefghij\n0\n\n", 3, &o, &c), 16);
	assert_true(chunked_done(&c));
	assert_int_equal(o.len, 10);
}

static void test_bad_framing(void **state)
{
	static const char *const bad[] = {
		"zz\r\n",                /* no size */
		"\r\n",                  /* an empty size line */
		"3x\r\n",                /* junk after the size */
		"2\r\nabc\r\n",          /* data longer than its size */
		"11111111111111111\r\n", /* 17 digits */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct out o;
		struct chunked c;
		assert_int_equal(feed(bad[i], 64, &o, &c), -EBADMSG);
	}
	char line[CHUNKED_LINE_MAX + 8];
	memset(line, ';', sizeof(line) - 1);
	line[0] = '1';
	line[sizeof(line) - 1] = '\0';
	struct out o;
	struct chunked c;
	assert_int_equal(feed(line, 7, &o, &c), -EBADMSG); /* a size line over the bound */
}

static void test_callback_error_stops(void **state)
{
	struct chunked c;
	struct out o = {.fail_with = -EFBIG};
	chunked_init(&c);
	assert_int_equal(chunked_feed(&c, "3\r\nabc\r\n", 8, collect, &o), -EFBIG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_body_in_any_pieces),
		cmocka_unit_test(test_bare_lf_and_upper_hex),
		cmocka_unit_test(test_bad_framing),
		cmocka_unit_test(test_callback_error_stops),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
