/* Landlock in a forked child with no_new_privs: read everywhere, write only under the
 * writable directories. Skipped when the kernel has no Landlock. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "lib/landlock.h"
#include "child.h"

static char w[64], o[64];

static int setup(void **state)
{
	snprintf(w, sizeof(w), "/tmp/cordon-test-ll-w-XXXXXX");
	snprintf(o, sizeof(o), "/tmp/cordon-test-ll-o-XXXXXX");
	if (!mkdtemp(w) || !mkdtemp(o))
		return -1;
	/* a file that exists before the fence, in the directory that is not writable */
	char p[128];
	snprintf(p, sizeof(p), "%s/old", o);
	int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, "old\n", 4) != 4)
		return -1;
	close(fd);
	snprintf(p, sizeof(p), "%s/sub", w);
	return mkdir(p, 0755);
}

static int teardown(void **state)
{
	char cmd[200];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", w, o);
	return system(cmd) == 0 ? 0 : -1;
}

static int open_at(const char *dir, const char *name, int flags)
{
	char p[128];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return open(p, flags | O_CLOEXEC, 0644);
}

static void fenced(int fd)
{
	const char *writable[] = {w, "/nonexistent-is-ignored", NULL};
	struct cordon_err e = {};
	char p[128], q[128], buf[8];

	CHILD_CHECK(fd, prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0);
	int abi = landlock_apply(writable, &e);
	if (abi < 0)
		dprintf(fd, "landlock_apply: %s", e.msg), _exit(1);
	CHILD_CHECK(fd, abi == landlock_abi() && abi > 0);

	/* inside: create, write, mkdir, rename, unlink */
	int f = open_at(w, "new", O_WRONLY | O_CREAT);
	CHILD_CHECK(fd, f >= 0);
	CHILD_CHECK(fd, write(f, "x", 1) == 1);
	close(f);
	f = open_at(w, "sub/deep", O_WRONLY | O_CREAT);
	CHILD_CHECK(fd, f >= 0);
	close(f);
	snprintf(p, sizeof(p), "%s/dir", w);
	CHILD_CHECK(fd, mkdir(p, 0755) == 0);
	snprintf(p, sizeof(p), "%s/new", w);
	snprintf(q, sizeof(q), "%s/renamed", w);
	CHILD_CHECK(fd, rename(p, q) == 0);
	CHILD_CHECK(fd, unlink(q) == 0);

	/* elsewhere: reading works, no kind of write does */
	f = open_at(o, "old", O_RDONLY);
	CHILD_CHECK(fd, f >= 0);
	CHILD_CHECK(fd, read(f, buf, 4) == 4 && memcmp(buf, "old\n", 4) == 0);
	close(f);
	CHILD_CHECK(fd, open_at(o, "new", O_WRONLY | O_CREAT) < 0 && errno == EACCES);
	CHILD_CHECK(fd, open_at(o, "old", O_WRONLY) < 0 && errno == EACCES);
	CHILD_CHECK(fd, open_at(o, "old", O_RDWR) < 0 && errno == EACCES);
	snprintf(p, sizeof(p), "%s/dir", o);
	CHILD_CHECK(fd, mkdir(p, 0755) < 0 && errno == EACCES);
	snprintf(p, sizeof(p), "%s/old", o);
	CHILD_CHECK(fd, unlink(p) < 0 && errno == EACCES);
	snprintf(q, sizeof(q), "%s/link", o);
	CHILD_CHECK(fd, symlink("old", q) < 0 && errno == EACCES);
	if (abi >= 3)
		CHILD_CHECK(fd, truncate(p, 0) < 0 && errno == EACCES);
	/* moving a file out of the writable directory into the fenced one */
	f = open_at(w, "mv", O_WRONLY | O_CREAT);
	CHILD_CHECK(fd, f >= 0);
	close(f);
	snprintf(p, sizeof(p), "%s/mv", w);
	snprintf(q, sizeof(q), "%s/mv", o);
	CHILD_CHECK(fd, rename(p, q) < 0 && (errno == EACCES || errno == EXDEV));
	/* /tmp itself, the parent of both */
	CHILD_CHECK(fd, open("/tmp/cordon-test-ll-escape", O_WRONLY | O_CREAT | O_CLOEXEC, 0644) < 0 &&
			    errno == EACCES);
	/* the process can still execute what is outside */
	CHILD_CHECK(fd, access("/bin/sh", X_OK) == 0);
}

static void test_fence(void **state)
{
	int abi = landlock_abi();
	if (abi == 0) {
		print_message("skip: the kernel has no Landlock (or it is disabled)\n");
		skip();
	}
	print_message("Landlock ABI %d\n", abi);
	run_in_child(fenced);
	/* the parent is not fenced */
	int f = open_at(o, "after", O_WRONLY | O_CREAT);
	assert_true(f >= 0);
	close(f);
}

/* Without no_new_privs and CAP_SYS_ADMIN the kernel refuses to restrict. */
static void needs_nnp(int fd)
{
	const char *writable[] = {w, NULL};
	struct cordon_err e = {};
	if (geteuid() == 0) {
		/* leaving uid 0 drops every capability, CAP_SYS_ADMIN included */
		CHILD_CHECK(fd, setresuid(65534, 65534, 65534) == 0);
	}
	int r = landlock_apply(writable, &e);
	CHILD_CHECK(fd, r == -EPERM);
	CHILD_CHECK(fd, strstr(e.msg, "landlock") != NULL);
}

static void test_needs_nnp(void **state)
{
	if (landlock_abi() == 0) {
		print_message("skip: the kernel has no Landlock (or it is disabled)\n");
		skip();
	}
	run_in_child(needs_nnp);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fence),
		cmocka_unit_test(test_needs_nnp),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
