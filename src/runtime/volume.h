/* Persistent volumes: named ext4 filesystems that outlive sandboxes, cordond and the host's
 * reboots, each a sparse image <volume dir>/<name>.img whose size is its quota (ENOSPC inside
 * when it is full). cordond and `cordon run` share this code and its lock.
 *
 * The lock: volume_open() takes an exclusive flock on the image and hands the open image to
 * a loop device, which holds that open file (and with it the lock) until the device clears,
 * that is until the last mount of the filesystem is gone. So a volume is mounted by one
 * process at a time, whoever mounted it last is really done before another one mounts it,
 * and no crash can leave the lock behind. Within that process (cordond) every sandbox gets a
 * mount of the same superblock, read-write or read-only: one filesystem, never two.
 *
 *     struct volume_handle h;
 *     if (volume_open("data", &h, &err) < 0) ...          // -EBUSY: another process has it
 *     spec.volumes[0] = (struct cordon_volume){h.source, "/data", false};
 *     ... the sandbox runs (the jail mounts volume_tree(h.source, its userns, ro)) ...
 *     volume_close(&h);                                    // after the sandbox is gone
 *
 * Root only. Names are [a-z0-9][a-z0-9._-]{0,62}.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <cordon/err.h>

#define VOLUME_NAME_MAX 63
#define VOLUME_MIN_MB	16u
#define VOLUME_MAX_MB	(16u << 20) /* 16 TiB */

/* $CORDON_VOLUME_DIR, else /var/lib/cordon/volumes (cordond sets it to <state-dir>/volumes). */
const char *volume_dir(void);
bool volume_name_ok(const char *name);

struct volume_info {
	char name[VOLUME_NAME_MAX + 1];
	uint64_t size_bytes; /* its quota */
	uint64_t used_bytes; /* what its image takes on the host's disk */
	int64_t created_s;
	bool in_use;	     /* mounted by some process (the lock is held) */
};

/* Makes volume @name of @size_mb MiB: -EINVAL (name, size), -EEXIST, -ENOSPC (more than the
 * host's free space at the volume directory). Never half-made: the image is made under a
 * temporary name and renamed. */
int volume_create(const char *name, uint64_t size_mb, struct cordon_err *err);
int volume_stat(const char *name, struct volume_info *ret, struct cordon_err *err); /* -ENOENT */
/* Every volume, sorted by name; *@ret is the caller's to free(). */
int volume_list(struct volume_info **ret, size_t *ret_n, struct cordon_err *err);
/* -EBUSY while any process has it mounted, -ENOENT. */
int volume_delete(const char *name, struct cordon_err *err);

struct volume_handle {
	int mnt;	 /* the filesystem, detached: it keeps the loop device (and the lock) */
	char source[32]; /* its block device, for cordon_volume.source */
};
#define VOLUME_HANDLE_NONE {.mnt = -1}

/* Mounts volume @name for this process: -ENOENT, -EBUSY (another process has it). */
int volume_open(const char *name, struct volume_handle *ret, struct cordon_err *err);
void volume_close(struct volume_handle *h);

/* For the runtime: a new detached mount of the filesystem on @source, nosuid, nodev,
 * read-only if @read_only, shown idmapped through the user namespace @userns_fd. */
int volume_tree(const char *source, int userns_fd, bool read_only, struct cordon_err *err);

/* Removes what a maker killed mid-create left (.tmp-* images of dead processes). */
void volume_sweep(void);
