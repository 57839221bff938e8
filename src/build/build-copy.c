/* COPY and ADD: files of the context into the template (build-int.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <linux/openat2.h>
#include <unistd.h>

#include <cordon/cordon.h>

#include "basic/cleanup.h"
#include "basic/fileio.h"
#include "basic/tree.h"
#include "build/build-int.h"
#include "image/recipe.h"
#include "lib/overlay.h"

/* COPY: sources from the context (never outside it), through an overlay of the layers so
 * far, written as root of the template with the owner --chown names. Destinations resolve
 * inside the template's root (its symlinks followed there, as Docker does), never outside. */

struct copy_ctx {
	struct build *b;
	const struct recipe_step *s;
	int root;       /* the merged tree */
	uid_t uid;
	gid_t gid;
	mode_t chmod;   /* 0: keep */
	struct hasher *h; /* hashing pass: no writes */
	uint64_t bytes;
};

int bld_open_beneath(int dirfd, const char *path, int flags, uint64_t resolve)
{
	struct open_how how = {.flags = (uint64_t)(flags | O_CLOEXEC), .resolve = resolve};
	int fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
	return fd < 0 ? -errno : fd;
}

/* At most @limit bytes: an archive named by FROM oci-archive may be a device or a fifo. */
int bld_hash_file(struct hasher *h, int fd, uint64_t limit)
{
	char buf[65536];
	ssize_t n;
	uint64_t total = 0;
	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		if ((total += n) > limit)
			return -EFBIG;
		bld_hash_bytes(h, buf, n);
	}
	return n < 0 ? -errno : 0;
}

/* Makes @path (absolute, normalised) a directory under the template's root, resolving
 * every component inside that root only (its symlinks included), and returns its fd;
 * *@created says whether the last component was made here. */
static int mkdir_in_root(struct copy_ctx *c, const char *path, bool *created)
{
	char prefix[PATH_MAX] = "";
	const uint64_t in_root = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
	bool made = false;
	for (const char *p = path; *p;) {
		while (*p == '/')
			p++;
		size_t n = strcspn(p, "/");
		if (n == 0)
			break;
		size_t len = strlen(prefix);
		if (len + 1 + n >= sizeof(prefix))
			return cordon_err_setf(c->b->err, -ENAMETOOLONG, "'%s': too long", path);
		_cleanup_close_ int parent = bld_open_beneath(c->root, len ? prefix : "/", O_PATH | O_DIRECTORY, in_root);
		snprintf(prefix + len, sizeof(prefix) - len, "/%.*s", (int)n, p);
		if (parent < 0)
			return cordon_err_set(c->b->err, parent, "'%s'", prefix);
		made = mkdirat(parent, prefix + len + 1, 0755) == 0;
		if (!made && errno != EEXIST)
			return cordon_err_set(c->b->err, -errno, "mkdir '%s'", prefix);
		p += n;
	}
	if (created)
		*created = made;
	int fd = bld_open_beneath(c->root, prefix[0] ? prefix : "/", O_RDONLY | O_DIRECTORY, in_root);
	return fd < 0 ? cordon_err_set(c->b->err, fd, "'%s' is not a directory", prefix) : fd;
}

static int copy_tree(struct copy_ctx *c, int sdir, const char *name, int ddir, const char *dpath,
		     const char *rel, unsigned depth);

