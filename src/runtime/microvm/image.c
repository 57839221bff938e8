/* The guest's images, made once and cached in microvm_cache(): the initramfs (a cpio "newc"
 * archive: cordon-init as /init, the modules and their load order) per cordon-init and
 * kernel, and a read-only erofs image per template version. Each is written under a
 * temporary name and renamed, so that no reader sees half of one; a failed step removes its
 * temporary file. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "basic/child.h"
#include "basic/cleanup.h"
#include "basic/fileio.h"
#include "basic/helper.h"
#include "lib/initproto.h"
#include "lib/rootfs.h"
#include "policy/seccomp_filter.h"
#include "runtime/initargs.h"
#include "runtime/microvm/microvm.h"
#include "runtime/scratch.h"

/* FNV-1a: a cache key, not a defence (the cache is root's). */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *c = p;
	for (size_t i = 0; i < n; i++)
		h = (h ^ c[i]) * 0x100000001b3ULL;
	return h;
}

static uint64_t fnv_stat(uint64_t h, const char *path)
{
	struct stat st = {};
	(void)stat(path, &st);
	h = fnv(h, path, strlen(path));
	h = fnv(h, &st.st_size, sizeof(st.st_size));
	h = fnv(h, &st.st_ino, sizeof(st.st_ino));
	return fnv(h, &st.st_mtim, sizeof(st.st_mtim));
}

static int cache_dir(struct cordon_err *err)
{
	const char *d = microvm_cache();
	if (mkdir(d, 0700) < 0 && errno != EEXIST)
		return cordon_err_set(err, -errno, "microvm: cache directory '%s'", d);
	return 0;
}

/* ---- the initramfs ---- */

static int cpio_entry(int fd, const char *name, mode_t mode, const void *data, size_t size)
{
	static const char zero[4];
	static unsigned ino = 1;
	char hdr[128];
	size_t namesz = strlen(name) + 1;
	snprintf(hdr, sizeof(hdr),
		 "070701%08X%08X%08X%08X%08X%08X%08zX%08X%08X%08X%08X%08zX%08X", ino++, mode, 0, 0,
		 1, 0, size, 0, 0, 0, 0, namesz, 0);
	int r = write_all(fd, hdr, 110);
	if (r == 0)
		r = write_all(fd, name, namesz);
	if (r == 0)
		r = write_all(fd, zero, (4 - (110 + namesz) % 4) % 4);
	if (r == 0 && size)
		r = write_all(fd, data, size);
	if (r == 0)
		r = write_all(fd, zero, (4 - size % 4) % 4);
	return r;
}

static int cpio_file(int fd, const char *name, const char *path, mode_t mode)
{
	_cleanup_close_ int in = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (in < 0 || fstat(in, &st) < 0)
		return -errno;
	_cleanup_free_ char *buf = malloc(st.st_size ? st.st_size : 1);
	if (!buf)
		return -ENOMEM;
	int r = read_exact(in, buf, st.st_size);
	return r < 0 ? r : cpio_entry(fd, name, S_IFREG | mode, buf, st.st_size);
}

static int cpio_write(int fd, const char *init, const struct microvm_host *h)
{
	static const char *const dirs[] = {"dev", "proc", "sys", "mnt", "lib", "lib/modules"};
	char order[512] = "", name[96], path[PATH_MAX];
	int r = 0;
	for (size_t i = 0; i < ELEMENTSOF(dirs) && r == 0; i++)
		r = cpio_entry(fd, dirs[i], S_IFDIR | 0755, NULL, 0);
	if (r == 0)
		r = cpio_file(fd, "init", init, 0755);
	for (size_t i = 0; i < microvm_modules_n && r == 0; i++) {
		snprintf(name, sizeof(name), "lib/modules/%s.ko", microvm_modules[i]);
		snprintf(path, sizeof(path), "%s/%s.ko", h->modules, microvm_modules[i]);
		strcat(strcat(order, microvm_modules[i]), "\n");
		r = cpio_file(fd, name, path, 0644);
	}
	if (r == 0)
		r = cpio_entry(fd, "lib/modules/order", S_IFREG | 0644, order, strlen(order));
	return r == 0 ? cpio_entry(fd, "TRAILER!!!", 0, NULL, 0) : r;
}

/* Writes @path through @path.tmp.<tid> with @fill (two threads of cordond may make the same
 * image at once: the last rename wins, both whole); the temporary file goes on failure. */
static int publish(const char *path, int (*fill)(const char *tmp, void *data), void *data)
{
	char tmp[PATH_MAX];
	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)gettid());
	int r = fill(tmp, data);
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r < 0)
		(void)unlink(tmp);
	return r;
}

struct initrd_job {
	const char *init;
	const struct microvm_host *h;
};

static int fill_initrd(const char *tmp, void *data)
{
	struct initrd_job *j = data;
	_cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	return fd < 0 ? -errno : cpio_write(fd, j->init, j->h);
}

