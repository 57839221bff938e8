/* Which fds an event loop watches, so that none is closed while it is still watched.
 *
 * An fd closed while it is registered with epoll stays registered if another process holds
 * a copy of its file (a child being cloned, between clone() and its close_range()): the
 * kernel removes a registration only with the file's last reference, and the loop's later
 * delete fails with EBADF. The stale registration then fires under the fd number's next
 * owner. Hence the rule: unwatch, then close. Code that registers an fd with a loop calls
 * fdwatch_add() and fdwatch_del() around the registration; code that closes an fd another
 * layer may watch closes it with fd_close(), which aborts in debug builds (no NDEBUG) if the
 * fd is still watched. Release builds keep no table and fd_close() is close().
 *
 * Thread-safe: the table is updated with atomic operations (cordond starts sandboxes on a
 * second thread, which closes fds of its own). fds above FDWATCH_MAX are not tracked. */
#pragma once

#include <stdbool.h>

#define FDWATCH_MAX 65536

void fdwatch_add(int fd);
void fdwatch_del(int fd);
/* True if @fd is watched (always false in release builds). */
bool fdwatch_has(int fd);
/* Closes @fd (nothing if < 0) after checking that no loop watches it; never retried on
 * EINTR; keeps errno. */
void fd_close(int fd);
