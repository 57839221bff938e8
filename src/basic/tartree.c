/* Directory trees as tar streams (tartree.h). It may allocate: it runs in a process of its
 * own (a child of the agent, the CLI). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "basic/tar.h"
#include "basic/tartree.h"

#define IO_CHUNK  (128u * 1024u)
#define MAX_DEPTH 256

/* ---- out ---- */

struct packer {
	int out;
	uint8_t buf[IO_CHUNK];
	size_t len;
	uint8_t hdr[TAR_HEADER_MAX];
	char name[TAR_MAX_PATH];
};

static int flush(struct packer *p)
{
	for (size_t off = 0; off < p->len;) {
		ssize_t n = write(p->out, p->buf + off, p->len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		off += (size_t)n;
	}
	p->len = 0;
	return 0;
}

static int put(struct packer *p, const void *data, size_t n)
{
	const uint8_t *d = data;
	while (n > 0) {
		size_t room = sizeof(p->buf) - p->len, k = n < room ? n : room;
		memcpy(p->buf + p->len, d, k);
		p->len += k;
		d += k;
		n -= k;
		if (p->len == sizeof(p->buf)) {
			int r = flush(p);
			if (r < 0)
				return r;
		}
	}
	return 0;
}

static int put_zeroes(struct packer *p, size_t n)
{
	static const uint8_t zero[TAR_BLOCK];
	int r = 0;
	while (n > 0 && r == 0) {
		size_t k = n < sizeof(zero) ? n : sizeof(zero);
		r = put(p, zero, k);
		n -= k;
	}
	return r;
}

static int put_header(struct packer *p, struct tar_entry *e)
{
	return put(p, p->hdr, tar_header(p->hdr, e));
}

/* The file's first e->size bytes; if it shrank meanwhile, zeroes for the rest. */
static int put_file(struct packer *p, int dirfd, const char *name, struct tar_entry *e)
{
	int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno; /* gone since the listing */
	struct stat st;
	int r = fstat(fd, &st) < 0 ? -errno : S_ISREG(st.st_mode) ? 0 : 1;
	e->size = (uint64_t)st.st_size;
	if (r == 0)
		r = put_header(p, e);
	uint64_t left = e->size;
	while (r == 0 && left > 0) {
		if (p->len == sizeof(p->buf) && (r = flush(p)) < 0)
			break;
		size_t room = sizeof(p->buf) - p->len;
		ssize_t n = read(fd, p->buf + p->len, left < room ? (size_t)left : room);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			r = n < 0 ? -errno : put_zeroes(p, (size_t)left);
			left = 0;
			break;
		}
		p->len += (size_t)n;
		left -= (uint64_t)n;
	}
	close(fd);
	return r < 0 ? r : r == 1 ? 0 : put_zeroes(p, tar_padding(e->size));
}

static int pack_dir(struct packer *p, int dirfd, size_t base, int depth);

/* Entry @name of @dirfd, at p->name (its path in the archive). */
static int pack_entry(struct packer *p, int dirfd, const char *name, int depth)
{
	struct stat st;
	struct tar_entry *e = calloc(1, sizeof(*e));
	int r = 0;
	if (!e)
		return -ENOMEM;
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		free(e);
		return errno == ENOENT ? 0 : -errno;
	}
	*e = (struct tar_entry){.mode = st.st_mode & 0777, .mtime = st.st_mtime, .uid = st.st_uid,
				.gid = st.st_gid};
	memcpy(e->name, p->name, strlen(p->name) + 1);
	if (S_ISREG(st.st_mode)) {
		e->type = TAR_FILE;
		r = put_file(p, dirfd, name, e);
	} else if (S_ISLNK(st.st_mode)) {
		ssize_t n = readlinkat(dirfd, name, e->link, sizeof(e->link) - 1);
		e->type = TAR_SYMLINK;
		r = n < 0 ? -errno : put_header(p, e);
	} else if (S_ISDIR(st.st_mode)) {
		e->type = TAR_DIR;
		int fd = depth < MAX_DEPTH ? openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
		r = fd < 0 ? (depth < MAX_DEPTH ? -errno : -ELOOP) : put_header(p, e);
		if (r == 0)
			r = pack_dir(p, fd, strlen(p->name), depth + 1);
		if (fd >= 0)
			close(fd);
	} /* sockets, fifos, devices: left out */
	free(e);
	return r;
}

static int pack_dir(struct packer *p, int dirfd, size_t base, int depth)
{
	int fd = dup(dirfd);
	DIR *d = fd < 0 ? NULL : fdopendir(fd);
	if (!d) {
		if (fd >= 0)
			close(fd);
		return -errno;
	}
	int r = 0;
	for (struct dirent *de; r == 0 && (de = readdir(d));) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		size_t n = strlen(de->d_name);
		if (base + 1 + n + 2 > sizeof(p->name)) {
			r = -ENAMETOOLONG;
			break;
		}
		snprintf(p->name + base, sizeof(p->name) - base, "%s%s", base ? "/" : "", de->d_name);
		r = pack_entry(p, dirfd, de->d_name, depth);
		p->name[base] = '\0';
	}
	closedir(d);
	return r;
}

