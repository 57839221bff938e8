#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <linux/mount.h>
#include <unistd.h>

#include "basic/cleanup.h"
#include "lib/overlay.h"

static int fsconfig_str(int fs, const char *key, const char *value)
{
	return syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, key, value, 0) < 0 ? -errno : 0;
}

/* One lower layer as an O_PATH-like mount fd: a detached clone of @dir, idmapped when asked. */
static int lower_tree(const char *dir, int userns_fd, struct cordon_err *err)
{
	_cleanup_close_ int tree = syscall(SYS_open_tree, AT_FDCWD, dir, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
	if (tree < 0)
		return cordon_err_set(err, -errno, "overlay: open layer '%s'", dir);
	struct mount_attr attr = {.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV};
	if (userns_fd >= 0) {
		attr.attr_set |= MOUNT_ATTR_IDMAP;
		attr.userns_fd = (uint64_t)userns_fd;
	}
	if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0)
		return cordon_err_set(err, -errno, "overlay: idmap layer '%s'", dir);
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

int overlay_tree(const char *const *lower, size_t n_lower, const char *upper, const char *work,
		 int userns_fd, struct cordon_err *err)
{
	int trees[OVERLAY_MAX_LOWER];
	char lowerdir[OVERLAY_MAX_LOWER * 24];
	size_t n = 0, off = 0;
	int r;

	if (n_lower == 0 || n_lower > OVERLAY_MAX_LOWER)
		return cordon_err_setf(err, -EINVAL, "overlay: %zu layers (1 to %u)", n_lower,
				       OVERLAY_MAX_LOWER);
	_cleanup_close_ int fs = syscall(SYS_fsopen, "overlay", FSOPEN_CLOEXEC);
	if (fs < 0) {
		r = cordon_err_set(err, -errno, "overlay: fsopen");
		goto out;
	}
	/* The layers are named by magic links to detached mounts: nothing is attached anywhere,
	 * and the names cannot hold the ':' or ',' overlayfs splits on. */
	for (; n < n_lower; n++) {
		if ((r = lower_tree(lower[n], userns_fd, err)) < 0)
			goto out;
		trees[n] = r;
		off += snprintf(lowerdir + off, sizeof(lowerdir) - off, "%s/proc/self/fd/%d",
				n ? ":" : "", trees[n]);
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
	for (size_t i = 0; i < n; i++)
		close(trees[i]);
	return r;
}
