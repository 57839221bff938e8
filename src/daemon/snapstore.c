/* The snapshots on disk (daemon.h, "snapstore.c"): one directory per snapshot under
 * <state>/snapshots, its meta.json (what the API shows) and fs/ (what the runtime wrote).
 * A snapshot is made under .tmp-<id> and renamed into place whole, so that a crash leaves a
 * temporary name the next start removes, never half a snapshot under a real one; removal
 * renames it to .rm-<id> first for the same reason. Sizes are the meta's: summed by a scan
 * at start, then kept as snapshots come and go (/metrics and every snapshot read them). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "basic/log.h"
#include "basic/tree.h"
#include "daemon/daemon.h"

static struct {
	size_t n;
	uint64_t bytes;
} usage;

static uint64_t meta_size(json_t *meta)
{
	json_int_t v = json_integer_value(json_object_get(meta, "size_bytes"));
	return v > 0 ? (uint64_t)v : 0;
}

static int snap_dir(char *buf, size_t size, const char *prefix, const char *id)
{
	return (size_t)snprintf(buf, size, "%s%s", prefix, id) < size ? 0 : -ENAMETOOLONG;
}

/* A directory stream of its own (a dup would share the offset with every other scan). */
static DIR *snap_opendir(void)
{
	int fd = D.snap_dirfd < 0 ? -1 : openat(D.snap_dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd < 0 ? NULL : fdopendir(fd);
	if (!d && fd >= 0)
		close(fd);
	return d;
}

static void sweep_temporaries(void)
{
	_cleanup_closedir_ DIR *d = snap_opendir();
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d)))
		if (strncmp(de->d_name, ".tmp-", 5) == 0 || strncmp(de->d_name, ".rm-", 4) == 0)
			(void)tree_remove_at(D.snap_dirfd, de->d_name, TREE_MAX_DEPTH);
}

static void add_usage(json_t *meta, void *arg);

int snapstore_open(const char *state_dir)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/snapshots", state_dir);
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		return -errno;
	D.snap_dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (D.snap_dirfd < 0)
		return -errno;
	sweep_temporaries();
	snapstore_each(add_usage, NULL);
	return 0;
}

void snapstore_new_id(char out[32])
{
	char id[SBX_ID_LEN + 1];
	make_id(id); /* "sb-" + 20 base32: the same randomness, another prefix */
	snprintf(out, 32, "sn-%s", id + 3);
}

int snapstore_begin(const char *id, int *ret_fsfd)
{
	char tmp[64];
	int r = snap_dir(tmp, sizeof(tmp), ".tmp-", id);
	if (r < 0)
		return r;
	if (mkdirat(D.snap_dirfd, tmp, 0700) < 0)
		return -errno;
	_cleanup_close_ int dfd = openat(D.snap_dirfd, tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || mkdirat(dfd, "fs", 0700) < 0) {
		r = -errno;
		snapstore_abort(id);
		return r;
	}
	*ret_fsfd = openat(dfd, "fs", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (*ret_fsfd < 0) {
		r = -errno;
		snapstore_abort(id);
		return r;
	}
	return 0;
}

int snapstore_commit(const char *id, json_t *meta)
{
	char tmp[64], file[96];
	snap_dir(tmp, sizeof(tmp), ".tmp-", id);
	snprintf(file, sizeof(file), "%s/meta.json", tmp);
	_cleanup_free_ char *text = json_dumps(meta, JSON_COMPACT);
	_cleanup_close_ int fd = openat(D.snap_dirfd, file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	int r = !text ? -ENOMEM : fd < 0 ? -errno : 0;
	if (r == 0 && write(fd, text, strlen(text)) != (ssize_t)strlen(text))
		r = -EIO;
	if (r == 0 && renameat(D.snap_dirfd, tmp, D.snap_dirfd, id) < 0)
		r = -errno;
	if (r < 0) {
		snapstore_abort(id);
		return r;
	}
	add_usage(meta, &usage);
	return 0;
}

void snapstore_abort(const char *id)
{
	char tmp[64];
	if (snap_dir(tmp, sizeof(tmp), ".tmp-", id) == 0)
		(void)tree_remove_at(D.snap_dirfd, tmp, TREE_MAX_DEPTH);
}

int snapstore_read(const char *id, json_t **ret_meta)
{
	char file[96];
	if (!api_snapshot_id_ok(id))
		return -ENOENT;
	snprintf(file, sizeof(file), "%s/meta.json", id);
	_cleanup_close_ int fd = openat(D.snap_dirfd, file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	json_error_t je;
	json_t *m = json_loadfd(fd, 0, &je);
	if (!json_is_object(m)) {
		json_decref(m);
		return -EBADMSG;
	}
	*ret_meta = m;
	return 0;
}

int snapstore_fs(const char *id)
{
	char dir[64];
	if (!api_snapshot_id_ok(id))
		return -ENOENT;
	snprintf(dir, sizeof(dir), "%s/fs", id);
	int fd = openat(D.snap_dirfd, dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

int snapstore_remove(const char *id)
{
	char rm[64];
	if (!api_snapshot_id_ok(id))
		return -ENOENT;
	snap_dir(rm, sizeof(rm), ".rm-", id);
	json_t *meta = NULL;
	uint64_t size = snapstore_read(id, &meta) == 0 ? meta_size(meta) : 0;
	json_decref(meta);
	if (renameat(D.snap_dirfd, id, D.snap_dirfd, rm) < 0)
		return -errno;
	usage.n -= usage.n > 0;
	usage.bytes -= size < usage.bytes ? size : usage.bytes;
	int r = tree_remove_at(D.snap_dirfd, rm, TREE_MAX_DEPTH);
	if (r < 0)
		log_warning("snapshot %s: removal left files (%s); the next start removes them", id,
			    strerror(-r));
	return 0;
}

static int by_created(const void *a, const void *b)
{
	json_t *const *x = a, *const *y = b;
	const char *p = json_string_value(json_object_get(*x, "created_at"));
	const char *q = json_string_value(json_object_get(*y, "created_at"));
	return strcmp(p ? p : "", q ? q : "");
}

void snapstore_each(void (*fn)(json_t *meta, void *arg), void *arg)
{
	_cleanup_closedir_ DIR *d = snap_opendir();
	if (!d)
		return;
	_cleanup_(json_decrefp) json_t *all = json_array();
	struct dirent *de;
	json_t *m;
	while (all && (de = readdir(d)))
		if (api_snapshot_id_ok(de->d_name) && snapstore_read(de->d_name, &m) == 0)
			json_array_append_new(all, m);
	size_t n = json_array_size(all);
	json_t **v = n ? calloc(n, sizeof(*v)) : NULL;
	for (size_t i = 0; v && i < n; i++)
		v[i] = json_array_get(all, i);
	if (v)
		qsort(v, n, sizeof(*v), by_created);
	for (size_t i = 0; v && i < n; i++)
		fn(v[i], arg);
	free(v);
}

static void add_usage(json_t *meta, void *arg)
{
	(void)arg;
	usage.n++;
	usage.bytes += meta_size(meta);
}

void snapstore_usage(size_t *ret_n, uint64_t *ret_bytes)
{
	*ret_n = usage.n;
	*ret_bytes = usage.bytes;
}
