#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "basic/cleanup.h"
#include "basic/tree.h"
#include "image/layer.h"

#define OPAQUE_XATTR "trusted.overlay.opaque"
#define ID_RANGE     65536u

static bool is_whiteout(const struct stat *st)
{
	return S_ISCHR(st->st_mode) && st->st_rdev == makedev(0, 0);
}

static bool is_opaque(int fd)
{
	char v[2];
	return fgetxattr(fd, OPAQUE_XATTR, v, sizeof(v)) == 1 && v[0] == 'y';
}

/* Calls @fn for each entry of the directory @sfd, with @path (the entry's path from the
 * tree's root, for messages) extended by its name for the call. */
typedef int (*entry_fn)(void *ctx, int sfd, int dfd, const char *name, unsigned depth);

static int walk_dir(char *path, size_t size, int sfd, int dfd, unsigned depth, entry_fn fn, void *ctx,
		    struct cordon_err *err, const char *what)
{
	if (depth > LAYER_MAX_DEPTH)
		return cordon_err_setf(err, -ELOOP, "%s: deeper than %u directories at '%s'", what,
				       LAYER_MAX_DEPTH, path);
	_cleanup_closedir_ DIR *d = tree_opendir_dup(sfd);
	if (!d)
		return cordon_err_set(err, -errno, "%s: read directory '%s'", what, path);
	size_t len = strlen(path);
	struct dirent *de;
	while ((errno = 0, de = readdir(d))) {
		if (tree_is_dot(de->d_name))
			continue;
		if ((size_t)snprintf(path + len, size - len, "/%s", de->d_name) >= size - len) {
			path[len] = '\0';
			return cordon_err_setf(err, -ENAMETOOLONG, "%s: a path under '%s' is too long", what, path);
		}
		int r = fn(ctx, sfd, dfd, de->d_name, depth);
		path[len] = '\0';
		if (r < 0)
			return r;
	}
	return errno > 0 ? cordon_err_set(err, -errno, "%s: read directory '%s'", what, path) : 0;
}

/* Hard links inside one captured tree: the first copy of an inode, by source inode. */
struct link_seen {
	ino_t ino;
	char *path; /* relative to the destination's root */
};

struct capture {
	int dst_root;
	uid_t base;
	uint64_t *bytes;
	struct link_seen *seen;
	size_t n_seen, cap_seen;
	char path[4096]; /* of the entry being copied, for messages */
	struct cordon_err *err;
};

static int map_owner(const struct capture *c, const struct stat *st, uid_t *uid, gid_t *gid)
{
	if (c->base == 0) {
		*uid = st->st_uid;
		*gid = st->st_gid;
		return 0;
	}
	if (st->st_uid < c->base || st->st_uid - c->base >= ID_RANGE || st->st_gid < c->base ||
	    st->st_gid - c->base >= ID_RANGE)
		return -EOVERFLOW;
	*uid = st->st_uid - c->base;
	*gid = st->st_gid - c->base;
	return 0;
}

static int fail(struct capture *c, int code, const char *what)
{
	return cordon_err_set(c->err, code, "layer: %s '%s'", what, c->path);
}

static int set_attrs(struct capture *c, int fd, const struct stat *st)
{
	uid_t uid;
	gid_t gid;
	if (map_owner(c, st, &uid, &gid) < 0)
		return cordon_err_setf(c->err, -EOVERFLOW,
				       "layer: '%s' is owned by %u:%u, outside the build's ids",
				       c->path, (unsigned)st->st_uid, (unsigned)st->st_gid);
	/* setuid and setgid go from files; a directory keeps setgid (group inheritance). */
	mode_t keep = S_ISDIR(st->st_mode) ? 03777 : 01777;
	if (fchown(fd, uid, gid) < 0 || fchmod(fd, st->st_mode & keep) < 0)
		return fail(c, -errno, "set owner and mode of");
	struct timespec ts[2] = {st->st_atim, st->st_mtim};
	(void)futimens(fd, ts);
	return 0;
}

