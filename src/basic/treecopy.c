/* Copies of hostile directory trees (treecopy.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "basic/cleanup.h"
#include "basic/tree.h"
#include "basic/treecopy.h"

#define OPAQUE_XATTR "trusted.overlay.opaque"

bool treecopy_is_whiteout(const struct stat *st)
{
	return S_ISCHR(st->st_mode) && st->st_rdev == makedev(0, 0);
}

bool treecopy_is_opaque(int fd)
{
	char v[2];
	return fgetxattr(fd, OPAQUE_XATTR, v, sizeof(v)) == 1 && v[0] == 'y';
}

int treecopy_walk(char *path, size_t size, int sfd, int dfd, unsigned depth, treecopy_entry_fn fn,
		  void *ctx, struct cordon_err *err, const char *what)
{
	if (depth > TREECOPY_MAX_DEPTH)
		return cordon_err_setf(err, -ELOOP, "%s: deeper than %u directories at '%s'", what,
				       TREECOPY_MAX_DEPTH, path);
	_cleanup_closedir_ DIR *d = tree_opendir_dup(sfd);
	if (!d)
		return cordon_err_set(err, -errno, "%s: read directory '%s'", what, path);
	rewinddir(d); /* the copy shares the offset of @sfd, which another walk may have moved */
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

/* Hard links inside one copied tree: the first copy of an inode, by source inode. */
struct link_seen {
	ino_t ino;
	char *path; /* relative to the destination's root */
};

struct copy {
	const struct treecopy_opts *o;
	int dst_root;
	struct link_seen *seen;
	size_t n_seen, cap_seen;
	char path[4096]; /* of the entry being copied, for messages */
	char *names, *val; /* XATTR_LIST_MAX and XATTR_SIZE_MAX bytes, made on first use */
	struct cordon_err *err;
};

#define XATTR_BUF 65536

static int map_id(const struct copy *c, unsigned id, unsigned *ret)
{
	if (c->o->verbatim) {
		*ret = id;
		return 0;
	}
	if (id < c->o->from || id - c->o->from >= TREECOPY_ID_RANGE)
		return -EOVERFLOW;
	*ret = id - c->o->from + c->o->to;
	return 0;
}

static int map_owner(const struct copy *c, const struct stat *st, uid_t *uid, gid_t *gid)
{
	unsigned u, g;
	if (map_id(c, st->st_uid, &u) < 0 || map_id(c, st->st_gid, &g) < 0)
		return -EOVERFLOW;
	*uid = u;
	*gid = g;
	return 0;
}

static int fail(struct copy *c, int code, const char *what)
{
	return cordon_err_set(c->err, code, "%s: %s '%s'", c->o->what, what, c->path);
}

/* Every extended attribute of @in onto @out (the opaque mark alone without o->xattrs). */
static int copy_xattrs(struct copy *c, int in, int out)
{
	if (!c->o->xattrs)
		return treecopy_is_opaque(in) && fsetxattr(out, OPAQUE_XATTR, "y", 1, 0) < 0 ?
			       fail(c, -errno, "mark opaque") : 0;
	/* The kernel's bounds: a sandbox may fill both. */
	if (!c->names && (!(c->names = malloc(XATTR_BUF)) || !(c->val = malloc(XATTR_BUF))))
		return fail(c, -ENOMEM, "copy the attributes of");
	ssize_t n = flistxattr(in, c->names, XATTR_BUF);
	if (n < 0)
		return errno == ENOTSUP ? 0 : fail(c, -errno, "list the attributes of");
	for (char *k = c->names; k < c->names + n; k += strlen(k) + 1) {
		ssize_t l = fgetxattr(in, k, c->val, XATTR_BUF);
		if (l < 0 || fsetxattr(out, k, c->val, (size_t)l, 0) < 0)
			return fail(c, -errno, "copy an attribute of");
	}
	return 0;
}

static int set_attrs(struct copy *c, int fd, const struct stat *st)
{
	uid_t uid;
	gid_t gid;
	if (map_owner(c, st, &uid, &gid) < 0)
		return cordon_err_setf(c->err, -EOVERFLOW,
				       "%s: '%s' is owned by %u:%u, outside the sandbox's ids",
				       c->o->what, c->path, (unsigned)st->st_uid, (unsigned)st->st_gid);
	/* setuid and setgid go from files; a directory keeps setgid (group inheritance). */
	mode_t keep = S_ISDIR(st->st_mode) ? 03777 : 01777;
	if (fchown(fd, uid, gid) < 0 || fchmod(fd, st->st_mode & keep) < 0)
		return fail(c, -errno, "set owner and mode of");
	struct timespec ts[2] = {st->st_atim, st->st_mtim};
	(void)futimens(fd, ts);
	return 0;
}