int tartree_pack(const char *path, int out)
{
	struct packer *p = calloc(1, sizeof(*p));
	struct stat st;
	int r;
	if (!p)
		return -ENOMEM;
	p->out = out;
	if (lstat(path, &st) < 0) {
		r = -errno;
	} else if (S_ISDIR(st.st_mode)) {
		int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		r = fd < 0 ? -errno : pack_dir(p, fd, 0, 0);
		if (fd >= 0)
			close(fd);
	} else {
		/* One file or symlink, under its own name, from its directory. */
		char dir[TAR_MAX_PATH];
		const char *slash = strrchr(path, '/');
		snprintf(dir, sizeof(dir), "%.*s", slash == path ? 1 : (int)(slash - path), path);
		snprintf(p->name, sizeof(p->name), "%s", slash + 1);
		int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		r = fd < 0 ? -errno : pack_entry(p, fd, slash + 1, 0);
		if (fd >= 0)
			close(fd);
	}
	if (r == 0)
		r = put_zeroes(p, 2 * TAR_BLOCK);
	if (r == 0)
		r = flush(p);
	free(p);
	return r;
}

/* ---- in ---- */

struct unpacker {
	int root;
	int file; /* the regular file being written, or -1 */
	struct tar_reader r;
};

/* The directory holding @name beneath @root, made where missing; no symlink is followed.
 * *@ret_last points at @name's last component. */
static int parent_of(int root, const char *name, bool make, const char **ret_last)
{
	char comp[256];
	int dfd = dup(root);
	const char *c = name;
	for (const char *s; dfd >= 0 && (s = strchr(c, '/')); c = s + 1) {
		if ((size_t)(s - c) >= sizeof(comp)) {
			close(dfd);
			return -ENAMETOOLONG;
		}
		memcpy(comp, c, (size_t)(s - c));
		comp[s - c] = '\0';
		if (make && mkdirat(dfd, comp, 0755) < 0 && errno != EEXIST) {
			close(dfd);
			return -errno;
		}
		int next = openat(dfd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		int err = errno;
		close(dfd);
		if (next < 0)
			return err == ELOOP ? -ENOTDIR : -err;
		dfd = next;
	}
	*ret_last = c;
	return dfd < 0 ? -errno : dfd;
}

/* Whatever is at @last, unless it is a directory (which an entry of any type may reuse). */
static int clear(int dfd, const char *last)
{
	struct stat st;
	if (fstatat(dfd, last, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (S_ISDIR(st.st_mode))
		return 1;
	return unlinkat(dfd, last, 0) < 0 ? -errno : 0;
}

static int make_entry(int dfd, const char *last, const struct tar_entry *e, struct unpacker *u)
{
	int r = clear(dfd, last);
	if (r < 0)
		return r;
	if (e->type == TAR_DIR)
		return r == 1 || mkdirat(dfd, last, e->mode | 0700) == 0 ? 0 : -errno;
	if (r == 1)
		return -EISDIR;
	if (e->type == TAR_SYMLINK)
		return symlinkat(e->link, dfd, last) < 0 ? -errno : 0;
	if (e->type == TAR_HARDLINK) {
		const char *tlast;
		int tfd = parent_of(u->root, e->link, false, &tlast);
		if (tfd < 0)
			return tfd;
		r = linkat(tfd, tlast, dfd, last, 0) < 0 ? -errno : 0;
		close(tfd);
		return r;
	}
	u->file = openat(dfd, last, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, e->mode);
	return u->file < 0 ? -errno : 0;
}

static int on_entry(const struct tar_entry *e, void *arg)
{
	struct unpacker *u = arg;
	const char *last;
	if (u->file >= 0) {
		close(u->file);
		u->file = -1;
	}
	int dfd = parent_of(u->root, e->name, true, &last);
	if (dfd < 0)
		return dfd;
	int r = make_entry(dfd, last, e, u);
	close(dfd);
	return r;
}

static int on_data(const uint8_t *p, size_t n, void *arg)
{
	struct unpacker *u = arg;
	while (n > 0) {
		ssize_t k = write(u->file, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return k < 0 ? -errno : -EIO;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

int tartree_unpack(const char *path, int in)
{
	static const struct tar_ops ops = {.entry = on_entry, .data = on_data};
	struct unpacker *u = calloc(1, sizeof(*u));
	uint8_t *buf = malloc(IO_CHUNK);
	int r = 0;
	if (!u || !buf) {
		free(u);
		free(buf);
		return -ENOMEM;
	}
	u->file = -1;
	tar_reader_init(&u->r, UINT64_MAX, 1u << 22);
	if (mkdir(path, 0755) < 0 && errno != EEXIST)
		r = -errno;
	u->root = r < 0 ? -1 : open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (r == 0 && u->root < 0)
		r = -errno;
	while (r == 0) {
		ssize_t n = read(in, buf, IO_CHUNK);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			r = n < 0 ? -errno : tar_reader_finish(&u->r) < 0 ? -EBADMSG : 0;
			break;
		}
		r = tar_reader_feed(&u->r, buf, (size_t)n, &ops, u);
	}
	if (u->file >= 0)
		close(u->file);
	if (u->root >= 0)
		close(u->root);
	free(u);
	free(buf);
	return r;
}
