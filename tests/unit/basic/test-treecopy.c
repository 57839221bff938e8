/* treecopy(): a tree copied with its holes, hard links, modes, xattrs, whiteouts and owners
 * moved between id ranges; an owner outside the range refused. Owners and whiteouts need
 * root (skipped without). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <cmocka.h>

#include "basic/cleanup.h"
#include "basic/tree.h"
#include "basic/treecopy.h"

struct dirs {
	char root[64];
	int src, dst;
};

static int setup(void **state)
{
	struct dirs *d = calloc(1, sizeof(*d));
	snprintf(d->root, sizeof(d->root), "/tmp/test-treecopy-XXXXXX");
	assert_non_null(mkdtemp(d->root));
	int root = open(d->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_int_equal(mkdirat(root, "src", 0755), 0);
	assert_int_equal(mkdirat(root, "dst", 0755), 0);
	d->src = openat(root, "src", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	d->dst = openat(root, "dst", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	close(root);
	*state = d;
	return 0;
}

static int teardown(void **state)
{
	struct dirs *d = *state;
	close(d->src);
	close(d->dst);
	int parent = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	tree_remove_at(parent, d->root + 5, TREE_MAX_DEPTH);
	close(parent);
	free(d);
	return 0;
}

static void test_sparse_links_modes_xattrs(void **state)
{
	struct dirs *d = *state;
	int fd = openat(d->src, "sparse", O_WRONLY | O_CREAT | O_CLOEXEC, 0640);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 1LL << 30), 0);
	assert_int_equal(pwrite(fd, "end", 3, 1LL << 30), 3);
	(void)fsetxattr(fd, "user.k", "v", 1, 0); /* where the filesystem has user xattrs */
	static char big[60000];
	memset(big, 'x', sizeof(big));
	(void)fsetxattr(fd, "user.big", big, sizeof(big), 0); /* larger than a page */
	close(fd);
	assert_int_equal(linkat(d->src, "sparse", d->src, "hard", 0), 0);
	assert_int_equal(mkdirat(d->src, "sub", 0751), 0);
	assert_int_equal(symlinkat("../sparse", d->src, "sub/link"), 0);

	uint64_t bytes = 0, alloc = 0;
	struct treecopy_opts o = {.what = "t", .verbatim = true, .xattrs = true, .bytes = &bytes,
				  .alloc = &alloc};
	struct cordon_err err = {};
	assert_int_equal(treecopy(d->src, d->dst, &o, &err), 0);
	struct stat a, b;
	assert_int_equal(fstatat(d->dst, "sparse", &a, 0), 0);
	assert_int_equal(fstatat(d->dst, "hard", &b, 0), 0);
	assert_int_equal(a.st_size, (1LL << 30) + 3);
	assert_true(a.st_blocks * 512 < (1 << 20)); /* the hole stayed a hole */
	assert_int_equal(a.st_ino, b.st_ino);	    /* the link stayed a link */
	assert_int_equal(a.st_mode & 07777, 0640);
	assert_true(alloc < (1 << 20));
	assert_int_equal(bytes, (uint64_t)(1LL << 30) + 3);
	assert_int_equal(fstatat(d->dst, "sub", &a, 0), 0);
	assert_int_equal(a.st_mode & 07777, 0751);
	char target[32] = "";
	assert_int_equal(readlinkat(d->dst, "sub/link", target, sizeof(target)), 9);
	char v[4] = "";
	int sfd = openat(d->src, "sparse", O_RDONLY | O_CLOEXEC);
	if (fgetxattr(sfd, "user.k", v, sizeof(v)) == 1) {
		_cleanup_close_ int dfd = openat(d->dst, "sparse", O_RDONLY | O_CLOEXEC);
		memset(v, 0, sizeof(v));
		assert_int_equal(fgetxattr(dfd, "user.k", v, sizeof(v)), 1);
		assert_string_equal(v, "v");
		static char back[60000];
		if (fgetxattr(sfd, "user.big", back, sizeof(back)) == sizeof(back)) /* ea_inode, tmpfs */
			assert_int_equal(fgetxattr(dfd, "user.big", back, sizeof(back)), sizeof(back));
	}
	close(sfd);
}

static void test_owners_and_whiteouts(void **state)
{
	struct dirs *d = *state;
	if (geteuid() != 0)
		skip();
	const uid_t base = 0x70000000u;
	int fd = openat(d->src, "f", O_WRONLY | O_CREAT | O_CLOEXEC, 04755);
	assert_int_equal(fchown(fd, base + 1000, base + 1000), 0);
	assert_int_equal(fchmod(fd, 04755), 0);
	close(fd);
	assert_int_equal(mknodat(d->src, "gone", S_IFCHR | 0600, makedev(0, 0)), 0);
	uint64_t bytes = 0;
	struct treecopy_opts o = {.what = "t", .from = base, .to = 0, .bytes = &bytes};
	struct cordon_err err = {};
	assert_int_equal(treecopy(d->src, d->dst, &o, &err), 0);
	struct stat st;
	assert_int_equal(fstatat(d->dst, "f", &st, 0), 0);
	assert_int_equal(st.st_uid, 1000);
	assert_int_equal(st.st_mode & 07777, 0755); /* setuid dropped */
	assert_int_equal(fstatat(d->dst, "gone", &st, AT_SYMLINK_NOFOLLOW), 0);
	assert_true(treecopy_is_whiteout(&st));

	/* An owner outside the range is refused, naming the file. */
	assert_int_equal(fchownat(d->src, "f", 5, 5, 0), 0);
	int empty = openat(d->dst, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_int_equal(tree_empty(empty, TREE_MAX_DEPTH), 0);
	close(empty);
	assert_int_equal(treecopy(d->src, d->dst, &o, &err), -EOVERFLOW);
	assert_non_null(strstr(err.msg, "outside"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_sparse_links_modes_xattrs, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_owners_and_whiteouts, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
