/* Small, allocation-free helpers for the files of /proc and /sys. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Writes @s to @path (relative to @dirfd, or absolute) in one write(2). -errno on failure. */
int write_file_at(int dirfd, const char *path, const char *s);

/* Reads at most @size-1 bytes of @path into @buf, NUL-terminated. Returns the length. */
ssize_t read_file_at(int dirfd, const char *path, char *buf, size_t size);

/* Reads a decimal unsigned integer file ("max" reads as UINT64_MAX). */
int read_u64_at(int dirfd, const char *path, uint64_t *ret);

/* Finds "key value" in a flat-keyed file such as memory.events or memory.stat. */
int read_keyed_u64_at(int dirfd, const char *path, const char *key, uint64_t *ret);

/* write(2) all of @buf, retrying on EINTR and short writes. */
int write_all(int fd, const void *buf, size_t len);

/* read(2) exactly @len bytes; -EPIPE on early EOF. */
int read_exact(int fd, void *buf, size_t len);
