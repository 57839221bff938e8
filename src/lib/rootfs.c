#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <linux/mount.h>
#include <unistd.h>

#include "basic/cleanup.h"
#include "basic/fileio.h"
#include "lib/rootfs.h"

/* The staging mount point. The sandbox's root tmpfs is mounted over /tmp of the *new* mount
 * namespace; every host path it needs was opened before (O_PATH fds), so hiding the host's
 * /tmp here loses nothing. */
#define NEWROOT "/tmp"

#define USER_UID 1000

/* What of the host the `host` template shows: the image directories, read-only. A symlink
 * (merged /usr) is copied as a symlink. */
const char *const rootfs_host_image[ROOTFS_HOST_IMAGE_N] = {"usr",   "bin",   "sbin",  "lib",
							    "lib32", "lib64", "libx32"};

/* apt's credentials for its mirrors, and its configuration, where a proxy's password may be
 * (Acquire::http::Proxy): never in a sandbox, which needs neither to install. Its sources and
 * keyrings (trusted.gpg, trusted.gpg.d, keyrings: public keys) stay. */
static const char *const apt_hidden[] = {"auth.conf", "auth.conf.d", "apt.conf", "apt.conf.d", NULL};
/* dpkg's owner overrides name the host's system users and groups (ssl-cert), which the
 * sandbox's /etc/group does not have: dpkg refuses to run with one it cannot resolve. */
static const char *const dpkg_hidden[] = {"statoverride", NULL};

const struct rootfs_host_pkg rootfs_host_pkg[ROOTFS_HOST_PKG_N] = {
	{"var/lib/dpkg", "var-lib-dpkg", dpkg_hidden},
	{"etc/apt", "etc-apt", apt_hidden},
};

const char *rootfs_host_tree_path(size_t i)
{
	return i < ROOTFS_HOST_IMAGE_N ? rootfs_host_image[i] : rootfs_host_pkg[i - ROOTFS_HOST_IMAGE_N].path;
}

const char *rootfs_host_tree_key(size_t i)
{
	return i < ROOTFS_HOST_IMAGE_N ? rootfs_host_image[i] : rootfs_host_pkg[i - ROOTFS_HOST_IMAGE_N].key;
}

const char *const rootfs_host_dirs[] = {
	"var/lib", "var/lib/apt", "var/lib/apt/lists", "var/cache", "var/cache/apt", "var/log", "var/log/apt",
};
const size_t rootfs_host_dirs_n = ELEMENTSOF(rootfs_host_dirs);

/* From the host's /etc, read-only: what makes programs work and holds no secret. */
const char *const rootfs_host_etc[] = {
	"ssl",	      "ca-certificates", "ca-certificates.conf", "ld.so.cache", "ld.so.conf",
	"ld.so.conf.d", "alternatives",	  "localtime",		  "timezone",	 "protocols",
	"services",   "mime.types",	  "perl",		  "python3",	 "python3.11",
	"os-release", "debian_version",  "magic",		  "magic.mime",	 "gai.conf",
	"bash.bashrc", "profile",	  "environment",	  "inputrc",	 "gitconfig",
};

/* Top-level names of a --rootfs image that the sandbox gets fresh instead. */
static const char *const image_skip[] = {"proc", "dev", "sys", "tmp", "home", "root", "run"};

const size_t rootfs_host_etc_n = ELEMENTSOF(rootfs_host_etc);

const struct rootfs_gen_file rootfs_etc_files[] = {
	{"passwd", "root:x:0:0:root:/root:/bin/bash\n"
		   "user:x:1000:1000:user:/home/user:/bin/bash\n"
		   "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"},
	{"group", "root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n"},
	{"hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"},
	{"resolv.conf", "# no network: this sandbox has loopback only\n"},
	{"nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n"
			  "networks: files\nprotocols: files\nservices: files\n"},
};
const size_t rootfs_etc_files_n = ELEMENTSOF(rootfs_etc_files);

/* Masked parts of /proc, after the OCI runtime spec's defaults. */
static const char *const proc_readonly[] = {"bus", "fs", "irq", "sys", "sysrq-trigger"};
static const char *const proc_masked_files[] = {"kcore",       "keys",	      "key-users",
						"timer_list",  "sched_debug", "latency_stats",
						"kallsyms",    "kpagecount",  "kpageflags",
						"kpagecgroup"};
static const char *const proc_masked_dirs[] = {"acpi", "asound", "scsi", "firmware", "driver"};

static const char *const dev_nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};

struct dev_link {
	const char *name, *target;
};
static const struct dev_link dev_links[] = {
	{"fd", "/proc/self/fd"},     {"stdin", "/proc/self/fd/0"}, {"stdout", "/proc/self/fd/1"},
	{"stderr", "/proc/self/fd/2"}, {"ptmx", "pts/ptmx"},	   {"core", "/proc/kcore"},
};

