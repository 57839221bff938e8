/* The jail's child runs in its builder's memory until it execs (runtime/jail/spawn.c): what
 * that must not change.
 *
 * - The child reads nothing of the caller's spec: the spec may be gone as soon as the start
 *   returns. Here the caller overwrites every string of it (hostname, bind paths, the command)
 *   at once, and the sandbox still has what was asked.
 * - A sandbox does not die with the thread that built it (the child's parent-death signal is
 *   its spawner thread's, which lives as long as the process), yet dies with the process
 *   (tests/integration/test_leaks.py).
 * - The child is cloned into our memory (CLONE_VM) where the host can: after a start, writing
 *   64 MiB of the builder's heap takes no page faults (after a fork-like clone each page is
 *   copy-on-write and faults once).
 * - A process forked after a build builds too: the spawners in its copy of our memory have
 *   no threads there, and their pipes are ours.
 * Needs root (the child takes its user namespace's root): skips otherwise. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <cordon/cordon.h>

#include "basic/tree.h"
#include "sandbox-test.h"

#define SETUP_TIMEOUT_MS 10000

/* Where the child is a copy (spawn.c: not x86_64, or a build with AddressSanitizer). */
#if !defined(__x86_64__) || defined(__SANITIZE_ADDRESS__)
#define SPAWNS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SPAWNS 0
#endif
#endif
#ifndef SPAWNS
#define SPAWNS 1
#endif

static void need_spawn(void)
{
	if (!SPAWNS) {
		print_message("skip: the child is a copy here (not x86_64, or AddressSanitizer)\n");
		skip();
	}
}

/* A one-shot jail sandbox running @argv, on a setup deadline. */
static void one_shot_spec(struct cordon_spec *spec, char **argv)
{
	cordon_spec_init(spec);
	spec->runtime = "jail";
	spec->argv = argv;
	spec->timeout_ms = SETUP_TIMEOUT_MS;
}

/* Runs a started @sb to its end, which must be exit 0. */
static void run_to_end(struct cordon_sandbox *sb)
{
	struct cordon_err err = {};
	int r = finish_within(sb, SETUP_TIMEOUT_MS, &err);
	if (r < 0)
		fail_msg("setup: %s", r == -ETIMEDOUT ? "timed out" : err.msg);
	cordon_sandbox_setup_close(sb);
	struct cordon_result res;
	assert_int_equal(cordon_sandbox_wait(sb, -1, &res), 0);
	assert_int_equal(res.exit_code, 0);
}

/* Runs @sb to its end; its stdout (a pipe's read end, @out) into @buf. */
static void wait_output(struct cordon_sandbox *sb, int out, char *buf, size_t size)
{
	run_to_end(sb);
	ssize_t n = read(out, buf, size - 1);
	buf[n > 0 ? n : 0] = '\0';
}

static void test_spec_overwritten_after_start(void **state)
{
	need_root();
	char host_dir[] = "/tmp/cordon-spawn-XXXXXX";
	assert_non_null(mkdtemp(host_dir));
	assert_int_equal(chmod(host_dir, 0755), 0); /* the sandbox reads it as its "user" */
	char file[64];
	snprintf(file, sizeof(file), "%s/marker", host_dir);
	FILE *f = fopen(file, "w");
	assert_non_null(f);
	fputs("bound", f);
	fclose(f);

	/* Every string the spec points to lives in this buffer, overwritten after the start. */
	char strings[4][64];
	snprintf(strings[0], sizeof(strings[0]), "spawned-host");
	snprintf(strings[1], sizeof(strings[1]), "%s", host_dir);
	snprintf(strings[2], sizeof(strings[2]), "/mnt/shared");
	snprintf(strings[3], sizeof(strings[3]), "echo $(hostname) $(cat /mnt/shared/marker)");
	char *argv[] = {"/bin/sh", "-c", strings[3], NULL};
	int out[2];
	assert_int_equal(pipe(out), 0);

	struct cordon_spec spec;
	one_shot_spec(&spec, argv);
	spec.hostname = strings[0];
	spec.binds[0] = (struct cordon_bind){.host = strings[1], .sandbox = strings[2]};
	spec.n_binds = 1;
	spec.stdio[1] = out[1];
	struct cordon_sandbox *sb = NULL;
	struct cordon_err err = {};
	if (cordon_sandbox_start(&spec, &sb, &err) < 0)
		fail_msg("start: %s", err.msg);
	memset(strings, 'x', sizeof(strings));
	for (size_t i = 0; i < 4; i++)
		strings[i][sizeof(strings[i]) - 1] = '\0';
	memset(&spec, 0xa5, sizeof(spec));
	close(out[1]);

	char buf[256];
	wait_output(sb, out[0], buf, sizeof(buf));
	cordon_sandbox_free(sb);
	close(out[0]);
	unlink(file); /* before the check: a failure leaves nothing on the host either */
	rmdir(host_dir);
	assert_string_equal(buf, "spawned-host bound\n");
}

