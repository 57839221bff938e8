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
	bool tree;       /* src_fd is a detached mount of a directory (a volume), moved into place
			  * with the attributes the host gave it */
};

/* What of the host the `host` template shows (/usr, /bin, ...): each a directory bound
 * read-only, a writable overlay (root_tree's host_trees), or a symlink copied. */
#define ROOTFS_HOST_IMAGE_N 7
extern const char *const rootfs_host_image[ROOTFS_HOST_IMAGE_N];

/* The host's package state, for installs as root at run time (`apt-get install`): each a
 * writable overlay of the host's directory (copy-on-write into the sandbox's disk, never the
 * host), never a bind: without an overlay it is not shown. @hidden names entries of it
 * whited out in the overlay's upper before the mount: secrets, and what names the host's
 * users and groups (the sandbox has its own). */
struct rootfs_host_pkg {
	const char *path;		  /* below /, no leading slash: "var/lib/dpkg" */
	const char *key;		  /* a single name for its layer's directories */
	const char *const *hidden;	  /* NULL-terminated, or NULL */
};
#define ROOTFS_HOST_PKG_N 2
extern const struct rootfs_host_pkg rootfs_host_pkg[ROOTFS_HOST_PKG_N];

/* The `host` template's overlays: the image's (0 .. IMAGE_N-1), then the package state's. */
#define ROOTFS_HOST_TREES_N (ROOTFS_HOST_IMAGE_N + ROOTFS_HOST_PKG_N)
#define ROOTFS_HOST_TREES_NONE {-1, -1, -1, -1, -1, -1, -1, -1, -1}
/* Tree @i's path below / and its layer's name. */
const char *rootfs_host_tree_path(size_t i);
const char *rootfs_host_tree_key(size_t i);
/* Directories made empty and writable in the `host` template's root (the package manager's
 * cache, lists and logs), after lib/rootfs.c's fresh ones; each with its parents first. */
extern const char *const rootfs_host_dirs[];
extern const size_t rootfs_host_dirs_n;

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
	int host_trees[ROOTFS_HOST_TREES_N]; /* `host` template: an overlay per entry, or -1 */
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
