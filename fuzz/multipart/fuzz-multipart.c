/* libFuzzer target for the multipart/form-data reader: an upload body from a client of
 * --e2b-listen (a signed URL is enough to send one).
 *
 * The input is "<content-type>\n<body>". Checks beyond "no crash": every part's data lies
 * inside the body, filenames are NUL-terminated within their bound, the reader stops within
 * MULTIPART_MAX_PARTS parts, and the same body read from a file (multipart_init_fd, a window
 * at a time: the gate's spool) gives the same parts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "daemon/multipart.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nl = memchr(data, '\n', size);
	char ct[512], boundary[MULTIPART_MAX_BOUNDARY + 1];
	size_t clen = nl ? (size_t)(nl - data) : 0;
	if (!nl || clen >= sizeof(ct))
		return 0;
	memcpy(ct, data, clen);
	ct[clen] = '\0';
	if (multipart_boundary(ct, boundary) < 0)
		return 0;
	if (strlen(boundary) == 0 || strlen(boundary) > MULTIPART_MAX_BOUNDARY)
		abort();
	const uint8_t *body = nl + 1;
	size_t blen = size - clen - 1;
	static struct multipart_reader r, f;
	struct multipart_part p, q;
	unsigned n = 0;
	int rc, fd = memfd_create("fuzz", MFD_CLOEXEC);
	if (fd < 0 || write(fd, body, blen) != (ssize_t)blen)
		abort();
	multipart_init(&r, boundary, body, blen);
	multipart_init_fd(&f, boundary, fd, blen);
	while ((rc = multipart_next(&r, &p)) > 0) {
		if (p.data < body || p.data + p.len > body + blen || ++n > MULTIPART_MAX_PARTS)
			abort();
		if (!memchr(p.filename, '\0', sizeof(p.filename)) || !memchr(p.name, '\0', sizeof(p.name)))
			abort();
		if (multipart_next(&f, &q) != 1 || q.off != p.off || q.len != p.len ||
		    strcmp(q.filename, p.filename) != 0)
			abort();
	}
	if (multipart_next(&f, &q) != rc)
		abort();
	close(fd);
	return 0;
}
