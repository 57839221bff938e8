/* A sandbox's scratch filesystem on a loop device (scratch.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <linux/mount.h>
#include <unistd.h>

#include "basic/child.h"
#include "basic/cleanup.h"
#include "basic/log.h"
#include "basic/tree.h"
#include "basic/treecopy.h"
#include "lib/idmap.h"
#include "lib/overlay.h"
#include "runtime/blockdev.h"
#include "runtime/prjquota.h"
#include "runtime/scratch.h"

/* 0: not probed, 1: works, -1: this host has none (logged once). */
static int scratch_state;

/* A sandbox's project id is its slot's, far above the small ids people give their own
 * projects (/etc/projid). */
#define SCRATCH_PROJID_BASE 0x434f0000u

/* The kind of disk, found at the first one (scratch.h): a directory with a project quota of
 * its own, or an ext4 image on a loop device. */
enum scratch_backend { BACKEND_LOOP, BACKEND_QUOTA };
static enum scratch_backend backend;

const char *scratch_dir(void)
{
	const char *d = getenv("CORDON_SCRATCH_DIR");
	return d && d[0] == '/' ? d : "/var/lib/cordon/scratch";
}

bool scratch_on_disk(void)
{
	const char *mode = getenv("CORDON_SCRATCH");
	struct statfs sf;
	if (scratch_state < 0 || geteuid() != 0 || (mode && strcmp(mode, "tmpfs") == 0))
		return false;
	return statfs(scratch_dir(), &sf) < 0 || sf.f_type != TMPFS_MAGIC;
}

static int scratch_dirfd(void)
{
	const char *dir = scratch_dir();
	/* Only the parent of the default is ours to make; a given directory must exist. */
	if (strcmp(dir, "/var/lib/cordon/scratch") == 0)
		(void)mkdir("/var/lib/cordon", 0755);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return -errno;
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/* The empty filesystem of @mb MiB, made once and shared by every sandbox of that size: made
 * under a temporary name and renamed, so that a reader never sees half of one. */
static int golden_open(int dirfd, uint64_t mb)
{
	char name[64], tmp[96], path[PATH_MAX];
	snprintf(name, sizeof(name), "golden-%llum.img", (unsigned long long)mb);
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd >= 0 || errno != ENOENT)
		return fd < 0 ? -errno : fd;
	/* The thread's id, not the process's: cordond's loop (a create that skips the pool) and
	 * its pool thread may both make the first image of a size at once, and with one name
	 * each truncated the other's and one rename found nothing (ENOENT, or mke2fs's EIO). A
	 * thread id is a pid for kill(), so the sweep's liveness test still holds. */
	snprintf(tmp, sizeof(tmp), "%s.%d", name, (int)gettid());
	_cleanup_close_ int t = openat(dirfd, tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (t < 0)
		return -errno;
	int r = ftruncate(t, (off_t)(mb << 20)) < 0 ? -errno : 0;
	snprintf(path, sizeof(path), "%s/%s", scratch_dir(), tmp);
	if (r == 0)
		r = blockdev_mke2fs(path, false, "0:0");
	if (r == 0 && renameat(dirfd, tmp, dirfd, name) < 0)
		r = -errno;
	if (r < 0) {
		(void)unlinkat(dirfd, tmp, 0);
		return r;
	}
	fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	return fd < 0 ? -errno : fd;
}

/* A copy of @src's data extents only: the holes stay holes. A reflink where the directory's
 * filesystem has them (xfs, btrfs), copy_file_range otherwise: a few MiB of metadata. */
int scratch_copy_sparse(int src, int dst)
{
	struct stat st;
	if (fstat(src, &st) < 0 || ftruncate(dst, st.st_size) < 0)
		return -errno;
	if (ioctl(dst, FICLONE, src) == 0)
		return 0;
	for (off_t off = 0; off < st.st_size;) {
		off_t data = lseek(src, off, SEEK_DATA);
		if (data < 0)
			return errno == ENXIO ? 0 : -errno;
		off_t hole = lseek(src, data, SEEK_HOLE);
		if (hole < 0)
			return -errno;
		for (off_t o = data; o < hole;) {
			off_t in = o, out = o;
			ssize_t n = copy_file_range(src, &in, dst, &out, (size_t)(hole - o), 0);
			if (n <= 0)
				return n < 0 ? -errno : -EIO;
			o += n;
		}
		off = hole;
	}
	return 0;
}

/* Removes "q<slot>", the directory of a project-quota disk, and clears its project's limits:
 * nothing of it stays on the host. The caller holds the slot's lock. */
static void quota_remove(int dirfd, unsigned slot)
{
	char name[32];
	struct stat st;
	snprintf(name, sizeof(name), "q%u", slot);
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return;
	if (tree_remove_at(dirfd, name, TREE_MAX_DEPTH) < 0)
		log_debug("scratch: remove %s: %m", name);
	(void)prjquota_limit(dirfd, SCRATCH_PROJID_BASE + slot, 0);
}

/* Where a slot's scratch is attached for the moment its layout and overlays need paths:
 * /run/cordon/stage/s<slot>, on /run's tmpfs, and not beside the images. A host filesystem
 * without a journal (this project's CI machines) checks each inode it hands out against the
 * inodes its block group freed in the last 5 s (ext4's recently_deleted()): a directory made
 * and removed there per build made every build's inodes slower to find the more builds a
 * second ran (0.6 ms of the pool thread's per build at ~150 a second). Without /run, beside
 * the images as before. Made with its parents; 0 or -errno. */
static const char stage_root[] = "/run/cordon/stage";

static int stage_make(unsigned slot, char *buf, size_t size)
{
	snprintf(buf, size, "%s/s%u", stage_root, slot);
	if (mkdir(buf, 0700) == 0)
		return 0;
	if (errno == ENOENT && (mkdir("/run/cordon", 0755) == 0 || errno == EEXIST) &&
	    (mkdir(stage_root, 0700) == 0 || errno == EEXIST) && mkdir(buf, 0700) == 0)
		return 0;
	if (errno == EEXIST)
		return -EEXIST;
	snprintf(buf, size, "%s/s%u", scratch_dir(), slot);
	return mkdir(buf, 0700) < 0 ? -errno : 0;
}

static void stage_sweep(const char *path)
{
	while (umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW) == 0)
		;
	(void)rmdir(path);
}

