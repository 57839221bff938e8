/* Layers and image archives (see oci.h).
 *
 * Every path of the archive is first cleaned as a string (leading '/', '.', '..' clamped at
 * the root), then walked one component at a time with openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV): the kernel, not the string,
 * guarantees that nothing is reached through a symlink (CVE-2018-15664, CVE-2019-14271 and
 * the many "tar slip" bugs came from following one). Files are always created afresh with
 * O_CREAT | O_EXCL | O_NOFOLLOW after removing what was there, so a hard link or symlink
 * planted by an earlier entry is never written through.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/openat2.h>

#include <archive.h>
#include <archive_entry.h>
#include <jansson.h>
#include <openssl/evp.h>

#include "basic/cleanup.h"
#include "basic/tar.h"
#include "basic/tree.h"
#include "image/oci.h"

#define WHITEOUT        ".wh."
#define WHITEOUT_OPAQUE ".wh..wh..opq"
/* A blob may be larger than the data it holds (tar headers, padding): this much more. */
#define BLOB_SLACK      (1ULL << 30)

struct layer {
	struct archive *a;
	int rootfd;
	uint64_t max_bytes;
	uint64_t *used;
	bool plain; /* oci_apply_tar(): no whiteouts, no owners, refuse what layers clean */
	char shown[256]; /* the current entry's path, printable, for messages */
	struct cordon_err *err;
};

static void archive_freep(struct archive **a)
{
	if (*a)
		archive_read_free(*a);
}
#define _cleanup_archive_ _cleanup_(archive_freep)

/* A hostile name may hold newlines or escapes: messages stay one printable line. */
static void show(char *buf, size_t size, const char *s)
{
	size_t i = 0;
	for (; s[i] && i + 1 < size; i++)
		buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
	buf[i] = '\0';
}

/* Cleans @in into a relative path without empty, "." or ".." components; ".." stops at the
 * root, as it does for a process chrooted there. "" is the root itself. */
static int clean_path(const char *in, char *out, size_t size)
{
	size_t n = 0;

	if (strlen(in) >= OCI_MAX_PATH || size < OCI_MAX_PATH)
		return -ENAMETOOLONG;
	for (const char *p = in; *p;) {
		const char *e = strchrnul(p, '/');
		size_t len = e - p;
		if (len == 2 && p[0] == '.' && p[1] == '.') {
			while (n > 0 && out[n - 1] != '/')
				n--;
			if (n > 0)
				n--;
		} else if (len > 0 && !(len == 1 && p[0] == '.')) {
			if (n > 0)
				out[n++] = '/';
			memcpy(out + n, p, len);
			n += len;
		}
		p = *e ? e + 1 : e;
	}
	out[n] = '\0';
	return 0;
}

/* Splits a cleaned @path into its parent (in place) and returns the last component. */
static char *split_last(char *path)
{
	char *slash = strrchr(path, '/');
	if (!slash) {
		memmove(path + 1, path, strlen(path) + 1);
		path[0] = '\0';
		return path + 1;
	}
	*slash = '\0';
	return slash + 1;
}

static int open_beneath(int dirfd, const char *name, int flags)
{
	struct open_how how = {
		.flags = flags | O_CLOEXEC,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
			   RESOLVE_NO_XDEV,
	};
	int fd = (int)syscall(SYS_openat2, dirfd, name, &how, sizeof(how));
	return fd < 0 ? -errno : fd;
}

/* Opens the directory @rel (cleaned) under @rootfd one component at a time, creating missing
 * ones (0755, root's) when @create. -ELOOP when a component is a symlink, -ENOTDIR when it
 * is another file. */
