/* The jail child of a threaded process finishes its setup whatever the other threads were
 * doing at the instant of clone() (issue 10: cordond's creates hung).
 *
 * cordond has a second thread (the pool's creator). glibc marks a thread that pthread_create()
 * has made but that has not run yet (setxid_futex = -1); setuid(), setresgid(), setgroups()
 * of a threaded process wait for every such thread to start (setxid_mark_thread). A child
 * cloned in that window has the mark in its copy of memory and no thread to clear it: with
 * glibc's setresgid() it waited in futex_wait for ever. Here the window is made certain: a
 * SCHED_FIFO main thread pinned to one CPU creates a SCHED_OTHER thread, which cannot run
 * before the main thread blocks, and clones the sandbox at once.
 *
 * The other half of the class is a lock another thread holds at clone() time: a thread
 * allocating without pause in the only arena (M_ARENA_MAX 1) while --rootfs sandboxes are
 * cloned; the child's opendir() (32 KiB of malloc) hung within a few rounds. That test can
 * only catch what it runs; check-child-calls.py checks every path of the child's code.
 * Needs root (the child takes its user namespace's root with setresgid): skips otherwise. */
#include <errno.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <cordon/cordon.h>

#include "sandbox-test.h"

#define SETUP_TIMEOUT_MS 10000
#define ROUNDS_IN_MALLOC 200

static int wake[2] = {-1, -1};

static void *idle_thread(void *arg)
{
	char c;
	return read(wake[0], &c, 1) < 0 ? NULL : arg;
}

/* Main thread: SCHED_FIFO on CPU 0 (reset for children); @ret_thread: SCHED_OTHER, not yet
 * run. -errno when the kernel or our rights refuse. */
static int create_unstarted_thread(pthread_t *ret_thread)
{
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(sched_getcpu() < 0 ? 0 : sched_getcpu(), &one);
	if (sched_setaffinity(0, sizeof(one), &one) < 0)
		return -errno;
	struct sched_param fifo = {.sched_priority = 1};
	if (sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &fifo) < 0)
		return -errno;
	pthread_attr_t attr;
	struct sched_param other = {.sched_priority = 0};
	pthread_attr_init(&attr);
	pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED);
	pthread_attr_setschedpolicy(&attr, SCHED_OTHER);
	pthread_attr_setschedparam(&attr, &other);
	int r = pthread_create(ret_thread, &attr, idle_thread, NULL);
	pthread_attr_destroy(&attr);
	return -r;
}

static void back_to_normal(void)
{
	struct sched_param other = {.sched_priority = 0};
	cpu_set_t all;
	CPU_ZERO(&all);
	for (int i = 0; i < CPU_SETSIZE; i++)
		CPU_SET(i, &all);
	sched_setscheduler(0, SCHED_OTHER, &other);
	sched_setaffinity(0, sizeof(all), &all);
}

static void one_round(void)
{
	struct cordon_spec spec;
	struct cordon_sandbox *sb = NULL;
	struct cordon_err err = {};
	char *argv[] = {"/bin/true", NULL};
	pthread_t t;

	cordon_spec_init(&spec);
	spec.argv = argv;
	spec.timeout_ms = SETUP_TIMEOUT_MS;
	int r = create_unstarted_thread(&t);
	if (r < 0) {
		back_to_normal();
		print_message("skip: no SCHED_FIFO or affinity here: %s\n", strerror(-r));
		skip();
	}
	r = cordon_sandbox_start(&spec, &sb, &err);
	back_to_normal();
	assert_int_equal(write(wake[1], "x", 1), 1);
	pthread_join(t, NULL);
	if (r < 0)
		fail_msg("start: %s", err.msg);
	r = finish_within(sb, SETUP_TIMEOUT_MS, &err);
	if (r == -ETIMEDOUT)
		fail_msg("the jail child did not finish its setup in %d ms: it hangs", SETUP_TIMEOUT_MS);
	if (r < 0)
		fail_msg("setup: %s", err.msg);
	cordon_sandbox_setup_close(sb);
	struct cordon_result res;
	assert_int_equal(cordon_sandbox_wait(sb, -1, &res), 0);
	assert_int_equal(res.exit_code, 0);
	cordon_sandbox_free(sb);
}

static void test_clone_beside_an_unstarted_thread(void **state)
{
	need_root();
	assert_int_equal(pipe(wake), 0);
	/* A few rounds: the first alone hangs the unfixed code every time on an idle machine. */
	for (int i = 0; i < 3; i++)
		one_round();
	close(wake[0]);
	close(wake[1]);
}

/* ---- a lock of malloc's held by another thread at clone() time ---- */

static volatile int hammering;

/* Allocations too large for the per-thread cache, so each takes the arena's lock. */
static void *hammer_thread(void *arg)
{
	while (hammering) {
		void *p = malloc(40000);
		if (p)
			*(volatile char *)p = 1;
		free(p);
	}
	return arg;
}

/* One arena for every thread, so that the hammer's lock is the one the child would take: a
 * --rootfs child that called opendir() (which allocates 32 KiB) hung here when cloned while
 * the hammer held it. Many rounds: each clone lands in the lock's hold with some chance. */
static void test_clone_beside_a_thread_in_malloc(void **state)
{
	struct cordon_err err = {};
	char *argv[] = {"/bin/true", NULL};
	pthread_t t;

	need_root();
	if (mallopt(M_ARENA_MAX, 1) != 1) {
		print_message("skip: malloc is not glibc's here (a sanitizer's allocator)\n");
		skip();
	}
	hammering = 1;
	assert_int_equal(pthread_create(&t, NULL, hammer_thread, NULL), 0);
	for (int i = 0; i < ROUNDS_IN_MALLOC; i++) {
		struct cordon_spec spec;
		struct cordon_sandbox *sb = NULL;
		cordon_spec_init(&spec);
		spec.argv = argv;
		spec.rootfs = "/";
		spec.runtime = "jail"; /* the jail child is what this tests (auto may be gvisor) */
		int r = cordon_sandbox_start(&spec, &sb, &err);
		if (r < 0)
			fail_msg("start: %s", err.msg);
		r = finish_within(sb, SETUP_TIMEOUT_MS, &err);
		if (r == -ETIMEDOUT)
			fail_msg("round %d: the jail child did not finish its setup in %d ms: it hangs",
				 i, SETUP_TIMEOUT_MS);
		if (r < 0)
			fail_msg("setup: %s", err.msg);
		cordon_sandbox_setup_close(sb);
		struct cordon_result res;
		assert_int_equal(cordon_sandbox_wait(sb, -1, &res), 0);
		assert_int_equal(res.exit_code, 0);
		cordon_sandbox_free(sb);
	}
	hammering = 0;
	pthread_join(t, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_clone_beside_an_unstarted_thread),
		cmocka_unit_test(test_clone_beside_a_thread_in_malloc),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