int microvm_initrd(const struct microvm_host *h, char *path, size_t size, struct cordon_err *err)
{
	char init[PATH_MAX], ko[PATH_MAX];
	if (helper_path("cordon-init", "CORDON_INIT", init, sizeof(init)) < 0)
		return cordon_err_setf(err, -ENOENT, "microvm: no cordon-init at '%s'", init);
	uint64_t key = fnv_stat(0xcbf29ce484222325ULL, init);
	for (size_t i = 0; i < microvm_modules_n; i++) {
		snprintf(ko, sizeof(ko), "%s/%s.ko", h->modules, microvm_modules[i]);
		key = fnv_stat(key, ko);
	}
	int r = cache_dir(err);
	if (r < 0)
		return r;
	snprintf(path, size, "%s/initrd-%016llx.cpio", microvm_cache(), (unsigned long long)key);
	if (access(path, R_OK) == 0)
		return 0;
	struct initrd_job j = {init, h};
	r = publish(path, fill_initrd, &j);
	if (r == 0)
		microvm_cache_sweep(path, false);
	return r < 0 ? cordon_err_set(err, r, "microvm: initramfs '%s'", path) : 0;
}

/* ---- the template's erofs image ---- */

/* One entry of the `host` template: a symlink copied, a directory or file bound read-only. */
static int stage_entry(const char *src, const char *dst)
{
	struct stat st;
	char target[PATH_MAX];
	if (lstat(src, &st) < 0)
		return 0;
	if (S_ISLNK(st.st_mode)) {
		ssize_t n = readlink(src, target, sizeof(target) - 1);
		if (n < 0)
			return -errno;
		target[n] = '\0';
		return symlink(target, dst) < 0 ? -errno : 0;
	}
	int made = S_ISDIR(st.st_mode) ? mkdir(dst, 0755) : mknod(dst, S_IFREG | 0644, 0);
	if (made < 0 || mount(src, dst, NULL, MS_BIND | MS_REC, NULL) < 0)
		return -errno;
	return 0;
}

/* The `host` template's tree, in a mount namespace of the child that makes the image: a
 * tmpfs at @stage with the host's image directories and the /etc files of rootfs.h bound in
 * (nothing else of the host: no secret of /etc). */
static int stage_host(const char *stage)
{
	char dst[PATH_MAX], src[PATH_MAX];
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("tmpfs", stage, "tmpfs", 0, "mode=0755") < 0)
		return -errno;
	snprintf(dst, sizeof(dst), "%s/etc", stage);
	if (mkdir(dst, 0755) < 0)
		return -errno;
	for (size_t i = 0; i < ROOTFS_HOST_IMAGE_N + rootfs_host_etc_n; i++) {
		bool etc = i >= ROOTFS_HOST_IMAGE_N;
		const char *name = etc ? rootfs_host_etc[i - ROOTFS_HOST_IMAGE_N] : rootfs_host_image[i];
		snprintf(src, sizeof(src), "/%s%s", etc ? "etc/" : "", name);
		snprintf(dst, sizeof(dst), "%s/%s%s", stage, etc ? "etc/" : "", name);
		int r = stage_entry(src, dst);
		if (r < 0)
			return r;
	}
	return 0;
}

struct erofs_job {
	const char *rootfs; /* NULL: the `host` template, staged at @stage */
	char stage[PATH_MAX];
};

static int fill_erofs(const char *tmp, void *data)
{
	struct erofs_job *j = data;
	const char *tool = access("/usr/bin/mkfs.erofs", X_OK) == 0 ? "/usr/bin/mkfs.erofs"
								    : "/usr/sbin/mkfs.erofs";
	if (access(tool, X_OK) < 0)
		return -ENOENT;
	if (!j->rootfs && mkdir(j->stage, 0700) < 0 && errno != EEXIST)
		return -errno;
	pid_t pid = fork();
	if (pid == 0) {
		/* with the thread that waits for it: cordond's end is mkfs.erofs's */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int null = open("/dev/null", O_RDWR);
		if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0 ||
		    (!j->rootfs && stage_host(j->stage) < 0))
			_exit(127);
		execl(tool, "mkfs.erofs", "--quiet", "--all-root", "-T0", tmp,
		      j->rootfs ? j->rootfs : j->stage, (char *)NULL);
		_exit(127);
	}
	int r = pid < 0 ? -errno : child_wait_ok(pid, MICROVM_TOOL_MS);
	if (!j->rootfs)
		(void)rmdir(j->stage);
	return r;
}

/* rootfs-K.src beside rootfs-K.erofs, before the image: what the cache's sweep keeps it for
 * (cache.c). Published as the image is, so that no sweep reads half of one. */
static int fill_source(const char *tmp, void *data)
{
	const char *rootfs = data;
	_cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	int r = write_all(fd, rootfs ? rootfs : "host", strlen(rootfs ? rootfs : "host"));
	return r < 0 ? r : write_all(fd, "\n", 1);
}