static int open_dir(int rootfd, const char *rel, bool create)
{
	char comp[256];
	_cleanup_close_ int fd = open_beneath(rootfd, ".", O_RDONLY | O_DIRECTORY);
	if (fd < 0)
		return fd;
	for (const char *p = rel; *p;) {
		const char *e = strchrnul(p, '/');
		size_t len = e - p;
		if (len >= sizeof(comp))
			return -ENAMETOOLONG;
		memcpy(comp, p, len);
		comp[len] = '\0';
		int next = open_beneath(fd, comp, O_RDONLY | O_DIRECTORY);
		if (next == -ENOENT && create) {
			if (mkdirat(fd, comp, 0755) < 0 && errno != EEXIST)
				return -errno;
			next = open_beneath(fd, comp, O_RDONLY | O_DIRECTORY);
		}
		if (next < 0)
			return next;
		close(fd);
		fd = next;
		p = *e ? e + 1 : e;
	}
	return TAKE_FD(fd);
}

/* uid/gid numbers outside 0..65535 (an image's, mapped into a sandbox's 65536 ids) would be
 * unmapped inside: they become nobody, never root. */
static uid_t map_id(la_int64_t id)
{
	return id >= 0 && id <= OCI_MAX_ID ? (uid_t)id : OCI_NOBODY;
}

/* Ownership and permissions of the open @fd; no setuid, setgid or sticky bit survives. */
static int set_meta(const struct layer *l, int fd, struct archive_entry *e, bool times)
{
	if (!l->plain && fchown(fd, map_id(archive_entry_uid(e)), map_id(archive_entry_gid(e))) < 0)
		return -errno;
	if (fchmod(fd, archive_entry_perm(e) & 0777) < 0)
		return -errno;
	if (times && archive_entry_mtime_is_set(e)) {
		struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT},
					 {archive_entry_mtime(e), archive_entry_mtime_nsec(e)}};
		if (futimens(fd, ts) < 0)
			return -errno;
	}
	return 0;
}

static int fail(struct layer *l, int r, const char *what)
{
	if (r == -ELOOP)
		what = "path goes through a symlink";
	return cordon_err_set(l->err, r, "layer entry '%s': %s", l->shown, what);
}

static int copy_data(struct layer *l, int fd, la_int64_t size)
{
	const void *buf;
	size_t len;
	la_int64_t off;
	int r;

	while ((r = archive_read_data_block(l->a, &buf, &len, &off)) != ARCHIVE_EOF) {
		if (r < ARCHIVE_WARN)
			return cordon_err_setf(l->err, -EINVAL, "layer entry '%s': %s", l->shown,
					       archive_error_string(l->a));
		if (off < 0 || (uint64_t)off + len > (uint64_t)size)
			return fail(l, -EFBIG, "data beyond its declared size");
		for (size_t done = 0; done < len;) {
			ssize_t n = pwrite(fd, (const char *)buf + done, len - done, off + done);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				return fail(l, -errno, "write");
			done += n;
		}
	}
	/* Trailing holes of a sparse file; the size was checked against the budget. */
	if (ftruncate(fd, size) < 0)
		return fail(l, -errno, "truncate");
	return 0;
}

static int do_file(struct layer *l, int pfd, const char *name, struct archive_entry *e)
{
	la_int64_t size = archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;
	if (size < 0)
		return fail(l, -EINVAL, "negative size");
	if ((uint64_t)size > l->max_bytes - *l->used)
		return cordon_err_setf(l->err, -EFBIG, "layer entry '%s': %lld bytes exceed the "
				       "limit of %llu bytes in all", l->shown, (long long)size,
				       (unsigned long long)l->max_bytes);
	*l->used += size;
	int r = tree_remove_at(pfd, name, OCI_MAX_DEPTH);
	if (r < 0)
		return fail(l, r, "remove what was there");
	_cleanup_close_ int fd = openat(pfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return fail(l, -errno, "create");
	if ((r = copy_data(l, fd, size)) < 0)
		return r;
	return (r = set_meta(l, fd, e, true)) < 0 ? fail(l, r, "set owner and mode") : 0;
}

static int do_dir(struct layer *l, int pfd, const char *name, struct archive_entry *e)
{
	struct stat st;
	/* A directory over a directory merges; over anything else it replaces. */
	if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode)) {
		int r = tree_remove_at(pfd, name, OCI_MAX_DEPTH);
		if (r < 0)
			return fail(l, r, "remove what was there");
		if (mkdirat(pfd, name, 0700) < 0)
			return fail(l, -errno, "mkdir");
	}
	_cleanup_close_ int fd = open_beneath(pfd, name, O_RDONLY | O_DIRECTORY);
	if (fd < 0)
		return fail(l, fd, "open");
	/* No mtime: the entries that follow change it anyway. */
	int r = set_meta(l, fd, e, false);
	return r < 0 ? fail(l, r, "set owner and mode") : 0;
}

