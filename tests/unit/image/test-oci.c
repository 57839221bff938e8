/* Unit tests of src/image/oci.c: layers written here with libarchive into a memfd and
 * applied into a fresh mkdtemp directory next to a canary. The hostile corpus is in
 * tests/image/test_import.py (pytest over oci-tool). Needs root for the chown of entries. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>
#include <cmocka.h>

#include "basic/cleanup.h"
#include "image/oci.h"

struct ent {
	const char *path;
	mode_t type;
	mode_t perm;
	const char *data; /* file contents, or the link target */
	bool hard;
};

static int make_layer(const struct ent *ents, size_t n)
{
	int fd = memfd_create("layer", MFD_CLOEXEC);
	assert_true(fd >= 0);
	struct archive *a = archive_write_new();
	archive_write_set_format_pax_restricted(a);
	assert_int_equal(archive_write_open_fd(a, fd), ARCHIVE_OK);
	for (size_t i = 0; i < n; i++) {
		struct archive_entry *e = archive_entry_new();
		archive_entry_set_pathname(e, ents[i].path);
		archive_entry_set_filetype(e, ents[i].type);
		archive_entry_set_perm(e, ents[i].perm);
		if (ents[i].hard)
			archive_entry_set_hardlink(e, ents[i].data);
		else if (ents[i].type == AE_IFLNK)
			archive_entry_set_symlink(e, ents[i].data);
		size_t len = ents[i].type == AE_IFREG && !ents[i].hard && ents[i].data ? strlen(ents[i].data) : 0;
		archive_entry_set_size(e, len);
		assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
		if (len)
			assert_int_equal(archive_write_data(a, ents[i].data, len), (la_ssize_t)len);
		archive_entry_free(e);
	}
	archive_write_close(a);
	archive_write_free(a);
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	return fd;
}

struct box {
	char dir[64];
	int root;
};

