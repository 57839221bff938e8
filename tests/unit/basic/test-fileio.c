/* fileio: the /proc and /sys helpers over real files in a private temporary directory, and
 * write_all()/read_exact() over socketpairs. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "basic/fileio.h"

struct tmp {
	char path[64];
	int dirfd;
};

static int tmp_setup(void **state)
{
	struct tmp *t = calloc(1, sizeof(*t));
	if (!t)
		return -1;
	snprintf(t->path, sizeof(t->path), "/tmp/cordon-test-fileio-XXXXXX");
	if (!mkdtemp(t->path))
		return -1;
	t->dirfd = open(t->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (t->dirfd < 0)
		return -1;
	*state = t;
	return 0;
}

static int tmp_teardown(void **state)
{
	struct tmp *t = *state;
	char cmd[128];
	close(t->dirfd);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t->path);
	int r = system(cmd);
	free(t);
	return r == 0 ? 0 : -1;
}

/* Creates @name under the test directory with exactly @content. */
static void put(struct tmp *t, const char *name, const char *content)
{
	int fd = openat(t->dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	size_t len = strlen(content);
	assert_int_equal(write(fd, content, len), (ssize_t)len);
	close(fd);
}

static void test_write_read(void **state)
{
	struct tmp *t = *state;
	char buf[64];

	put(t, "f", "");
	assert_int_equal(write_file_at(t->dirfd, "f", "hello\n"), 0);
	assert_int_equal(read_file_at(t->dirfd, "f", buf, sizeof(buf)), 6);
	assert_string_equal(buf, "hello\n");

	/* absolute path, dirfd ignored */
	char abs[128];
	snprintf(abs, sizeof(abs), "%s/f", t->path);
	assert_int_equal(read_file_at(AT_FDCWD, abs, buf, sizeof(buf)), 6);
	assert_string_equal(buf, "hello\n");
	assert_int_equal(read_file_at(-1, abs, buf, sizeof(buf)), 6);

	/* an empty file reads as "" */
	put(t, "empty", "");
	memset(buf, 'x', sizeof(buf));
	assert_int_equal(read_file_at(t->dirfd, "empty", buf, sizeof(buf)), 0);
	assert_string_equal(buf, "");
}

static void test_read_truncates(void **state)
{
	struct tmp *t = *state;
	char buf[8];

	put(t, "long", "0123456789abcdef");
	memset(buf, 'x', sizeof(buf));
	assert_int_equal(read_file_at(t->dirfd, "long", buf, 4), 3);
	assert_string_equal(buf, "012");
	assert_int_equal(buf[4], 'x'); /* nothing written past @size */
	assert_int_equal(read_file_at(t->dirfd, "long", buf, 1), 0);
	assert_string_equal(buf, "");
	assert_int_equal(read_file_at(t->dirfd, "long", buf, sizeof(buf)), 7);
	assert_string_equal(buf, "0123456");
}

static void test_errors(void **state)
{
	struct tmp *t = *state;
	char buf[16];

	assert_int_equal(read_file_at(t->dirfd, "absent", buf, sizeof(buf)), -ENOENT);
	/* write_file_at never creates: it is for files the kernel provides */
	assert_int_equal(write_file_at(t->dirfd, "absent", "1"), -ENOENT);
	assert_int_equal(faccessat(t->dirfd, "absent", F_OK, 0), -1);
	assert_int_equal(mkdirat(t->dirfd, "d", 0700), 0);
	assert_int_equal(read_file_at(t->dirfd, "d", buf, sizeof(buf)), -EISDIR);
	assert_int_equal(write_file_at(t->dirfd, "d", "1"), -EISDIR);
	assert_int_equal(read_file_at(-1, "relative", buf, sizeof(buf)), -EBADF);

	/* a kernel file that refuses the value: the errno comes back */
	int r = write_file_at(AT_FDCWD, "/proc/self/oom_score_adj", "not a number");
	assert_int_equal(r, -EINVAL);
}

static void test_u64(void **state)
{
	struct tmp *t = *state;
	static const struct {
		const char *content;
		uint64_t want;
	} ok[] = {
		{"0\n", 0},
		{"42\n", 42},
		{"42", 42},
		{"max\n", UINT64_MAX},
		{"max", UINT64_MAX},
		{"18446744073709551615\n", UINT64_MAX},
		{"9223372036854771712\n", 9223372036854771712ULL}, /* v1 "unlimited" memory */
	};
	static const char *const bad[] = {"", "\n", "abc\n", "18446744073709551616\n", "ma\n"};

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		uint64_t v = 1;
		put(t, "n", ok[i].content);
		assert_int_equal(read_u64_at(t->dirfd, "n", &v), 0);
		assert_int_equal(v, ok[i].want);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint64_t v = 1;
		put(t, "n", bad[i]);
		if (read_u64_at(t->dirfd, "n", &v) != -EINVAL)
			fail_msg("'%s' did not give -EINVAL", bad[i]);
		assert_int_equal(v, 1);
	}
	uint64_t v = 1;
	assert_int_equal(read_u64_at(t->dirfd, "absent", &v), -ENOENT);
	assert_int_equal(v, 1);

	/* a real kernel file */
	assert_int_equal(read_u64_at(AT_FDCWD, "/proc/sys/kernel/pid_max", &v), 0);
	assert_true(v >= 301);
}

