/* Locked, undumped, wiped memory for secrets (secmem.h). */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "basic/cleanup.h"
#include "basic/fileio.h"
#include "basic/secmem.h"

void *secmem_new(size_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	/* Never swapped out, never in a core dump: or not held at all. */
	if (mlock(p, size) < 0 || madvise(p, size, MADV_DONTDUMP) < 0) {
		int e = errno;
		munmap(p, size);
		errno = e;
		return NULL;
	}
	return p;
}

void secmem_free(void *p, size_t size)
{
	if (!p)
		return;
	explicit_bzero(p, size);
	munlock(p, size);
	munmap(p, size);
}

void secmem_free_wiped(void *p)
{
	if (p)
		explicit_bzero(p, malloc_usable_size(p));
	free(p);
}

static int key_make(const char *path, size_t len)
{
	uint8_t k[256];
	if (len > sizeof(k) || getrandom(k, len, 0) != (ssize_t)len)
		return -EIO;
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	int r = fd < 0 ? -errno : write_all(fd, k, len);
	if (r >= 0 && fsync(fd) < 0)
		r = -errno;
	explicit_bzero(k, sizeof(k));
	if (r < 0 && fd >= 0)
		(void)unlink(path);
	return r == -EEXIST ? 0 : r; /* another maker was first: load its key */
}

int secmem_key_file(const char *path, void *out, size_t len)
{
	int r = access(path, F_OK) == 0 ? 0 : key_make(path, len);
	if (r < 0)
		return r;
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, out, len);
	char extra;
	if (n != (ssize_t)len || read(fd, &extra, 1) != 0) {
		explicit_bzero(out, len);
		return n < 0 ? -errno : -EINVAL;
	}
	return 0;
}
