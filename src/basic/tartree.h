/* Directory trees as tar streams (basic/tar.h). cordon-init's agent runs both in a child of
 * its own, as the requesting user, for ARCHIVE_READ and ARCHIVE_WRITE: the tar of a sandbox's
 * directory is made and unpacked inside it, and the host never walks the sandbox's tree. The
 * CLI packs a host directory with tartree_pack() for `cordon cp -r DIR ID:/path` (a tar that
 * comes out of a sandbox is unpacked on the host by image/oci.h's oci_apply_tar() instead).
 * Both run to their end and return 0 or -errno.
 *
 * tartree_pack() writes the tree at @path (a directory's entries, or one file or symlink
 * under its own name) to @out: directories, regular files and symlinks, never following a
 * link; sockets, fifos and devices are left out. tartree_unpack() reads a tar from @in and
 * lays it out beneath the directory @path (made if missing), through no symlink, refusing
 * what basic/tar.h's reader refuses. */
#pragma once

int tartree_pack(const char *path, int out);
int tartree_unpack(const char *path, int in);
