#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <linux/mount.h>
#include <unistd.h>

#include "basic/cleanup.h"
#include "lib/overlay.h"

static int fsconfig_str(int fs, const char *key, const char *value)
{
	return syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, key, value, 0) < 0 ? -errno : 0;
}

int mount_clone_ro(const char *dir, int userns_fd, struct cordon_err *err)
{
	_cleanup_close_ int tree = syscall(SYS_open_tree, AT_FDCWD, dir, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
	if (tree < 0)
		return cordon_err_set(err, -errno, "open_tree '%s'", dir);
	struct mount_attr attr = {.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV};
	if (userns_fd >= 0) {
		attr.attr_set |= MOUNT_ATTR_IDMAP;
		attr.userns_fd = (uint64_t)userns_fd;
	}
	if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0)
		return cordon_err_set(err, -errno, "idmap '%s'", dir);
	return TAKE_FD(tree);
}

/* The kernel's own words on a failed create (fs context log), else strerror. */
static int create_failed(int fs, int code, struct cordon_err *err)
{
	char buf[256];
	ssize_t n = read(fs, buf, sizeof(buf) - 1);
	if (n > 2) {
		buf[n] = '\0';
		buf[strcspn(buf, "\n")] = '\0';
		return cordon_err_setf(err, code, "overlay: %s (%s)", buf + 2, strerror(-code));
	}
	return cordon_err_set(err, code, "overlay: create");
}

/* Attaches @tree at <cwd>/<i> (made here) and writes that name into @buf. */
static int attach_layer(int tree, size_t i, char *buf, size_t size, struct cordon_err *err)
{
	snprintf(buf, size, "%zu", i);
	if (mkdir(buf, 0700) < 0 && errno != EEXIST)
		return cordon_err_set(err, -errno, "overlay: mkdir layer mount point %s", buf);
	if (syscall(SYS_move_mount, tree, "", AT_FDCWD, buf, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		return cordon_err_set(err, -errno, "overlay: attach layer at '%s'", buf);
	return 0;
}

static void detach_layers(size_t n)
{
	char p[32];
	for (size_t i = 0; i < n; i++) {
		snprintf(p, sizeof(p), "%zu", i);
		(void)umount2(p, MNT_DETACH);
		(void)rmdir(p);
	}
}

int overlay_tree(const char *const *lower, size_t n_lower, const char *upper, const char *work,
		 int userns_fd, const char *stage, struct cordon_err *err)
{
	char lowerdir[OVERLAY_MAX_LOWER * 8], path[32];
	size_t n = 0, off = 0;
	int r;

	if (n_lower == 0 || n_lower > OVERLAY_MAX_LOWER)
		return cordon_err_setf(err, -EINVAL, "overlay: %zu layers (1 to %u)", n_lower,
				       OVERLAY_MAX_LOWER);
	_cleanup_close_ int cwd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	_cleanup_close_ int fs = syscall(SYS_fsopen, "overlay", FSOPEN_CLOEXEC);
	if (cwd < 0 || fs < 0 || chdir(stage) < 0) {
		r = cordon_err_set(err, -errno, "overlay: fsopen, or enter '%s'", stage);
		goto out;
	}
	/* Each layer is a detached (idmapped) clone, attached in @stage for the moment of the
	 * mount: overlayfs takes private clones of its layers, and before 6.15 it cannot clone a
	 * detached mount. They are named "0", "1", ... relative to @stage, our cwd until the
	 * mount is made: 6.1 reads the options as one page, which long paths would overflow. */
	for (; n < n_lower; n++) {
		_cleanup_close_ int tree = mount_clone_ro(lower[n], userns_fd, err);
		if (tree < 0 || (r = attach_layer(tree, n, path, sizeof(path), err)) < 0) {
			r = tree < 0 ? tree : r;
			if (tree >= 0)
				n++; /* its mount point was made */
			goto out;
		}
		off += snprintf(lowerdir + off, sizeof(lowerdir) - off, "%s%s", n ? ":" : "", path);
	}
	static const char *const opts[][2] = {
		{"redirect_dir", "off"}, {"index", "off"}, {"metacopy", "off"}, {"xino", "off"},
	};
	if ((r = fsconfig_str(fs, "lowerdir", lowerdir)) < 0 || (r = fsconfig_str(fs, "upperdir", upper)) < 0 ||
	    (r = fsconfig_str(fs, "workdir", work)) < 0) {
		r = cordon_err_set(err, r, "overlay: configure (upper '%s')", upper);
		goto out;
	}
	for (size_t i = 0; i < ELEMENTSOF(opts); i++)
		(void)fsconfig_str(fs, opts[i][0], opts[i][1]); /* older kernels lack some */
	if (syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0) {
		r = create_failed(fs, -errno, err);
		goto out;
	}
	r = syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
	if (r < 0)
		r = cordon_err_set(err, -errno, "overlay: fsmount");
out:
	/* Back to where we were, from wherever the failure left us. */
	if (cwd >= 0 && fchdir(cwd) == 0 && chdir(stage) == 0) {
		detach_layers(n);
		if (fchdir(cwd) < 0 && r >= 0) {
			close(r);
			r = cordon_err_set(err, -errno, "overlay: return to the cwd");
		}
	}
	return r;
}
