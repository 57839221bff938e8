/* The debug table of watched fds (fdwatch.h): one counter per fd number. */
#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <unistd.h>

#include "basic/fdwatch.h"
#include "basic/log.h"

#ifndef NDEBUG
static uint8_t watched[FDWATCH_MAX];

static bool tracked(int fd)
{
	return fd >= 0 && fd < FDWATCH_MAX;
}

void fdwatch_add(int fd)
{
	if (tracked(fd))
		__atomic_add_fetch(&watched[fd], 1, __ATOMIC_SEQ_CST);
}

void fdwatch_del(int fd)
{
	if (!tracked(fd))
		return;
	uint8_t old = __atomic_fetch_sub(&watched[fd], 1, __ATOMIC_SEQ_CST);
	assert(old > 0 && "fdwatch_del of an fd that is not watched");
	(void)old;
}

bool fdwatch_has(int fd)
{
	return tracked(fd) && __atomic_load_n(&watched[fd], __ATOMIC_SEQ_CST) > 0;
}
#else
void fdwatch_add(int fd) { (void)fd; }
void fdwatch_del(int fd) { (void)fd; }
bool fdwatch_has(int fd) { (void)fd; return false; }
#endif

void fd_close(int fd)
{
	if (fd < 0)
		return;
	if (fdwatch_has(fd)) {
		log_error("fd %d closed while an event loop watches it", fd);
		assert(!"an fd is closed while an event loop watches it (unwatch first)");
	}
	int saved = errno;
	close(fd);
	errno = saved;
}
