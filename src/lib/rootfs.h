/* The sandbox's filesystem: a disk-backed scratch (or a size-bounded tmpfs) as root and
 * writable layer, the image bound into it (read-only, or its writable overlay), a curated /etc, fresh /tmp, /home/user and /root, a minimal /dev, a
 * masked /proc, then pivot_root with the old root detached.
 *
 * Runs in the sandbox's first process, inside its new user and mount namespaces, as root of
 * that user namespace, between clone() and exec(): no heap, errors through @err.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <cordon/err.h>

struct rootfs_bind {
	int src_fd;      /* O_PATH fd of a regular file or directory, opened by the host side */
	const char *dst; /* absolute, normalised path inside the sandbox */
};

/* What of the host the `host` template shows (/usr, /bin, ...): each a directory bound
 * read-only, a writable overlay (root_tree's host_trees), or a symlink copied. */
#define ROOTFS_HOST_IMAGE_N 7
extern const char *const rootfs_host_image[ROOTFS_HOST_IMAGE_N];

/* From the host's /etc, read-only: what makes programs work and holds no secret. */
extern const char *const rootfs_host_etc[];
extern const size_t rootfs_host_etc_n;

/* The sandbox's own /etc files. */
struct rootfs_gen_file {
	const char *name;
	const char *content;
};
extern const struct rootfs_gen_file rootfs_etc_files[];
extern const size_t rootfs_etc_files_n;

struct rootfs_config {
	int image_fd; /* O_PATH fd of a root filesystem directory; -1 for the `host` template */
	int image_tree; /* the same as a detached idmapped mount (open_tree) of the host's, or -1 */
	bool image_writable; /* image_tree is a writable overlay: its entries are bound writable */
	int root_tree; /* the root as a detached mount of a disk-backed scratch; -1: a tmpfs */
	int host_trees[ROOTFS_HOST_IMAGE_N]; /* `host` template: an overlay per entry, or -1 */
	bool image_is_root; /* build mode: image_tree is a writable overlay, the root itself */
	uint64_t disk_bytes;
	const char *hostname;
	bool ids_mapped; /* uids 0 and 1000 both exist inside (range mapping) */
	const struct rootfs_bind *binds;
	size_t n_binds;
	const char *resolv_conf; /* NULL: no network, loopback only */
};

/* Builds the tree and pivots into it. On return the cwd and root are the sandbox's "/". */
int rootfs_setup(const struct rootfs_config *cfg, struct cordon_err *err);

/* Checks a sandbox-side path given by a user: absolute, no "." or ".." components, no empty
 * components, not inside /proc or /dev, at most PATH_MAX. */
int rootfs_check_sandbox_path(const char *path, struct cordon_err *err);
