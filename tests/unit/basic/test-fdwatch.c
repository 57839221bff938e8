/* Tests of the watched-fd table (basic/fdwatch.h): counts per fd, and fd_close() refusing,
 * in debug builds, an fd that is still watched. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "basic/fdwatch.h"

static bool fd_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0;
}

static void test_counts(void **state)
{
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_false(fdwatch_has(fd));
	fdwatch_add(fd);
	fdwatch_add(fd); /* two events on one fd */
#ifndef NDEBUG
	assert_true(fdwatch_has(fd));
	fdwatch_del(fd);
	assert_true(fdwatch_has(fd));
#else
	fdwatch_del(fd);
#endif
	fdwatch_del(fd);
	assert_false(fdwatch_has(fd));
	errno = EXDEV;
	fd_close(fd);
	assert_int_equal(errno, EXDEV); /* kept */
	assert_false(fd_open(fd));
	fd_close(-1);
	fdwatch_add(FDWATCH_MAX + 5); /* beyond the table: ignored */
	assert_false(fdwatch_has(FDWATCH_MAX + 5));
}

/* The rule itself: unwatch, then close. A close of a watched fd aborts (debug builds). */
static void test_close_of_watched_fd_aborts(void **state)
{
#ifdef NDEBUG
	skip();
#else
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		close(2); /* the assertion's message is expected */
		fdwatch_add(fd);
		fd_close(fd);
		_exit(0);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), SIGABRT);
#endif
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_counts),
	    cmocka_unit_test(test_close_of_watched_fd_aborts),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
