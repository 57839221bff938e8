/* A sandbox's scratch filesystem, host side: its writable `/`, /tmp and home on disk,
 * bounded by --disk through the filesystem itself.
 *
 * Each sandbox gets a sparse ext4 image (a copy of an empty "golden" image per size, made
 * once with mke2fs) on a loop device with autoclear, the image unlinked as soon as the loop
 * holds it. Its root directory becomes the sandbox's `/`; the image (--rootfs) or the host's
 * /usr (the `host` template) is a writable overlay whose upper layer lives on the same
 * scratch, its lower the read-only template shown idmapped through the sandbox's user
 * namespace. Nothing is left behind by design: when the sandbox's mount namespace goes, its
 * mounts go, the loop device clears itself and the unlinked image is freed. What a killed
 * holder left between two steps (a staging mount, an image not yet unlinked) carries its uid
 * slot's number, and the sweep removes it once the slot's lock is free.
 *
 * Where the scratch directory's filesystem enforces project quotas (xfs, or ext4 with the
 * `project` feature, mounted with `prjquota`; probed at the first disk, CORDON_SCRATCH=loop
 * asks for images anyway), a disk is instead the directory "q<slot>" with a project id of
 * its own and a hard block limit of --disk (prjquota.h): no loop device, no second
 * filesystem between the sandbox and the host's disk. It is bound (a detached clone) where
 * the image's mount would be and laid out the same way; scratch_release() removes it when
 * the sandbox is gone, the sweep when its holder died.
 *
 * Root only. Where the host cannot (no loop devices, no mke2fs, a kernel without idmapped
 * overlay lowers), the sandbox keeps the tmpfs root: logged once, never an error.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <cordon/err.h>

#include "lib/rootfs.h"

/* Smaller disks keep the tmpfs: ext4's own metadata would be most of them. */
#define SCRATCH_MIN_BYTES (16ULL << 20)

struct scratch {
	int mnt; /* the detached ext4 mount, or -1: tmpfs */
	int img; /* the (unlinked) image, or the quota directory, for its size on the host
		  * (scratch_disk_used()); the caller's to close */
	unsigned slot;
};

/* What the child mounts: -1 for what stays as it was. */
struct scratch_trees {
	int root;  /* the sandbox's `/`: a directory of the scratch */
	int image; /* --rootfs: a writable overlay of the image */
	int host[ROOTFS_HOST_TREES_N]; /* `host` template: overlays of its directories */
};

#define SCRATCH_TREES_NONE                                                                         \
	{.root = -1, .image = -1, .host = ROOTFS_HOST_TREES_NONE}

/* Makes slot @slot's scratch of @bytes (rounded up to MiB). Sets sc->mnt to -1 and returns 0
 * when the host has no disk-backed scratch to give (the caller then uses a tmpfs). */
int scratch_open(struct scratch *sc, unsigned slot, uint64_t bytes, struct cordon_err *err);

/* The trees for a sandbox whose user namespace is @userns_fd and whose root is host uid
 * @base: its root, and the overlays over @rootfs (NULL: the host's image directories). With
 * @from (a snapshot's directory, else -1) the scratch is filled from it first. sc->mnt stays
 * open: the sandbox's snapshots read it (scratch_close() when the sandbox goes). */
int scratch_trees(struct scratch *sc, int userns_fd, uid_t base, const char *rootfs, int from,
		  struct scratch_trees *ret, struct cordon_err *err);

/* The filesystem part of a snapshot, for any runtime on a scratch: the sandbox's `/` and the
 * overlays' upper directories (whiteouts, opaque marks, xattrs, holes, hard links kept) into
 * @dirfd's root/ and upper/, owners made relative to the sandbox's range at @base (0 is its
 * root); the bytes it takes are added to *@alloc. The caller has paused the sandbox.
 * -EOPNOTSUPP for a sandbox on a tmpfs root. */
int scratch_snapshot(const struct scratch *sc, uid_t base, int dirfd, uint64_t *alloc,
		     struct cordon_err *err);

/* The same for a runtime that lays out its disk itself, as the scratch does (root/, and
 * upper/NAME for each overlay's upper directory) in the directory @diskfd, a scratch or not:
 * scratch_dir_snapshot() copies it into @dirfd; scratch_dir_fill() fills the empty @diskfd
 * from the snapshot @from, before the overlays are mounted. @base as above (0: a sandbox
 * without a uid range). */
int scratch_dir_snapshot(int diskfd, uid_t base, int dirfd, uint64_t *alloc,
			 struct cordon_err *err);
int scratch_dir_fill(int diskfd, uid_t base, int from, struct cordon_err *err);

void scratch_trees_close(struct scratch_trees *t);
void scratch_close(struct scratch *sc);

/* The bytes a disk takes on the host, from its scratch.img: an image's allocated blocks, a
 * quota directory's project count. */
uint64_t scratch_disk_used(int disk_fd);

/* Removes slot @slot's project-quota disk (its directory and its limits), if it has one:
 * when the sandbox is gone and before its slot is released. An image needs nothing. */
void scratch_release(unsigned slot);

/* Fills @dst (a regular file) with a sparse copy of the empty ext4 image of @bytes (rounded
 * up to MiB), the one every sandbox of that size shares: a VM's scratch disk. -errno. */
int scratch_image_copy(int dst, uint64_t bytes);

/* Removes what dead holders of unlocked slots left in the scratch directory. */
void scratch_sweep(void);

/* Whether sandbox disks are images in the scratch directory, so on its filesystem: not when
 * CORDON_SCRATCH=tmpfs, the directory is on a tmpfs, or the host was found unable (then the
 * disks are tmpfs roots, in memory). */
bool scratch_on_disk(void);

/* The scratch directory: $CORDON_SCRATCH_DIR, else /var/lib/cordon/scratch. */
const char *scratch_dir(void);

/* A copy of @src's data extents into @dst (sized as @src): a reflink where the filesystem
 * has them, else copy_file_range of the data only, the holes kept. */
int scratch_copy_sparse(int src, int dst);