/* The data of @in into @out, holes left holes: a step can make a terabyte-sized sparse
 * file for free on its tmpfs, and it must not cost the store a terabyte. */
static int copy_bytes(int in, int out, off_t size)
{
	off_t pos = 0;
	while (pos < size) {
		off_t data = lseek(in, pos, SEEK_DATA);
		if (data < 0 && errno == ENXIO)
			break; /* only a hole is left */
		if (data < 0)
			return -errno;
		off_t hole = lseek(in, data, SEEK_HOLE);
		if (hole < 0)
			return -errno;
		for (off_t off_in = data, off_out = data; off_in < hole;) {
			ssize_t n = copy_file_range(in, &off_in, out, &off_out, hole - off_in, 0);
			if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP)) {
				if (lseek(out, off_out, SEEK_SET) < 0)
					return -errno;
				n = sendfile(out, in, &off_in, hole - off_in);
				off_out += n > 0 ? n : 0;
			}
			if (n < 0)
				return -errno;
			if (n == 0)
				return -EIO; /* the file shrank under us */
		}
		pos = hole;
	}
	return ftruncate(out, size) < 0 ? -errno : 0;
}

/* Hard links: an open-addressing table from source inode to the path of its first copy. */
static size_t seen_slot(const struct capture *c, ino_t ino)
{
	size_t i = (size_t)(ino * 0x9E3779B97F4A7C15ull) & (c->cap_seen - 1);
	while (c->seen[i].path && c->seen[i].ino != ino)
		i = (i + 1) & (c->cap_seen - 1);
	return i;
}

static struct link_seen *seen_find(struct capture *c, ino_t ino)
{
	if (!c->cap_seen)
		return NULL;
	struct link_seen *s = &c->seen[seen_slot(c, ino)];
	return s->path ? s : NULL;
}

static int seen_add(struct capture *c, ino_t ino)
{
	if (2 * (c->n_seen + 1) > c->cap_seen) {
		size_t cap = c->cap_seen ? c->cap_seen * 2 : 256;
		struct link_seen *old = c->seen;
		size_t old_cap = c->cap_seen;
		if (!(c->seen = calloc(cap, sizeof(*c->seen)))) {
			c->seen = old;
			return -ENOMEM;
		}
		c->cap_seen = cap;
		for (size_t i = 0; i < old_cap; i++)
			if (old[i].path)
				c->seen[seen_slot(c, old[i].ino)] = old[i];
		free(old);
	}
	char *copy = strdup(c->path + 1);
	if (!copy)
		return -ENOMEM;
	c->seen[seen_slot(c, ino)] = (struct link_seen){ino, copy};
	c->n_seen++;
	return 0;
}