struct new_dir {
	const char *path;
	mode_t mode;
	uid_t uid; /* inside the sandbox */
};
static const struct new_dir new_dirs[] = {
	{"tmp", 01777, 0},   {"home", 0755, 0},	    {"home/user", 0755, USER_UID}, {"root", 0700, 0},
	{"run", 0755, 0},    {"var", 0755, 0},	    {"var/tmp", 01777, 0},	    {"etc", 0755, 0},
	{"dev", 0755, 0},    {"proc", 0555, 0},
};

static unsigned long locked_flags(int fd)
{
	struct statvfs sv;
	unsigned long f = 0;

	/* In a user namespace the kernel refuses a remount that would clear a flag the parent
	 * namespace set (nosuid, nodev, noexec, atime): carry them over (bubblewrap does too). */
	if (fstatvfs(fd, &sv) < 0)
		return 0;
	static const struct {
		unsigned long st, ms;
	} map[] = {{ST_NOSUID, MS_NOSUID},   {ST_NODEV, MS_NODEV},	    {ST_NOEXEC, MS_NOEXEC},
		   {ST_NOATIME, MS_NOATIME}, {ST_NODIRATIME, MS_NODIRATIME}, {ST_RELATIME, MS_RELATIME}};
	for (size_t i = 0; i < ELEMENTSOF(map); i++)
		if (sv.f_flag & map[i].st)
			f |= map[i].ms;
	return f;
}

static void fd_path(int fd, char *buf, size_t size)
{
	snprintf(buf, size, "/proc/self/fd/%d", fd);
}

/* Set when the binds being made will be sealed read-only at once by seal_tree(). Per thread:
 * the jail's child runs in its host's memory (runtime/jail/spawn.c) on its spawner thread's
 * thread-local storage, and two children of two builder threads may be at it at once. */
static _Thread_local bool sealing;
/* Set while the entries of a writable overlay image are bound: they stay writable. */
static _Thread_local bool writable;

/* Binds @src_fd (an O_PATH fd) read-only, nosuid, nodev onto @dst. */
static int bind_ro_fd(int src_fd, const char *dst, struct cordon_err *err)
{
	char src[64];
	fd_path(src_fd, src, sizeof(src));
	if (mount(src, dst, NULL, MS_BIND, NULL) < 0)
		return cordon_err_set(err, -errno, "mount: bind '%s'", dst);
	if (sealing || writable)
		return 0;
	unsigned long fl = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | locked_flags(src_fd);
	if (mount(NULL, dst, NULL, fl, NULL) < 0)
		return cordon_err_set(err, -errno, "mount: remount '%s' read-only", dst);
	return 0;
}

/* Creates an empty mount point of the same kind as @src_fd's file. */
static int make_mountpoint(int src_fd, const char *dst, struct cordon_err *err)
{
	struct stat st;
	if (fstat(src_fd, &st) < 0)
		return cordon_err_set(err, -errno, "stat source of '%s'", dst);
	if (S_ISDIR(st.st_mode)) {
		if (mkdir(dst, 0755) < 0 && errno != EEXIST)
			return cordon_err_set(err, -errno, "mkdir '%s'", dst);
		return 0;
	}
	if (lstat(dst, &st) == 0 && S_ISREG(st.st_mode))
		return 0; /* a file of the image, bound over where it is (a read-only /etc too) */
	int fd = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return cordon_err_set(err, -errno, "create mount point '%s'", dst);
	close(fd);
	return 0;
}

static int copy_symlink(int dirfd, const char *name, const char *dst, struct cordon_err *err)
{
	char target[PATH_MAX];
	ssize_t n = readlinkat(dirfd, name, target, sizeof(target) - 1);
	if (n < 0)
		return cordon_err_set(err, -errno, "readlink '%s'", name);
	target[n] = '\0';
	if (symlink(target, dst) < 0 && errno != EEXIST)
		return cordon_err_set(err, -errno, "symlink '%s'", dst);
	return 0;
}

/* Puts @dirfd/@name at @dst: a symlink is copied, a file or directory bound read-only. */
static int expose_entry(int dirfd, const char *name, const char *dst, struct cordon_err *err)
{
	struct stat st;
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : cordon_err_set(err, -errno, "stat '%s'", name);
	if (S_ISLNK(st.st_mode))
		return copy_symlink(dirfd, name, dst, err);
	if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
		return 0; /* never a socket, fifo or device of the host */
	_cleanup_close_ int fd = openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return cordon_err_set(err, -errno, "open '%s'", name);
	int r = make_mountpoint(fd, dst, err);
	return r < 0 ? r : bind_ro_fd(fd, dst, err);
}

