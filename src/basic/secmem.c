/* Locked, undumped, wiped memory for secrets (secmem.h). */
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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