static int write_source(const char *image, const char *rootfs)
{
	char src[PATH_MAX - 32]; /* room for publish()'s .tmp.TID */
	snprintf(src, sizeof(src), "%.*s.src", (int)(strlen(image) - strlen(".erofs")), image);
	return publish(src, fill_source, (void *)rootfs);
}

/* A template is a directory whose content does not change under its name; the host's
 * changes with its packages (dpkg's status file). */
int microvm_rootfs_image(const char *rootfs, bool make, char *path, size_t size,
			 struct cordon_err *err)
{
	uint64_t key = fnv_stat(0xcbf29ce484222325ULL, rootfs ? rootfs : "/var/lib/dpkg/status");
	int r = cache_dir(err);
	if (r < 0)
		return r;
	snprintf(path, size, "%s/rootfs-%016llx.erofs", microvm_cache(), (unsigned long long)key);
	if (access(path, R_OK) == 0)
		return 0;
	if (!make)
		return cordon_err_setf(err, -EINPROGRESS, "microvm: the image of %s is not made yet (the "
				       "first sandbox of a template version waits for it)",
				       rootfs ? "this template version" : "the host template");
	struct erofs_job j = {rootfs, ""};
	snprintf(j.stage, sizeof(j.stage), "%s/stage.%d", microvm_cache(), (int)gettid());
	r = write_source(path, rootfs);
	if (r == 0)
		r = publish(path, fill_erofs, &j);
	if (r == 0)
		microvm_cache_sweep(path, !rootfs);
	if (r == -ENOENT)
		return cordon_err_setf(err, r, "microvm: mkfs.erofs not found (apt-get install erofs-utils)");
	if (r == -ETIMEDOUT)
		return cordon_err_setf(err, r, "microvm: mkfs.erofs of '%s' did not finish in %d s",
				       rootfs ? rootfs : "the host", MICROVM_TOOL_MS / 1000);
	return r < 0 ? cordon_err_set(err, r, "microvm: erofs image of '%s'", rootfs ? rootfs : "the host") : 0;
}

/* ---- the scratch disk and the args block ---- */

int microvm_scratch_make(const char *path, uint64_t bytes, struct cordon_err *err)
{
	_cleanup_close_ int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	int r = fd < 0 ? -errno : scratch_image_copy(fd, bytes);
	return r < 0 ? cordon_err_set(err, r, "microvm: scratch disk '%s'", path) : 0;
}

static size_t strv_len(char *const *v, size_t *bytes)
{
	size_t n = 0;
	for (; v && v[n]; n++)
		*bytes += strlen(v[n]) + 1;
	return n;
}

static char *strv_put(char *p, char *const *v)
{
	for (; v && *v; v++)
		p = stpcpy(p, *v) + 1;
	return p;
}

static int block_fill(const struct init_args *a, const struct cordon_spec *spec, char **ret,
		      size_t *ret_len, struct cordon_err *err)
{
	size_t bytes = 0, filter = (size_t)spec->seccomp->len * sizeof(struct sock_filter);
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	uint64_t caps = init_caps(spec);
	struct vm_args_head h = {
	    .argc = (uint32_t)strv_len(a->argv, &bytes),
	    .envc = (uint32_t)strv_len(a->envp, &bytes),
	    .uid = spec->argv && spec->user != CORDON_USER_ROOT ? 1000 : 0,
	    .time_lo = (uint32_t)now.tv_sec,
	    .time_hi = (uint32_t)((uint64_t)now.tv_sec >> 32),
	    .caps_lo = (uint32_t)caps,
	    .caps_hi = (uint32_t)(caps >> 32),
	    .filter_len = spec->seccomp->len,
	};
	if (sizeof(h) + bytes + filter > MICROVM_ARGS_MAX)
		return cordon_err_setf(err, -E2BIG, "microvm: command and environment over %u KiB",
				       MICROVM_ARGS_MAX >> 10);
	h.bytes = (uint32_t)bytes;
	char *buf = malloc(sizeof(h) + bytes + filter);
	if (!buf)
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	memcpy(buf, &h, sizeof(h));
	char *p = strv_put(strv_put(buf + sizeof(h), a->argv), a->envp);
	memcpy(p, spec->seccomp->filter, filter);
	*ret = buf;
	*ret_len = sizeof(h) + bytes + filter;
	return 0;
}

/* Sent before QEMU starts: it waits in the socket's buffer until the guest opens its port,
 * so it must fit there (MICROVM_ARGS_MAX is well below the default unix socket buffer). */
int microvm_args_block(const struct cordon_spec *spec, char **ret, size_t *ret_len,
		       struct cordon_err *err)
{
	struct init_args a = {};
	int r = init_args_make(&a, spec, NULL, err);
	if (r == 0)
		r = block_fill(&a, spec, ret, ret_len, err);
	init_args_free(&a);
	return r;
}
