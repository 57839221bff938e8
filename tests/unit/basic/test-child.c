/* basic/child: a child that ends in time is reaped with its status; one that does not is
 * killed at the deadline, not waited for. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "basic/child.h"
#include "basic/clock.h"

static pid_t spawn_exit(int code, unsigned sleep_s)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (sleep_s)
			sleep(sleep_s);
		_exit(code);
	}
	return pid;
}

static void test_ok_and_status(void **state)
{
	(void)state;
	assert_int_equal(child_wait_ok(spawn_exit(0, 0), 5000), 0);
	assert_int_equal(child_wait_ok(spawn_exit(3, 0), 5000), -EIO);
	int st = 0;
	assert_int_equal(child_wait_deadline(spawn_exit(7, 0), 5000, &st), 0);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 7);
}

static void test_deadline_kills(void **state)
{
	(void)state;
	pid_t pid = spawn_exit(0, 30);
	uint64_t t0 = now_ms();
	assert_int_equal(child_wait_deadline(pid, 100, NULL), -ETIMEDOUT);
	uint64_t took = now_ms() - t0;
	assert_true(took >= 100 && took < 5000);
	assert_int_equal(kill(pid, 0), -1); /* reaped: the pid is gone */
	assert_int_equal(errno, ESRCH);
}

static void test_not_our_child(void **state)
{
	(void)state;
	assert_int_equal(child_wait_deadline(1, 100, NULL), -ECHILD);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_ok_and_status),
	    cmocka_unit_test(test_deadline_kills),
	    cmocka_unit_test(test_not_our_child),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
