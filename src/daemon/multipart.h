/* A multipart/form-data body (RFC 7578) as E2B's SDK uploads files: one part per file, its
 * filename the path to write. Pure: no allocation. A body in memory (multipart_init) gives
 * parts that point into it; a body in a file (multipart_init_fd: the gate's spool of a large
 * upload) is read MULTIPART_WINDOW bytes at a time with pread, and its parts are offsets
 * (data NULL): the reader holds one window, whatever the body's size. Both are the same code.
 *
 *   char boundary[MULTIPART_MAX_BOUNDARY + 1];
 *   struct multipart_reader mr;
 *   struct multipart_part part;
 *   if (multipart_boundary(content_type, boundary) < 0) ... not multipart/form-data
 *   multipart_init(&mr, boundary, body, len);
 *   while ((r = multipart_next(&mr, &part)) > 0) ... part.filename, part.data, part.len
 *   r < 0: -EBADMSG (malformed), -E2BIG (over MULTIPART_MAX_PARTS parts)
 *
 * Filenames come as browsers send them: quoted, with LF, CR and '"' as %0A, %0D and %22
 * (the WHATWG form encoding), which are decoded; a backslash before a character is dropped
 * (RFC 2616's quoted-pair). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MULTIPART_MAX_BOUNDARY 70   /* RFC 2046 */
#define MULTIPART_MAX_PARTS    1000 /* files of one upload */
#define MULTIPART_MAX_NAME     4096 /* bytes of a part's decoded filename (PATH_MAX) */
#define MULTIPART_MAX_HEAD     16384 /* bytes of one part's headers */
#define MULTIPART_WINDOW       65536 /* bytes read at a time from a file body */

struct multipart_part {
	char name[256];                       /* the form field's name, "" if none */
	char filename[MULTIPART_MAX_NAME + 1]; /* "" if the part has none */
	bool has_filename;
	const uint8_t *data; /* into the body in memory; NULL for a file body */
	uint64_t off, len;   /* the data's offset in the body, its length */
};

struct multipart_reader {
	const uint8_t *p; /* the body in memory, or NULL: in the file fd */
	int fd;
	uint64_t len, off;
	char delim[MULTIPART_MAX_BOUNDARY + 5]; /* "\r\n--" boundary */
	size_t dlen;
	unsigned parts;
	bool started, done;
	uint8_t win[MULTIPART_WINDOW]; /* the last window read of a file body */
};

/* The boundary parameter of a Content-Type of multipart/form-data into @ret; -EINVAL if it is
 * none or not a valid boundary. */
int multipart_boundary(const char *content_type, char ret[MULTIPART_MAX_BOUNDARY + 1]);
void multipart_init(struct multipart_reader *r, const char *boundary, const void *body,
		    size_t len);
/* The body is the @len bytes of @fd (read with pread, the fd's offset untouched); a part
 * -EIO when the file cannot be read. */
void multipart_init_fd(struct multipart_reader *r, const char *boundary, int fd, uint64_t len);
/* 1 and the next part in @ret, 0 after the last one. */
int multipart_next(struct multipart_reader *r, struct multipart_part *ret);