/* The data of @in into @out, holes left holes. */
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
static size_t seen_slot(const struct copy *c, ino_t ino)
{
	size_t i = (size_t)(ino * 0x9E3779B97F4A7C15ull) & (c->cap_seen - 1);
	while (c->seen[i].path && c->seen[i].ino != ino)
		i = (i + 1) & (c->cap_seen - 1);
	return i;
}

static struct link_seen *seen_find(struct copy *c, ino_t ino)
{
	if (!c->cap_seen)
		return NULL;
	struct link_seen *s = &c->seen[seen_slot(c, ino)];
	return s->path ? s : NULL;
}

static int seen_add(struct copy *c, ino_t ino)
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

static int copy_file(struct copy *c, int sfd, int dfd, const char *name, const struct stat *st)
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
	*c->o->bytes += st->st_size;
	if ((r = copy_xattrs(c, in, out)) < 0 || (r = set_attrs(c, out, st)) < 0)
		return r;
	struct stat done;
	if (c->o->alloc && fstat(out, &done) == 0)
		*c->o->alloc += (uint64_t)done.st_blocks * 512;
	if (st->st_nlink > 1 && (r = seen_add(c, st->st_ino)) < 0)
		return fail(c, r, "remember");
	return 0;
}

static int copy_symlink(struct copy *c, int sfd, int dfd, const char *name, const struct stat *st)
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
		uid = gid = c->o->verbatim ? 0 : c->o->to;
	if (fchownat(dfd, name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
		return fail(c, -errno, "chown");
	return 0;
}

static int copy_dir(struct copy *c, int sfd, int dfd, unsigned depth);

static int copy_subdir(struct copy *c, int sfd, int dfd, const char *name, const struct stat *st,
		       unsigned depth)
{
	if (mkdirat(dfd, name, 0700) < 0)
		return fail(c, -errno, "mkdir");
	_cleanup_close_ int in = openat(sfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	_cleanup_close_ int out = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (in < 0 || out < 0)
		return fail(c, -errno, "open directory");
	int r = copy_dir(c, in, out, depth + 1);
	if (r < 0 || (r = copy_xattrs(c, in, out)) < 0)
		return r;
	return set_attrs(c, out, st);
}

static int copy_entry(struct copy *c, int sfd, int dfd, const char *name, unsigned depth)
{
	struct stat st;
	if (fstatat(sfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return fail(c, -errno, "stat");
	if (S_ISREG(st.st_mode))
		return copy_file(c, sfd, dfd, name, &st);
	if (S_ISDIR(st.st_mode))
		return copy_subdir(c, sfd, dfd, name, &st, depth);
	if (S_ISLNK(st.st_mode))
		return copy_symlink(c, sfd, dfd, name, &st);
	if (treecopy_is_whiteout(&st))
		return mknodat(dfd, name, S_IFCHR | 0600, makedev(0, 0)) < 0 ? fail(c, -errno, "whiteout") : 0;
	if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))
		return cordon_err_setf(c->err, -EPERM, "%s: '%s' is a device node", c->o->what, c->path);
	return 0; /* a fifo or a socket: not data */
}

static int copy_entry_cb(void *ctx, int sfd, int dfd, const char *name, unsigned depth)
{
	return copy_entry(ctx, sfd, dfd, name, depth);
}

static int copy_dir(struct copy *c, int sfd, int dfd, unsigned depth)
{
	return treecopy_walk(c->path, sizeof(c->path), sfd, dfd, depth, copy_entry_cb, c, c->err,
			     c->o->what);
}

int treecopy(int src_fd, int dst_fd, const struct treecopy_opts *o, struct cordon_err *err)
{
	struct copy c = {.o = o, .dst_root = dst_fd, .err = err};
	struct stat st;
	int r = copy_dir(&c, src_fd, dst_fd, 0);
	if (r >= 0)
		r = copy_xattrs(&c, src_fd, dst_fd);
	if (r >= 0 && o->top_attrs && fstat(src_fd, &st) == 0)
		r = set_attrs(&c, dst_fd, &st);
	for (size_t i = 0; i < c.cap_seen; i++)
		free(c.seen[i].path);
	free(c.seen);
	free(c.names);
	free(c.val);
	return r;
}
