/* Directories in and out of the sandbox as tar streams (ARCHIVE_READ, ARCHIVE_WRITE), made
 * and unpacked inside it, by a child of the agent running as the requesting user: the host
 * never walks the sandbox's tree. Both run to their end and return 0 or -errno.
 *
 * archive_pack() writes the tree at @path (a directory's entries, or one file or symlink
 * under its own name) to @out: directories, regular files and symlinks, never following a
 * link; sockets, fifos and devices are left out. archive_unpack() reads a tar from @in and
 * lays it out beneath the directory @path (made if missing), through no symlink, refusing
 * what basic/tar.h's reader refuses. */
#pragma once

int archive_pack(const char *path, int out);
int archive_unpack(const char *path, int in);
