/* Layers of built templates: immutable directory trees in the overlay "upper" format, kept
 * in the store under .layers/<key>/diff with canonical owners (0 = root), whiteouts as 0/0
 * character devices and opaque directories marked with trusted.overlay.opaque = "y".
 *
 * A build step writes into a fresh upper directory on a size-bounded tmpfs;
 * layer_capture() copies that (hostile) tree into the store, mapping the sandbox's host ids
 * back to canonical ones. layer_apply() lays one layer over a tree by hard links, which is
 * how a template's rootfs is flattened from its layers: no file data is copied, and a
 * sandbox from a built template starts exactly as fast as from an imported one.
 */
#pragma once

#include <stdint.h>
#include <sys/types.h>

#include <cordon/err.h>

#define LAYER_MAX_DEPTH 512u   /* directory depth of a layer */
#define LAYER_KEY_LEN   64u    /* hex sha256 */

/* Copies the tree @src_fd into the empty directory @dst_fd. Owners in [@base, @base + 65536)
 * become owner - @base; with @base 0 they are taken as they are (the builder wrote them).
 * An owner outside the range, a device other than a whiteout, a fifo or a socket is refused
 * or skipped as documented in layer.c; setuid and setgid bits are dropped. Regular file
 * bytes are added to *@bytes. */
int layer_capture(int src_fd, int dst_fd, uid_t base, uint64_t *bytes, struct cordon_err *err);

/* Lays the layer @diff_fd over the tree @dst_fd (same file system): whiteouts remove,
 * opaque directories hide what was below, files and symlinks are hard-linked. */
int layer_apply(int diff_fd, int dst_fd, struct cordon_err *err);
