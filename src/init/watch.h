/* A directory watch inside the sandbox: inotify over a directory and, when recursive, every
 * directory beneath it, including those made later (cordon-init's WATCH_OPEN).
 *
 * Open it over an O_PATH fd of the directory (resolved by the caller, as the user it watches
 * for), poll watch_fd() and call watch_read() when it is readable: each event is handed to
 * the callback as an absolute path and FRAME_WATCH_EV_* bits. Memory is bounded: at most
 * WATCH_MAX_DIRS directories per watch (past that, new ones are not watched and an OVERFLOW
 * event says events were missed), one read's events at a time, and the kernel's queue, whose
 * overflow is an OVERFLOW event too. Symlinks beneath the root are never followed. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#define WATCH_MAX_DIRS  8192u
#define WATCH_MAX_DEPTH 32u

struct watch;
typedef void (*watch_emit_fn)(void *arg, const char *path, uint32_t type);

/* Takes @dirfd (an O_PATH fd of a directory); @root is the path events are named under. */
int watch_open(int dirfd, const char *root, bool recursive, struct watch **ret);
int watch_fd(const struct watch *w);
/* One read of the inotify queue (non-blocking): 0, or -errno (-EAGAIN: nothing). */
int watch_read(struct watch *w, watch_emit_fn emit, void *arg);
struct watch *watch_free(struct watch *w);
