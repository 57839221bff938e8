/* Filesystems on loop devices, for the scratch (scratch.c) and persistent volumes (volume.c):
 * mke2fs of an image (run with a deadline), a loop device bound to an open image, an ext4 on
 * it as a detached mount. Root only.
 *
 *     int nr, loop = blockdev_loop_attach(image_fd, &nr);   // the loop holds image_fd's file
 *     int mnt = blockdev_mount_ext4("/dev/loop7", BLOCKDEV_SCRATCH, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
 */
#pragma once

#include <stdbool.h>

/* mke2fs -t ext4 of the image at @path (an existing file of its size): no reserved blocks,
 * lazy inode tables, the root directory owned by @root_owner ("0:0"); with a journal when
 * @journal. Killed past 10 s. */
int blockdev_mke2fs(const char *path, bool journal, const char *root_owner);

/* A free loop device bound to @file: autoclear (it goes with its last user), direct I/O where
 * the kernel takes it. The device holds @file's open file (and so any flock on it) until it
 * clears. Returns the device's fd, its number in @ret_nr. */
int blockdev_loop_attach(int file, int *ret_nr);

enum blockdev_kind {
	BLOCKDEV_SCRATCH, /* dies with its sandbox: no barriers */
	BLOCKDEV_VOLUME,  /* outlives it: barriers, the journal's ordering */
};

/* The ext4 on @dev ("/dev/loop7") as a detached mount (fsmount) with @attrs (MOUNT_ATTR_*):
 * a new mount of the same superblock when the device is mounted already. */
int blockdev_mount_ext4(const char *dev, enum blockdev_kind kind, unsigned attrs);

/* fsconfig(2) of @fs: -errno on failure. */
int blockdev_fsconfig(int fs, unsigned cmd, const char *key, const char *value);
