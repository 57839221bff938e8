/* Project quotas (xfs, or ext4 with its `project` feature), mounted with `prjquota`: a
 * directory tree with a project id of its own and a hard block limit, for the scratch
 * (scratch.c) where the scratch directory's filesystem offers them. Root only; everything
 * goes through quotactl_fd(2) (5.14+) on an fd of the filesystem, no device path needed.
 *
 *     if (prjquota_probe(dirfd) == 0 && prjquota_assign(treefd, id) == 0)
 *             r = prjquota_limit(dirfd, id, bytes); // the tree's writers get ENOSPC/EDQUOT past it
 */
#pragma once

#include <stdint.h>

/* 0 if the filesystem of @fd accounts and enforces project quotas; -EOPNOTSUPP (or the
 * kernel's -errno) if not. */
int prjquota_probe(int fd);

/* Gives the directory @dirfd project id @id, inherited by everything made in it. Only the
 * initial user namespace may change an id (fileattr_set), so a sandbox cannot move its files
 * out of its project. */
int prjquota_assign(int dirfd, uint32_t id);

/* Sets project @id's hard and soft limits on the filesystem of @fd: @bytes of blocks and an
 * inode per 4 KiB of them (0: none). */
int prjquota_limit(int fd, uint32_t id, uint64_t bytes);

/* The bytes project @id holds on the filesystem of @fd, into *@ret. */
int prjquota_used(int fd, uint32_t id, uint64_t *ret);
