#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "basic/cleanup.h"
#include "basic/tree.h"
#include "basic/treecopy.h"
#include "image/layer.h"

int layer_capture(int src_fd, int dst_fd, uid_t base, uint64_t *bytes, struct cordon_err *err)
{
	struct treecopy_opts o = {.what = "layer", .verbatim = base == 0, .from = base, .to = 0,
				  .top_attrs = true, .bytes = bytes};
	return treecopy(src_fd, dst_fd, &o, err);
}

/* layer_apply: one layer over a tree. */

struct apply {
	char path[4096];
	struct cordon_err *err;
};

static int apply_fail(struct apply *a, int code, const char *what)
{
	return cordon_err_set(a->err, code, "flatten: %s '%s'", what, a->path);
}

static int apply_dir(struct apply *a, int sfd, int dfd, unsigned depth);

static int apply_subdir(struct apply *a, int sfd, int dfd, const char *name, const struct stat *st,
			unsigned depth)
{
	struct stat dst;
	_cleanup_close_ int in = openat(sfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (in < 0)
		return apply_fail(a, -errno, "open");
	bool exists = fstatat(dfd, name, &dst, AT_SYMLINK_NOFOLLOW) == 0;
	if (exists && (!S_ISDIR(dst.st_mode) || treecopy_is_opaque(in))) {
		int r = tree_remove_at(dfd, name, TREE_MAX_DEPTH);
		if (r < 0)
			return apply_fail(a, r, "replace");
		exists = false;
	}
	if (!exists && mkdirat(dfd, name, 0700) < 0)
		return apply_fail(a, -errno, "mkdir");
	_cleanup_close_ int out = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (out < 0)
		return apply_fail(a, -errno, "open");
	int r = apply_dir(a, in, out, depth + 1);
	if (r < 0)
		return r;
	if (fchown(out, st->st_uid, st->st_gid) < 0 || fchmod(out, st->st_mode & 07777) < 0)
		return apply_fail(a, -errno, "set owner and mode of");
	struct timespec ts[2] = {st->st_atim, st->st_mtim};
	(void)futimens(out, ts);
	return 0;
}

static int apply_entry(struct apply *a, int sfd, int dfd, const char *name, unsigned depth)
{
	struct stat st;
	if (fstatat(sfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return apply_fail(a, -errno, "stat");
	if (S_ISDIR(st.st_mode))
		return apply_subdir(a, sfd, dfd, name, &st, depth);
	int r = tree_remove_at(dfd, name, TREE_MAX_DEPTH);
	if (r < 0)
		return apply_fail(a, r, "remove");
	if (treecopy_is_whiteout(&st))
		return 0;
	if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
		return 0;
	/* A symlink is linked as itself (no AT_SYMLINK_FOLLOW). */
	return linkat(sfd, name, dfd, name, 0) < 0 ? apply_fail(a, -errno, "link") : 0;
}

static int apply_entry_cb(void *ctx, int sfd, int dfd, const char *name, unsigned depth)
{
	return apply_entry(ctx, sfd, dfd, name, depth);
}

static int apply_dir(struct apply *a, int sfd, int dfd, unsigned depth)
{
	return treecopy_walk(a->path, sizeof(a->path), sfd, dfd, depth, apply_entry_cb, a, a->err, "flatten");
}

int layer_apply(int diff_fd, int dst_fd, struct cordon_err *err)
{
	struct apply a = {.err = err};
	struct stat st;
	if (treecopy_is_opaque(diff_fd)) {
		int r = tree_empty(dst_fd, TREE_MAX_DEPTH);
		if (r < 0)
			return apply_fail(&a, r, "empty");
	}
	int r = apply_dir(&a, diff_fd, dst_fd, 0);
	if (r < 0)
		return r;
	if (fstat(diff_fd, &st) == 0 && (fchown(dst_fd, st.st_uid, st.st_gid) < 0 ||
					 fchmod(dst_fd, st.st_mode & 07777) < 0))
		return apply_fail(&a, -errno, "set owner and mode of");
	return 0;
}
