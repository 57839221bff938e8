/* The gvisor runtime's pause and resume (runsc pause/resume): a one-shot sandbox that prints
 * a line every 50 ms prints nothing while paused and goes on after resume; both answer -EOPNOTSUPP
 * for the jail. Skips where gvisor cannot run (not root, no runsc). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "runtime/runtime.h"

/* Reads what is there within @ms; returns the byte count. */
static size_t drain(int fd, int ms)
{
	char buf[4096];
	size_t total = 0;
	struct pollfd p = {fd, POLLIN, 0};
	while (poll(&p, 1, ms) > 0) {
		ssize_t n = read(fd, buf, sizeof(buf));
		if (n <= 0)
			break;
		total += (size_t)n;
		ms = 0;
	}
	return total;
}

static void test_pause_resume(void **state)
{
	struct cordon_err err = {};
	const char *name;
	if (cordon_runtime_resolve("gvisor", &name, &err) < 0) {
		print_message("skip: %s\n", err.msg);
		skip();
	}
	char *argv[] = {"/bin/sh", "-c", "while :; do echo tick; sleep 0.05; done", NULL};
	int out[2];
	assert_int_equal(pipe2(out, O_CLOEXEC), 0);
	struct cordon_spec spec;
	cordon_spec_init(&spec);
	spec.runtime = "gvisor";
	spec.argv = argv;
	spec.stdio[1] = out[1];
	spec.timeout_ms = 60000;
	struct cordon_sandbox *sb = NULL;
	int r = cordon_sandbox_create(&spec, &sb, &err);
	if (r < 0)
		fail_msg("create: %s", err.msg);
	close(out[1]);
	assert_true(drain(out[0], 5000) > 0); /* it runs */
	assert_int_equal(cordon_sandbox_pause(sb), 0);
	drain(out[0], 100); /* a line on its way when the pause came */
	assert_int_equal(drain(out[0], 700), 0);
	assert_int_equal(cordon_sandbox_resume(sb), 0);
	assert_true(drain(out[0], 3000) > 0);
	cordon_sandbox_kill(sb);
	struct cordon_result res;
	assert_int_equal(cordon_sandbox_wait(sb, -1, &res), 0);
	cordon_sandbox_free(sb);
	close(out[0]);
}

static void test_jail_has_no_pause(void **state)
{
	char *argv[] = {"/bin/true", NULL};
	struct cordon_spec spec;
	cordon_spec_init(&spec);
	spec.runtime = "jail";
	spec.argv = argv;
	struct cordon_sandbox *sb = NULL;
	struct cordon_err err = {};
	if (cordon_sandbox_create(&spec, &sb, &err) < 0) {
		print_message("skip: %s\n", err.msg);
		skip();
	}
	assert_int_equal(cordon_sandbox_pause(sb), -EOPNOTSUPP);
	assert_int_equal(cordon_sandbox_resume(sb), -EOPNOTSUPP);
	struct cordon_result res;
	assert_int_equal(cordon_sandbox_wait(sb, -1, &res), 0);
	cordon_sandbox_free(sb);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_pause_resume),
	    cmocka_unit_test(test_jail_has_no_pause),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