static int write_new_file(const char *path, const char *content, mode_t mode,
			  struct cordon_err *err)
{
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
	if (fd < 0)
		return cordon_err_set(err, -errno, "create '%s'", path);
	int r = write_all(fd, content, strlen(content));
	return r < 0 ? cordon_err_set(err, r, "write '%s'", path) : 0;
}

static int make_dirs(const struct rootfs_config *cfg, struct cordon_err *err)
{
	char path[PATH_MAX];
	for (size_t i = 0; i < ELEMENTSOF(new_dirs); i++) {
		const struct new_dir *d = &new_dirs[i];
		snprintf(path, sizeof(path), NEWROOT "/%s", d->path);
		if (mkdir(path, d->mode) < 0 && errno != EEXIST)
			return cordon_err_set(err, -errno, "mkdir '/%s'", d->path);
		if (chmod(path, d->mode) < 0)
			return cordon_err_set(err, -errno, "chmod '/%s'", d->path);
		/* With a single-uid mapping only the sandbox's own user exists: it owns all. */
		if (cfg->ids_mapped && chown(path, d->uid, d->uid) < 0)
			return cordon_err_set(err, -errno, "chown '/%s'", d->path);
	}
	return 0;
}

/* Attaches the detached mount @tree at @dst. */
static int move_tree(int tree, const char *dst, struct cordon_err *err)
{
	if (syscall(SYS_move_mount, tree, "", AT_FDCWD, dst, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		return cordon_err_set(err, -errno, "attach '%s'", dst);
	return 0;
}

/* A detached mount @tree of the host at @dst (a directory made here). */
static int attach_tree(int tree, const char *dst, struct cordon_err *err)
{
	if (mkdir(dst, 0755) < 0 && errno != EEXIST)
		return cordon_err_set(err, -errno, "mkdir '%s'", dst);
	return move_tree(tree, dst, err);
}

/* The sandbox's own small trees, /etc (the `host` template's), /dev and the empty directory
 * that masks parts of /proc, are three directories of one tmpfs, each bound where it goes,
 * rather than a tmpfs each. Every superblock holds a memcg-aware shrinker id while it lives,
 * and the kernel gives every memory cgroup of the host a slot for each id up to the most ever
 * in use at once (1 KiB per 64 ids on 6.7+, 8 bytes per id on 6.1): each superblock a sandbox
 * makes costs memory in every other sandbox's cgroup, O(n^2) over the host
 * (docs/ARCHITECTURE.md, "What an idle sandbox costs"). Sizes: /etc's 1 MiB and 256 inodes
 * and /dev's 64 KiB and 64 inodes, as when each was a tmpfs of its own. */
#define OWN_TMPFS_SIZE	  "1088k"
#define OWN_TMPFS_INODES  "384"
#define OWN_TMPFS_OPTS	  "mode=0755,size=" OWN_TMPFS_SIZE ",nr_inodes=" OWN_TMPFS_INODES

struct own_trees {
	int etc, dev, mask; /* detached binds of the tmpfs's three directories */
};

/* A tree not attached is dissolved when its fd is closed. */
static void own_trees_close(struct own_trees *t)
{
	closep(&t->etc);
	closep(&t->dev);
	closep(&t->mask);
}

static int own_tmpfs(void)
{
	_cleanup_close_ int fs = syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC);
	if (fs < 0)
		return -errno;
	static const char *const opts[][2] = {
		{"source", "tmpfs"}, {"mode", "0755"}, {"size", OWN_TMPFS_SIZE}, {"nr_inodes", OWN_TMPFS_INODES}};
	for (size_t i = 0; i < ELEMENTSOF(opts); i++)
		if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, opts[i][0], opts[i][1], 0) < 0)
			return -errno;
	if (syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
		return -errno;
	int mnt = syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
	return mnt < 0 ? -errno : mnt;
}

/* Makes the tmpfs and a detached bind of each of its directories. A kernel before 6.15 clones
 * no detached mount (open_tree() wants one of this namespace), so the tmpfs is attached for
 * that time at /proc's mount point, which nothing is mounted on yet, and detached after. */
