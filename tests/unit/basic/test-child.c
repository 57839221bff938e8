/* basic/child: a child that ends in time is reaped with its status; one that does not is
 * killed at the deadline, not waited for. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
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

/* A group leader whose child sleeps on: the group variant kills both at the deadline, the
 * plain one only the leader. @ret_grandchild: the sleeper's pid, read from a pipe. */
static pid_t spawn_group(pid_t *ret_grandchild)
{
	int p[2];
	assert_int_equal(pipe(p), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		setpgid(0, 0);
		pid_t g = fork();
		if (g == 0) {
			sleep(30);
			_exit(0);
		}
		(void)!write(p[1], &g, sizeof(g));
		sleep(30);
		_exit(0);
	}
	close(p[1]);
	assert_int_equal(read(p[0], ret_grandchild, sizeof(*ret_grandchild)), sizeof(*ret_grandchild));
	close(p[0]);
	return pid;
}

/* Dead: no such pid, or a zombie that its reaper (init or a subreaper) has not reaped yet. */
static bool dead(pid_t pid)
{
	char path[64], buf[256];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return true;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *paren = strrchr(buf, ')');
	return !paren || paren[1] == '\0' || paren[2] == 'Z' || paren[2] == 'X';
}

static bool gone_within(pid_t pid, int ms)
{
	for (uint64_t end = now_ms() + (uint64_t)ms; now_ms() < end; usleep(10000))
		if (dead(pid))
			return true;
	return false;
}

static void test_group_deadline_kills_the_group(void **state)
{
	(void)state;
	pid_t g, pid = spawn_group(&g);
	assert_int_equal(child_wait_group_deadline(pid, 100, NULL), -ETIMEDOUT);
	assert_true(gone_within(g, 5000)); /* reaped by init once killed */
	pid = spawn_group(&g);
	assert_int_equal(child_wait_deadline(pid, 100, NULL), -ETIMEDOUT);
	assert_false(gone_within(g, 300)); /* the plain wait leaves the group alone */
	kill(g, SIGKILL);
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
	    cmocka_unit_test(test_group_deadline_kills_the_group),
	    cmocka_unit_test(test_not_our_child),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