/* With no stdin given, the command's is /dev/null, whichever fds the child has free: its
 * /dev/null once opened at the lowest free fd, which could be 3, 4 or 5, where the sync
 * socket's or cordon-init's memfd's dup then went: PID 1's stdin was the setup socket (its
 * exec no longer closed it, and the host's setup never ended: a template build's RUN step
 * hung) or the memfd. As in a build step: the root an overlay the host makes (one tree in
 * the "go"), and the host's fds below 24 taken by files of ours that the child closes first
 * thing, so that what it keeps sits above them and 3-5 are free. */
static void test_stdin_unset_is_dev_null(void **state)
{
	need_root();
	char *argv[] = {"/bin/sh", "-c", "readlink /proc/self/fd/0", NULL};
	int p[2], fillers[24], n_fillers = 0;
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	int rd = fcntl(p[0], F_DUPFD_CLOEXEC, 40), wr = fcntl(p[1], F_DUPFD_CLOEXEC, 41);
	assert_true(rd >= 0 && wr >= 0);
	close(p[0]);
	close(p[1]);
	for (int fd; n_fillers < 24 && (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0 && fd < 24;)
		fillers[n_fillers++] = fd;
	/* A template build's step: the root an overlay the host makes, one tree in the "go". */
	char dir[] = "/tmp/cordon-stdin-XXXXXX", upper[64], work[64];
	assert_non_null(mkdtemp(dir));
	snprintf(upper, sizeof(upper), "%s/diff", dir);
	snprintf(work, sizeof(work), "%s/work", dir);
	assert_int_equal(mkdir(upper, 0755), 0);
	assert_int_equal(mkdir(work, 0755), 0);
	const char *lower[] = {"/"};
	struct cordon_overlay ov = {.lower = lower, .n_lower = 1, .upper = upper, .work = work,
				    .stage = dir};
	struct cordon_spec spec;
	one_shot_spec(&spec, argv);
	spec.overlay = &ov;
	spec.workdir = "/";
	spec.stdio[1] = spec.stdio[2] = wr; /* stdin: the -1 of cordon_spec_init() */
	struct cordon_sandbox *sb = NULL;
	struct cordon_err err = {};
	int r = cordon_sandbox_start(&spec, &sb, &err);
	while (n_fillers > 0)
		close(fillers[--n_fillers]);
	if (r < 0)
		fail_msg("start: %s", err.msg);
	close(wr);
	char buf[256];
	wait_output(sb, rd, buf, sizeof(buf));
	cordon_sandbox_free(sb);
	close(rd);
	(void)tree_remove_at(AT_FDCWD, dir, TREE_MAX_DEPTH);
	assert_string_equal(buf, "/dev/null\n");
}

struct built {
	struct cordon_sandbox *sb;
	int out;
	struct cordon_err err;
};

/* A thread that starts a sandbox and ends before the sandbox's command has run. */
static void *build_and_leave(void *arg)
{
	static char *argv[] = {"/bin/sh", "-c", "sleep 0.3; echo alive", NULL};
	struct built *b = arg;
	int out[2];
	if (pipe(out) < 0)
		return NULL;
	struct cordon_spec spec;
	one_shot_spec(&spec, argv);
	spec.stdio[1] = out[1];
	if (cordon_sandbox_start(&spec, &b->sb, &b->err) < 0)
		b->sb = NULL;
	close(out[1]);
	b->out = out[0];
	return b;
}

static void test_outlives_its_builder_thread(void **state)
{
	need_spawn(); /* a copy's parent-death signal is its builder thread's */
	need_root();
	struct built b = {.out = -1};
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, build_and_leave, &b), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	if (!b.sb)
		fail_msg("start: %s", b.err.msg);
	char buf[64];
	wait_output(b.sb, b.out, buf, sizeof(buf));
	assert_string_equal(buf, "alive\n");
	cordon_sandbox_free(b.sb);
	close(b.out);
}