static int setup(void **state)
{
	struct box *b = calloc(1, sizeof(*b));
	snprintf(b->dir, sizeof(b->dir), "/tmp/test-oci-XXXXXX");
	assert_non_null(mkdtemp(b->dir));
	char p[128];
	snprintf(p, sizeof(p), "%s/root", b->dir);
	assert_int_equal(mkdir(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/canary", b->dir);
	assert_int_equal(mkdir(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/root", b->dir);
	b->root = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(b->root >= 0);
	*state = b;
	return 0;
}

static int teardown(void **state)
{
	struct box *b = *state;
	char cmd[256];
	/* the canary stays empty whatever the layer did */
	snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A %s/canary)\" && rm -rf %s", b->dir, b->dir);
	int r = system(cmd);
	close(b->root);
	free(b);
	return r == 0 ? 0 : -1;
}

static int apply(struct box *b, const struct ent *ents, size_t n, uint64_t max, struct cordon_err *err)
{
	_cleanup_close_ int fd = make_layer(ents, n);
	return oci_apply_layer(b->root, fd, max, err);
}

static void assert_file(struct box *b, const char *path, const char *content, mode_t perm)
{
	char buf[256] = "";
	struct stat st;
	assert_int_equal(fstatat(b->root, path, &st, AT_SYMLINK_NOFOLLOW), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_mode & 07777, perm);
	_cleanup_close_ int fd = openat(b->root, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	assert_true(read(fd, buf, sizeof(buf) - 1) >= 0);
	assert_string_equal(buf, content);
}

static void test_layer_basic(void **state)
{
	struct box *b = *state;
	struct cordon_err err = {0};
	const struct ent l1[] = {
		{"etc/", AE_IFDIR, 0755, NULL, false},
		{"etc/a", AE_IFREG, 04755, "one", false},
		{"etc/b", AE_IFREG, 0644, "etc/a", true},
		{"ln", AE_IFLNK, 0777, "/etc", false},
		{"gone/x", AE_IFREG, 0644, "x", false},
	};
	assert_int_equal(apply(b, l1, ELEMENTSOF(l1), 1 << 20, &err), 0);
	assert_file(b, "etc/a", "one", 0755); /* setuid stripped */
	assert_file(b, "etc/b", "one", 0755);
	const struct ent l2[] = {
		{".wh.gone", AE_IFREG, 0644, NULL, false},
		{"etc/.wh..wh..opq", AE_IFREG, 0644, NULL, false},
		{"etc/c", AE_IFREG, 0600, "three", false},
	};
	assert_int_equal(apply(b, l2, ELEMENTSOF(l2), 1 << 20, &err), 0);
	assert_int_equal(faccessat(b->root, "gone", F_OK, AT_SYMLINK_NOFOLLOW), -1);
	assert_int_equal(faccessat(b->root, "etc/a", F_OK, AT_SYMLINK_NOFOLLOW), -1);
	assert_file(b, "etc/c", "three", 0600);
}

static void test_through_symlink_refused(void **state)
{
	struct box *b = *state;
	struct cordon_err err = {0};
	char target[96];
	snprintf(target, sizeof(target), "%s/canary", b->dir);
	const struct ent l[] = {
		{"a", AE_IFLNK, 0777, target, false},
		{"a/x", AE_IFREG, 0644, "pwned", false},
	};
	assert_int_equal(apply(b, l, ELEMENTSOF(l), 1 << 20, &err), -ELOOP);
	assert_non_null(strstr(err.msg, "symlink"));
}

static void test_hardlink_out_refused(void **state)
{
	struct box *b = *state;
	struct cordon_err err = {0};
	const struct ent l[] = {{"h", AE_IFREG, 0644, "../canary/x", true}};
	assert_int_equal(apply(b, l, ELEMENTSOF(l), 1 << 20, &err), -ENOENT);
	assert_non_null(strstr(err.msg, "not inside"));
}

static void test_byte_limit(void **state)
{
	struct box *b = *state;
	struct cordon_err err = {0};
	const struct ent l[] = {{"f", AE_IFREG, 0644, "0123456789", false},
				{"g", AE_IFREG, 0644, "0123456789", false}};
	assert_int_equal(apply(b, l, ELEMENTSOF(l), 15, &err), -EFBIG);
}

static void test_whiteout_dotdot_refused(void **state)
{
	struct box *b = *state;
	struct cordon_err err = {0};
	const struct ent l[] = {{"d/.wh..", AE_IFREG, 0644, NULL, false}};
	assert_int_equal(apply(b, l, ELEMENTSOF(l), 1 << 20, &err), -EINVAL);
}

static int apply_plain(struct box *b, const struct ent *ents, size_t n, struct cordon_err *err)
{
	_cleanup_close_ int fd = make_layer(ents, n);
	return oci_apply_tar(b->root, fd, 1 << 20, err);
}

/* oci_apply_tar(): a directory out of a sandbox. Whiteouts are plain files, owners are not
 * kept, and what a layer would clean or skip is refused, the tree as it was. */
static void test_plain_tar(void **state)
{
	struct box *b = *state;
	struct cordon_err err = {0};
	const struct ent ok[] = {
		{"./d/", AE_IFDIR, 0755, NULL, false},
		{"d/.wh.x", AE_IFREG, 0644, "kept", false},
		{"d/l", AE_IFLNK, 0777, "../d/.wh.x", false},
		{"h", AE_IFREG, 0644, "d/.wh.x", true},
	};
	assert_int_equal(apply_plain(b, ok, ELEMENTSOF(ok), &err), 0);
	assert_file(b, "d/.wh.x", "kept", 0644);
	struct stat st;
	assert_int_equal(fstatat(b->root, "d/.wh.x", &st, 0), 0);
	assert_int_equal(st.st_uid, geteuid());
	static const struct ent bad[][1] = {
		{{"../canary/x", AE_IFREG, 0644, "x", false}},
		{{"/abs", AE_IFREG, 0644, "x", false}},
		{{"a/../../x", AE_IFREG, 0644, "x", false}},
		{{"d/l2", AE_IFLNK, 0777, "../../canary", false}},
		{{"fifo", AE_IFIFO, 0644, NULL, false}},
		{{"chr", AE_IFCHR, 0644, NULL, false}},
	};
	for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
		err = (struct cordon_err){0};
		assert_int_equal(apply_plain(b, bad[i], 1, &err), -EPERM);
		assert_non_null(err.msg[0] ? err.msg : NULL);
	}
	assert_int_equal(faccessat(b->root, "fifo", F_OK, AT_SYMLINK_NOFOLLOW), -1);
	assert_int_equal(faccessat(b->root, "d/l2", F_OK, AT_SYMLINK_NOFOLLOW), -1);
}

/* An absolute symlink out of a sandbox (a venv's bin/python) is written as it is, pointing
 * at the host's path of that name; an entry through it is refused and the canary (its
 * target, an absolute path here) stays empty (teardown checks). */
static void test_plain_tar_absolute_symlink(void **state)
{
	struct box *b = *state;
	struct cordon_err err = {0};
	char target[96], got[96];
	snprintf(target, sizeof(target), "%s/canary", b->dir);
	const struct ent ok[] = {{"bin/", AE_IFDIR, 0755, NULL, false},
				 {"bin/python", AE_IFLNK, 0777, "/usr/bin/python3", false},
				 {"out", AE_IFLNK, 0777, target, false}};
	assert_int_equal(apply_plain(b, ok, ELEMENTSOF(ok), &err), 0);
	ssize_t n = readlinkat(b->root, "bin/python", got, sizeof(got) - 1);
	assert_true(n > 0);
	got[n] = '\0';
	assert_string_equal(got, "/usr/bin/python3");
	const struct ent through[] = {{"out/x", AE_IFREG, 0644, "pwned", false}};
	assert_int_equal(apply_plain(b, through, ELEMENTSOF(through), &err), -ELOOP);
	const struct ent up[] = {{"d/up", AE_IFLNK, 0777, "../../canary", false}};
	assert_int_equal(apply_plain(b, up, ELEMENTSOF(up), &err), -EPERM);
}

int main(void)
{
	if (geteuid() != 0) {
		printf("# skip: needs root (entries are chowned)\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_layer_basic, setup, teardown),
		cmocka_unit_test_setup_teardown(test_through_symlink_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hardlink_out_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_byte_limit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_whiteout_dotdot_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_plain_tar, setup, teardown),
		cmocka_unit_test_setup_teardown(test_plain_tar_absolute_symlink, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
