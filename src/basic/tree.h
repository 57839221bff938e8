/* Directory trees walked by fd, never following a symlink: removal, emptying, size. Depth
 * is bounded (TREE_MAX_DEPTH) so that a hostile tree cannot exhaust fds or stack. */
#pragma once

#include <dirent.h>
#include <stdint.h>

#define TREE_MAX_DEPTH 4096u

/* A DIR over a copy of @fd (which stays the caller's); NULL with errno set. */
DIR *tree_opendir_dup(int fd);

/* Removes everything in the directory @fd (the caller's). */
int tree_empty(int fd, unsigned depth);

/* Removes @name under @dirfd, a directory with everything in it. Missing is success. */
int tree_remove_at(int dirfd, const char *name, unsigned depth);

/* Adds the bytes of the regular files and symlinks under @fd to *@size (hard links counted
 * each time). */
int tree_size(int fd, unsigned depth, uint64_t *size);
