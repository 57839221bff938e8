/* Persistent volumes (volume.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <linux/mount.h>
#include <unistd.h>

#include "basic/cleanup.h"
#include "runtime/blockdev.h"
#include "runtime/volume.h"

#define TMP_PREFIX ".tmp-"
/* A holder that let go a moment ago may still be tearing its mounts down (its sandbox's
 * mount namespace, the loop device clearing itself): so long we wait for the lock. */
#define LOCK_WAIT_MS 500

const char *volume_dir(void)
{
	const char *d = getenv("CORDON_VOLUME_DIR");
	return d && d[0] == '/' ? d : "/var/lib/cordon/volumes";
}

bool volume_name_ok(const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || n > VOLUME_NAME_MAX || !((name[0] >= 'a' && name[0] <= 'z') ||
					      (name[0] >= '0' && name[0] <= '9')))
		return false;
	return strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

static int dir_open(bool create)
{
	const char *dir = volume_dir();
	if (create && strcmp(dir, "/var/lib/cordon/volumes") == 0)
		(void)mkdir("/var/lib/cordon", 0755);
	if (create && mkdir(dir, 0700) < 0 && errno != EEXIST)
		return -errno;
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

static int check_name(const char *name, struct cordon_err *err)
{
	if (!volume_name_ok(name))
		return cordon_err_setf(err, -EINVAL, "volume name: must match [a-z0-9][a-z0-9._-]{0,%d}",
				       VOLUME_NAME_MAX - 1);
	return 0;
}

/* Opens @name's image for writing; -ENOENT when there is none. */
static int image_open(const char *name, struct cordon_err *err)
{
	char file[VOLUME_NAME_MAX + 8];
	int r = check_name(name, err);
	if (r < 0)
		return r;
	_cleanup_close_ int dirfd = dir_open(false);
	if (dirfd < 0)
		return dirfd == -ENOENT ? cordon_err_setf(err, -ENOENT, "no volume '%s'", name)
					: cordon_err_set(err, dirfd, "volumes: open '%s'", volume_dir());
	snprintf(file, sizeof(file), "%s.img", name);
	int fd = openat(dirfd, file, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? cordon_err_setf(err, -ENOENT, "no volume '%s'", name)
				       : cordon_err_set(err, -errno, "volume '%s'", name);
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return cordon_err_setf(err, -EINVAL, "volume '%s': not a regular file", name);
	}
	return fd;
}

/* The exclusive lock on @fd, waiting LOCK_WAIT_MS for a holder that is letting go. */
static int lock_image(int fd, const char *name, struct cordon_err *err)
{
	for (int waited = 0;; waited += 10) {
		if (flock(fd, LOCK_EX | LOCK_NB) == 0)
			return 0;
		if (errno != EWOULDBLOCK && errno != EINTR)
			return cordon_err_set(err, -errno, "volume '%s': lock", name);
		if (waited >= LOCK_WAIT_MS)
			return cordon_err_setf(err, -EBUSY, "volume '%s' is in use by another process",
					       name);
		usleep(10000);
	}
}

static int make_image(int dirfd, const char *tmp, uint64_t size_mb)
{
	char path[PATH_MAX];
	_cleanup_close_ int fd = openat(dirfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)(size_mb << 20)) < 0)
		return -errno;
	snprintf(path, sizeof(path), "%s/%s", volume_dir(), tmp);
	/* The volume's root is the sandbox user's (1000 inside), as a home directory is. */
	int r = blockdev_mke2fs(path, true, "1000:1000");
	return r < 0 ? r : fsync(fd) < 0 ? -errno : 0;
}

