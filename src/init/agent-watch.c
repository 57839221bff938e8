/* cordon-init's directory watches (WATCH_OPEN, WATCH_CLOSE): src/init/watch.c's inotify per
 * channel, read as the watch's user while the host's queue has room. */
#include <errno.h>
#include <fcntl.h>

#include "init/agent-int.h"

/* ---- directory watches ---- */

static struct awatch *watch_find(struct agent *a, uint32_t chan)
{
	for (unsigned i = 0; i < a->n_watches; i++)
		if (a->watches[i].chan == chan)
			return &a->watches[i];
	return NULL;
}

/* WATCH_OPEN: the path resolved as the user, as the file requests do (no magic links); the
 * watch is theirs, its events named under PATH. */
int do_watch_open(struct agent *a, uint32_t chan, void *m)
{
	const struct frame_file *f = m;
	struct watch *w = NULL;

	if (watch_find(a, chan))
		return -EEXIST;
	if (a->n_watches >= MAX_WATCHES)
		return -EAGAIN;
	if (check_path(f->path) < 0 || (f->flags & ~FRAME_WATCH_RECURSIVE))
		return -EINVAL;
	int r = fs_become(a, f->user);
	if (r < 0)
		return r;
	/* Readable, not O_PATH: listing a directory's names is what a watch tells, so the user
	 * must be allowed to read it (gVisor's inotify does not check that itself). */
	int fd = xopenat(AT_FDCWD, f->path, O_RDONLY | O_DIRECTORY, 0);
	r = fd < 0 ? fd : watch_open(fd, f->path, f->flags & FRAME_WATCH_RECURSIVE, &w);
	fs_restore(a);
	if (r < 0)
		return r;
	a->watches[a->n_watches++] = (struct awatch){chan, f->user, w};
	emit(a, FRAME_OK, chan, &(struct frame_ok){0});
	return 0;
}

void watch_drop(struct agent *a, struct awatch *aw)
{
	watch_free(aw->w);
	*aw = a->watches[--a->n_watches];
}

int do_watch_close(struct agent *a, uint32_t chan, void *m)
{
	struct awatch *aw = watch_find(a, chan);
	if (aw)
		watch_drop(a, aw); /* a watch that failed or ended is no error */
	emit(a, FRAME_OK, chan, &(struct frame_ok){0}); /* the last frame on @chan */
	return 0;
}

struct watch_emit_ctx {
	struct agent *a;
	uint32_t chan;
};

static void watch_emit(void *arg, const char *path, uint32_t type)
{
	struct watch_emit_ctx *c = arg;
	emit(c->a, FRAME_WATCH_EVENT, c->chan,
	     &(struct frame_watch_event){.name = path, .type = type});
}

/* Reads every watch with events while the host's queue has room (the kernel's queue holds
 * the rest, and says when it overflowed). */
void pump_watches(struct agent *a)
{
	for (unsigned i = 0; i < a->n_watches && out_room(a); i++) {
		struct awatch *aw = &a->watches[i];
		struct watch_emit_ctx c = {a, aw->chan};
		if (fs_become(a, aw->user) < 0)
			continue;
		while (out_room(a) && watch_read(aw->w, watch_emit, &c) == 0)
			;
		fs_restore(a);
	}
}

