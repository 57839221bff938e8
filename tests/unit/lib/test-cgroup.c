/* cgroup: limits written and read back, attach, stats, kill, free, a child joining by
 * itself, and the freezer. Needs root and a cgroup v1 or v2 hierarchy with memory, pids and cpu; makes real
 * cgroups named cordon-unit-<pid>-<n> under cordon/ and removes them. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "basic/fileio.h"
#include "lib/cgroup.h"

#define ROOT "/sys/fs/cgroup"

static char name[64];
static enum cgroup_mode mode;
/* What a test made, for the teardown to remove when an assertion cut the test short: a
 * failed test must not leave cgroups or processes on the host. */
static struct cgroup *cg, *cg2;
static pid_t worker;

static int teardown(void **state)
{
	if (worker > 0) {
		kill(worker, SIGKILL);
		waitpid(worker, NULL, 0);
		worker = 0;
	}
	cg = cgroup_free(cg);
	cg2 = cgroup_free(cg2);
	return 0;
}

static bool available(void)
{
	if (geteuid() != 0) {
		print_message("skip: making cgroups needs root\n");
		return false;
	}
	mode = cgroup_detect();
	if (mode == CGROUP_NONE) {
		print_message("skip: no cgroup v2 or v1 hierarchy with memory, pids and cpu\n");
		return false;
	}
	static int n;
	snprintf(name, sizeof(name), "cordon-unit-%d-%d", (int)getpid(), n++);
	return true;
}

/* The sandbox's directory for the controller @ctl ("memory", "pids", "cpu"). */
static void dir_of(const char *ctl, char *buf, size_t size)
{
	if (mode == CGROUP_V2)
		snprintf(buf, size, ROOT "/cordon/%s", name);
	else
		snprintf(buf, size, ROOT "/%s/cordon/%s", ctl, name);
}