static int copy_file(struct copy_ctx *c, int sdir, const char *name, int ddir, const char *dname,
		     const char *rel)
{
	struct stat st;
	_cleanup_close_ int in = openat(sdir, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (in < 0 || fstat(in, &st) < 0)
		return cordon_err_set(c->b->err, -errno, "open '%s'", rel);
	if (!S_ISREG(st.st_mode))
		return 0; /* changed under us */
	mode_t mode = c->chmod ? c->chmod : st.st_mode & 0777;
	if (c->h) {
		char meta[64];
		snprintf(meta, sizeof(meta), "f %o %lld", (unsigned)mode, (long long)st.st_size);
		bld_hash_str(c->h, rel);
		bld_hash_str(c->h, meta);
		return bld_hash_file(c->h, in, UINT64_MAX);
	}
	(void)unlinkat(ddir, dname, 0); /* a symlink there is replaced, never written through */
	_cleanup_close_ int out = openat(ddir, dname, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (out < 0)
		return cordon_err_set(c->b->err, -errno, "create '%s'", dname);
	char buf[65536];
	ssize_t n;
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (write_all(out, buf, n) < 0)
			return cordon_err_set(c->b->err, -errno, "write '%s'", dname);
	if (n < 0)
		return cordon_err_set(c->b->err, -errno, "read '%s'", rel);
	c->bytes += st.st_size;
	struct timespec ts[2] = {st.st_atim, st.st_mtim};
	if (fchown(out, c->uid, c->gid) < 0 || fchmod(out, mode) < 0 || futimens(out, ts) < 0)
		return cordon_err_set(c->b->err, -errno, "set owner and mode of '%s'", dname);
	return 0;
}

static int copy_symlink(struct copy_ctx *c, int sdir, const char *name, int ddir, const char *dname,
			const char *rel)
{
	char target[PATH_MAX];
	ssize_t n = readlinkat(sdir, name, target, sizeof(target) - 1);
	if (n < 0)
		return cordon_err_set(c->b->err, -errno, "readlink '%s'", rel);
	target[n] = '\0';
	if (c->h) {
		bld_hash_str(c->h, rel);
		bld_hash_str(c->h, "l");
		bld_hash_str(c->h, target);
		return 0;
	}
	(void)unlinkat(ddir, dname, 0);
	if (symlinkat(target, ddir, dname) < 0 || fchownat(ddir, dname, c->uid, c->gid, AT_SYMLINK_NOFOLLOW) < 0)
		return cordon_err_set(c->b->err, -errno, "symlink '%s'", dname);
	return 0;
}

static int sorted_names(int dfd, char ***ret, size_t *ret_n);

/* The entries of the source directory @sfd into the destination directory @dfd, whose path
 * in the template is @dpath. */
static int copy_dir_contents(struct copy_ctx *c, int sfd, int dfd, const char *dpath, const char *rel,
			     unsigned depth)
{
	char **names = NULL;
	size_t n = 0;
	int r = sorted_names(sfd, &names, &n);
	if (r < 0)
		return cordon_err_set(c->b->err, r, "read '%s'", rel);
	for (size_t i = 0; i < n && r >= 0; i++) {
		char sub[PATH_MAX], dsub[PATH_MAX];
		if ((size_t)snprintf(sub, sizeof(sub), "%s/%s", rel, names[i]) >= sizeof(sub) ||
		    (size_t)snprintf(dsub, sizeof(dsub), "%s/%s", strcmp(dpath, "/") ? dpath : "", names[i]) >= sizeof(dsub))
			r = cordon_err_setf(c->b->err, -ENAMETOOLONG, "'%s': path too long", rel);
		else
			r = copy_tree(c, sfd, names[i], dfd, dsub, sub, depth + 1);
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return r;
}

/* A directory: the destination resolved in the template (an existing directory, or a
 * symlink to one, is entered and keeps its owner and mode; a new one gets the source's). */
static int copy_subdir(struct copy_ctx *c, int sdir, const char *name, const char *dpath,
		       const struct stat *st, const char *rel, unsigned depth)
{
	_cleanup_close_ int sfd = openat(sdir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (sfd < 0)
		return cordon_err_set(c->b->err, -errno, "open '%s'", rel);
	if (c->h) {
		char meta[32];
		snprintf(meta, sizeof(meta), "d %o", (unsigned)(c->chmod ? c->chmod : st->st_mode & 07777));
		bld_hash_str(c->h, rel);
		bld_hash_str(c->h, meta);
		return copy_dir_contents(c, sfd, -1, dpath, rel, depth);
	}
	bool created = false;
	_cleanup_close_ int dfd = mkdir_in_root(c, dpath, &created);
	if (dfd < 0)
		return dfd;
	mode_t mode = c->chmod ? c->chmod : st->st_mode & 07777;
	if (created && (fchown(dfd, c->uid, c->gid) < 0 || fchmod(dfd, mode) < 0))
		return cordon_err_set(c->b->err, -errno, "set owner and mode of '%s'", dpath);
	return copy_dir_contents(c, sfd, dfd, dpath, rel, depth);
}

static int copy_tree(struct copy_ctx *c, int sdir, const char *name, int ddir, const char *dpath,
		     const char *rel, unsigned depth)
{
	struct stat st;
	const char *dname = strrchr(dpath, '/') + 1;
	if (depth > LAYER_MAX_DEPTH)
		return cordon_err_setf(c->b->err, -ELOOP, "'%s': too deep", rel);
	if (fstatat(sdir, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return cordon_err_set(c->b->err, -errno, "stat '%s'", rel);
	if (S_ISREG(st.st_mode))
		return copy_file(c, sdir, name, ddir, dname, rel);
	if (S_ISLNK(st.st_mode))
		return copy_symlink(c, sdir, name, ddir, dname, rel);
	if (S_ISDIR(st.st_mode))
		return copy_subdir(c, sdir, name, dpath, &st, rel, depth);
	return 0; /* no devices, fifos or sockets from the context */
}

static int cmp_strp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int sorted_names(int dfd, char ***ret, size_t *ret_n)
{
	_cleanup_closedir_ DIR *d = tree_opendir_dup(dfd);
	if (!d)
		return -errno;
	char **v = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (tree_is_dot(de->d_name))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 32;
			char **nv = realloc(v, cap * sizeof(*v));
			if (!nv)
				goto oom;
			v = nv;
		}
		if (!(v[n] = strdup(de->d_name)))
			goto oom;
		n++;
	}
	if (n)
		qsort(v, n, sizeof(*v), cmp_strp);
	*ret = v;
	*ret_n = n;
	return 0;
oom:
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
	return -ENOMEM;
}

static bool has_glob(const char *s)
{
	return strpbrk(s, "*?[") != NULL;
}

/* The context entries a source names: itself, or with a pattern in its last component,
 * the matching names of its directory (sorted). Nothing outside the context: the whole
 * path is resolved beneath it first ("..", absolute symlinks and magic links refused). */
static int expand_source(struct copy_ctx *c, const char *src, int *ret_dir, char ***names, size_t *n)
{
	char path[PATH_MAX];
	const uint64_t beneath = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
	while (*src == '/')
		src++;
	snprintf(path, sizeof(path), "%s", *src ? src : ".");
	for (size_t len = strlen(path); len > 1 && path[len - 1] == '/'; len--)
		path[len - 1] = '\0';
	char *slash = strrchr(path, '/');
	const char *last = slash ? slash + 1 : path;
	if (!has_glob(last)) {
		int fd = bld_open_beneath(c->b->ctx_fd, path, O_PATH | O_NOFOLLOW, beneath);
		if (fd < 0)
			return cordon_err_set(c->b->err, fd, "source '%s' (in the build context)", src);
		close(fd);
		if (strcmp(last, "..") == 0 || strcmp(last, ".") == 0) {
			/* "a/.." or ".": the directory itself, named from its own fd */
			*ret_dir = bld_open_beneath(c->b->ctx_fd, path, O_RDONLY | O_DIRECTORY, beneath);
			last = ".";
			if (*ret_dir < 0)
				return cordon_err_set(c->b->err, *ret_dir, "source '%s'", src);
		}
	}
	if (slash && strcmp(last, ".") != 0)
		*slash = '\0';
	if (*ret_dir < 0) {
		const char *dir = slash ? path : ".";
		int dfd = bld_open_beneath(c->b->ctx_fd, dir, O_RDONLY | O_DIRECTORY, beneath);
		if (dfd < 0)
			return cordon_err_set(c->b->err, dfd, "source '%s' (in the build context)", src);
		*ret_dir = dfd;
	}
	if (!has_glob(last)) {
		*names = calloc(1, sizeof(char *));
		if (!*names || !((*names)[0] = strdup(last)))
			return -ENOMEM;
		*n = 1;
		return 0;
	}
	char **all;
	size_t k = 0, m;
	int r = sorted_names(*ret_dir, &all, &m);
	if (r < 0)
		return cordon_err_set(c->b->err, r, "read the directory of '%s'", src);
	for (size_t i = 0; i < m; i++) {
		if (fnmatch(last, all[i], FNM_PERIOD) == 0)
			all[k++] = all[i];
		else
			free(all[i]);
	}
	*names = all;
	*n = k;
	return k ? 0 : cordon_err_setf(c->b->err, -ENOENT, "no source matches '%s'", src);
}

/* One pass over every source: hashing (c->h set) or copying into the tree. A directory's
 * contents go into the destination, as in Docker. */
static int copy_sources(struct copy_ctx *c, const char *dest, bool dest_dir)
{
	const struct recipe_step *s = c->s;
	int r = 0;
	_cleanup_close_ int dfd = -1;
	char parent[PATH_MAX];
	snprintf(parent, sizeof(parent), "%s", dest);
	if (!dest_dir) {
		char *last = strrchr(parent, '/');
		last[last == parent ? 1 : 0] = '\0';
	}
	if (!c->h && (dfd = mkdir_in_root(c, parent, NULL)) < 0)
		return dfd;
	for (size_t i = 0; i + 1 < s->argc && r >= 0; i++) {
		_cleanup_close_ int sdir = -1;
		char **names = NULL;
		size_t n = 0;
		r = expand_source(c, s->argv[i], &sdir, &names, &n);
		for (size_t j = 0; j < n && r >= 0; j++) {
			struct stat st;
			char dpath[PATH_MAX];
			const char *nm = names[j];
			if (fstatat(sdir, nm, &st, AT_SYMLINK_NOFOLLOW) < 0) {
				r = cordon_err_set(c->b->err, -errno, "source '%s'", nm);
				break;
			}
			if (S_ISDIR(st.st_mode)) {
				_cleanup_close_ int sub = openat(sdir, nm, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
				_cleanup_close_ int into = c->h ? -1 : mkdir_in_root(c, dest, NULL);
				if (sub < 0 || (!c->h && into < 0))
					r = sub < 0 ? cordon_err_set(c->b->err, -errno, "open '%s'", nm) : into;
				else
					r = copy_dir_contents(c, sub, into, dest, nm, 0);
				continue;
			}
			if (dest_dir)
				snprintf(dpath, sizeof(dpath), "%s/%s", strcmp(dest, "/") ? dest : "", nm);
			else
				snprintf(dpath, sizeof(dpath), "%s", dest);
			r = copy_tree(c, sdir, nm, dfd, dpath, nm, 0);
		}
		for (size_t j = 0; j < n; j++)
			free(names[j]);
		free(names);
	}
	return r;
}

/* --chown U[:G]: numbers, or root/user (the two ids the jail has names for). */
static int parse_owner(const char *spec, uid_t *uid, gid_t *gid)
{
	char buf[64];
	*uid = *gid = 0;
	if (!spec)
		return 0;
	snprintf(buf, sizeof(buf), "%s", spec);
	char *g = strchr(buf, ':');
	if (g)
		*g++ = '\0';
	const char *parts[2] = {buf, g};
	unsigned long ids[2] = {0, 0};
	for (int i = 0; i < 2; i++) {
		const char *p = parts[i] ? parts[i] : parts[0];
		char *end;
		if (strcmp(p, "root") == 0)
			ids[i] = 0;
		else if (strcmp(p, "user") == 0)
			ids[i] = 1000;
		else if ((ids[i] = strtoul(p, &end, 10)) > 65535 || *end || !*p)
			return -EINVAL;
	}
	*uid = ids[0];
	*gid = ids[1];
	return 0;
}

int bld_copy_dest(struct build *b, const struct recipe_step *s, char *dest, size_t size, bool *dest_dir)
{
	const char *d = s->argv[s->argc - 1];
	size_t n = strlen(d);
	*dest_dir = (n && d[n - 1] == '/') || s->argc > 2 || has_glob(s->argv[0]);
	if (d[0] == '/')
		snprintf(dest, size, "%s", d);
	else
		snprintf(dest, size, "%s/%s", b->workdir && strcmp(b->workdir, "/") ? b->workdir : "", d);
	/* Normalise: no "." or ".." components, no trailing slash (the kernel refuses the
	 * rest: every lookup below is RESOLVE_IN_ROOT). */
	n = strlen(dest);
	while (n > 1 && dest[n - 1] == '/')
		dest[--n] = '\0';
	if (strstr(dest, "/../") || (n >= 3 && strcmp(dest + n - 3, "/..") == 0))
		return cordon_err_setf(b->err, -EINVAL, "destination '%s': '..' is not allowed", d);
	if (strcmp(dest, "/") == 0)
		*dest_dir = true;
	return 0;
}

int bld_copy_key(struct build *b, const struct recipe_step *s, const char *dest, bool dest_dir,
		 char out[LAYER_KEY_LEN + 1])
{
	struct hasher h;
	if (bld_hash_begin(&h, b->key) < 0)
		return cordon_err_setf(b->err, -ENOMEM, "out of memory");
	bld_hash_str(&h, "COPY");
	bld_hash_str(&h, s->chown);
	bld_hash_str(&h, s->chmod);
	bld_hash_str(&h, dest);
	bld_hash_str(&h, dest_dir ? "dir" : "file");
	struct copy_ctx c = {.b = b, .s = s, .h = &h, .root = -1};
	int r = copy_sources(&c, dest, dest_dir);
	bld_hash_end(&h, out);
	return r;
}

int bld_copy_step(struct build *b, const struct recipe_step *s, const char *key, const char *dest,
		  bool dest_dir)
{
	struct copy_ctx c = {.b = b, .s = s, .root = -1};
	char up[PATH_MAX], upper[PATH_MAX], workd[PATH_MAX];
	const char *lower[MAX_LAYERS];
	if (parse_owner(s->chown, &c.uid, &c.gid) < 0)
		return cordon_err_setf(b->err, -EINVAL, "--chown '%s': expected root, user or numbers up "
				       "to 65535", s->chown);
	c.chmod = s->chmod ? (mode_t)strtoul(s->chmod, NULL, 8) : 0;
	for (size_t i = 0; i < b->n_lowers; i++)
		lower[i] = b->lowers[b->n_lowers - 1 - i];
	snprintf(upper, sizeof(upper), "%s/up/diff", b->work);
	snprintf(workd, sizeof(workd), "%s/up/work", b->work);
	int r = bld_mount_scratch(b, up, sizeof(up));
	/* Written through a detached overlay, never attached anywhere: the fd is the root. */
	if (r >= 0)
		r = c.root = overlay_tree(lower, b->n_lowers, upper, workd, -1, up, b->err);
	if (r >= 0)
		r = copy_sources(&c, dest, dest_dir);
	if (c.root >= 0)
		close(c.root);
	if (r >= 0)
		r = bld_capture_commit(b, key, s->text, 0);
	bld_umount_scratch(b);
	return r;
}

