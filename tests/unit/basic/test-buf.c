/* Unit tests of src/basic/buf.c (the growable buffer of the CLI, the recipe lexer and the
 * agent) and of env_name_valid() (basic/parse.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "basic/buf.h"
#include "basic/parse.h"

static void test_append_take(void **state)
{
	struct buf b = {};
	char *s = buf_take(&b);
	assert_string_equal(s, ""); /* nothing appended: "", not NULL */
	free(s);
	for (int i = 0; i < 1000; i++)
		assert_int_equal(buf_add(&b, "abc", 3), 0);
	assert_int_equal(buf_addc(&b, '!'), 0);
	assert_int_equal(b.len, 3001);
	assert_true(b.cap > b.len);
	assert_int_equal(b.p[b.len], '\0');
	s = buf_take(&b);
	assert_int_equal(strlen(s), 3001);
	assert_int_equal(s[3000], '!');
	assert_null(b.p);
	assert_int_equal(b.len + b.cap + b.head, 0);
	free(s);
}

static void test_consume_moves_to_front(void **state)
{
	struct buf b = {};
	assert_int_equal(buf_add(&b, "0123456789", 10), 0);
	buf_consume(&b, 4);
	assert_int_equal(b.head, 4);
	assert_memory_equal(b.p + b.head, "456789", 6);
	size_t cap = b.cap;
	/* Room for what fits once the data moves to the front: no growth. */
	assert_int_equal(buf_reserve(&b, cap - 6 - 1), 0);
	assert_int_equal(b.head, 0);
	assert_int_equal(b.cap, cap);
	assert_memory_equal(b.p, "456789", 6);
	memcpy(buf_tail(&b), "ab", 2);
	b.len += 2;
	buf_consume(&b, 8); /* emptied: back to the front */
	assert_int_equal(b.head, 0);
	assert_int_equal(b.len, 0);
	buf_done(&b);
	assert_null(b.p);
}

static void test_refuses_overflow(void **state)
{
	struct buf b = {};
	assert_int_equal(buf_add(&b, "x", 1), 0);
	assert_int_equal(buf_reserve(&b, SIZE_MAX - 1), -12 /* -ENOMEM */);
	assert_int_equal(b.len, 1);
	buf_done(&b);
}

static void test_env_name(void **state)
{
	static const char *const good[] = {"A", "_", "PATH", "a_1", "_9", "LC_ALL"};
	static const char *const bad[] = {"", "1A", "A-B", "A=B", "A B", "é", "$X"};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		assert_true(env_name_valid(good[i], strlen(good[i])));
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_false(env_name_valid(bad[i], strlen(bad[i])));
	assert_false(env_name_valid("AB", 0));
	assert_true(env_name_valid("AB=1", 2)); /* the name part of NAME=value */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_append_take),
		cmocka_unit_test(test_consume_moves_to_front),
		cmocka_unit_test(test_refuses_overflow),
		cmocka_unit_test(test_env_name),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