static uint64_t read_num(const char *ctl, const char *file)
{
	char dir[256], path[320];
	uint64_t v = 0;
	dir_of(ctl, dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	int r = read_u64_at(AT_FDCWD, path, &v);
	if (r < 0)
		fail_msg("read %s: %s", path, strerror(-r));
	return v;
}

static void read_str(const char *ctl, const char *file, char *buf, size_t size)
{
	char dir[256], path[320];
	dir_of(ctl, dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	if (read_file_at(AT_FDCWD, path, buf, size) < 0)
		fail_msg("read %s: %m", path);
}

static bool dir_exists(const char *ctl)
{
	char dir[256];
	dir_of(ctl, dir, sizeof(dir));
	return access(dir, F_OK) == 0;
}

static bool procs_has(const char *ctl, pid_t pid)
{
	char buf[8192], want[32];
	read_str(ctl, "cgroup.procs", buf, sizeof(buf));
	snprintf(want, sizeof(want), "%d", (int)pid);
	for (char *l = strtok(buf, "\n"); l; l = strtok(NULL, "\n"))
		if (strcmp(l, want) == 0)
			return true;
	return false;
}

static void check_limits(const struct cgroup_limits *lim)
{
	char buf[128], want[128];
	uint64_t quota = (uint64_t)lim->cpus_milli * 100;

	if (mode == CGROUP_V2) {
		assert_int_equal(read_num("memory", "memory.max"), lim->memory_bytes);
		assert_int_equal(read_num("pids", "pids.max"), lim->pids);
		read_str("cpu", "cpu.max", buf, sizeof(buf));
		snprintf(want, sizeof(want), "%" PRIu64 " 100000\n", quota);
		assert_string_equal(buf, want);
		if (access(ROOT "/cordon/memory.swap.max", F_OK) == 0)
			assert_int_equal(read_num("memory", "memory.swap.max"), 0);
	} else {
		assert_int_equal(read_num("memory", "memory.limit_in_bytes"), lim->memory_bytes);
		assert_int_equal(read_num("pids", "pids.max"), lim->pids);
		assert_int_equal(read_num("cpu", "cpu.cfs_period_us"), 100000);
		assert_int_equal(read_num("cpu", "cpu.cfs_quota_us"), quota);
	}
}

static void test_create_limits_free(void **state)
{
	if (!available())
		skip();
	struct cgroup_limits lim = {.memory_bytes = 64 << 20, .cpus_milli = 500, .pids = 32};
	struct cordon_err e = {};

	int r = cgroup_create(name, &lim, &cg, &e);
	if (r < 0)
		fail_msg("cgroup_create: %s", e.msg);
	assert_non_null(cg);
	assert_true(dir_exists("memory"));
	assert_true(dir_exists("pids"));
	assert_true(dir_exists("cpu"));
	check_limits(&lim);

	/* changed in place: lower memory, more CPU and pids */
	lim = (struct cgroup_limits){.memory_bytes = 32 << 20, .cpus_milli = 2000, .pids = 100};
	r = cgroup_set_limits(cg, &lim, &e);
	if (r < 0)
		fail_msg("cgroup_set_limits: %s", e.msg);
	check_limits(&lim);

	if (mode == CGROUP_V1)
		assert_int_equal(cgroup_clone_fd(cg), -1);
	else
		assert_true(cgroup_clone_fd(cg) >= 0);

	assert_null(cg = cgroup_free(cg));
	assert_false(dir_exists("memory"));
	assert_false(dir_exists("pids"));
	assert_false(dir_exists("cpu"));
	assert_null(cgroup_free(NULL));
}

/* Raising the memory limit, as claiming a pooled sandbox with a larger memory_mb does. On v1
 * memory.limit_in_bytes may never exceed memory.memsw.limit_in_bytes, so the order of the two
 * writes matters. */
static void test_raise_memory(void **state)
{
	if (!available())
		skip();
	struct cgroup_limits lim = {.memory_bytes = 64 << 20, .cpus_milli = 500, .pids = 32};
	struct cordon_err e = {};
	assert_int_equal(cgroup_create(name, &lim, &cg, &e), 0);
	lim.memory_bytes = 512 << 20;
	int r = cgroup_set_limits(cg, &lim, &e);
	if (r < 0)
		fail_msg("cgroup_set_limits 64 MiB -> 512 MiB: %s", e.msg);
	check_limits(&lim);
	if (mode == CGROUP_V1 && access(ROOT "/memory/memory.memsw.limit_in_bytes", F_OK) == 0)
		assert_int_equal(read_num("memory", "memory.memsw.limit_in_bytes"), lim.memory_bytes);
	cg = cgroup_free(cg);
}

/* Re-creating a name whose directory was left behind reuses it. */
static void test_create_existing(void **state)
{
	if (!available())
		skip();
	struct cgroup_limits lim = {.memory_bytes = 32 << 20, .cpus_milli = 100, .pids = 8};
	assert_int_equal(cgroup_create(name, &lim, &cg, NULL), 0);
	lim.pids = 9;
	assert_int_equal(cgroup_create(name, &lim, &cg2, NULL), 0);
	check_limits(&lim);
	cg2 = cgroup_free(cg2);
	assert_false(dir_exists("pids"));
	cg = cgroup_free(cg);
}

/* A child that, once told, burns some CPU and touches 8 MiB, then waits to be killed. */
static pid_t start_worker(int *ret_go, int *ret_ready)
{
	int go[2], ready[2];
	assert_int_equal(pipe2(go, O_CLOEXEC), 0);
	assert_int_equal(pipe2(ready, O_CLOEXEC), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char c;
		if (read(go[0], &c, 1) != 1)
			_exit(1);
		struct timespec t0, t;
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
		do
			clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
		while ((t.tv_sec - t0.tv_sec) * 1000000000L + t.tv_nsec - t0.tv_nsec < 50000000L);
		size_t len = 8 << 20;
		char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			_exit(1);
		memset(m, 1, len);
		if (write(ready[1], "r", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(go[0]);
	close(ready[1]);
	*ret_go = go[1];
	*ret_ready = ready[0];
	return pid;
}

static void test_attach_stats_kill(void **state)
{
	if (!available())
		skip();
	struct cgroup_limits lim = {.memory_bytes = 256 << 20, .cpus_milli = 1000, .pids = 16};
	struct cordon_err e = {};
	assert_int_equal(cgroup_create(name, &lim, &cg, &e), 0);

	int go, ready;
	pid_t pid = worker = start_worker(&go, &ready);
	int r = cgroup_attach(cg, pid, &e);
	if (r < 0)
		fail_msg("cgroup_attach: %s", e.msg);
	assert_true(procs_has("memory", pid));
	assert_true(procs_has("pids", pid));
	assert_true(procs_has("cpu", pid));
	assert_int_equal(read_num("pids", "pids.current"), 1);

	char c;
	assert_int_equal(write(go, "g", 1), 1);
	assert_int_equal(read(ready, &c, 1), 1);

	struct cgroup_stats st = {.oom_kills = 99};
	assert_int_equal(cgroup_stats(cg, &st), 0);
	assert_int_equal(st.oom_kills, 0);
	/* 50 ms of CPU at least, counted in this cgroup */
	if (st.cpu_usec < 40000)
		fail_msg("cpu_usec %" PRIu64 ", want >= 40000", st.cpu_usec);
	/* peak: 0 only where the kernel cannot tell (v2 before 5.19) */
	if (st.peak_memory_bytes != 0 || mode == CGROUP_V1)
		assert_true(st.peak_memory_bytes >= 8 << 20);

	int r_kill = cgroup_kill(cg);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	worker = 0;
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGKILL);
	assert_false(procs_has("pids", pid));
	/* one pass, no waiting: it signalled the only process (v2 with cgroup.kill says 0) */
	if (r_kill < 0 || r_kill > 1)
		fail_msg("cgroup_kill: %d, though there was one process to kill", r_kill);
	/* nothing left: killing again is a no-op */
	assert_int_equal(cgroup_kill(cg), 0);

	cg = cgroup_free(cg);
	assert_false(dir_exists("memory"));
	assert_false(dir_exists("pids"));
	close(go);
	close(ready);
}

/* cgroup_free() kills what is left before removing the directories. */
static void test_free_kills(void **state)
{
	if (!available())
		skip();
	struct cgroup_limits lim = {.memory_bytes = 64 << 20, .cpus_milli = 1000, .pids = 16};
	assert_int_equal(cgroup_create(name, &lim, &cg, NULL), 0);
	int go, ready;
	pid_t pid = worker = start_worker(&go, &ready);
	assert_int_equal(cgroup_attach(cg, pid, NULL), 0);
	cg = cgroup_free(cg);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	worker = 0;
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGKILL);
	assert_false(dir_exists("pids"));
	close(go);
	close(ready);
}

/* The pids limit holds: with pids.max 1 the attached process cannot fork. */
static void test_pids_limit(void **state)
{
	if (!available())
		skip();
	struct cgroup_limits lim = {.memory_bytes = 64 << 20, .cpus_milli = 1000, .pids = 1};
	assert_int_equal(cgroup_create(name, &lim, &cg, NULL), 0);
	int go[2], res[2];
	assert_int_equal(pipe2(go, O_CLOEXEC), 0);
	assert_int_equal(pipe2(res, O_CLOEXEC), 0);
	pid_t pid = worker = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char c;
		if (read(go[0], &c, 1) != 1)
			_exit(1);
		pid_t g = fork();
		if (g == 0)
			_exit(0);
		int err = g < 0 ? errno : 0;
		if (write(res[1], &err, sizeof(err)) != sizeof(err))
			_exit(1);
		_exit(0);
	}
	assert_int_equal(cgroup_attach(cg, pid, NULL), 0);
	assert_int_equal(write(go[1], "g", 1), 1);
	int err = -1;
	assert_int_equal(read(res[0], &err, sizeof(err)), sizeof(err));
	assert_int_equal(err, EAGAIN);
	waitpid(pid, NULL, 0);
	worker = 0;
	cg = cgroup_free(cg);
	close(go[0]), close(go[1]), close(res[0]), close(res[1]);
}

/* v1: the child writes itself into every hierarchy through fds the parent opened. */
static void test_join_self(void **state)
{
	if (!available())
		skip();
	struct cgroup_limits lim = {.memory_bytes = 64 << 20, .cpus_milli = 1000, .pids = 16};
	assert_int_equal(cgroup_create(name, &lim, &cg, NULL), 0);
	int fds[CGROUP_MAX_JOIN_FDS];
	size_t n = 99;
	assert_int_equal(cgroup_open_join_fds(cg, fds, &n), 0);
	if (mode == CGROUP_V2) {
		/* v2 joins with clone3(CLONE_INTO_CGROUP) on cgroup_clone_fd() instead */
		assert_int_equal(n, 0);
		cg = cgroup_free(cg);
		print_message("skip: cgroup v2 has no join fds (CLONE_INTO_CGROUP)\n");
		skip();
	}
	assert_true(n >= 3 && n <= CGROUP_MAX_JOIN_FDS); /* memory, pids, cpu (+ cpuacct) */
	for (size_t i = 0; i < n; i++)
		assert_true(fcntl(fds[i], F_GETFD) & FD_CLOEXEC);

	int joined[2], go[2];
	assert_int_equal(pipe2(joined, O_CLOEXEC), 0);
	assert_int_equal(pipe2(go, O_CLOEXEC), 0);
	pid_t pid = worker = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int r = cgroup_join_self(fds, n);
		char c = r == 0 ? 'j' : 'x';
		if (write(joined[1], &c, 1) != 1 || read(go[0], &c, 1) != 1)
			_exit(1);
		_exit(0);
	}
	char c;
	assert_int_equal(read(joined[0], &c, 1), 1);
	assert_int_equal(c, 'j');
	assert_true(procs_has("memory", pid));
	assert_true(procs_has("pids", pid));
	assert_true(procs_has("cpu", pid));
	assert_false(procs_has("pids", getpid()));
	assert_int_equal(write(go[1], "g", 1), 1);
	waitpid(pid, NULL, 0);
	worker = 0;
	for (size_t i = 0; i < n; i++)
		close(fds[i]);
	cg = cgroup_free(cg);
	close(joined[0]), close(joined[1]), close(go[0]), close(go[1]);
}

static bool stale_ours(const char *n, void *data)
{
	return strcmp(n, data) == 0;
}

/* The sweep removes what a dead process left behind, and only what it is told to. */
static void test_sweep(void **state)
{
	if (!available())
		skip();
	struct cgroup_limits lim = {.memory_bytes = 64 << 20, .cpus_milli = 1000, .pids = 16};
	char keep[64];
	assert_int_equal(cgroup_create(name, &lim, &cg, NULL), 0);
	snprintf(keep, sizeof(keep), "%s", name);
	assert_true(available()); /* a second name */
	assert_int_equal(cgroup_create(name, &lim, &cg2, NULL), 0);
	assert_int_equal(cgroup_sweep(stale_ours, name), 0);
	assert_false(dir_exists("pids"));
	assert_false(dir_exists("memory"));
	cg2 = cgroup_free(cg2); /* already gone: must not fail or crash */
	snprintf(name, sizeof(name), "%s", keep);
	assert_true(dir_exists("pids"));
	cg = cgroup_free(cg);
	assert_false(dir_exists("pids"));
}

/* A process counting in shared memory: frozen, the count stands still; thawed, it goes on;
 * killed while frozen, it dies (v1 thaws for the kill). */
static void test_freeze(void **state)
{
	if (!available())
		skip();
	struct cgroup_limits lim = {.memory_bytes = 64 << 20, .cpus_milli = 1000, .pids = 16};
	struct cordon_err e = {};
	assert_int_equal(cgroup_create(name, &lim, &cg, &e), 0);
	volatile uint64_t *n = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(n != MAP_FAILED);
	pid_t pid = worker = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		for (;;)
			(*n)++;
	assert_int_equal(cgroup_attach(cg, pid, &e), 0);
	struct timespec ms50 = {0, 50 * 1000 * 1000};
	nanosleep(&ms50, NULL);
	int r = cgroup_freeze(cg, true);
	if (r == -EOPNOTSUPP) {
		print_message("skip: no freezer here\n");
		munmap((void *)n, 4096);
		skip();
	}
	assert_int_equal(r, 0);
	uint64_t a = *n;
	nanosleep(&ms50, NULL);
	assert_true(*n == a); /* frozen: not one more step */
	assert_int_equal(cgroup_freeze(cg, true), 0); /* again: still 0 */
	assert_int_equal(cgroup_freeze(cg, false), 0);
	nanosleep(&ms50, NULL);
	assert_true(*n > a);
	assert_int_equal(cgroup_freeze(cg, true), 0);
	cgroup_kill(cg);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	worker = 0;
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	munmap((void *)n, 4096);
	cg = cgroup_free(cg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_create_limits_free, teardown),
		cmocka_unit_test_teardown(test_raise_memory, teardown),
		cmocka_unit_test_teardown(test_create_existing, teardown),
		cmocka_unit_test_teardown(test_attach_stats_kill, teardown),
		cmocka_unit_test_teardown(test_free_kills, teardown),
		cmocka_unit_test_teardown(test_pids_limit, teardown),
		cmocka_unit_test_teardown(test_join_self, teardown),
		cmocka_unit_test_teardown(test_sweep, teardown),
		cmocka_unit_test_teardown(test_freeze, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
