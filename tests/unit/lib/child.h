/* Running a check in a forked child, for the mechanisms that change the calling process for
 * good (capabilities, rlimits, Landlock, namespaces).
 *
 *     static void body(int fd) { CHILD_CHECK(fd, getuid() == 0); ... }
 *     run_in_child(body);   // fails the cmocka test with the child's message, or skips
 *
 * The child reports through a pipe: nothing means success, "SKIP: why" a missing feature,
 * anything else the failed check. cmocka's asserts are not used in the child: they would
 * longjmp into the child's copy of the test runner. */
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHILD_CHECK(fd, cond)                                                                      \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			dprintf((fd), "%s:%d: %s (errno %d %s)", __FILE__, __LINE__, #cond, errno, \
				strerror(errno));                                                  \
			_exit(1);                                                                  \
		}                                                                                  \
	} while (0)

#define CHILD_SKIP(fd, ...)                                                                        \
	do {                                                                                       \
		dprintf((fd), "SKIP: " __VA_ARGS__);                                               \
		_exit(0);                                                                          \
	} while (0)

static inline void run_in_child(void (*body)(int fd))
{
	int p[2];
	char msg[1024];
	size_t len = 0;

	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(p[0]);
		body(p[1]);
		_exit(0);
	}
	close(p[1]);
	for (;;) {
		ssize_t n = read(p[0], msg + len, sizeof(msg) - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	msg[len] = '\0';
	close(p[0]);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (strncmp(msg, "SKIP: ", 6) == 0) {
		print_message("%s\n", msg);
		skip();
	}
	if (len > 0)
		fail_msg("child: %s", msg);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("child ended with status 0x%x and no message", st);
}
