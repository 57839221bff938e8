/* What the image cache (microvm_cache()) no longer needs, removed after each image this
 * process publishes (image.c), so that the cache holds what the host can use and not every
 * image it ever made: the `host` template's erofs is a few GiB, and every package change
 * makes a new one.
 *
 *   rootfs-K.erofs   its source is in rootfs-K.src, written before the image: "host"
 *                    (superseded by the newest host image) or a template version's
 *                    directory (gone with the version). An image without a .src is left.
 *   initrd-K.cpio    another cordon-init's or kernel's, when a new one is published: gone
 *                    a day after it was made (a second install of Cordon on the host
 *                    rebuilds its own, 1 MiB)
 *   vm-template-K/   a booted template's snapshot: gone with its initramfs or image
 *   *.tmp.TID        what a process that died while it wrote left, and its stage.TID
 *
 * A file that a running QEMU has open stays readable until it closes it. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "basic/cleanup.h"
#include "basic/fileio.h"
#include "runtime/microvm/microvm.h"

#define INITRD_KEEP_S (24 * 3600)

static bool has_suffix(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);
	return n > m && strcmp(s + n - m, suffix) == 0;
}

/* A writer's temporary name, NAME.tmp.TID or stage.TID (the host image's mount point), of
 * a thread that no longer exists. */
static bool orphan_tmp(const char *name)
{
	const char *t = strncmp(name, "stage.", 6) == 0 ? name + 6 : strstr(name, ".tmp.");
	char proc[64];
	if (t && t != name + 6)
		t += 5;
	if (!t || !*t || strspn(t, "0123456789") != strlen(t))
		return false;
	snprintf(proc, sizeof(proc), "/proc/%s", t);
	return access(proc, F_OK) < 0 && errno == ENOENT;
}

/* rootfs-K.erofs against its rootfs-K.src. */
static bool image_stale(int dfd, const char *name, const char *fresh_host)
{
	char src[PATH_MAX + 8], what[PATH_MAX];
	size_t base = strlen(name) - strlen(".erofs");
	snprintf(src, sizeof(src), "%.*s.src", (int)base, name);
	ssize_t n = read_file_at(dfd, src, what, sizeof(what));
	if (n <= 0)
		return false;
	what[strcspn(what, "\n")] = '\0';
	if (strcmp(what, "host") == 0)
		return fresh_host && strcmp(name, fresh_host) != 0;
	return what[0] == '/' && access(what, F_OK) < 0 && errno == ENOENT;
}

/* vm-template-K/: its machine file names the initramfs and image it was booted from. */
static bool template_stale(int dfd, const char *name)
{
	char path[NAME_MAX + 32], buf[2048];
	snprintf(path, sizeof(path), "%s/" MICROVM_SNAP_MACHINE, name);
	ssize_t n = read_file_at(dfd, path, buf, sizeof(buf));
	if (n <= 0)
		return false;
	for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
		const char *file = strncmp(line, "initrd ", 7) == 0   ? line + 7
				   : strncmp(line, "rootfs ", 7) == 0 ? line + 7
								      : NULL;
		if (file && access(file, F_OK) < 0 && errno == ENOENT)
			return true;
	}
	return false;
}

static void remove_image(int dfd, const char *name)
{
	char src[NAME_MAX + 8];
	snprintf(src, sizeof(src), "%.*s.src", (int)(strlen(name) - strlen(".erofs")), name);
	(void)unlinkat(dfd, name, 0);
	(void)unlinkat(dfd, src, 0);
}

void microvm_cache_sweep(const char *fresh, bool host)
{
	_cleanup_close_ int dfd = open(microvm_cache(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	DIR *d = dfd < 0 ? NULL : fdopendir(dup(dfd));
	const char *slash = strrchr(fresh, '/'), *base = slash ? slash + 1 : fresh;
	const char *fresh_host = host ? base : NULL;
	bool initrds = strncmp(base, "initrd-", 7) == 0;
	time_t now = time(NULL);
	struct dirent *e;
	struct stat st;
	while (d && (e = readdir(d))) {
		const char *n = e->d_name;
		if (n[0] == '.' || fstatat(dfd, n, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (orphan_tmp(n) && S_ISDIR(st.st_mode))
			microvm_snap_dir_remove(dfd, n); /* a stage is empty outside its namespace */
		else if (orphan_tmp(n))
			(void)unlinkat(dfd, n, 0);
		else if (strncmp(n, "rootfs-", 7) == 0 && has_suffix(n, ".erofs") &&
			 image_stale(dfd, n, fresh_host))
			remove_image(dfd, n);
		else if (initrds && strncmp(n, "initrd-", 7) == 0 && has_suffix(n, ".cpio") &&
			 strcmp(n, base) != 0 && now - st.st_mtime > INITRD_KEEP_S)
			(void)unlinkat(dfd, n, 0);
		else if (strncmp(n, "vm-template-", 12) == 0 && S_ISDIR(st.st_mode) &&
			 template_stale(dfd, n))
			microvm_snap_dir_remove(dfd, n);
	}
	if (d)
		closedir(d);
}
