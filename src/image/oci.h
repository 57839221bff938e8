/* Importing container images into a directory: OCI image layouts and `docker save` archives.
 *
 * The input is hostile: a layer is a tar stream anyone can write. oci_apply_layer() applies
 * one onto a directory fd the way OCI and Docker define it (whiteouts, opaque directories)
 * and never writes outside that directory; oci_import() walks an archive's manifest, checks
 * every blob against its sha256 digest and applies the layers in order.
 *
 *     _cleanup_close_ int root = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
 *     struct oci_config cfg = {};
 *     struct cordon_err err = {};
 *     if (oci_import("image.tar", root, 8ULL << 30, &cfg, &err) < 0) { ... err.msg ... }
 *     oci_config_done(&cfg);
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <cordon/err.h>

/* Named limits on what one layer may make (see oci_apply_layer()). */
#define OCI_MAX_ENTRIES    (1u << 20) /* tar entries per layer */
#define OCI_MAX_PATH       4096u      /* bytes of one entry's path or link target */
#define OCI_MAX_DEPTH      512u       /* directory depth a whiteout may remove */
#define OCI_MAX_JSON       (4u << 20) /* bytes of index.json, manifest.json, a manifest, a config */
#define OCI_MAX_LAYERS     256u       /* layers of one image */
#define OCI_MAX_ID         65535u     /* highest uid/gid kept; others become OCI_NOBODY */
#define OCI_NOBODY         65534u

/* Applies one layer (a tar stream, optionally gzip- or zstd-compressed, read from
 * @archive_fd, which stays the caller's) on top of the directory @rootfd (the caller's):
 * whiteouts ".wh.NAME" delete NAME, an opaque ".wh..wh..opq" empties its directory first.
 * Absolute paths and ".." are resolved inside @rootfd; a path through any symlink, a hard
 * link to something not inside, a whiteout of "." or ".." is refused; symlinks are written
 * as they are and never followed; devices, fifos and sockets are skipped; setuid, setgid and
 * sticky bits and extended attributes (file capabilities) are dropped; uid/gid numbers are
 * kept when in 0..65535. Limits: OCI_MAX_ENTRIES entries, OCI_MAX_PATH, and @max_bytes of
 * file data in all. A later entry of the same name replaces the earlier one. Returns 0 or
 * -errno with a one-line reason in @err; on failure the directory holds part of the layer. */
int oci_apply_layer(int rootfd, int archive_fd, uint64_t max_bytes, struct cordon_err *err);

/* The same, adding the bytes of file data written to *@used (which limits them together with
 * @max_bytes, so that several layers share one budget). */
int oci_apply_layer_budget(int rootfd, int archive_fd, uint64_t max_bytes, uint64_t *used,
			   struct cordon_err *err);

/* A plain tar (a directory out of a sandbox: hostile) unpacked into @rootfd the same way, but
 * strictly: no whiteouts (".wh." names are files), owners not kept (the caller's), and an
 * absolute name, "..", a symlink that climbs out of the tree (basic/tar.h's tar_link_kept():
 * an absolute target is kept as it is, never followed), a device, fifo or socket refused
 * (-EPERM) rather than cleaned or skipped. */
int oci_apply_tar(int rootfd, int archive_fd, uint64_t max_bytes, struct cordon_err *err);

/* What an image's config says about how to run it. Every pointer is owned by the struct. */
struct oci_config {
	char **env;        /* "K=V", NULL-terminated, or NULL */
	char **cmd;        /* Entrypoint then Cmd, NULL-terminated, or NULL */
	char *working_dir; /* or NULL */
	char *user;        /* or NULL */
};

/* Frees what @cfg holds and zeroes it. Accepts a zeroed struct. */
void oci_config_done(struct oci_config *cfg);

/* Imports the archive @path, an OCI image layout (index.json -> manifest -> layers under
 * blobs/sha256/, each blob checked against its digest) or a `docker save` archive
 * (manifest.json -> Layers[]), applying its layers in order into the empty directory
 * @rootfd (the caller's), @max_bytes of file data in all. Fills @ret_config (may be NULL)
 * on success. Returns 0 or -errno with a one-line reason in @err. */
int oci_import(const char *path, int rootfd, uint64_t max_bytes, struct oci_config *ret_config,
	       struct cordon_err *err);
