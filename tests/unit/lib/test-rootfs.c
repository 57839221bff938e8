/* rootfs_check_sandbox_path(): the gate for every user-given path inside a sandbox (binds,
 * file API). */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/rootfs.h"

static void test_allowed(void **state)
{
	static const char *const ok[] = {
		"/a", "/a/b", "/home/user/file.txt", "/tmp/x", "/.hidden", "/a/.b", "/a..b", "/...",
		"/a/..b", "/a/b..", "/procfs", "/proc.d", "/procx/y", "/devices", "/developer/x",
		"/sysroot", "/system", "/a/proc", "/a/dev/null", "/a/sys", "/PROC", "/Dev/x",
		"/a b/c", "/é",
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		struct cordon_err e = {};
		int r = rootfs_check_sandbox_path(ok[i], &e);
		if (r != 0)
			fail_msg("'%s' refused: %d %s", ok[i], r, e.msg);
		assert_int_equal(e.code, 0);
	}
}

static void test_refused(void **state)
{
	static const char *const bad[] = {
		"", "a", "a/b", "./a", "../a", "~/a", " /a",
		"/", "//", "///", "/a//b", "/a/", "//a",
		"/.", "/./a", "/a/.", "/a/./b",
		"/..", "/../a", "/a/..", "/a/../b", "/a/b/../../..",
		"/proc", "/proc/", "/proc/self", "/proc/1/root",
		"/dev", "/dev/", "/dev/x", "/dev/null", "/dev/shm/a",
		"/sys", "/sys/", "/sys/fs/cgroup",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct cordon_err e = {};
		int r = rootfs_check_sandbox_path(bad[i], &e);
		if (r != -EINVAL)
			fail_msg("'%s': %d, want -EINVAL", bad[i], r);
		assert_int_equal(e.code, -EINVAL);
		assert_true(e.msg[0] != '\0');
		/* and without an error object */
		assert_int_equal(rootfs_check_sandbox_path(bad[i], NULL), -EINVAL);
	}
	assert_int_equal(rootfs_check_sandbox_path(NULL, NULL), -EINVAL);
}

static void test_messages(void **state)
{
	struct cordon_err e = {};
	assert_int_equal(rootfs_check_sandbox_path("/proc/self", &e), -EINVAL);
	assert_non_null(strstr(e.msg, "/proc"));
	assert_int_equal(rootfs_check_sandbox_path("/a/../b", &e), -EINVAL);
	assert_non_null(strstr(e.msg, "/a/../b"));
	assert_int_equal(rootfs_check_sandbox_path("relative", &e), -EINVAL);
	assert_non_null(strstr(e.msg, "relative"));
}

/* Builds "/aaa…/aaa…" of exactly @len bytes with components of at most 200 bytes. */
static char *long_path(size_t len)
{
	char *p = malloc(len + 1);
	assert_non_null(p);
	for (size_t i = 0; i < len; i++)
		p[i] = i % 201 == 0 ? '/' : 'a';
	if (p[len - 1] == '/')
		p[len - 1] = 'a', p[len - 2] = '/';
	p[len] = '\0';
	assert_int_equal(strlen(p), len);
	return p;
}

static void test_length(void **state)
{
	char *ok = long_path(PATH_MAX - 1), *bad = long_path(PATH_MAX), *worse = long_path(100000);
	assert_int_equal(rootfs_check_sandbox_path(ok, NULL), 0);
	assert_int_equal(rootfs_check_sandbox_path(bad, NULL), -EINVAL);
	struct cordon_err e = {};
	assert_int_equal(rootfs_check_sandbox_path(worse, &e), -EINVAL);
	assert_int_equal(strlen(e.msg), sizeof(e.msg) - 1); /* cut, not overflowed */
	free(ok);
	free(bad);
	free(worse);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_allowed),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_messages),
		cmocka_unit_test(test_length),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
