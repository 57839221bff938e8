/* The sandbox's filesystem: a size-bounded tmpfs as root and writable layer, the image bound
 * read-only into it, a curated /etc, fresh /tmp, /home/user and /root, a minimal /dev, a
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

struct rootfs_config {
	int image_fd; /* O_PATH fd of a root filesystem directory; -1 for the `host` template */
	int image_tree; /* the same as a detached idmapped mount (open_tree) of the host's, or -1 */
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
