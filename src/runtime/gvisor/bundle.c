/* A gvisor sandbox's directory on the host, <base>/s<slot> (gvisor.h):
 *
 *     disk/          the sandbox's scratch (scratch.h: sparse ext4 on a loop device), else
 *                    a tmpfs of --disk; nosuid, nodev; its writable layer and root:
 *       root/        `/` of the `host` template: fresh /tmp, /home, /root, /etc ...
 *       upper/ work/ the overlays' writable layers
 *     ov/NAME        overlays (lower: the template, upper: disk/upper/NAME): the host's
 *                    /usr, /bin ... copy-on-write, or `image` for --rootfs (then the root)
 *     netns          egress: the network namespace with the veth, eth0 configured
 *     bundle/config.json
 *
 * runsc's gofer serves these to the Sentry; nothing of it is reachable from the sandbox but
 * through the gofer. Everything carries the slot's number: the sweep removes what a dead
 * daemon left once the slot's lock is free.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <linux/mount.h>

#include "basic/cleanup.h"
#include "basic/fileio.h"
#include "basic/helper.h"
#include "lib/rootfs.h"
#include "runtime/gvisor/gvisor.h"
#include "runtime/scratch.h"

#define USER_UID 1000

struct new_dir {
	const char *path;
	mode_t mode;
	uid_t uid;
};
/* The jail's fresh directories (lib/rootfs.c), as the sandbox sees them. */
static const struct new_dir new_dirs[] = {
	{"tmp", 01777, 0}, {"home", 0755, 0}, {"home/user", 0755, USER_UID}, {"root", 0700, 0},
	{"run", 0755, 0}, {"var", 0755, 0}, {"var/tmp", 01777, 0}, {"etc", 0755, 0},
	{"dev", 0755, 0}, {"proc", 0555, 0},
};