static int own_trees_open(struct own_trees *t, struct cordon_err *err)
{
	static const char *const names[] = {"etc", "dev", "mask"};
	int *const fds[] = {&t->etc, &t->dev, &t->mask};
	const char *stage = NEWROOT "/proc";
	char path[PATH_MAX];

	_cleanup_close_ int mnt = own_tmpfs();
	if (mnt < 0)
		return cordon_err_set(err, mnt, "make the sandbox's tmpfs");
	if (syscall(SYS_move_mount, mnt, "", AT_FDCWD, stage, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		return cordon_err_set(err, -errno, "attach the sandbox's tmpfs");
	for (size_t i = 0; i < ELEMENTSOF(names); i++) {
		snprintf(path, sizeof(path), "%s/%s", stage, names[i]);
		if (mkdir(path, i == 2 ? 0555 : 0755) < 0)
			return cordon_err_set(err, -errno, "mkdir '%s' on the sandbox's tmpfs", names[i]);
		*fds[i] = syscall(SYS_open_tree, AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
		if (*fds[i] < 0)
			return cordon_err_set(err, -errno, "bind '%s' of the sandbox's tmpfs", names[i]);
	}
	if (umount2(stage, MNT_DETACH) < 0)
		return cordon_err_set(err, -errno, "detach the sandbox's tmpfs");
	return 0;
}

static int setup_host_image(const struct rootfs_config *cfg, struct cordon_err *err)
{
	_cleanup_close_ int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (root < 0)
		return cordon_err_set(err, -errno, "open host /");
	for (size_t i = 0; i < ROOTFS_HOST_IMAGE_N; i++) {
		char dst[PATH_MAX];
		snprintf(dst, sizeof(dst), NEWROOT "/%s", rootfs_host_image[i]);
		int r = cfg->host_trees[i] >= 0 ? attach_tree(cfg->host_trees[i], dst, err)
						: expose_entry(root, rootfs_host_image[i], dst, err);
		if (r < 0)
			return r;
	}
	return 0;
}

/* Makes the mount at @path and every mount below it read-only, nosuid, nodev in one call
 * (mount_setattr, 5.12+). -ENOSYS on older kernels: the caller then remounts one by one. */
static int seal_tree(const char *path)
{
	struct mount_attr attr = {.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV};
	if (syscall(SYS_mount_setattr, AT_FDCWD, path, AT_RECURSIVE, &attr, sizeof(attr)) < 0)
		return -errno;
	return 0;
}

/* Mount points of the package state's overlays below @prefix, where the host made them. */
static int host_pkg_points(const struct rootfs_config *cfg, const char *prefix, struct cordon_err *err)
{
	for (size_t i = ROOTFS_HOST_IMAGE_N; i < ROOTFS_HOST_TREES_N; i++) {
		char path[PATH_MAX];
		const char *p = rootfs_host_tree_path(i);
		if (cfg->host_trees[i] < 0 || strncmp(p, prefix, strlen(prefix)) != 0)
			continue;
		snprintf(path, sizeof(path), NEWROOT "/%s", p);
		if (mkdir(path, 0755) < 0 && errno != EEXIST)
			return cordon_err_set(err, -errno, "mkdir '/%s'", p);
	}
	return 0;
}

/* The package manager's directories and the package state's overlays (rootfs.h), after
 * /etc: its mount points there were made before it was sealed. */
static int setup_host_pkg(const struct rootfs_config *cfg, struct cordon_err *err)
{
	char path[PATH_MAX];
	for (size_t i = 0; i < rootfs_host_dirs_n; i++) {
		snprintf(path, sizeof(path), NEWROOT "/%s", rootfs_host_dirs[i]);
		if (mkdir(path, 0755) < 0 && errno != EEXIST)
			return cordon_err_set(err, -errno, "mkdir '/%s'", rootfs_host_dirs[i]);
	}
	for (size_t i = ROOTFS_HOST_IMAGE_N; i < ROOTFS_HOST_TREES_N; i++) {
		snprintf(path, sizeof(path), NEWROOT "/%s", rootfs_host_tree_path(i));
		int r = cfg->host_trees[i] >= 0 ? attach_tree(cfg->host_trees[i], path, err) : 0;
		if (r < 0)
			return r;
	}
	return 0;
}

static int setup_host_etc(const struct rootfs_config *cfg, int etc_tree, struct cordon_err *err)
{
	char path[PATH_MAX];
	int r;

	_cleanup_close_ int etc = open("/etc", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (etc < 0)
		return cordon_err_set(err, -errno, "open host /etc");
	/* /etc is a directory of the sandbox's tmpfs, sealed read-only with everything bound into
	 * it by one mount_setattr() rather than a remount per entry (where the kernel has it). */
	if ((r = move_tree(etc_tree, NEWROOT "/etc", err)) < 0)
		return r;
	/* A probe that changes nothing: EBADF or EINVAL where the call exists, or 0 where the
	 * kernel returns early for an empty change (6.x does, before it looks at the fd); only
	 * ENOSYS means it is missing. Counting 0 as missing made every entry a remount. */
	struct mount_attr probe = {0};
	sealing = syscall(SYS_mount_setattr, -1, "", 0, &probe, sizeof(probe)) == 0 || errno != ENOSYS;
	for (size_t i = 0; i < rootfs_host_etc_n; i++) {
		snprintf(path, sizeof(path), NEWROOT "/etc/%s", rootfs_host_etc[i]);
		r = expose_entry(etc, rootfs_host_etc[i], path, err);
		if (r < 0)
			return r;
	}
	for (size_t i = 0; i < rootfs_etc_files_n; i++) {
		snprintf(path, sizeof(path), NEWROOT "/etc/%s", rootfs_etc_files[i].name);
		r = write_new_file(path, rootfs_etc_files[i].content, 0644, err);
		if (r < 0)
			return r;
	}
	if (cfg->resolv_conf && (r = write_new_file(NEWROOT "/etc/resolv.conf", cfg->resolv_conf, 0644, err)) < 0)
		return r;
	char hn[128];
	snprintf(hn, sizeof(hn), "%s\n", cfg->hostname);
	if ((r = write_new_file(NEWROOT "/etc/hostname", hn, 0644, err)) < 0)
		return r;
	if ((r = host_pkg_points(cfg, "etc/", err)) < 0)
		return r;
	if (sealing) {
		sealing = false;
		if ((r = seal_tree(NEWROOT "/etc")) < 0)
			return cordon_err_set(err, r, "seal /etc read-only");
		return 0;
	}
	/* This mount only: the tmpfs itself is made read-only once /dev is written (setup_dev). */
	if (mount(NULL, NEWROOT "/etc", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
		return cordon_err_set(err, -errno, "remount /etc read-only");
	return 0;
}

static bool skipped(const char *name)
{
	for (size_t i = 0; i < ELEMENTSOF(image_skip); i++)
		if (strcmp(name, image_skip[i]) == 0)
			return true;
	return false;
}

/* One getdents64() record; glibc declares no type for it. */
struct dirent64_rec {
	uint64_t d_ino;
	int64_t d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

static bool dot_or_dotdot(const char *n)
{
	return n[0] == '.' && (!n[1] || (n[1] == '.' && !n[2]));
}

/* A --rootfs image: every top-level entry but those the sandbox gets fresh, read-only. Read
 * with getdents64() into a buffer on the stack: opendir() allocates, and this runs in the
 * jail child, where a malloc lock held by another thread of the host at clone() time is
 * held for ever. */
static int setup_image_dir(int image_fd, struct cordon_err *err)
{
	_cleanup_close_ int fd = openat(image_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return cordon_err_set(err, -errno, "open rootfs");
	for (;;) {
		char buf[4096] __attribute__((aligned(8)));
		long n = syscall(SYS_getdents64, fd, buf, sizeof(buf));
		if (n < 0)
			return cordon_err_set(err, -errno, "read rootfs");
		if (n == 0)
			return 0;
		for (long off = 0; off < n;) {
			const struct dirent64_rec *de = (const struct dirent64_rec *)(buf + off);
			char dst[PATH_MAX];
			off += de->d_reclen;
			if (dot_or_dotdot(de->d_name) || skipped(de->d_name))
				continue;
			snprintf(dst, sizeof(dst), NEWROOT "/%s", de->d_name);
			int r = expose_entry(fd, de->d_name, dst, err);
			if (r < 0)
				return r;
		}
	}
}

/* An idmapped image tree: attached at a staging point, its entries bound from there like a
 * plain image's, then the staging mount detached (the binds stay, idmapping and all). */
static int setup_image_tree(int tree, bool rw, struct cordon_err *err)
{
	const char *stage = NEWROOT "/.image";
	if (mkdir(stage, 0700) < 0)
		return cordon_err_set(err, -errno, "mkdir image staging point");
	if (syscall(SYS_move_mount, tree, "", AT_FDCWD, stage, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		return cordon_err_set(err, -errno, "attach the image");
	_cleanup_close_ int fd = open(stage, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return cordon_err_set(err, -errno, "open the image");
	writable = rw;
	int r = setup_image_dir(fd, err);
	writable = false;
	if (r < 0)
		return r;
	if (umount2(stage, MNT_DETACH) < 0 || rmdir(stage) < 0)
		return cordon_err_set(err, -errno, "detach the image staging point");
	return 0;
}

static int setup_dev(const char *resolv_conf, int dev_tree, struct cordon_err *err)
{
	char path[PATH_MAX];
	unsigned long fl = MS_NOSUID | MS_NOEXEC;

	int r = move_tree(dev_tree, NEWROOT "/dev", err);
	if (r < 0)
		return r;
	_cleanup_close_ int hostdev = open("/dev", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (hostdev < 0)
		return cordon_err_set(err, -errno, "open host /dev");
	for (size_t i = 0; i < ELEMENTSOF(dev_nodes); i++) {
		char src[64];
		snprintf(path, sizeof(path), NEWROOT "/dev/%s", dev_nodes[i]);
		_cleanup_close_ int fd = openat(hostdev, dev_nodes[i], O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return cordon_err_set(err, -errno, "open host /dev/%s", dev_nodes[i]);
		if ((r = write_new_file(path, "", 0666, err)) < 0)
			return r;
		fd_path(fd, src, sizeof(src));
		if (mount(src, path, NULL, MS_BIND, NULL) < 0)
			return cordon_err_set(err, -errno, "mount /dev/%s", dev_nodes[i]);
	}
	for (size_t i = 0; i < ELEMENTSOF(dev_links); i++) {
		snprintf(path, sizeof(path), NEWROOT "/dev/%s", dev_links[i].name);
		if (symlink(dev_links[i].target, path) < 0)
			return cordon_err_set(err, -errno, "symlink /dev/%s", dev_links[i].name);
	}
	if (mkdir(NEWROOT "/dev/pts", 0755) < 0 || mkdir(NEWROOT "/dev/shm", 01777) < 0 ||
	    chmod(NEWROOT "/dev/shm", 01777) < 0)
		return cordon_err_set(err, -errno, "mkdir /dev/pts, /dev/shm");
	if (mount("devpts", NEWROOT "/dev/pts", "devpts", fl, "newinstance,ptmxmode=0666,mode=0620") < 0)
		return cordon_err_set(err, -errno, "mount /dev/pts");
	if (mount("tmpfs", NEWROOT "/dev/shm", "tmpfs", fl | MS_NODEV, "mode=1777,size=64m") < 0)
		return cordon_err_set(err, -errno, "mount /dev/shm");
	if (resolv_conf && (r = write_new_file(NEWROOT "/dev/.resolv.conf", resolv_conf, 0644, err)) < 0)
		return r;
	/* Nothing may be created in /dev, /etc or a mask afterwards: the whole tmpfs read-only
	 * (not a remount of this bind alone), and this mount nosuid, nodev, noexec. */
	if (mount(NULL, NEWROOT "/dev", NULL, MS_REMOUNT | MS_RDONLY | MS_NODEV | fl, OWN_TMPFS_OPTS) < 0)
		return cordon_err_set(err, -errno, "remount /dev read-only");
	return 0;
}

static int proc_bind_self_ro(const char *name, struct cordon_err *err)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), NEWROOT "/proc/%s", name);
	if (mount(path, path, NULL, MS_BIND | MS_REC, NULL) < 0)
		return errno == ENOENT ? 0 : cordon_err_set(err, -errno, "mount /proc/%s", name);
	unsigned long fl = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC;
	if (mount(NULL, path, NULL, fl, NULL) < 0)
		return cordon_err_set(err, -errno, "remount /proc/%s read-only", name);
	return 0;
}

/* A mask reads as empty and takes no write: a read-only bind of /dev/null on a file, of the
 * sandbox's tmpfs's empty directory on a directory. The first mask of each kind, once
 * read-only, is the source of the others (@ro_mask, "" until then): a bind copies its source
 * mount's flags, read-only included, so each further mask is one mount() and not two. */
static int proc_mask(const char *name, bool dir, int mask_tree, char ro_mask[PATH_MAX], struct cordon_err *err)
{
	char path[PATH_MAX];
	unsigned long fl = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC;

	snprintf(path, sizeof(path), NEWROOT "/proc/%s", name);
	int r = ro_mask[0] ? mount(ro_mask, path, NULL, MS_BIND, NULL)
		: dir	   ? (int)syscall(SYS_move_mount, mask_tree, "", AT_FDCWD, path, MOVE_MOUNT_F_EMPTY_PATH)
			   : mount(NEWROOT "/dev/null", path, NULL, MS_BIND, NULL);
	if (r < 0)
		return errno == ENOENT ? 0 : cordon_err_set(err, -errno, "mask /proc/%s", name);
	if (ro_mask[0])
		return 0;
	if (mount(NULL, path, NULL, MS_REMOUNT | MS_BIND | fl, NULL) < 0)
		return cordon_err_set(err, -errno, "mask /proc/%s read-only", name);
	memcpy(ro_mask, path, sizeof(path));
	return 0;
}

static int setup_proc(int mask_tree, struct cordon_err *err)
{
	int r;
	if (mount("proc", NEWROOT "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		return cordon_err_set(err, -errno, "mount /proc");
	for (size_t i = 0; i < ELEMENTSOF(proc_readonly); i++)
		if ((r = proc_bind_self_ro(proc_readonly[i], err)) < 0)
			return r;
	char file_mask[PATH_MAX] = "", dir_mask[PATH_MAX] = "";
	for (size_t i = 0; i < ELEMENTSOF(proc_masked_files); i++)
		if ((r = proc_mask(proc_masked_files[i], false, -1, file_mask, err)) < 0)
			return r;
	for (size_t i = 0; i < ELEMENTSOF(proc_masked_dirs); i++)
		if ((r = proc_mask(proc_masked_dirs[i], true, mask_tree, dir_mask, err)) < 0)
			return r;
	return 0;
}

int rootfs_check_sandbox_path(const char *path, struct cordon_err *err)
{
	static const char *const forbidden[] = {"/proc", "/dev", "/sys"};

	if (!path || path[0] != '/' || strlen(path) >= PATH_MAX)
		return cordon_err_setf(err, -EINVAL, "'%s': not an absolute path", path ? path : "");
	if (strcmp(path, "/") == 0)
		return cordon_err_setf(err, -EINVAL, "'/': cannot replace the sandbox root");
	for (const char *p = path; *p;) {
		const char *c = p + 1, *e = strchrnul(c, '/');
		size_t len = e - c;
		if (len == 0 || (len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.'))
			return cordon_err_setf(err, -EINVAL,
					       "'%s': empty, '.' or '..' components are not allowed", path);
		p = e;
	}
	for (size_t i = 0; i < ELEMENTSOF(forbidden); i++) {
		size_t n = strlen(forbidden[i]);
		if (strncmp(path, forbidden[i], n) == 0 && (path[n] == '\0' || path[n] == '/'))
			return cordon_err_setf(err, -EINVAL, "'%s': %s is managed by cordon", path,
					       forbidden[i]);
	}
	return 0;
}

/* Creates the parents of @dst under NEWROOT, refusing to cross a symlink: the image's own
 * symlinks (e.g. /bin -> usr/bin) must not redirect a bind out of where it was asked for. */
static int make_parents(const char *dst, struct cordon_err *err)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), NEWROOT "%s", dst);
	for (char *p = path + strlen(NEWROOT) + 1; (p = strchr(p, '/')); p++) {
		struct stat st;
		*p = '\0';
		if (mkdir(path, 0755) < 0 && errno != EEXIST)
			return cordon_err_set(err, -errno, "bind '%s': mkdir '%s'", dst,
					      path + strlen(NEWROOT));
		if (lstat(path, &st) < 0 || !S_ISDIR(st.st_mode))
			return cordon_err_setf(err, -ENOTDIR, "bind '%s': '%s' is not a directory",
					       dst, path + strlen(NEWROOT));
		*p = '/';
	}
	return 0;
}

static int setup_binds(const struct rootfs_config *cfg, struct cordon_err *err)
{
	for (size_t i = 0; i < cfg->n_binds; i++) {
		const struct rootfs_bind *b = &cfg->binds[i];
		char dst[PATH_MAX];
		int r = make_parents(b->dst, err);
		if (r < 0)
			return r;
		snprintf(dst, sizeof(dst), NEWROOT "%s", b->dst);
		struct stat st;
		if (lstat(dst, &st) == 0 && S_ISLNK(st.st_mode))
			return cordon_err_setf(err, -ELOOP, "bind '%s': destination is a symlink", b->dst);
		if ((r = make_mountpoint(b->src_fd, dst, err)) < 0)
			return r;
		if (b->tree && syscall(SYS_move_mount, b->src_fd, "", AT_FDCWD, dst,
				       MOVE_MOUNT_F_EMPTY_PATH) < 0)
			return cordon_err_set(err, -errno, "mount: volume at '%s'", b->dst);
		if (!b->tree && (r = bind_ro_fd(b->src_fd, dst, err)) < 0)
			return r;
	}
	return 0;
}

static int pivot(struct cordon_err *err)
{
	if (chdir(NEWROOT) < 0)
		return cordon_err_set(err, -errno, "chdir new root");
	/* pivot_root(".", ".") stacks the old root on top of the new one; detaching it leaves
	 * the new root alone, with no way back to any host path (as in runc and crun). */
	if (syscall(SYS_pivot_root, ".", ".") < 0)
		return cordon_err_set(err, -errno, "pivot_root");
	if (umount2(".", MNT_DETACH) < 0)
		return cordon_err_set(err, -errno, "detach old root");
	if (chdir("/") < 0)
		return cordon_err_set(err, -errno, "chdir /");
	return 0;
}

/* An image's /etc/resolv.conf: the sandbox's resolver (setup_dev() wrote it in /dev)
 * bound over it, made where the image has none, so that a template's sandbox with a network
 * resolves names (apt-get update in a Debian template) and no layer or upper records it. A
 * symlink (to a resolver's stub) is left as the image has it, and so is an image whose /etc
 * cannot take a new file (read-only, without a disk of its own). */
static int bind_resolver(const struct rootfs_config *cfg, struct cordon_err *err)
{
	struct stat st;
	if (!cfg->resolv_conf || lstat(NEWROOT "/etc", &st) < 0 || !S_ISDIR(st.st_mode))
		return 0;
	if (lstat(NEWROOT "/etc/resolv.conf", &st) < 0) {
		int fd = open(NEWROOT "/etc/resolv.conf", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
		if (fd < 0)
			return errno == EROFS || errno == EACCES ? 0 : cordon_err_set(err, -errno, "create /etc/resolv.conf");
		close(fd);
	}
	if (lstat(NEWROOT "/etc/resolv.conf", &st) < 0 || !S_ISREG(st.st_mode))
		return 0;
	if (mount(NEWROOT "/dev/.resolv.conf", NEWROOT "/etc/resolv.conf", NULL, MS_BIND, NULL) < 0)
		return cordon_err_set(err, -errno, "bind /etc/resolv.conf");
	return 0;
}

/* Build mode: the overlay is the root, written through; only /dev, /proc and the resolver
 * are ours (the resolver bound from a file on /dev's tmpfs, so that no layer records it). */
static int setup_overlay_root(const struct rootfs_config *cfg, struct cordon_err *err)
{
	if (syscall(SYS_move_mount, cfg->image_tree, "", AT_FDCWD, NEWROOT, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		return cordon_err_set(err, -errno, "attach the overlay root");
	static const char *const dirs[] = {NEWROOT "/dev", NEWROOT "/proc"};
	for (size_t i = 0; i < ELEMENTSOF(dirs); i++) {
		struct stat st;
		if (mkdir(dirs[i], 0755) < 0 && errno != EEXIST)
			return cordon_err_set(err, -errno, "mkdir '%s'", dirs[i]);
		if (lstat(dirs[i], &st) < 0 || !S_ISDIR(st.st_mode))
			return cordon_err_setf(err, -ENOTDIR, "'%s' is not a directory", dirs[i]);
	}
	_cleanup_(own_trees_close) struct own_trees own = {-1, -1, -1};
	int r = own_trees_open(&own, err);
	if (r < 0 || (r = setup_dev(cfg->resolv_conf, own.dev, err)) < 0 || (r = setup_proc(own.mask, err)) < 0)
		return r;
	return bind_resolver(cfg, err);
}

int rootfs_setup(const struct rootfs_config *cfg, struct cordon_err *err)
{
	char opts[128];
	int r;

	/* No mount event of ours may propagate back to the host, nor the host's to us. */
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return cordon_err_set(err, -errno, "make mounts private");
	if (cfg->image_is_root) {
		if ((r = setup_overlay_root(cfg, err)) < 0 || (r = setup_binds(cfg, err)) < 0)
			return r;
		return pivot(err);
	}
	snprintf(opts, sizeof(opts), "mode=0755,size=%llu,nr_inodes=%llu",
		 (unsigned long long)cfg->disk_bytes,
		 (unsigned long long)(cfg->disk_bytes / 4096 + 1024));
	/* The scratch (a directory of the sandbox's own ext4, nosuid and nodev) where the host
	 * made one, else a tmpfs. */
	if (cfg->root_tree >= 0 &&
	    syscall(SYS_move_mount, cfg->root_tree, "", AT_FDCWD, NEWROOT, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		return cordon_err_set(err, -errno, "attach the scratch root");
	if (cfg->root_tree < 0 && mount("tmpfs", NEWROOT, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
		return cordon_err_set(err, -errno, "mount root tmpfs (%s)", opts);
	_cleanup_(own_trees_close) struct own_trees own = {-1, -1, -1};
	if ((r = make_dirs(cfg, err)) < 0 || (r = own_trees_open(&own, err)) < 0)
		return r;
	if (cfg->image_tree >= 0)
		r = setup_image_tree(cfg->image_tree, cfg->image_writable, err);
	else if (cfg->image_fd >= 0)
		r = setup_image_dir(cfg->image_fd, err);
	else if ((r = setup_host_image(cfg, err)) >= 0 && (r = setup_host_etc(cfg, own.etc, err)) >= 0)
		r = setup_host_pkg(cfg, err);
	if (r < 0)
		return r;
	bool image = cfg->image_tree >= 0 || cfg->image_fd >= 0; /* the host's /etc has its own */
	if ((r = setup_dev(image ? cfg->resolv_conf : NULL, own.dev, err)) < 0 || (r = setup_proc(own.mask, err)) < 0 ||
	    (image && (r = bind_resolver(cfg, err)) < 0) || (r = setup_binds(cfg, err)) < 0)
		return r;
	return pivot(err);
}