/* A symlink is stored as it is, whatever it points at: nothing here ever follows one, and in
 * a sandbox it resolves inside the sandbox's root. */
static int do_symlink(struct layer *l, int pfd, const char *name, struct archive_entry *e)
{
	const char *target = archive_entry_symlink(e);
	if (!target)
		target = archive_entry_symlink_utf8(e);
	if (!target || !*target)
		return fail(l, -EINVAL, "symlink without a target");
	if (strlen(target) >= OCI_MAX_PATH)
		return fail(l, -ENAMETOOLONG, "symlink target");
	int r = tree_remove_at(pfd, name, OCI_MAX_DEPTH);
	if (r < 0)
		return fail(l, r, "remove what was there");
	if (symlinkat(target, pfd, name) < 0)
		return fail(l, -errno, "symlink");
	if (!l->plain && fchownat(pfd, name, map_id(archive_entry_uid(e)), map_id(archive_entry_gid(e)),
		     AT_SYMLINK_NOFOLLOW) < 0)
		return fail(l, -errno, "chown");
	if (archive_entry_mtime_is_set(e)) {
		struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT},
					 {archive_entry_mtime(e), archive_entry_mtime_nsec(e)}};
		if (utimensat(pfd, name, ts, AT_SYMLINK_NOFOLLOW) < 0)
			return fail(l, -errno, "set times");
	}
	return 0;
}

/* A hard link must name a file (or symlink) already inside the root, reached without any
 * symlink; it links that inode, never what a symlink points at. */