static int capture_file(struct capture *c, int sfd, int dfd, const char *name, const struct stat *st)
{
	if (st->st_nlink > 1) {
		struct link_seen *s = seen_find(c, st->st_ino);
		if (s)
			return linkat(c->dst_root, s->path, dfd, name, 0) < 0 ? fail(c, -errno, "link") : 0;
	}
	_cleanup_close_ int in = openat(sfd, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (in < 0)
		return fail(c, -errno, "open");
	_cleanup_close_ int out = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (out < 0)
		return fail(c, -errno, "create");
	int r = copy_bytes(in, out, st->st_size);
	if (r < 0)
		return fail(c, r, "copy");
	*c->bytes += st->st_size;
	if ((r = set_attrs(c, out, st)) < 0)
		return r;
	if (st->st_nlink > 1 && (r = seen_add(c, st->st_ino)) < 0)
		return fail(c, r, "remember");
	return 0;
}

static int capture_symlink(struct capture *c, int sfd, int dfd, const char *name, const struct stat *st)
{
	char target[4096];
	ssize_t n = readlinkat(sfd, name, target, sizeof(target) - 1);
	if (n < 0)
		return fail(c, -errno, "readlink");
	target[n] = '\0';
	if (symlinkat(target, dfd, name) < 0)
		return fail(c, -errno, "symlink");
	uid_t uid;
	gid_t gid;
	if (map_owner(c, st, &uid, &gid) < 0)
		uid = gid = 0;
	if (fchownat(dfd, name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
		return fail(c, -errno, "chown");
	return 0;
}

static int capture_dir(struct capture *c, int sfd, int dfd, unsigned depth);

static int capture_subdir(struct capture *c, int sfd, int dfd, const char *name, const struct stat *st,
			  unsigned depth)
{
	if (mkdirat(dfd, name, 0700) < 0)
		return fail(c, -errno, "mkdir");
	_cleanup_close_ int in = openat(sfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	_cleanup_close_ int out = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (in < 0 || out < 0)
		return fail(c, -errno, "open directory");
	int r = capture_dir(c, in, out, depth + 1);
	if (r < 0)
		return r;
	if (is_opaque(in) && fsetxattr(out, OPAQUE_XATTR, "y", 1, 0) < 0)
		return fail(c, -errno, "mark opaque");
	return set_attrs(c, out, st);
}

/* What a build step may leave: files, directories, symlinks and whiteouts. Fifos and
 * sockets are not kept (a layer is data); other devices cannot be made in a sandbox. */
static int capture_entry(struct capture *c, int sfd, int dfd, const char *name, unsigned depth)
{
	struct stat st;
	if (fstatat(sfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return fail(c, -errno, "stat");
	if (S_ISREG(st.st_mode))
		return capture_file(c, sfd, dfd, name, &st);
	if (S_ISDIR(st.st_mode))
		return capture_subdir(c, sfd, dfd, name, &st, depth);
	if (S_ISLNK(st.st_mode))
		return capture_symlink(c, sfd, dfd, name, &st);
	if (is_whiteout(&st))
		return mknodat(dfd, name, S_IFCHR | 0600, makedev(0, 0)) < 0 ? fail(c, -errno, "whiteout") : 0;
	if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))
		return cordon_err_setf(c->err, -EPERM, "layer: '%s' is a device node", c->path);
	return 0;
}

static int capture_entry_cb(void *ctx, int sfd, int dfd, const char *name, unsigned depth)
{
	return capture_entry(ctx, sfd, dfd, name, depth);
}

static int capture_dir(struct capture *c, int sfd, int dfd, unsigned depth)
{
	return walk_dir(c->path, sizeof(c->path), sfd, dfd, depth, capture_entry_cb, c, c->err, "layer");
}

int layer_capture(int src_fd, int dst_fd, uid_t base, uint64_t *bytes, struct cordon_err *err)
{
	struct capture c = {.dst_root = dst_fd, .base = base, .bytes = bytes, .err = err};
	struct stat st;
	int r = capture_dir(&c, src_fd, dst_fd, 0);
	if (r >= 0 && is_opaque(src_fd) && fsetxattr(dst_fd, OPAQUE_XATTR, "y", 1, 0) < 0)
		r = fail(&c, -errno, "mark opaque");
	if (r >= 0 && fstat(src_fd, &st) == 0)
		r = set_attrs(&c, dst_fd, &st);
	for (size_t i = 0; i < c.cap_seen; i++)
		free(c.seen[i].path);
	free(c.seen);
	return r;
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
	if (exists && (!S_ISDIR(dst.st_mode) || is_opaque(in))) {
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
	if (is_whiteout(&st))
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
	return walk_dir(a->path, sizeof(a->path), sfd, dfd, depth, apply_entry_cb, a, a->err, "flatten");
}

int layer_apply(int diff_fd, int dst_fd, struct cordon_err *err)
{
	struct apply a = {.err = err};
	struct stat st;
	if (is_opaque(diff_fd)) {
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