static long minor_faults(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_minflt;
}

/* Starts a sandbox, then writes all of @heap: the minor faults of that write. After a
 * fork-like clone every page of ours is write-protected (copy-on-write) and faults at its
 * first write, whether or not the child has exec'd by then; in our own memory, none does. */
static long faults_writing_after_start(char *heap, size_t size, int value)
{
	char *argv[] = {"/bin/true", NULL};
	struct cordon_spec spec;
	one_shot_spec(&spec, argv);
	struct cordon_sandbox *sb = NULL;
	struct cordon_err err = {};
	if (cordon_sandbox_start(&spec, &sb, &err) < 0)
		fail_msg("start: %s", err.msg);
	long before = minor_faults();
	memset(heap, value, size);
	long faults = minor_faults() - before;
	run_to_end(sb);
	cordon_sandbox_free(sb);
	return faults;
}

static void test_no_copy_of_the_builder(void **state)
{
	need_spawn();
	need_root();
	size_t big = 64u << 20;
	char *heap = malloc(big);
	assert_non_null(heap);
	memset(heap, 1, big); /* every page ours and present */
	(void)faults_writing_after_start(heap, big, 2); /* the first: the spawner thread */
	long faults = faults_writing_after_start(heap, big, 3);
	print_message("minor faults writing 64 MiB after a start: %ld\n", faults);
	assert_true(faults < 64); /* a copy: 16,384 (or 32 huge pages split, and then more) */
	free(heap);
}

/* One-shot /bin/true to its end; 0 when it ran and exited 0. For a forked child: no cmocka. */
static int run_true(void)
{
	char *argv[] = {"/bin/true", NULL};
	struct cordon_spec spec;
	one_shot_spec(&spec, argv);
	struct cordon_sandbox *sb = NULL;
	struct cordon_err err = {};
	struct cordon_result res = {};
	if (cordon_sandbox_create(&spec, &sb, &err) < 0 || cordon_sandbox_wait(sb, -1, &res) < 0)
		return -1;
	cordon_sandbox_free(sb);
	return res.exit_code == 0 ? 0 : -1;
}

/* A process forked after a build builds on its own: the spawners it inherited in its copy of
 * memory have no threads in it, and their pipes lead to ours. */
static void test_builds_after_fork(void **state)
{
	need_spawn();
	need_root();
	assert_int_equal(run_true(), 0); /* a spawner, idle, in this process */
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(run_true() == 0 ? 0 : 1);
	int st = 0;
	for (int i = 0; i < 200 && waitpid(pid, &st, WNOHANG) == 0; i++)
		usleep(50 * 1000);
	if (waitpid(pid, &st, WNOHANG) == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		fail_msg("the forked process's build hangs");
	}
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_int_equal(run_true(), 0); /* and ours still work */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_builds_after_fork),
		cmocka_unit_test(test_spec_overwritten_after_start),
		cmocka_unit_test(test_stdin_unset_is_dev_null),
		cmocka_unit_test(test_outlives_its_builder_thread),
		cmocka_unit_test(test_no_copy_of_the_builder),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
