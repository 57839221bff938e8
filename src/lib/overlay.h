/* Overlay trees for build steps: a detached overlayfs mount (fsopen/fsmount, 5.2+) whose
 * read-only lower layers may be shown through an idmapped mount (5.19+ for overlayfs), so
 * that a layer stored with canonical owners (0 = root) is owned by a sandbox's root inside
 * it. Mounted by the caller (root of the initial user namespace): copy-up and whiteouts are
 * done with its credentials, on an upper directory the caller owns.
 */
#pragma once

#include <stddef.h>

#include <cordon/err.h>

#define OVERLAY_MAX_LOWER 128u

/* A detached clone of @dir (open_tree), read-only, nosuid and nodev, shown idmapped through
 * the user namespace @userns_fd when it is >= 0: a layer of an overlay, or a sandbox's image.
 * Returns the mount's fd (O_CLOEXEC) or -errno with @err. */
int mount_clone_ro(const char *dir, int userns_fd, struct cordon_err *err);

/* A detached mount: @lower (top first, 1..OVERLAY_MAX_LOWER directories) under the writable
 * @upper, @work being an empty directory on the same mount as @upper. Each lower is shown
 * idmapped through the user namespace @userns_fd when it is >= 0, as it is otherwise. The
 * layers are attached in @stage (a directory in the caller's own mount namespace: a
 * build's) while the overlay is made, and detached after; the cwd is @stage meanwhile
 * (not for threaded callers). The
 * mount is nosuid and nodev; redirect_dir, index and metacopy are off, so that @upper holds
 * plain files, whiteouts (0/0 character devices) and opaque directories
 * (trusted.overlay.opaque) only. Returns the mount's fd (O_CLOEXEC) or -errno with @err. */
int overlay_tree(const char *const *lower, size_t n_lower, const char *upper, const char *work,
		 int userns_fd, const char *stage, struct cordon_err *err);
