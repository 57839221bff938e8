/* struct cordon_err: the message, the strerror suffix, errno kept, and a message that does
 * not fit. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <cordon/err.h>

static void test_set_suffix(void **state)
{
	struct cordon_err e = {};
	errno = EBADF;
	assert_int_equal(cordon_err_set(&e, -ENOENT, "mount '%s'", "/x"), -ENOENT);
	assert_int_equal(e.code, -ENOENT);
	char want[128];
	snprintf(want, sizeof(want), "mount '/x': %s", strerror(ENOENT));
	assert_string_equal(e.msg, want);
	assert_int_equal(errno, EBADF);
}

static void test_setf_no_suffix(void **state)
{
	struct cordon_err e = {};
	errno = EIO;
	assert_int_equal(cordon_err_setf(&e, -EINVAL, "bad option %d", 7), -EINVAL);
	assert_int_equal(e.code, -EINVAL);
	assert_string_equal(e.msg, "bad option 7");
	assert_int_equal(errno, EIO);
}

static void test_overwrite(void **state)
{
	struct cordon_err e = {};
	cordon_err_setf(&e, -EINVAL, "a long first message that must not leak into the second");
	cordon_err_setf(&e, -EPERM, "short");
	assert_int_equal(e.code, -EPERM);
	assert_string_equal(e.msg, "short");
}

static void test_null_err(void **state)
{
	errno = EAGAIN;
	assert_int_equal(cordon_err_set(NULL, -EACCES, "x %s", "y"), -EACCES);
	assert_int_equal(errno, EAGAIN);
	assert_int_equal(cordon_err_setf(NULL, -E2BIG, "x"), -E2BIG);
	assert_int_equal(errno, EAGAIN);
}

static void test_truncation(void **state)
{
	struct cordon_err e;
	char big[1024];
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';

	/* longer than msg: cut at 511 bytes, NUL-terminated, no suffix */
	memset(&e, 0x5a, sizeof(e));
	assert_int_equal(cordon_err_set(&e, -ENOENT, "%s", big), -ENOENT);
	assert_int_equal(e.code, -ENOENT);
	assert_int_equal(strlen(e.msg), sizeof(e.msg) - 1);
	assert_int_equal(strspn(e.msg, "a"), sizeof(e.msg) - 1);

	/* fits, but the suffix does not: the suffix is cut, the message stays terminated */
	memset(&e, 0x5a, sizeof(e));
	cordon_err_set(&e, -ENOENT, "%.*s", 500, big);
	assert_int_equal(strlen(e.msg), sizeof(e.msg) - 1);
	assert_int_equal(strspn(e.msg, "a"), 500);
	assert_memory_equal(e.msg + 500, ": ", 2);
	assert_memory_equal(e.msg + 502, strerror(ENOENT), sizeof(e.msg) - 1 - 502);

	/* exactly 511: the message alone fills it */
	memset(&e, 0x5a, sizeof(e));
	cordon_err_set(&e, -ENOENT, "%.*s", 511, big);
	assert_int_equal(strlen(e.msg), 511);
	assert_int_equal(strspn(e.msg, "a"), 511);

	memset(&e, 0x5a, sizeof(e));
	cordon_err_setf(&e, -EINVAL, "%s", big);
	assert_int_equal(strlen(e.msg), sizeof(e.msg) - 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_set_suffix), cmocka_unit_test(test_setf_no_suffix),
		cmocka_unit_test(test_overwrite),  cmocka_unit_test(test_null_err),
		cmocka_unit_test(test_truncation),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
