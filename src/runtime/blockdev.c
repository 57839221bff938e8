/* Filesystems on loop devices (blockdev.h). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/loop.h>
#include <linux/mount.h>
#include <unistd.h>

#include "basic/child.h"
#include "basic/cleanup.h"
#include "basic/fileio.h"
#include "runtime/blockdev.h"

/* mke2fs of an empty image takes tens of milliseconds; one that does not end in this time
 * (stopped, stuck on a sick disk) is killed rather than waited for: the caller may be an
 * event loop. */
#define MKE2FS_DEADLINE_MS 10000

/* mke2fs by absolute path, with no environment of ours. No reserved blocks (all of the
 * image is its user's), inode tables left to the kernel (the image is sparse: they read as
 * zeroes already, and noinit_itable at mount keeps them so). A scratch has no journal (it dies
 * with its sandbox: nothing to recover); a volume has one. */
int blockdev_mke2fs(const char *path, bool journal, const char *root_owner)
{
	static const char *const tools[] = {"/usr/sbin/mke2fs", "/sbin/mke2fs"};
	const char *tool = NULL;
	for (size_t i = 0; i < ELEMENTSOF(tools) && !tool; i++)
		if (access(tools[i], X_OK) == 0)
			tool = tools[i];
	if (!tool)
		return -ENOENT;
	char ext[96];
	snprintf(ext, sizeof(ext), "lazy_itable_init=1,lazy_journal_init=1,nodiscard,root_owner=%s", root_owner);
	char *const argv[] = {"mke2fs", "-q", "-F", "-t", "ext4", "-b", "4096", "-m", "0",
			      "-O", journal ? "^resize_inode" : "^has_journal,^resize_inode",
			      "-E", ext, (char *)path, NULL};
	char *const envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL};
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	pid_t pid;
	int r = posix_spawn(&pid, tool, &fa, NULL, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	if (r != 0)
		return -r;
	return child_wait_ok(pid, MKE2FS_DEADLINE_MS);
}


/* Each device's dirty pages held to a budget of their own (the bdi's strict limit, 6.2+):
 * the writeback of a large write starts while it is written, not all at the fsync, and one
 * sandbox's burst cannot fill the host's dirty-page share that every writer throttles on
 * (cgroup v1 has no per-cgroup dirty accounting). A 1 GiB write and fsync inside went from
 * 0.93 to 1.15 of the host's rate with it (bench/RESULTS.md); a budget of 64 MiB throttled too
 * soon. The settings stay with the device when it clears: the next user of a loop device
 * cordon once had gets the same budget. A kernel without the files (6.1) writes back at the
 * fsync, as before. */
#define LOOP_DIRTY_MAX_BYTES "268435456"

static void loop_dirty_limit(int loop)
{
	struct stat st;
	char dir[64];
	if (fstat(loop, &st) < 0)
		return;
	snprintf(dir, sizeof(dir), "/sys/dev/block/%u:%u/bdi", major(st.st_rdev), minor(st.st_rdev));
	_cleanup_close_ int bdi = open(dir, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
	if (bdi >= 0 && write_file_at(bdi, "max_bytes", LOOP_DIRTY_MAX_BYTES) == 0)
		(void)write_file_at(bdi, "strict_limit", "1");
}

/* Direct I/O: no second copy of the data in the page cache. Sectors of 4096 bytes, the block
 * of every ext4 made here (blockdev_mke2fs) and of the host's filesystem: no request smaller
 * than a host block reaches the image. LOOP_CONFIGURE is 5.8+; before, LOOP_SET_FD and
 * LOOP_SET_STATUS64 (and 512-byte sectors). */
int blockdev_loop_attach(int file, int *ret_nr)
{
	_cleanup_close_ int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	if (ctl < 0)
		return -errno;
	for (int tries = 0; tries < 16; tries++) {
		char dev[32];
		int nr = ioctl(ctl, LOOP_CTL_GET_FREE);
		if (nr < 0)
			return -errno;
		snprintf(dev, sizeof(dev), "/dev/loop%d", nr);
		_cleanup_close_ int fd = open(dev, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			return -errno;
		struct loop_config cfg = {.fd = (uint32_t)file, .block_size = 4096,
					  .info.lo_flags = LO_FLAGS_AUTOCLEAR | LO_FLAGS_DIRECT_IO};
		int r = ioctl(fd, LOOP_CONFIGURE, &cfg);
		if (r < 0 && errno == EINVAL) { /* 6.1 may refuse direct I/O here */
			cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR;
			r = ioctl(fd, LOOP_CONFIGURE, &cfg);
		}
		if (r < 0 && (errno == ENOTTY || errno == EINVAL)) {
			struct loop_info64 info = {.lo_flags = LO_FLAGS_AUTOCLEAR};
			r = ioctl(fd, LOOP_SET_FD, file);
			if (r == 0 && (r = ioctl(fd, LOOP_SET_STATUS64, &info)) < 0)
				(void)ioctl(fd, LOOP_CLR_FD, 0);
			if (r == 0)
				(void)ioctl(fd, LOOP_SET_DIRECT_IO, 1UL);
		}
		if (r == 0) {
			loop_dirty_limit(fd);
			*ret_nr = nr;
			return TAKE_FD(fd);
		}
		if (errno != EBUSY)
			return -errno;
		/* Someone took it between GET_FREE and us: ask again. */
	}
	return -EBUSY;
}

int blockdev_fsconfig(int fs, unsigned cmd, const char *key, const char *value)
{
	return syscall(SYS_fsconfig, fs, cmd, key, value, 0) < 0 ? -errno : 0;
}

/* A scratch has no barriers: a flush would be an fsync of the image, a commit of the host's
 * journal, for a filesystem that no crash needs to find consistent (it dies with its
 * sandbox). Neither has discard (a hole punched on the host per delete): freed blocks are
 * reused inside, so an image grows to its peak use at most. Flushes and discards cost 3x in
 * concurrent lifecycles (bench/RESULTS.md). A volume keeps its barriers: it must survive a
 * crash of the host. */
int blockdev_mount_ext4(const char *dev, enum blockdev_kind kind, unsigned attrs)
{
	_cleanup_close_ int fs = syscall(SYS_fsopen, "ext4", FSOPEN_CLOEXEC);
	if (fs < 0)
		return -errno;
	int r = blockdev_fsconfig(fs, FSCONFIG_SET_STRING, "source", dev);
	if (r == 0)
		r = blockdev_fsconfig(fs, FSCONFIG_SET_FLAG, "noinit_itable", NULL);
	if (r == 0 && kind == BLOCKDEV_SCRATCH)
		r = blockdev_fsconfig(fs, FSCONFIG_SET_STRING, "barrier", "0");
	if (r == 0)
		r = blockdev_fsconfig(fs, FSCONFIG_SET_STRING, "errors", "remount-ro");
	if (r == 0)
		r = blockdev_fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL);
	if (r < 0)
		return r;
	int mnt = syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, attrs);
	return mnt < 0 ? -errno : mnt;
}
