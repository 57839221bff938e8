/* Directory trees walked by fd, never following a symlink: removal, emptying, size. Depth
 * is bounded so that a hostile tree cannot exhaust fds or stack: @max_depth is how many
 * levels of directories below @dirfd (or @fd) a walk enters before it fails with -ELOOP. */
#pragma once

#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>

#define TREE_MAX_DEPTH 4096u

/* "." or "..". */
bool tree_is_dot(const char *name);

/* A DIR over a copy of @fd (which stays the caller's); NULL with errno set. */
DIR *tree_opendir_dup(int fd);

/* Removes everything in the directory @fd (the caller's). */
int tree_empty(int fd, unsigned max_depth);

/* Removes @name under @dirfd, a directory with everything in it. Missing is success. */
int tree_remove_at(int dirfd, const char *name, unsigned max_depth);

/* Adds the bytes of the regular files and symlinks under @fd to *@size (hard links counted
 * each time), at most TREE_MAX_DEPTH levels down. */
int tree_size(int fd, uint64_t *size);