static int pathf(char *buf, size_t size, const char *fmt, const char *a, const char *b)
{
	int n = snprintf(buf, size, fmt, a, b);
	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

int gvisor_create_file(const char *path, const char *content, mode_t mode)
{
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
	if (fd < 0)
		return -errno;
	return write_all(fd, content, strlen(content));
}

static int make_dir(const char *path, mode_t mode, uid_t uid, struct cordon_err *err)
{
	if (mkdir(path, mode) < 0 && errno != EEXIST)
		return cordon_err_set(err, -errno, "gvisor: mkdir '%s'", path);
	if (chmod(path, mode) < 0 || chown(path, uid, uid) < 0)
		return cordon_err_set(err, -errno, "gvisor: chown '%s'", path);
	return 0;
}

static int make_new_dirs(const char *root, struct cordon_err *err)
{
	char path[PATH_MAX];
	for (size_t i = 0; i < ELEMENTSOF(new_dirs); i++) {
		pathf(path, sizeof(path), "%s/%s", root, new_dirs[i].path);
		int r = make_dir(path, new_dirs[i].mode, new_dirs[i].uid, err);
		if (r < 0)
			return r;
	}
	return 0;
}

/* The disk, mounted at <dir>/disk: the scratch, or a tmpfs of @bytes where the host has
 * none to give (scratch.h). */
static int disk_mount(const char *dir, unsigned slot, uint64_t bytes, struct cordon_err *err)
{
	char path[PATH_MAX], opts[64];
	struct scratch sc = {.mnt = -1};
	pathf(path, sizeof(path), "%s/%s", dir, "disk");
	int r = make_dir(path, 0700, 0, err);
	if (r < 0 || (r = scratch_open(&sc, slot, bytes, err)) < 0)
		return r;
	if (sc.mnt >= 0) {
		r = syscall(SYS_move_mount, sc.mnt, "", AT_FDCWD, path, MOVE_MOUNT_F_EMPTY_PATH);
		r = r < 0 ? cordon_err_set(err, -errno, "gvisor: attach the scratch") : 0;
		scratch_close(&sc);
		if (sc.img >= 0) /* the caller's (scratch.h); nothing here reads its size */
			close(sc.img);
		return r;
	}
	snprintf(opts, sizeof(opts), "size=%llu,mode=0700", (unsigned long long)bytes);
	if (mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
		return cordon_err_set(err, -errno, "gvisor: mount the disk's tmpfs");
	return 0;
}

int gvisor_disk_open(const struct gvisor *g)
{
	char path[PATH_MAX];
	pathf(path, sizeof(path), "%s/%s", g->dir, "disk");
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/* A restore: the disk filled from the snapshot @from before its layers are made (the
 * snapshot's root/ and upper/ are the disk's own layout; owners as they are, base 0). */
static int disk_fill(const struct gvisor *g, int from, struct cordon_err *err)
{
	if (from < 0)
		return 0;
	_cleanup_close_ int fd = gvisor_disk_open(g);
	if (fd < 0)
		return cordon_err_set(err, fd, "gvisor: open the disk of '%s'", g->dir);
	return scratch_dir_fill(fd, 0, from, err);
}

/* @hidden's names whited out (0:0 character devices) in the upper @upper. */
static int whiteouts(const char *upper, const char *const *hidden, struct cordon_err *err)
{
	char path[PATH_MAX];
	for (; hidden && *hidden; hidden++) {
		if (pathf(path, sizeof(path), "%s/%s", upper, *hidden) < 0)
			return cordon_err_setf(err, -ENAMETOOLONG, "gvisor: path too long");
		if (mknod(path, S_IFCHR | 0600, makedev(0, 0)) < 0 && errno != EEXIST)
			return cordon_err_set(err, -errno, "gvisor: hide '%s'", path);
	}
	return 0;
}

/* ov/@name: @lower copy-on-write, its layer on the disk, @hidden's names not shown. */
static int overlay_at(const char *dir, const char *lower, const char *name,
		      const char *const *hidden, char *ret, size_t size, struct cordon_err *err)
{
	char upper[PATH_MAX], work[PATH_MAX], opts[3 * PATH_MAX + 64];
	struct stat st;
	int r;
	if (stat(lower, &st) < 0)
		return cordon_err_set(err, -errno, "gvisor: '%s'", lower);
	pathf(upper, sizeof(upper), "%s/disk/upper/%s", dir, name);
	pathf(work, sizeof(work), "%s/disk/work/%s", dir, name);
	if (pathf(ret, size, "%s/ov/%s", dir, name) < 0)
		return cordon_err_setf(err, -ENAMETOOLONG, "gvisor: path too long");
	if ((r = make_dir(upper, st.st_mode & 07777, st.st_uid, err)) < 0 ||
	    (r = whiteouts(upper, hidden, err)) < 0 ||
	    (r = make_dir(work, 0700, 0, err)) < 0 || (r = make_dir(ret, 0755, 0, err)) < 0)
		return r;
	snprintf(opts, sizeof(opts), "lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work);
	if (mount("overlay", ret, "overlay", MS_NOSUID | MS_NODEV, opts) < 0)
		return cordon_err_set(err, -errno, "gvisor: overlay over '%s'", lower);
	return 0;
}

static int add_mount(struct gvisor_bundle *b, const char *src, const char *dst, bool rw,
		     struct cordon_err *err)
{
	if (b->n >= GVISOR_MAX_MOUNTS)
		return cordon_err_setf(err, -E2BIG, "gvisor: too many mounts");
	struct gvisor_mount *m = &b->m[b->n];
	if (pathf(m->src, sizeof(m->src), "%s%s", src, "") < 0 ||
	    pathf(m->dst, sizeof(m->dst), "%s%s", dst, "") < 0)
		return cordon_err_setf(err, -ENAMETOOLONG, "gvisor: mount path too long");
	m->rw = rw;
	b->n++;
	return 0;
}

/* A host symlink (merged /usr: /bin -> usr/bin) is copied as a symlink. */
static int copy_symlink(const char *src, const char *dst, struct cordon_err *err)
{
	char target[PATH_MAX];
	ssize_t n = readlink(src, target, sizeof(target) - 1);
	if (n < 0)
		return cordon_err_set(err, -errno, "gvisor: readlink '%s'", src);
	target[n] = '\0';
	if (symlink(target, dst) < 0 && errno != EEXIST)
		return cordon_err_set(err, -errno, "gvisor: symlink '%s'", dst);
	return 0;
}

/* The `host` template's image directories and package state (lib/rootfs.h): each an
 * overlay, bound at its place; the package manager's empty directories. */
static int host_image(struct gvisor_bundle *b, const char *dir, struct cordon_err *err)
{
	for (size_t i = 0; i < rootfs_host_dirs_n; i++) {
		char dst[PATH_MAX];
		pathf(dst, sizeof(dst), "%s/%s", b->root, rootfs_host_dirs[i]);
		int r = make_dir(dst, 0755, 0, err);
		if (r < 0)
			return r;
	}
	for (size_t i = 0; i < ROOTFS_HOST_TREES_N; i++) {
		char src[PATH_MAX], dst[PATH_MAX], ov[PATH_MAX];
		struct stat st;
		const char *name = rootfs_host_tree_path(i);
		const char *const *hidden = i < ROOTFS_HOST_IMAGE_N ? NULL
								    : rootfs_host_pkg[i - ROOTFS_HOST_IMAGE_N].hidden;
		pathf(src, sizeof(src), "/%s%s", name, "");
		pathf(dst, sizeof(dst), "%s/%s", b->root, name);
		int r = 0;
		if (lstat(src, &st) < 0)
			continue;
		if (S_ISLNK(st.st_mode))
			r = copy_symlink(src, dst, err);
		else if (S_ISDIR(st.st_mode) &&
			 (r = overlay_at(dir, src, rootfs_host_tree_key(i), hidden, ov, sizeof(ov), err)) == 0 &&
			 (r = make_dir(dst, 0755, 0, err)) == 0)
			r = add_mount(b, ov, src, true, err);
		if (r < 0)
			return r;
	}
	return 0;
}

/* The resolver is the host end of the link, as in the jail; false without a link. */
static bool resolver_conf(const struct runtime_host *h, char *conf, size_t size)
{
	char ip[16];
	if (!h->privileged || !inet_ntop(AF_INET, &h->link.host, ip, sizeof(ip)))
		return false;
	snprintf(conf, size, "nameserver %s\n", ip);
	return true;
}

/* A template's /etc/resolv.conf, as the jail's bind_resolver() (lib/rootfs.c): <dir>/resolv.conf
 * bound read-only over it, made where the image has none, so that the overlay's upper records
 * an empty file at most; a symlink (a resolver's stub) is left as the image has it, and so is
 * an image without /etc. */
static int image_resolver(struct gvisor_bundle *b, const char *dir, const struct runtime_host *h,
			  struct cordon_err *err)
{
	char conf[64], src[PATH_MAX], dst[PATH_MAX];
	struct stat st;
	pathf(dst, sizeof(dst), "%s/%s", b->root, "etc");
	if (!resolver_conf(h, conf, sizeof(conf)) || lstat(dst, &st) < 0 || !S_ISDIR(st.st_mode))
		return 0;
	pathf(dst, sizeof(dst), "%s/%s", b->root, "etc/resolv.conf");
	if (lstat(dst, &st) < 0) {
		int r = gvisor_create_file(dst, "", 0644);
		if (r < 0)
			return cordon_err_set(err, r, "gvisor: create '%s'", dst);
	} else if (!S_ISREG(st.st_mode)) {
		return 0;
	}
	pathf(src, sizeof(src), "%s/%s", dir, "resolv.conf");
	int r = gvisor_create_file(src, conf, 0644);
	if (r < 0)
		return cordon_err_set(err, r, "gvisor: write '%s'", src);
	return add_mount(b, src, "/etc/resolv.conf", false, err);
}

/* /etc: the host's harmless entries read-only (lib/rootfs.c's list), the sandbox's own. */
static int host_etc(struct gvisor_bundle *b, const struct cordon_spec *spec,
		    const struct runtime_host *h, struct cordon_err *err)
{
	char src[PATH_MAX], dst[PATH_MAX], ns[64];
	int r;
	for (size_t i = 0; i < rootfs_host_etc_n; i++) {
		struct stat st;
		pathf(src, sizeof(src), "/etc/%s%s", rootfs_host_etc[i], "");
		pathf(dst, sizeof(dst), "%s/etc/%s", b->root, rootfs_host_etc[i]);
		if (lstat(src, &st) < 0 || !(S_ISLNK(st.st_mode) || S_ISDIR(st.st_mode) ||
					     S_ISREG(st.st_mode)))
			continue;
		r = S_ISLNK(st.st_mode) ? copy_symlink(src, dst, err) : add_mount(b, src, src, false, err);
		if (r < 0)
			return r;
	}
	/* The sandbox's own files, read-only as in the jail: bound over themselves. */
	for (size_t i = 0; i < rootfs_etc_files_n; i++) {
		pathf(dst, sizeof(dst), "%s/etc/%s", b->root, rootfs_etc_files[i].name);
		pathf(src, sizeof(src), "/etc/%s%s", rootfs_etc_files[i].name, "");
		if ((r = gvisor_create_file(dst, rootfs_etc_files[i].content, 0644)) < 0)
			return cordon_err_set(err, r, "gvisor: write '%s'", dst);
		if ((r = add_mount(b, dst, src, false, err)) < 0)
			return r;
	}
	char conf[64];
	pathf(dst, sizeof(dst), "%s/etc/%s", b->root, "resolv.conf");
	if (resolver_conf(h, conf, sizeof(conf)) && (r = gvisor_create_file(dst, conf, 0644)) < 0)
		return cordon_err_set(err, r, "gvisor: write '%s'", dst);
	snprintf(ns, sizeof(ns), "%s\n", spec->hostname ? spec->hostname : "cordon");
	pathf(dst, sizeof(dst), "%s/etc/%s", b->root, "hostname");
	if ((r = gvisor_create_file(dst, ns, 0644)) < 0)
		return cordon_err_set(err, r, "gvisor: write '%s'", dst);
	return 0;
}

/* runsc puts a tmpfs of the Sentry's memory on /tmp unless the spec mounts something there:
 * /tmp is the sandbox's disk, bounded by --disk as in the jail. */
static int tmp_on_disk(struct gvisor_bundle *b, struct cordon_err *err)
{
	char path[PATH_MAX];
	pathf(path, sizeof(path), "%s/%s", b->root, "tmp");
	return add_mount(b, path, "/tmp", true, err);
}

/* <dir>/disk/upper, disk/work and ov: where the overlays go. */
static int make_layer_dirs(const char *dir, struct cordon_err *err)
{
	static const struct new_dir dirs[] = {{"disk/upper", 0755, 0}, {"disk/work", 0700, 0},
					      {"ov", 0700, 0}};
	char path[PATH_MAX];
	for (size_t i = 0; i < ELEMENTSOF(dirs); i++) {
		pathf(path, sizeof(path), "%s/%s", dir, dirs[i].path);
		int r = make_dir(path, dirs[i].mode, dirs[i].uid, err);
		if (r < 0)
			return r;
	}
	return 0;
}

static int make_root(struct gvisor_bundle *b, const char *dir, const struct cordon_spec *spec,
		     const struct runtime_host *h, struct cordon_err *err)
{
	int r = make_layer_dirs(dir, err);
	if (r < 0)
		return r;
	if (spec->rootfs) {
		if ((r = overlay_at(dir, spec->rootfs, "image", NULL, b->root, sizeof(b->root), err)) < 0 ||
		    (r = make_new_dirs(b->root, err)) < 0 || (r = image_resolver(b, dir, h, err)) < 0)
			return r;
		return tmp_on_disk(b, err);
	}
	pathf(b->root, sizeof(b->root), "%s/%s", dir, "disk/root");
	if ((r = make_dir(b->root, 0755, 0, err)) < 0 || (r = make_new_dirs(b->root, err)) < 0 ||
	    (r = host_image(b, dir, err)) < 0 || (r = tmp_on_disk(b, err)) < 0)
		return r;
	return host_etc(b, spec, h, err);
}

/* The caller's read-only binds: regular files and directories only, as in the jail. */
static int binds(struct gvisor_bundle *b, const struct cordon_spec *spec, struct cordon_err *err)
{
	for (size_t i = 0; i < spec->n_binds; i++) {
		struct stat st;
		const char *src = spec->binds[i].host;
		if (!src || src[0] != '/' || stat(src, &st) < 0)
			return cordon_err_setf(err, -ENOENT, "bind source '%s': not found", src ? src : "");
		if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
			return cordon_err_setf(err, -EPERM, "bind source '%s': only regular files "
					       "and directories can be shared", src);
		int r = add_mount(b, src, spec->binds[i].sandbox, false, err);
		if (r < 0)
			return r;
	}
	return 0;
}

/* Egress: the sandbox's own network namespace with the veth of its slot, eth0 configured,
 * before runsc boots: the Sentry's netstack takes the interfaces it finds there. */
static int netns_make(struct gvisor *g, const struct cordon_spec *spec, struct gvisor_bundle *b,
		      struct cordon_err *err)
{
	int ready = -1;
	char c, src[64];
	pid_t pid = runtime_host_netns_holder(&ready);
	if (pid < 0)
		return cordon_err_set(err, -errno, "gvisor: fork the network namespace's holder");
	int r = read(ready, &c, 1) == 1 ? 0 : cordon_err_setf(err, -EIO, "gvisor: unshare network");
	close(ready);
	if (r == 0)
		r = runtime_host_link(&g->sb.host, pid, spec->net_hook, spec->net_hook_data, err);
	if (r == 0)
		r = runtime_host_link_inside(&g->sb.host, pid, err);
	pathf(b->netns, sizeof(b->netns), "%s/%s", g->dir, "netns");
	snprintf(src, sizeof(src), "/proc/%d/ns/net", (int)pid);
	if (r == 0 && gvisor_create_file(b->netns, "", 0600) < 0)
		r = cordon_err_set(err, -errno, "gvisor: create '%s'", b->netns);
	if (r == 0 && mount(src, b->netns, NULL, MS_BIND, NULL) < 0)
		r = cordon_err_set(err, -errno, "gvisor: bind the network namespace");
	kill(pid, SIGKILL);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
	return r;
}

int gvisor_bundle_make(struct gvisor *g, const struct cordon_spec *spec, int from,
		       struct gvisor_bundle *b, struct cordon_err *err)
{
	int r;
	char path[PATH_MAX];
	if (helper_path("cordon-init", "CORDON_INIT", b->init, sizeof(b->init)) < 0)
		return cordon_err_setf(err, -ENOENT, "gvisor: cordon-init not found");
	if (helper_path("cordon-gvisor-stat.so", "CORDON_GVISOR_STAT", b->stat, sizeof(b->stat)) < 0)
		return cordon_err_setf(err, -ENOENT, "gvisor: cordon-gvisor-stat.so not found");
	mkdir(gvisor_base(), 0700);
	if ((r = make_dir(g->dir, 0700, 0, err)) < 0)
		return r;
	g->made = true;
	pathf(path, sizeof(path), "%s/%s", g->dir, "bundle");
	if ((r = make_dir(path, 0700, 0, err)) < 0 ||
	    (r = disk_mount(g->dir, g->sb.host.slot.slot, spec->disk_bytes, err)) < 0 ||
	    (r = disk_fill(g, from, err)) < 0 ||
	    (r = make_root(b, g->dir, spec, &g->sb.host, err)) < 0 || (r = binds(b, spec, err)) < 0)
		return r;
	if (spec->net == CORDON_NET_EGRESS && (r = netns_make(g, spec, b, err)) < 0)
		return r;
	pathf(b->sock, sizeof(b->sock), "%s/%s", g->dir, "sock");
	if (!spec->argv && (r = make_dir(b->sock, 0700, 0, err)) < 0)
		return r;
	if (spec->argv)
		b->sock[0] = '\0';
	pathf(path, sizeof(path), "%s/%s", g->dir, "bundle/config.json");
	return gvisor_oci_write(path, spec, b, err);
}

static void umount_all(const char *path)
{
	while (umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW) == 0)
		;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(flag == FTW_DP ? rmdir : unlink)(path);
	return 0;
}

void gvisor_bundle_remove(const char *dir)
{
	char path[PATH_MAX];
	_cleanup_closedir_ DIR *d = NULL;
	pathf(path, sizeof(path), "%s/%s", dir, "ov");
	if ((d = opendir(path))) {
		struct dirent *e;
		while ((e = readdir(d)))
			if (e->d_name[0] != '.') {
				char ov[PATH_MAX + 256];
				pathf(ov, sizeof(ov), "%s/%s", path, e->d_name);
				umount_all(ov);
			}
	}
	pathf(path, sizeof(path), "%s/%s", dir, "netns");
	umount_all(path);
	pathf(path, sizeof(path), "%s/%s", dir, "disk");
	umount_all(path);
	/* FTW_MOUNT: never into a mount that would not go (a disk still busy stays whole). */
	nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}