static int do_hardlink(struct layer *l, int pfd, const char *rel, const char *name,
		       const char *link)
{
	char tpath[OCI_MAX_PATH];
	struct stat st;

	if (clean_path(link, tpath, sizeof(tpath)) < 0 || !tpath[0])
		return fail(l, -EINVAL, "hard link to the root or too long a target");
	if (strcmp(tpath, rel) == 0)
		return 0; /* to itself */
	char *tname = split_last(tpath);
	_cleanup_close_ int tfd = open_dir(l->rootfd, tpath, false);
	if (tfd < 0)
		return fail(l, tfd, "hard link target's directory is not inside the image");
	if (fstatat(tfd, tname, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return fail(l, -errno, "hard link target is not inside the image");
	if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
		return fail(l, -EPERM, "hard link to something other than a file");
	int r = tree_remove_at(pfd, name, OCI_MAX_DEPTH);
	if (r < 0)
		return fail(l, r, "remove what was there");
	if (linkat(tfd, tname, pfd, name, 0) < 0)
		return fail(l, -errno, "link");
	return 0;
}

static int do_whiteout(struct layer *l, const char *parent, const char *name)
{
	if (strcmp(name, WHITEOUT_OPAQUE) == 0) {
		_cleanup_close_ int fd = open_dir(l->rootfd, parent, true);
		if (fd < 0)
			return fail(l, fd, "opaque directory");
		int r = tree_empty(fd, OCI_MAX_DEPTH);
		return r < 0 ? fail(l, r, "empty opaque directory") : 0;
	}
	const char *victim = name + strlen(WHITEOUT);
	if (!*victim || strcmp(victim, ".") == 0 || strcmp(victim, "..") == 0)
		return fail(l, -EINVAL, "whiteout of '.', '..' or nothing");
	_cleanup_close_ int fd = open_dir(l->rootfd, parent, false);
	if (fd == -ENOENT)
		return 0; /* nothing there to delete */
	if (fd < 0)
		return fail(l, fd, "whiteout's directory");
	int r = tree_remove_at(fd, victim, OCI_MAX_DEPTH);
	return r < 0 ? fail(l, r, "whiteout") : 0;
}

/* oci_apply_tar()'s rules (basic/tar.h): 1 to go on, 0 for the root itself, <0 refused. */
static int plain_check(struct layer *l, const char *path, struct archive_entry *e)
{
	char name[OCI_MAX_PATH];
	const char *p = path;
	while (p[0] == '.' && p[1] == '/')
		p += 2;
	size_t n = strlen(p);
	if (n >= sizeof(name))
		return fail(l, -ENAMETOOLONG, "path longer than 4096 bytes");
	memcpy(name, p, n + 1);
	while (n > 0 && name[n - 1] == '/')
		name[--n] = '\0';
	if (!name[0] || strcmp(name, ".") == 0)
		return archive_entry_filetype(e) == AE_IFDIR ? 0 : fail(l, -EPERM, "not a directory");
	if (!tar_name_safe(name))
		return fail(l, -EPERM, "an absolute name or '..'");
	mode_t type = archive_entry_filetype(e);
	const char *hl = archive_entry_hardlink(e), *sl = archive_entry_symlink(e);
	if (!hl && type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK)
		return fail(l, -EPERM, "a device, fifo or socket");
	if (type == AE_IFLNK && !hl && (!sl || !tar_link_kept(name, sl)))
		return fail(l, -EPERM, "a symlink out of the tree");
	return 1;
}

static int apply_entry(struct layer *l, struct archive_entry *e)
{
	char rel[OCI_MAX_PATH], parent[OCI_MAX_PATH];
	int r;
	const char *path = archive_entry_pathname(e);
	if (!path)
		path = archive_entry_pathname_utf8(e);
	if (!path)
		return cordon_err_setf(l->err, -EILSEQ, "layer entry without a readable name");
	show(l->shown, sizeof(l->shown), path);
	if (l->plain && (r = plain_check(l, path, e)) <= 0)
		return r;
	if (clean_path(path, rel, sizeof(rel)) < 0)
		return fail(l, -ENAMETOOLONG, "path longer than 4096 bytes");
	memcpy(parent, rel, strlen(rel) + 1);
	const char *name = split_last(parent);
	if (!l->plain && strncmp(name, WHITEOUT, strlen(WHITEOUT)) == 0)
		return do_whiteout(l, parent, name);
	if (!*name) {
		/* the root itself: it stays as the caller made it */
		return archive_entry_filetype(e) == AE_IFDIR ? 0 : fail(l, -EINVAL, "not a directory");
	}

	mode_t type = archive_entry_filetype(e);
	const char *link = archive_entry_hardlink(e);
	if (!link)
		link = archive_entry_hardlink_utf8(e);
	if (!link && type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK)
		return 0; /* devices, fifos, sockets: skipped */
	_cleanup_close_ int pfd = open_dir(l->rootfd, parent, true);
	if (pfd < 0)
		return fail(l, pfd, "parent directory");
	if (link)
		return do_hardlink(l, pfd, rel, name, link);
	if (type == AE_IFDIR)
		return do_dir(l, pfd, name, e);
	if (type == AE_IFLNK)
		return do_symlink(l, pfd, name, e);
	return do_file(l, pfd, name, e);
}

static struct archive *reader_new(bool compressed)
{
	struct archive *a = archive_read_new();
	if (!a)
		return NULL;
	if (compressed) {
		archive_read_support_filter_gzip(a);
		archive_read_support_filter_zstd(a);
	}
	archive_read_support_format_tar(a);
	archive_read_support_format_empty(a);
	return a;
}

static int apply(int rootfd, int archive_fd, uint64_t max_bytes, uint64_t *used, bool plain,
		 struct cordon_err *err)
{
	struct archive_entry *e;
	struct layer l = {.rootfd = rootfd, .max_bytes = max_bytes, .used = used, .plain = plain,
			  .err = err};
	_cleanup_archive_ struct archive *a = l.a = reader_new(true);

	if (!a)
		return cordon_err_setf(err, -ENOMEM, "libarchive");
	if (*used > max_bytes)
		return cordon_err_setf(err, -EFBIG, "layer: no bytes left of the limit");
	if (archive_read_open_fd(a, archive_fd, 64 * 1024) != ARCHIVE_OK)
		return cordon_err_setf(err, -EINVAL, "layer: %s", archive_error_string(a));
	for (uint32_t n = 0;; n++) {
		int r = archive_read_next_header(a, &e);
		if (r == ARCHIVE_EOF)
			return 0;
		if (r < ARCHIVE_WARN)
			return cordon_err_setf(err, -EINVAL, "layer: entry %u: %s", n,
					       archive_error_string(a));
		if (n >= OCI_MAX_ENTRIES)
			return cordon_err_setf(err, -E2BIG, "layer: more than %u entries",
					       OCI_MAX_ENTRIES);
		if ((r = apply_entry(&l, e)) < 0)
			return r;
	}
}

int oci_apply_layer_budget(int rootfd, int archive_fd, uint64_t max_bytes, uint64_t *used,
			   struct cordon_err *err)
{
	return apply(rootfd, archive_fd, max_bytes, used, false, err);
}

int oci_apply_layer(int rootfd, int archive_fd, uint64_t max_bytes, struct cordon_err *err)
{
	uint64_t used = 0;
	return oci_apply_layer_budget(rootfd, archive_fd, max_bytes, &used, err);
}

int oci_apply_tar(int rootfd, int archive_fd, uint64_t max_bytes, struct cordon_err *err)
{
	uint64_t used = 0;
	return apply(rootfd, archive_fd, max_bytes, &used, true, err);
}

/* ---- image archives ---- */

struct import {
	const char *path;
	int rootfd;
	uint64_t max_bytes, used;
	struct cordon_err *err;
};

/* A member's name as a cleaned relative path: "./index.json" is "index.json". */
static bool member_is(struct archive_entry *e, const char *want)
{
	char rel[OCI_MAX_PATH];
	const char *p = archive_entry_pathname(e);
	return p && archive_entry_filetype(e) == AE_IFREG && !archive_entry_hardlink(e) &&
	       clean_path(p, rel, sizeof(rel)) == 0 && strcmp(rel, want) == 0;
}

/* Positions a fresh reader of the outer archive at the data of member @name. -ENOENT if
 * there is none. The archive is read anew each time: uncompressed, skipping is a seek. */
static int find_member(struct import *im, const char *name, struct archive **ret)
{
	struct archive_entry *e;
	_cleanup_archive_ struct archive *a = reader_new(true);
	if (!a)
		return cordon_err_setf(im->err, -ENOMEM, "libarchive");
	if (archive_read_open_filename(a, im->path, 64 * 1024) != ARCHIVE_OK)
		return cordon_err_setf(im->err, -archive_errno(a) ?: -EINVAL, "open '%s': %s",
				       im->path, archive_error_string(a));
	for (uint32_t n = 0; n < OCI_MAX_ENTRIES; n++) {
		int r = archive_read_next_header(a, &e);
		if (r == ARCHIVE_EOF)
			return -ENOENT;
		if (r < ARCHIVE_WARN)
			return cordon_err_setf(im->err, -EINVAL, "'%s': %s", im->path,
					       archive_error_string(a));
		if (member_is(e, name)) {
			*ret = TAKE_PTR(a);
			return 0;
		}
	}
	return cordon_err_setf(im->err, -E2BIG, "'%s': more than %u members", im->path, OCI_MAX_ENTRIES);
}

static int hex_of(const unsigned char *md, char out[65])
{
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
	return 0;
}

/* Copies member @name into @fd (or into a buffer of at most OCI_MAX_JSON bytes when @fd is
 * -1), checking its sha256 against @hex when not NULL. */
static int copy_member(struct import *im, const char *name, const char *hex, uint64_t limit,
		       int fd, char **ret_buf)
{
	struct archive *a0 = NULL;
	int r = find_member(im, name, &a0);
	if (r == -ENOENT)
		return cordon_err_setf(im->err, r, "'%s': no member '%s'", im->path, name);
	if (r < 0)
		return r;
	_cleanup_archive_ struct archive *a = a0;
	_cleanup_free_ char *buf = fd < 0 ? malloc(OCI_MAX_JSON + 1) : NULL;
	if (fd < 0 && !buf)
		return cordon_err_setf(im->err, -ENOMEM, "out of memory");
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	if (!md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
		EVP_MD_CTX_free(md);
		return cordon_err_setf(im->err, -ENOMEM, "sha256");
	}
	uint64_t total = 0;
	char chunk[64 * 1024];
	la_ssize_t n;
	while ((n = archive_read_data(a, chunk, sizeof(chunk))) > 0) {
		total += n;
		if (total > (fd < 0 ? OCI_MAX_JSON : limit)) {
			r = cordon_err_setf(im->err, -EFBIG, "'%s': member '%s' is too large", im->path, name);
			break;
		}
		EVP_DigestUpdate(md, chunk, n);
		if (fd < 0)
			memcpy(buf + total - n, chunk, n);
		else if (write(fd, chunk, n) != n) {
			r = cordon_err_set(im->err, -errno ?: -EIO, "copy '%s'", name);
			break;
		}
	}
	unsigned char digest[32];
	char got[65];
	EVP_DigestFinal_ex(md, digest, NULL);
	EVP_MD_CTX_free(md);
	if (r < 0)
		return r;
	if (n < 0)
		return cordon_err_setf(im->err, -EINVAL, "'%s': member '%s': %s", im->path, name,
				       archive_error_string(a));
	hex_of(digest, got);
	if (hex && strcmp(hex, got) != 0)
		return cordon_err_setf(im->err, -EBADMSG, "'%s': member '%s' has sha256 %s, not %s",
				       im->path, name, got, hex);
	if (fd < 0) {
		buf[total] = '\0';
		*ret_buf = TAKE_PTR(buf);
	}
	return 0;
}

/* "sha256:<64 lowercase hex>" -> the hex; anything else (other algorithms, a path) is refused
 * before it becomes part of a member name. */
static const char *digest_hex(const char *digest)
{
	if (!digest || strncmp(digest, "sha256:", 7) != 0 || strlen(digest) != 7 + 64)
		return NULL;
	for (const char *p = digest + 7; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return NULL;
	return digest + 7;
}

static json_t *read_json(struct import *im, const char *name, const char *hex)
{
	_cleanup_free_ char *buf = NULL;
	json_error_t je;
	if (copy_member(im, name, hex, 0, -1, &buf) < 0)
		return NULL;
	json_t *j = json_loads(buf, JSON_REJECT_DUPLICATES, &je);
	if (!j)
		cordon_err_setf(im->err, -EINVAL, "'%s': %s: %s", im->path, name, je.text);
	return j;
}

static json_t *read_blob_json(struct import *im, const char *digest)
{
	char name[128];
	const char *hex = digest_hex(digest);
	if (!hex) {
		cordon_err_setf(im->err, -EINVAL, "'%s': not a sha256 digest", im->path);
		return NULL;
	}
	snprintf(name, sizeof(name), "blobs/sha256/%s", hex);
	return read_json(im, name, hex);
}

/* Applies member @name, checked against @hex, from a private unnamed copy (an O_TMPFILE in
 * the target's file system: the outer archive may be compressed and cannot be seeked). */
static int apply_member(struct import *im, const char *name, const char *hex)
{
	_cleanup_close_ int fd = openat(im->rootfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0)
		fd = memfd_create("cordon-layer", MFD_CLOEXEC);
	if (fd < 0)
		return cordon_err_set(im->err, -errno, "temporary file for '%s'", name);
	int r = copy_member(im, name, hex, im->max_bytes + BLOB_SLACK, fd, NULL);
	if (r < 0)
		return r;
	if (lseek(fd, 0, SEEK_SET) < 0)
		return cordon_err_set(im->err, -errno, "seek");
	return oci_apply_layer_budget(im->rootfd, fd, im->max_bytes, &im->used, im->err);
}

#if defined(__x86_64__)
#define HOST_ARCH "amd64"
#elif defined(__aarch64__)
#define HOST_ARCH "arm64"
#else
#define HOST_ARCH ""
#endif

/* Of an index's manifests, the one for this host (or without a platform, or the first). */
static json_t *pick_manifest(json_t *index)
{
	json_t *ms = json_object_get(index, "manifests"), *m, *first = NULL;
	size_t i;
	json_array_foreach(ms, i, m) {
		json_t *pl = json_object_get(m, "platform");
		const char *arch = json_string_value(json_object_get(pl, "architecture"));
		const char *os = json_string_value(json_object_get(pl, "os"));
		if (!pl || (arch && os && strcmp(arch, HOST_ARCH) == 0 && strcmp(os, "linux") == 0))
			return m;
		if (!first)
			first = m;
	}
	return first;
}

/* index.json -> (nested indexes) -> an image manifest, whose blob is returned. */
static json_t *oci_manifest(struct import *im, json_t *index)
{
	json_t *cur = json_incref(index);
	for (int depth = 0; depth < 4; depth++) {
		json_t *desc = pick_manifest(cur);
		const char *mt = json_string_value(json_object_get(desc, "mediaType"));
		json_t *next = desc ? read_blob_json(im, json_string_value(json_object_get(desc, "digest"))) : NULL;
		if (!desc)
			cordon_err_setf(im->err, -EINVAL, "'%s': an index without manifests", im->path);
		json_decref(cur);
		if (!next)
			return NULL;
		cur = next;
		if (!(mt && strstr(mt, "index")) && !json_object_get(cur, "manifests"))
			return cur;
	}
	json_decref(cur);
	cordon_err_setf(im->err, -ELOOP, "'%s': indexes nested too deep", im->path);
	return NULL;
}

static char **strv_from_json(json_t *a, char **prefix)
{
	size_t n0 = 0, n = json_array_size(a), i;
	json_t *s;
	if (!n && !prefix)
		return NULL;
	while (prefix && prefix[n0])
		n0++;
	char **v = calloc(n0 + n + 1, sizeof(char *));
	if (!v)
		return NULL;
	for (i = 0; i < n0; i++)
		v[i] = prefix[i];
	json_array_foreach(a, i, s)
		if (json_is_string(s))
			v[n0++] = strdup(json_string_value(s));
	free(prefix);
	return v;
}

void oci_config_done(struct oci_config *cfg)
{
	for (char **v = cfg->env; v && *v; v++)
		free(*v);
	for (char **v = cfg->cmd; v && *v; v++)
		free(*v);
	free(cfg->env);
	free(cfg->cmd);
	free(cfg->working_dir);
	free(cfg->user);
	*cfg = (struct oci_config){0};
}

static void fill_config(json_t *config, struct oci_config *ret)
{
	json_t *c = json_object_get(config, "config");
	const char *s;
	*ret = (struct oci_config){0};
	ret->env = strv_from_json(json_object_get(c, "Env"), NULL);
	ret->cmd = strv_from_json(json_object_get(c, "Cmd"),
				  strv_from_json(json_object_get(c, "Entrypoint"), NULL));
	if ((s = json_string_value(json_object_get(c, "WorkingDir"))) && *s)
		ret->working_dir = strdup(s);
	if ((s = json_string_value(json_object_get(c, "User"))) && *s)
		ret->user = strdup(s);
}

static int apply_oci(struct import *im, json_t *index, json_t **ret_config)
{
	json_t *m = oci_manifest(im, index);
	if (!m)
		return im->err && im->err->code ? im->err->code : -EINVAL;
	json_t *layers = json_object_get(m, "layers"), *l;
	size_t i;
	int r = 0;
	if (!json_is_array(layers) || json_array_size(layers) > OCI_MAX_LAYERS) {
		json_decref(m);
		return cordon_err_setf(im->err, -EINVAL, "'%s': manifest without layers, or too many",
				       im->path);
	}
	*ret_config = read_blob_json(im, json_string_value(json_object_get(json_object_get(m, "config"), "digest")));
	if (!*ret_config)
		r = im->err && im->err->code ? im->err->code : -EINVAL;
	json_array_foreach(layers, i, l) {
		char name[128];
		const char *hex = digest_hex(json_string_value(json_object_get(l, "digest")));
		if (r < 0)
			break;
		if (!hex) {
			r = cordon_err_setf(im->err, -EINVAL, "'%s': layer %zu: not a sha256 digest", im->path, i);
			break;
		}
		snprintf(name, sizeof(name), "blobs/sha256/%s", hex);
		r = apply_member(im, name, hex);
	}
	json_decref(m);
	return r;
}

/* docker save: manifest.json names the config and the layer files. Each (uncompressed) layer
 * is checked against its diff_id in the config, whose own name is its sha256. */
static int apply_docker(struct import *im, json_t *manifest, json_t **ret_config)
{
	json_t *m = json_array_get(manifest, 0);
	const char *cname = json_string_value(json_object_get(m, "Config"));
	json_t *layers = json_object_get(m, "Layers"), *l;
	char chex[65] = "";
	size_t i;
	if (!cname || !json_is_array(layers) || json_array_size(layers) > OCI_MAX_LAYERS)
		return cordon_err_setf(im->err, -EINVAL, "'%s': manifest.json without Config or Layers", im->path);
	const char *base = strrchr(cname, '/') ? strrchr(cname, '/') + 1 : cname;
	if (sscanf(base, "%64[0-9a-f]", chex) != 1 || strlen(chex) != 64)
		chex[0] = '\0';
	*ret_config = read_json(im, cname, chex[0] ? chex : NULL);
	if (!*ret_config)
		return im->err && im->err->code ? im->err->code : -EINVAL;
	json_t *diff_ids = json_object_get(json_object_get(*ret_config, "rootfs"), "diff_ids");
	if (json_array_size(diff_ids) != json_array_size(layers))
		return cordon_err_setf(im->err, -EINVAL, "'%s': %zu layers but %zu diff_ids", im->path,
				       json_array_size(layers), json_array_size(diff_ids));
	json_array_foreach(layers, i, l) {
		const char *name = json_string_value(l);
		const char *hex = digest_hex(json_string_value(json_array_get(diff_ids, i)));
		if (!name || !hex)
			return cordon_err_setf(im->err, -EINVAL, "'%s': layer %zu: no name or diff_id", im->path, i);
		int r = apply_member(im, name, hex);
		if (r < 0)
			return r;
	}
	return 0;
}

static int dir_is_empty(int rootfd)
{
	int fd = openat(rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	_cleanup_closedir_ DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	struct dirent *de;
	while ((de = readdir(d)))
		if (!tree_is_dot(de->d_name))
			return -ENOTEMPTY;
	return 0;
}

int oci_import(const char *path, int rootfd, uint64_t max_bytes, struct oci_config *ret_config,
	       struct cordon_err *err)
{
	struct import im = {.path = path, .rootfd = rootfd, .max_bytes = max_bytes, .err = err};
	json_t *config = NULL, *top;
	int r = dir_is_empty(rootfd);
	if (r < 0)
		return cordon_err_set(err, r, "import '%s': target directory", path);

	struct cordon_err probe = {0};
	im.err = &probe;
	top = read_json(&im, "index.json", NULL);
	bool oci = top != NULL;
	if (!oci && probe.code != -ENOENT) {
		if (err)
			*err = probe;
		return probe.code;
	}
	im.err = err;
	if (!oci && !(top = read_json(&im, "manifest.json", NULL)))
		return cordon_err_setf(err, err && err->code ? err->code : -EINVAL,
				       "'%s': neither an OCI layout (index.json) nor a docker save "
				       "archive (manifest.json)", path);
	r = oci ? apply_oci(&im, top, &config) : apply_docker(&im, top, &config);
	json_decref(top);
	if (r >= 0 && ret_config)
		fill_config(config, ret_config);
	json_decref(config);
	return r;
}