int volume_create(const char *name, uint64_t size_mb, struct cordon_err *err)
{
	char tmp[VOLUME_NAME_MAX + 32], file[VOLUME_NAME_MAX + 8];
	struct statvfs sv;
	int r = check_name(name, err);
	if (r < 0)
		return r;
	if (size_mb < VOLUME_MIN_MB || size_mb > VOLUME_MAX_MB)
		return cordon_err_setf(err, -EINVAL, "size_mb: must be between %u and %u", VOLUME_MIN_MB,
				       VOLUME_MAX_MB);
	_cleanup_close_ int dirfd = dir_open(true);
	if (dirfd < 0)
		return cordon_err_set(err, dirfd, "volumes: open '%s'", volume_dir());
	if (fstatvfs(dirfd, &sv) < 0)
		return cordon_err_set(err, -errno, "volumes: statvfs '%s'", volume_dir());
	uint64_t avail_mb = ((uint64_t)sv.f_bavail * sv.f_frsize) >> 20;
	if (size_mb > avail_mb)
		return cordon_err_setf(err, -ENOSPC, "size_mb: %llu MiB is more than the host's free "
				       "space (%llu MiB)", (unsigned long long)size_mb,
				       (unsigned long long)avail_mb);
	snprintf(file, sizeof(file), "%s.img", name);
	if (faccessat(dirfd, file, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
		return cordon_err_setf(err, -EEXIST, "volume '%s' exists", name);
	snprintf(tmp, sizeof(tmp), TMP_PREFIX "%s.%d", name, (int)getpid());
	r = make_image(dirfd, tmp, size_mb);
	if (r == 0 && syscall(SYS_renameat2, dirfd, tmp, dirfd, file, RENAME_NOREPLACE) < 0)
		r = -errno;
	if (r < 0) {
		(void)unlinkat(dirfd, tmp, 0);
		if (r == -EEXIST)
			return cordon_err_setf(err, r, "volume '%s' exists", name);
		return cordon_err_set(err, r, "volume '%s': make its filesystem", name);
	}
	return 0;
}

static int info_of(int fd, const char *name, struct volume_info *ret)
{
	struct statx sx;
	if (statx(fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS | STATX_BTIME, &sx) < 0)
		return -errno;
	*ret = (struct volume_info){.size_bytes = sx.stx_size, .used_bytes = sx.stx_blocks * 512};
	snprintf(ret->name, sizeof(ret->name), "%s", name);
	ret->created_s = (sx.stx_mask & STATX_BTIME) ? sx.stx_btime.tv_sec : sx.stx_mtime.tv_sec;
	/* The lock is someone's: a mount of it. Ours is dropped at once. */
	if (flock(fd, LOCK_EX | LOCK_NB) == 0)
		(void)flock(fd, LOCK_UN);
	else
		ret->in_use = true;
	return 0;
}

int volume_stat(const char *name, struct volume_info *ret, struct cordon_err *err)
{
	_cleanup_close_ int fd = image_open(name, err);
	if (fd < 0)
		return fd;
	int r = info_of(fd, name, ret);
	return r < 0 ? cordon_err_set(err, r, "volume '%s': stat", name) : 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(((const struct volume_info *)a)->name, ((const struct volume_info *)b)->name);
}

/* The volume named by directory entry @d ("<name>.img"), into @out; 0 if it is none. */
static int list_one(const char *d, struct volume_info *out)
{
	char name[VOLUME_NAME_MAX + 1];
	size_t n = strlen(d);
	if (n < 5 || n - 4 > VOLUME_NAME_MAX || strcmp(d + n - 4, ".img") != 0)
		return 0;
	snprintf(name, sizeof(name), "%.*s", (int)(n - 4), d);
	if (!volume_name_ok(name))
		return 0;
	_cleanup_close_ int fd = image_open(name, NULL);
	return fd < 0 ? 0 : info_of(fd, name, out) == 0;
}

int volume_list(struct volume_info **ret, size_t *ret_n, struct cordon_err *err)
{
	_cleanup_free_ struct volume_info *v = NULL;
	size_t n = 0, cap = 0;
	_cleanup_close_ int dirfd = dir_open(false);
	int fd = dirfd < 0 ? -1 : dup(dirfd);
	_cleanup_closedir_ DIR *d = fd < 0 ? NULL : fdopendir(fd);
	if (!d && fd >= 0)
		close(fd);
	for (struct dirent *de; d && (de = readdir(d));) {
		if (n == cap) {
			struct volume_info *nv = reallocarray(v, cap = cap ? cap * 2 : 16, sizeof(*v));
			if (!nv)
				return cordon_err_setf(err, -ENOMEM, "out of memory");
			v = nv;
		}
		n += list_one(de->d_name, &v[n]) > 0;
	}
	if (n)
		qsort(v, n, sizeof(*v), by_name);
	*ret_n = n;
	*ret = TAKE_PTR(v);
	return 0;
}

int volume_delete(const char *name, struct cordon_err *err)
{
	char file[VOLUME_NAME_MAX + 8];
	_cleanup_close_ int fd = image_open(name, err);
	if (fd < 0)
		return fd;
	/* Held while the name goes: an open that comes between finds it locked, then gone. */
	if (flock(fd, LOCK_EX | LOCK_NB) < 0)
		return errno == EWOULDBLOCK ? cordon_err_setf(err, -EBUSY, "volume '%s' is in use", name)
					    : cordon_err_set(err, -errno, "volume '%s': lock", name);
	_cleanup_close_ int dirfd = dir_open(false);
	snprintf(file, sizeof(file), "%s.img", name);
	if (dirfd < 0 || unlinkat(dirfd, file, 0) < 0)
		return cordon_err_set(err, dirfd < 0 ? dirfd : -errno, "volume '%s': remove", name);
	return 0;
}

int volume_open(const char *name, struct volume_handle *ret, struct cordon_err *err)
{
	_cleanup_close_ int fd = image_open(name, err);
	if (fd < 0)
		return fd;
	int r = lock_image(fd, name, err), nr = -1;
	if (r < 0)
		return r;
	/* The loop device takes the open image, and the lock with it, until it clears. */
	_cleanup_close_ int loop = blockdev_loop_attach(fd, &nr);
	if (loop < 0)
		return cordon_err_set(err, loop, "volume '%s': a loop device", name);
	struct volume_handle h = VOLUME_HANDLE_NONE;
	snprintf(h.source, sizeof(h.source), "/dev/loop%d", nr);
	h.mnt = blockdev_mount_ext4(h.source, BLOCKDEV_VOLUME, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
	if (h.mnt < 0)
		return cordon_err_set(err, h.mnt, "volume '%s': mount its ext4", name);
	*ret = h;
	return 0;
}

void volume_close(struct volume_handle *h)
{
	if (h->mnt >= 0)
		close(TAKE_FD(h->mnt));
}

int volume_tree(const char *source, int userns_fd, bool read_only, struct cordon_err *err)
{
	unsigned attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (read_only ? MOUNT_ATTR_RDONLY : 0);
	_cleanup_close_ int mnt = blockdev_mount_ext4(source, BLOCKDEV_VOLUME, attrs);
	if (mnt < 0)
		return cordon_err_set(err, mnt, "volume: mount '%s'", source);
	struct mount_attr attr = {.attr_set = MOUNT_ATTR_IDMAP, .userns_fd = (uint64_t)userns_fd};
	if (syscall(SYS_mount_setattr, mnt, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0)
		return cordon_err_set(err, -errno, "volume: idmap '%s'", source);
	return TAKE_FD(mnt);
}

/* ".tmp-<name>.<pid>" whose maker is gone. */
static bool tmp_stale(const char *d)
{
	const char *dot = strrchr(d, '.');
	if (strncmp(d, TMP_PREFIX, strlen(TMP_PREFIX)) != 0 || !dot)
		return false;
	char *end;
	long pid = strtol(dot + 1, &end, 10);
	return *end == '\0' && pid > 0 && kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

void volume_sweep(void)
{
	_cleanup_close_ int dirfd = dir_open(false);
	int fd = dirfd < 0 ? -1 : dup(dirfd);
	_cleanup_closedir_ DIR *d = fd < 0 ? NULL : fdopendir(fd);
	if (!d && fd >= 0)
		close(fd);
	for (struct dirent *de; d && (de = readdir(d));)
		if (tmp_stale(de->d_name))
			(void)unlinkat(dirfd, de->d_name, 0);
}
