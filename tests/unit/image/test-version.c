/* Unit tests of the template store's versions (src/image/version.c, store.c): publish,
 * hold, replace, remove, gc, a holder's death, links that are not ours, and a store from
 * before versions. Each test has a store of its own ($CORDON_TEMPLATES, a mkdtemp directory);
 * no root needed. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "basic/cleanup.h"
#include "basic/tree.h"
#include "image/store.h"

static char root[64], store[PATH_MAX];

static int setup(void **state)
{
	snprintf(root, sizeof(root), "/tmp/cordon-version-test-XXXXXX");
	assert_non_null(mkdtemp(root));
	snprintf(store, sizeof(store), "%s/store", root);
	setenv(STORE_ENV, store, 1);
	return 0;
}

static int teardown(void **state)
{
	int fd = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	tree_remove_at(fd, root + strlen("/tmp/"), TREE_MAX_DEPTH);
	close(fd);
	return 0;
}

/* store_fill_fn: one file, "marker", holding the string given. */
static int fill_marker(int rootfd, json_t *meta, void *userdata, struct cordon_err *err)
{
	const char *text = userdata;
	int fd = openat(rootfd, "marker", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return 0;
}

static void publish(const char *name, const char *text)
{
	struct cordon_err err = {};
	int r = store_import(name, true, fill_marker, (void *)text, NULL, &err);
	if (r < 0)
		fail_msg("store_import %s: %s", name, err.msg);
}

static void marker_is(const struct store_version *v, const char *text)
{
	char p[PATH_MAX * 2], buf[64] = "";
	snprintf(p, sizeof(p), "%s/marker", v->rootfs);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_true(read(fd, buf, sizeof(buf) - 1) >= 0);
	close(fd);
	assert_string_equal(buf, text);
}

static bool exists(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0;
}

static unsigned n_versions(void)
{
	char p[PATH_MAX + 16];
	unsigned n = 0;
	snprintf(p, sizeof(p), "%s/.versions", store);
	DIR *d = opendir(p);
	struct dirent *de;
	while (d && (de = readdir(d)))
		n += de->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}

static void test_replace_keeps_the_held_version(void **state)
{
	struct store_version a, b;
	struct cordon_err err = {};
	publish("t", "one");
	assert_int_equal(store_version_open("t", &a, &err), 0);
	publish("t", "two");
	assert_int_equal(store_version_open("t", &b, &err), 0);
	assert_string_not_equal(a.id, b.id);
	marker_is(&a, "one");
	marker_is(&b, "two");
	assert_int_equal(n_versions(), 2);
	store_version_close(&a, false); /* its last holder: it goes */
	assert_false(exists(a.path));
	assert_int_equal(n_versions(), 1);
	store_version_close(&b, false); /* still named: it stays */
	assert_true(exists(b.path));
	store_version_close(&b, false); /* twice is nothing */
}

static void test_remove_unnames_at_once_and_the_data_goes_with_its_holder(void **state)
{
	struct store_version a, b;
	struct cordon_err err = {};
	struct store_gc g;
	char p[PATH_MAX];
	publish("t", "one");
	assert_int_equal(store_version_open("t", &a, &err), 0);
	assert_int_equal(store_remove("t", &err), 0);
	assert_int_equal(store_path("t", p, sizeof(p)), -ENOENT);
	assert_int_equal(store_version_open("t", &b, &err), -ENOENT);
	assert_int_equal(store_remove("t", &err), -ENOENT);
	marker_is(&a, "one");
	assert_int_equal(store_gc_versions(&g, &err), 0);
	assert_int_equal(g.removed, 0);
	assert_int_equal(g.in_use, 1);
	store_version_close(&a, false);
	assert_int_equal(n_versions(), 0);
}

static void test_a_dead_holder_holds_nothing(void **state)
{
	struct store_version a;
	struct cordon_err err = {};
	struct store_gc g;
	publish("t", "one");
	int pipefd[2];
	assert_int_equal(pipe(pipefd), 0);
	pid_t pid = fork();
	if (pid == 0) {
		close(pipefd[0]);
		if (store_version_open("t", &a, &err) < 0)
			_exit(1);
		(void)!write(pipefd[1], "h", 1);
		for (;;)
			pause(); /* until killed */
	}
	char c;
	close(pipefd[1]);
	assert_int_equal(read(pipefd[0], &c, 1), 1);
	publish("t", "two"); /* the old one is held by the child */
	assert_int_equal(n_versions(), 2);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	close(pipefd[0]);
	assert_int_equal(n_versions(), 2); /* no one released it: only gc can know */
	assert_int_equal(store_gc_versions(&g, &err), 0);
	assert_int_equal(g.removed, 1);
	assert_int_equal(g.in_use, 0);
	assert_true(g.bytes >= 3);
	assert_int_equal(n_versions(), 1);
}

static void test_links_that_are_not_ours_are_refused(void **state)
{
	struct store_version a;
	struct cordon_err err = {};
	char p[PATH_MAX + 16];
	json_t *meta = NULL;
	publish("t", "one");
	static const struct {
		const char *target;
		int code;
	} links[] = {{"/", -EINVAL}, {"..", -EINVAL}, {".versions", -EINVAL}, {".versions/t@xyz", -EINVAL},
		     {"t", -EINVAL}, {".versions/u@0000000000000000", -ENOENT} /* ours, dangling */};
	for (size_t i = 0; i < sizeof(links) / sizeof(*links); i++) {
		snprintf(p, sizeof(p), "%s/u", store);
		assert_int_equal(symlink(links[i].target, p), 0);
		assert_int_equal(store_version_open("u", &a, &err), links[i].code);
		assert_true(store_read("u", &meta, &err) < 0);
		assert_int_equal(store_remove("u", &err), 0); /* the link goes, nothing else */
		assert_false(exists(p));
	}
	assert_int_equal(store_version_open("t", &a, &err), 0);
	marker_is(&a, "one");
	store_version_close(&a, false);
}

static void test_a_store_from_before_versions(void **state)
{
	struct store_version a;
	struct cordon_err err = {};
	json_t *meta = NULL;
	char p[PATH_MAX + 32];
	publish("t", "one");
	/* Back to the old layout: the version's directory at the name. */
	assert_int_equal(store_version_open("t", &a, &err), 0);
	store_version_close(&a, false);
	snprintf(p, sizeof(p), "%s/t", store);
	assert_int_equal(unlink(p), 0);
	assert_int_equal(rename(a.path, p), 0);
	snprintf(p, sizeof(p), "%s/t/.lock", store);
	assert_int_equal(unlink(p), 0);
	assert_int_equal(store_read("t", &meta, &err), 0); /* read as it is */
	json_decref(meta);
	assert_int_equal(store_version_open("t", &a, &err), 0); /* made a version */
	marker_is(&a, "one");
	snprintf(p, sizeof(p), "%s/t", store);
	struct stat st;
	assert_int_equal(lstat(p, &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	publish("t", "two");
	marker_is(&a, "one");
	store_version_close(&a, false);
	assert_int_equal(n_versions(), 1);
}

static void test_a_failed_import_leaves_nothing(void **state)
{
	struct cordon_err err = {};
	publish("t", "one");
	assert_int_equal(store_import("t", false, fill_marker, "two", NULL, &err), -EEXIST);
	assert_non_null(strstr(err.msg, "--replace"));
	assert_int_equal(n_versions(), 1);
	struct store_version a;
	assert_int_equal(store_version_open("t", &a, &err), 0);
	marker_is(&a, "one");
	store_version_close(&a, false);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_replace_keeps_the_held_version, setup, teardown),
		cmocka_unit_test_setup_teardown(test_remove_unnames_at_once_and_the_data_goes_with_its_holder,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_dead_holder_holds_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_links_that_are_not_ours_are_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_store_from_before_versions, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_failed_import_leaves_nothing, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
