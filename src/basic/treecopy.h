/* Copies of directory trees that may be hostile, walked by fd and never following a link:
 * the layers of a build (image/layer.c) and the writable trees of a sandbox's snapshot
 * (runtime/scratch.c) are both made with treecopy().
 *
 *     uint64_t bytes = 0;
 *     struct treecopy_opts o = {.what = "snapshot", .from = base, .to = 0, .bytes = &bytes};
 *     int r = treecopy(src_dirfd, empty_dst_dirfd, &o, err);
 *
 * Files keep their data ranges only (holes stay holes: a sparse terabyte costs nothing),
 * hard links stay links (a hash table by inode), whiteouts (0/0 character devices) are made
 * again and the overlayfs opaque mark is kept; with @xattrs every extended attribute is.
 * Owners are mapped from one id range to another and one outside the range is refused;
 * setuid and setgid go from files (a directory keeps setgid). Fifos and sockets are left
 * out; any other device is refused. Depth is bounded (TREECOPY_MAX_DEPTH). */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <cordon/err.h>

#define TREECOPY_MAX_DEPTH 512u
#define TREECOPY_ID_RANGE  65536u

struct treecopy_opts {
	const char *what; /* the prefix of messages: "layer", "snapshot" */
	bool verbatim;	  /* owners taken as they are; else [from, from + 65536) -> to + (id - from) */
	uid_t from, to;
	bool xattrs;	  /* every extended attribute; else only the opaque mark */
	bool top_attrs;	  /* @dst takes @src's owner and mode too */
	uint64_t *bytes;  /* regular files' sizes are added here */
	uint64_t *alloc;  /* NULL, or the copies' allocated bytes are added here */
};

/* Copies what is in the directory @src_fd into the empty directory @dst_fd (both the
 * caller's). Half a copy may be left on failure: the caller removes @dst. */
int treecopy(int src_fd, int dst_fd, const struct treecopy_opts *o, struct cordon_err *err);

/* The pieces layer_apply() shares: the formats, and a walk over one directory that calls
 * @fn for each entry with @path (its path from the tree's root, for messages) extended by
 * its name for the call. */
bool treecopy_is_whiteout(const struct stat *st);
bool treecopy_is_opaque(int fd);
typedef int (*treecopy_entry_fn)(void *ctx, int sfd, int dfd, const char *name, unsigned depth);
int treecopy_walk(char *path, size_t size, int sfd, int dfd, unsigned depth, treecopy_entry_fn fn,
		  void *ctx, struct cordon_err *err, const char *what);
