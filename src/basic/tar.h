/* tar streams for moving directories in and out of sandboxes: a strict incremental reader
 * that refuses what would be unsafe to unpack anywhere, and a header writer.
 *
 * The reader takes bytes as they come (tar_reader_feed) and hands each entry to @entry, the
 * data of a file to @data. It understands ustar, GNU long names ('L', 'K') and pax headers
 * ('x': path, linkpath, size; 'g' is skipped), and refuses, with -EPERM and a reason in
 * r->why: an absolute name, a ".." component, a symlink whose target is absolute (unless
 * r->abs_links) or climbs out of the archive's root, a hard link to a name that is not safe, devices, fifos and any
 * other type. Malformed input (a bad checksum, a number that does not parse) is -EBADMSG;
 * more than @max_bytes of file data or @max_entries entries is -EFBIG. tar_reader_finish()
 * says whether the archive ended (the end-of-archive blocks, or EOF at an entry boundary).
 *
 * Names are relative and normalised (no leading "./", no trailing "/"); the archive's root
 * itself ("." or "./") is not an entry. Parsers of hostile bytes: fuzzed (fuzz/tar). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TAR_BLOCK    512u
#define TAR_MAX_PATH 4096u
#define TAR_MAX_PAX  (64u << 10) /* bytes of one pax or GNU long-name record */

enum tar_type { TAR_FILE, TAR_DIR, TAR_SYMLINK, TAR_HARDLINK };

struct tar_entry {
	enum tar_type type;
	char name[TAR_MAX_PATH];
	char link[TAR_MAX_PATH]; /* symlink target, hard link's name */
	uint64_t size;
	uint32_t mode; /* permission bits only */
	int64_t mtime;
	uint32_t uid, gid;
};

struct tar_ops {
	int (*entry)(const struct tar_entry *e, void *arg);		/* <0 stops */
	int (*data)(const uint8_t *p, size_t n, void *arg);		/* file data, in order */
};

struct tar_reader {
	int state;
	uint8_t block[TAR_BLOCK];
	size_t have;
	uint64_t left, pad;	       /* of the current record's data */
	char ext[TAR_MAX_PAX + 1];     /* a long name or pax record being read */
	size_t ext_len;
	int ext_kind;
	char long_name[TAR_MAX_PATH], long_link[TAR_MAX_PATH];
	int64_t pax_size;	       /* -1: none */
	unsigned zero_blocks;
	uint64_t bytes, max_bytes, entries, max_entries;
	bool abs_links; /* set after init: a symlink's absolute target is kept (tar_link_kept) */
	struct tar_entry e;
	char why[160];
};

void tar_reader_init(struct tar_reader *r, uint64_t max_bytes, uint64_t max_entries);
int tar_reader_feed(struct tar_reader *r, const uint8_t *p, size_t n, const struct tar_ops *ops,
		    void *arg);
/* 0 when the stream ended where an archive may end; -EBADMSG otherwise. */
int tar_reader_finish(struct tar_reader *r);

/* Whether @name (relative, normalised) has no ".." component and is not absolute. */
bool tar_name_safe(const char *name);
/* Whether a symlink at @name with @target stays inside the archive's root. */
bool tar_link_safe(const char *name, const char *target);
/* Whether such a symlink may be written by an unpacker that follows no link, for a tree out
 * of a sandbox: @target inside (tar_link_safe), or absolute, which names a path of the
 * sandbox's own root (a venv's bin/python -> /usr/bin/python3). Written as it is, it points
 * at the host's path of that name, and is never followed by Cordon's unpackers (oci.h,
 * the SDK's download_dir()); one that climbs out by ".." is refused still. */
bool tar_link_kept(const char *name, const char *target);

/* The header blocks of @e (a GNU long-name record first when a name or link is over 100
 * bytes) into @out, which has room for TAR_HEADER_MAX bytes; returns their length. */
#define TAR_HEADER_MAX (3 * TAR_BLOCK + 2 * TAR_MAX_PATH)
size_t tar_header(uint8_t *out, const struct tar_entry *e);
/* Bytes of zeroes that pad @size bytes of data to a whole block. */
static inline size_t tar_padding(uint64_t size)
{
	return (size_t)((TAR_BLOCK - size % TAR_BLOCK) % TAR_BLOCK);
}