static void test_keyed_u64(void **state)
{
	struct tmp *t = *state;
	uint64_t v;

	/* memory.events-like: "oom" must not match "oom_kill" nor the other way round */
	put(t, "events", "low 0\nhigh 11\nmax 22\noom 33\noom_kill 44\noom_group_kill 55");
	static const struct {
		const char *key;
		uint64_t want;
	} ok[] = {
		{"low", 0}, {"high", 11}, {"max", 22}, {"oom", 33}, {"oom_kill", 44},
		{"oom_group_kill", 55}, /* last line, no newline */
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		v = 1;
		assert_int_equal(read_keyed_u64_at(t->dirfd, "events", ok[i].key, &v), 0);
		assert_int_equal(v, ok[i].want);
	}
	static const char *const absent[] = {"lo", "oom_", "kill", "ax", "high 11", "x"};
	for (size_t i = 0; i < sizeof(absent) / sizeof(absent[0]); i++) {
		v = 1;
		if (read_keyed_u64_at(t->dirfd, "events", absent[i], &v) != -ENOENT)
			fail_msg("key '%s' was found", absent[i]);
		assert_int_equal(v, 1);
	}

	/* a key in the middle of a line is not a key */
	put(t, "mid", "a b 1\nb 2\n");
	assert_int_equal(read_keyed_u64_at(t->dirfd, "mid", "b", &v), 0);
	assert_int_equal(v, 2);

	put(t, "empty", "");
	assert_int_equal(read_keyed_u64_at(t->dirfd, "empty", "x", &v), -ENOENT);
	assert_int_equal(read_keyed_u64_at(t->dirfd, "absent", "x", &v), -ENOENT);

	/* a real kernel file */
	assert_int_equal(read_keyed_u64_at(AT_FDCWD, "/proc/vmstat", "nr_free_pages", &v), 0);
	assert_true(v > 0);
}

static void test_write_all_read_exact(void **state)
{
	int sv[2];
	char buf[16];

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(write_all(sv[0], "abcdef", 6), 0);
	assert_int_equal(write_all(sv[0], "", 0), 0);
	assert_int_equal(read_exact(sv[1], buf, 4), 0);
	assert_memory_equal(buf, "abcd", 4);
	assert_int_equal(read_exact(sv[1], buf, 0), 0);
	close(sv[0]);
	/* two bytes left, eight asked for: early EOF */
	assert_int_equal(read_exact(sv[1], buf, 8), -EPIPE);
	assert_int_equal(read_exact(sv[1], buf, 1), -EPIPE);
	close(sv[1]);

	assert_int_equal(read_exact(-1, buf, 1), -EBADF);
	assert_int_equal(write_all(-1, buf, 1), -EBADF);

	/* the peer is gone: -EPIPE (with SIGPIPE ignored, as the binaries do) */
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	close(sv[1]);
	void (*old)(int) = signal(SIGPIPE, SIG_IGN);
	assert_int_equal(write_all(sv[0], "x", 1), -EPIPE);
	signal(SIGPIPE, old);
	close(sv[0]);
}

/* More than a socket buffer each way, so that both loops see short transfers. */
static void test_large_transfer(void **state)
{
	const size_t len = 4u << 20;
	int sv[2];
	uint8_t *out = malloc(len), *in = malloc(len);

	assert_non_null(out);
	assert_non_null(in);
	for (size_t i = 0; i < len; i++)
		out[i] = (uint8_t)(i * 2654435761u >> 13);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(sv[1]);
		_exit(write_all(sv[0], out, len) == 0 ? 0 : 1);
	}
	close(sv[0]);
	assert_int_equal(read_exact(sv[1], in, len), 0);
	assert_memory_equal(in, out, len);
	assert_int_equal(read_exact(sv[1], in, 1), -EPIPE);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	close(sv[1]);
	free(out);
	free(in);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_write_read, tmp_setup, tmp_teardown),
		cmocka_unit_test_setup_teardown(test_read_truncates, tmp_setup, tmp_teardown),
		cmocka_unit_test_setup_teardown(test_errors, tmp_setup, tmp_teardown),
		cmocka_unit_test_setup_teardown(test_u64, tmp_setup, tmp_teardown),
		cmocka_unit_test_setup_teardown(test_keyed_u64, tmp_setup, tmp_teardown),
		cmocka_unit_test(test_write_all_read_exact),
		cmocka_unit_test(test_large_transfer),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