/* Removes the staging mount point (and one where an earlier version made it, "s<slot>" beside
 * the images), "s<slot>.img" and "q<slot>" of a dead holder. The caller holds the slot's lock. */
static void sweep_slot(int dirfd, unsigned slot)
{
	char name[32], path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/s%u", stage_root, slot);
	stage_sweep(path);
	snprintf(path, sizeof(path), "%s/s%u", scratch_dir(), slot);
	stage_sweep(path);
	snprintf(name, sizeof(name), "s%u.img", slot);
	(void)unlinkat(dirfd, name, 0);
	quota_remove(dirfd, slot);
}

/* Before the first disk was made, a failure says the host cannot give one: tmpfs it is,
 * said once (scratch.h). After, it is this sandbox's (loop devices exhausted, the host's disk
 * full): the sandbox is refused rather than given memory for a disk. */
static int open_failed(int r, const char *what, struct cordon_err *err)
{
	if (scratch_state == 1)
		return cordon_err_set(err, r, "scratch: %s", what);
	/* Info: cordond's log has it; `cordon run` (warnings only) does not say it at every run. */
	log_info("scratch: %s: %s; sandboxes keep a tmpfs root (in memory)", what, strerror(-r));
	scratch_state = -1;
	return 0;
}

static void backend_find(void)
{
	const char *mode = getenv("CORDON_SCRATCH");
	bool loop = mode && strcmp(mode, "loop") == 0;
	_cleanup_close_ int dirfd = open(scratch_dir(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	backend = !loop && dirfd >= 0 && prjquota_probe(dirfd) == 0 ? BACKEND_QUOTA : BACKEND_LOOP;
	log_info("scratch: %s: %s", scratch_dir(),
		 backend == BACKEND_QUOTA ? "project quotas: each disk is a directory with its own"
					  : "each disk is an ext4 image on a loop device");
}

/* Found once per process, at its first disk (cordond's pool thread and its loop may both be
 * first): project quotas where the scratch directory's filesystem enforces them
 * (CORDON_SCRATCH=loop asks for images anyway), images otherwise. */
static enum scratch_backend backend_probe(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, backend_find);
	return backend;
}

/* A detached bind mount of the directory @fd, nosuid, nodev, noatime: the disk's root, as
 * an image's fsmount is. */
static int clone_dir(int fd)
{
	int m = syscall(SYS_open_tree, fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
	if (m < 0)
		return -errno;
	struct mount_attr a = {.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOATIME,
			       .attr_clr = MOUNT_ATTR__ATIME};
	if (syscall(SYS_mount_setattr, m, "", AT_EMPTY_PATH, &a, sizeof(a)) < 0) {
		int r = -errno;
		close(m);
		return r;
	}
	return m;
}

/* The disk as "q<slot>", a directory of project SCRATCH_PROJID_BASE + slot whose hard block
 * limit is @bytes: a writer past it gets ENOSPC (xfs) or EDQUOT (ext4). */
static int quota_open(struct scratch *sc, int dirfd, uint64_t bytes, struct cordon_err *err)
{
	char name[32];
	uint32_t id = SCRATCH_PROJID_BASE + sc->slot;
	snprintf(name, sizeof(name), "q%u", sc->slot);
	if (mkdirat(dirfd, name, 0700) < 0)
		return open_failed(-errno, "mkdir a disk's directory", err);
	_cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int r = fd < 0 ? -errno : prjquota_assign(fd, id);
	if (r == 0)
		r = prjquota_limit(dirfd, id, bytes);
	if (r == 0)
		r = sc->mnt = clone_dir(fd);
	if (r < 0) {
		sc->mnt = -1;
		quota_remove(dirfd, sc->slot);
		return open_failed(r, "a directory with a project quota", err);
	}
	sc->img = TAKE_FD(fd); /* for scratch_disk_used(): its project's count */
	scratch_state = 1;
	return 0;
}

static int loop_open(struct scratch *sc, int dirfd, uint64_t bytes, struct cordon_err *err);

int scratch_open(struct scratch *sc, unsigned slot, uint64_t bytes, struct cordon_err *err)
{
	sc->mnt = sc->img = -1;
	sc->slot = slot;
	const char *mode = getenv("CORDON_SCRATCH");
	if (scratch_state < 0 || bytes < SCRATCH_MIN_BYTES || (mode && strcmp(mode, "tmpfs") == 0))
		return 0;
	_cleanup_close_ int dirfd = scratch_dirfd();
	if (dirfd < 0)
		return open_failed(dirfd, scratch_dir(), err);
	/* An image on a tmpfs would be memory again, behind a loop device. */
	struct statfs sf;
	if (fstatfs(dirfd, &sf) == 0 && sf.f_type == TMPFS_MAGIC)
		return open_failed(-EXDEV, "the scratch directory is on a tmpfs", err);
	sweep_slot(dirfd, slot);
	if (backend_probe() == BACKEND_QUOTA)
		return quota_open(sc, dirfd, bytes, err);
	return loop_open(sc, dirfd, bytes, err);
}

/* The disk as a sparse copy of the golden image of its size on a loop device. */
static int loop_open(struct scratch *sc, int dirfd, uint64_t bytes, struct cordon_err *err)
{
	uint64_t mb = (bytes + (1ULL << 20) - 1) >> 20;
	unsigned slot = sc->slot;
	_cleanup_close_ int golden = golden_open(dirfd, mb);
	if (golden < 0)
		return open_failed(golden, "an empty ext4 image (mke2fs)", err);
	char name[32];
	snprintf(name, sizeof(name), "s%u.img", slot);
	_cleanup_close_ int img = openat(dirfd, name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (img < 0)
		return open_failed(-errno, "create an image", err);
	int r = scratch_copy_sparse(golden, img), nr = -1;
	_cleanup_close_ int loop = r < 0 ? r : blockdev_loop_attach(img, &nr);
	/* The loop device holds the file now; the name has done its work. */
	(void)unlinkat(dirfd, name, 0);
	if (r < 0)
		return open_failed(r, "copy the empty image", err);
	if (loop < 0)
		return open_failed(loop, "a loop device", err);
	char dev[32];
	snprintf(dev, sizeof(dev), "/dev/loop%d", nr);
	sc->mnt = blockdev_mount_ext4(dev, BLOCKDEV_SCRATCH,
				      MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOATIME);
	if (sc->mnt < 0)
		return open_failed(sc->mnt, "mount ext4 on a loop device", err);
	sc->img = fcntl(img, F_DUPFD_CLOEXEC, 3); /* -1 is only less to count */
	scratch_state = 1;
	return 0;
}

int scratch_image_copy(int dst, uint64_t bytes)
{
	_cleanup_close_ int dirfd = scratch_dirfd();
	if (dirfd < 0)
		return dirfd;
	_cleanup_close_ int golden = golden_open(dirfd, (bytes + (1ULL << 20) - 1) >> 20);
	return golden < 0 ? golden : scratch_copy_sparse(golden, dst);
}

/* mkdir at @parent/@name owned by @uid, mode @mode (the umask does not apply). */
static int make_dir(int parent, const char *name, mode_t mode, uid_t uid)
{
	if (mkdirat(parent, name, mode) < 0 && errno != EEXIST)
		return -errno;
	_cleanup_close_ int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fchown(fd, uid, uid) < 0 || fchmod(fd, mode) < 0)
		return -errno;
	return 0;
}

/* @hidden's names whited out (a 0:0 character device) in the upper @key: the overlay shows
 * nothing of the host's there. */
static int whiteouts(int stage_fd, const char *key, const char *const *hidden)
{
	if (!hidden)
		return 0;
	_cleanup_close_ int fd = openat(stage_fd, key, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	for (; *hidden; hidden++)
		if (mknodat(fd, *hidden, S_IFCHR | 0600, makedev(0, 0)) < 0 && errno != EEXIST)
			return -errno;
	return 0;
}

/* An overlay of @lower (shown idmapped through @userns) under <stage>/upper/<name>. The
 * upper's root takes the lower's owner and mode, as seen inside: it is the overlay's root.
 * The lower is attached at <stage>/l/<name> for the moment of the mount (overlay.c). */
static int overlay_one(int stage_fd, const char *stage, const char *lower, const char *name,
		       const char *const *hidden, int userns, uid_t base, struct cordon_err *err)
{
	char up[PATH_MAX], wk[PATH_MAX], lo[PATH_MAX], key[64];
	struct stat st;
	int r;

	if (stat(lower, &st) < 0)
		return cordon_err_set(err, -errno, "scratch: stat '%s'", lower);
	uid_t owner = st.st_uid < CORDON_IDMAP_SIZE ? base + st.st_uid : base;
	snprintf(key, sizeof(key), "upper/%s", name);
	if ((r = make_dir(stage_fd, key, st.st_mode & 07777, owner)) < 0)
		return cordon_err_set(err, r, "scratch: mkdir %s", key);
	if ((r = whiteouts(stage_fd, key, hidden)) < 0)
		return cordon_err_set(err, r, "scratch: hide what %s holds of the host's", key);
	snprintf(key, sizeof(key), "work/%s", name);
	if ((r = make_dir(stage_fd, key, 0700, 0)) < 0)
		return cordon_err_set(err, r, "scratch: mkdir %s", key);
	snprintf(key, sizeof(key), "l/%s", name);
	if ((r = make_dir(stage_fd, key, 0700, 0)) < 0)
		return cordon_err_set(err, r, "scratch: mkdir %s", key);
	snprintf(up, sizeof(up), "%s/upper/%s", stage, name);
	snprintf(wk, sizeof(wk), "%s/work/%s", stage, name);
	snprintf(lo, sizeof(lo), "%s/l/%s", stage, name);
	_cleanup_close_ int tree = mount_clone_ro(lower, userns, err);
	if (tree < 0)
		return tree;
	if (syscall(SYS_move_mount, tree, "", AT_FDCWD, lo, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		return cordon_err_set(err, -errno, "scratch: attach '%s'", lower);
	_cleanup_close_ int fs = syscall(SYS_fsopen, "overlay", FSOPEN_CLOEXEC);
	if (fs < 0)
		return cordon_err_set(err, -errno, "scratch: fsopen overlay");
	if ((r = blockdev_fsconfig(fs, FSCONFIG_SET_STRING, "lowerdir", lo)) < 0 ||
	    (r = blockdev_fsconfig(fs, FSCONFIG_SET_STRING, "upperdir", up)) < 0 ||
	    (r = blockdev_fsconfig(fs, FSCONFIG_SET_STRING, "workdir", wk)) < 0)
		return cordon_err_set(err, r, "scratch: configure the overlay of '%s'", lower);
	static const char *const opts[][2] = {
		{"redirect_dir", "off"}, {"index", "off"}, {"metacopy", "off"}, {"xino", "off"},
	};
	for (size_t i = 0; i < ELEMENTSOF(opts); i++)
		(void)blockdev_fsconfig(fs, FSCONFIG_SET_STRING, opts[i][0], opts[i][1]);
	if ((r = blockdev_fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL)) < 0)
		return cordon_err_set(err, r, "scratch: overlay over '%s'", lower);
	int m = syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
	return m < 0 ? cordon_err_set(err, -errno, "scratch: fsmount overlay") : m;
}

/* The overlays of the image. A kernel that cannot (idmapped lowers of overlayfs are 5.19+)
 * leaves the image read-only, as it was before: the rest of the scratch still holds. */
static void make_overlays(int stage_fd, const char *stage, int userns, uid_t base,
			  const char *rootfs, struct scratch_trees *t)
{
	struct cordon_err e = {};
	if (rootfs) {
		t->image = overlay_one(stage_fd, stage, rootfs, "image", NULL, userns, base, &e);
	} else {
		for (size_t i = 0; i < ROOTFS_HOST_TREES_N && e.code == 0; i++) {
			char path[64];
			struct stat st;
			const struct rootfs_host_pkg *pkg =
				i < ROOTFS_HOST_IMAGE_N ? NULL : &rootfs_host_pkg[i - ROOTFS_HOST_IMAGE_N];
			snprintf(path, sizeof(path), "/%s", rootfs_host_tree_path(i));
			if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
				t->host[i] = overlay_one(stage_fd, stage, path, rootfs_host_tree_key(i),
							 pkg ? pkg->hidden : NULL, userns, base, &e);
		}
	}
	if (e.code < 0) {
		static bool said;
		if (!said)
			log_info("scratch: %s; the image stays read-only", e.msg);
		said = true;
		for (size_t i = 0; i < ROOTFS_HOST_TREES_N; i++)
			if (t->host[i] >= 0)
				close(TAKE_FD(t->host[i]));
		if (t->image >= 0)
			close(TAKE_FD(t->image));
		t->image = -1;
	}
}

/* The trees a snapshot keeps (the sandbox's `/` and the overlays' uppers) from @sfd into
 * @dfd, owners moved from the range at @from to the one at @to. The overlays' work and
 * staging directories are the host's and made anew. */
static const char *const kept_trees[] = {"root", "upper"};

static int copy_trees(int sfd, int dfd, uid_t from, uid_t to, uint64_t *alloc,
		      struct cordon_err *err)
{
	uint64_t bytes = 0;
	for (size_t i = 0; i < ELEMENTSOF(kept_trees); i++) {
		const char *n = kept_trees[i];
		/* upper/ itself is the host's (0700 root), its entries the overlays' roots. */
		struct treecopy_opts o = {.what = "snapshot", .from = from, .to = to, .xattrs = true,
					  .top_attrs = i == 0, .bytes = &bytes, .alloc = alloc};
		if (mkdirat(dfd, n, 0700) < 0 && errno != EEXIST)
			return cordon_err_set(err, -errno, "snapshot: mkdir '%s'", n);
		_cleanup_close_ int in = openat(sfd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (in < 0 && errno == ENOENT)
			continue; /* a tree the sandbox never had */
		_cleanup_close_ int out = openat(dfd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (in < 0 || out < 0)
			return cordon_err_set(err, -errno, "snapshot: open '%s'", n);
		int r = treecopy(in, out, &o, err);
		if (r < 0)
			return r;
	}
	return 0;
}

int scratch_dir_snapshot(int diskfd, uid_t base, int dirfd, uint64_t *alloc,
			 struct cordon_err *err)
{
	return copy_trees(diskfd, dirfd, base, 0, alloc, err);
}

int scratch_dir_fill(int diskfd, uid_t base, int from, struct cordon_err *err)
{
	return copy_trees(from, diskfd, 0, base, NULL, err);
}

int scratch_snapshot(const struct scratch *sc, uid_t base, int dirfd, uint64_t *alloc,
		     struct cordon_err *err)
{
	if (sc->mnt < 0)
		return cordon_err_setf(err, -EOPNOTSUPP,
				       "snapshot: the sandbox has no disk-backed scratch (a tmpfs root)");
	return scratch_dir_snapshot(sc->mnt, base, dirfd, alloc, err);
}

int scratch_trees(struct scratch *sc, int userns, uid_t base, const char *rootfs, int from,
		  struct scratch_trees *ret, struct cordon_err *err)
{
	char stage[PATH_MAX];
	_cleanup_close_ int sfd = -1;
	int r;

	*ret = (struct scratch_trees)SCRATCH_TREES_NONE;
	if (sc->mnt < 0)
		return 0;
	_cleanup_close_ int dirfd = scratch_dirfd();
	if (dirfd < 0)
		return cordon_err_set(err, dirfd, "scratch: open '%s'", scratch_dir());
	/* Attached in our namespace for the moment the overlays need paths, then detached: the
	 * trees keep the filesystem alive, nothing of it stays visible on the host. */
	if ((r = stage_make(sc->slot, stage, sizeof(stage))) < 0)
		return cordon_err_set(err, r, "scratch: mkdir '%s'", stage);
	if (syscall(SYS_move_mount, sc->mnt, "", AT_FDCWD, stage, MOVE_MOUNT_F_EMPTY_PATH) < 0) {
		r = cordon_err_set(err, -errno, "scratch: attach at '%s'", stage);
		goto out;
	}
	sfd = open(stage, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (sfd < 0 || (r = make_dir(sfd, "root", 0755, base)) < 0 ||
	    (r = make_dir(sfd, "upper", 0700, 0)) < 0 || (r = make_dir(sfd, "work", 0700, 0)) < 0 ||
	    (r = make_dir(sfd, "l", 0700, 0)) < 0) {
		r = cordon_err_set(err, sfd < 0 ? -errno : r, "scratch: lay out '%s'", stage);
		goto out;
	}
	uint64_t alloc = 0;
	if (from >= 0 && (r = copy_trees(from, sfd, 0, base, &alloc, err)) < 0)
		goto out;
	char root[PATH_MAX + 8];
	snprintf(root, sizeof(root), "%s/root", stage);
	ret->root = syscall(SYS_open_tree, AT_FDCWD, root, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
	if (ret->root < 0) {
		r = cordon_err_set(err, -errno, "scratch: open_tree '%s'", root);
		goto out;
	}
	make_overlays(sfd, stage, userns, base, rootfs, ret);
	r = 0;
out:
	while (umount2(stage, MNT_DETACH | UMOUNT_NOFOLLOW) == 0)
		;
	(void)rmdir(stage);
	if (r < 0)
		scratch_trees_close(ret);
	return r;
}

void scratch_trees_close(struct scratch_trees *t)
{
	int *fds[] = {&t->root, &t->image};
	for (size_t i = 0; i < ELEMENTSOF(fds); i++)
		if (*fds[i] >= 0)
			close(TAKE_FD(*fds[i]));
	for (size_t i = 0; i < ROOTFS_HOST_TREES_N; i++)
		if (t->host[i] >= 0)
			close(TAKE_FD(t->host[i]));
}

void scratch_close(struct scratch *sc)
{
	if (sc->mnt >= 0)
		close(TAKE_FD(sc->mnt));
}

uint64_t scratch_disk_used(int disk_fd)
{
	struct stat st;
	struct fsxattr fa;
	uint64_t used = 0;
	if (disk_fd < 0 || fstat(disk_fd, &st) < 0)
		return 0;
	if (!S_ISDIR(st.st_mode))
		return (uint64_t)st.st_blocks * 512;
	if (ioctl(disk_fd, FS_IOC_FSGETXATTR, &fa) == 0)
		(void)prjquota_used(disk_fd, fa.fsx_projid, &used);
	return used;
}

void scratch_release(unsigned slot)
{
	if (geteuid() != 0)
		return;
	_cleanup_close_ int dirfd = open(scratch_dir(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd >= 0)
		quota_remove(dirfd, slot);
}

/* A temporary golden image whose maker is gone. */
static bool golden_tmp_stale(const char *name)
{
	const char *dot = strstr(name, ".img.");
	if (strncmp(name, "golden-", 7) != 0 || !dot)
		return false;
	char *end;
	long pid = strtol(dot + 5, &end, 10);
	return *end == '\0' && pid > 0 && kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

void scratch_sweep(void)
{
	_cleanup_close_ int dirfd = scratch_dirfd();
	if (dirfd < 0)
		return;
	int fd = dup(dirfd);
	_cleanup_closedir_ DIR *d = fd < 0 ? NULL : fdopendir(fd);
	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	struct dirent *de;
	while ((de = readdir(d))) {
		char *end;
		if (golden_tmp_stale(de->d_name)) {
			(void)unlinkat(dirfd, de->d_name, 0);
			continue;
		}
		if (de->d_name[0] != 's' && de->d_name[0] != 'q')
			continue;
		unsigned long slot = strtoul(de->d_name + 1, &end, 10);
		if ((*end && (de->d_name[0] == 'q' || strcmp(end, ".img") != 0)) || end == de->d_name + 1 ||
		    slot >= CORDON_IDMAP_SLOTS)
			continue;
		struct idmap_slot s;
		if (idmap_slot_try((unsigned)slot, &s) < 0)
			continue; /* held: a live sandbox's */
		sweep_slot(dirfd, (unsigned)slot);
		idmap_slot_release(&s);
	}
}
