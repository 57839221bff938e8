/* Project quotas through quotactl_fd (prjquota.h). */
#include <errno.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <linux/dqblk_xfs.h>
#include <linux/fs.h>
#include <linux/quota.h>
#include <unistd.h>

#include "runtime/prjquota.h"

#ifndef SYS_quotactl_fd
#define SYS_quotactl_fd 443
#endif

static int quotactl_fd(int fd, unsigned cmd, uint32_t id, void *addr)
{
	return syscall(SYS_quotactl_fd, fd, QCMD(cmd, PRJQUOTA), id, addr) < 0 ? -errno : 0;
}

int prjquota_probe(int fd)
{
	struct fs_quota_stat st = {.qs_version = FS_QSTAT_VERSION};
	int r = quotactl_fd(fd, Q_XGETQSTAT, 0, &st);
	if (r < 0)
		return r == -ENOSYS || r == -EINVAL || r == -ENOTTY ? -EOPNOTSUPP : r;
	return (st.qs_flags & FS_QUOTA_PDQ_ENFD) ? 0 : -EOPNOTSUPP;
}

int prjquota_assign(int dirfd, uint32_t id)
{
	struct fsxattr fa;
	if (ioctl(dirfd, FS_IOC_FSGETXATTR, &fa) < 0)
		return -errno;
	fa.fsx_projid = id;
	fa.fsx_xflags |= FS_XFLAG_PROJINHERIT;
	return ioctl(dirfd, FS_IOC_FSSETXATTR, &fa) < 0 ? -errno : 0;
}

int prjquota_limit(int fd, uint32_t id, uint64_t bytes)
{
	/* Blocks are 512-byte basic blocks, rounded up. Inodes: one per 4 KiB, as many as a disk
	 * of one-block files holds (an image's ext4 has a fixed count too), so that empty files
	 * cannot fill the host's inode space. */
	uint64_t bb = (bytes + 511) >> 9, ino = bytes ? (bytes >> 12) + 64 : 0;
	struct fs_disk_quota q = {.d_version = FS_DQUOT_VERSION, .d_flags = FS_PROJ_QUOTA,
				  .d_fieldmask = FS_DQ_BHARD | FS_DQ_BSOFT | FS_DQ_IHARD | FS_DQ_ISOFT,
				  .d_id = id, .d_blk_hardlimit = bb, .d_blk_softlimit = bb,
				  .d_ino_hardlimit = ino, .d_ino_softlimit = ino};
	return quotactl_fd(fd, Q_XSETQLIM, id, &q);
}

int prjquota_used(int fd, uint32_t id, uint64_t *ret)
{
	struct fs_disk_quota q = {};
	int r = quotactl_fd(fd, Q_XGETQUOTA, id, &q);
	if (r == -ENOENT) { /* no entry: nothing used */
		*ret = 0;
		return 0;
	}
	if (r == 0)
		*ret = q.d_bcount << 9;
	return r;
}
