/* Directory watches over inotify: see watch.h. */
#include "init/watch.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lib/frame.h"

#define WATCH_MASK                                                                                 \
	(IN_CREATE | IN_MODIFY | IN_DELETE | IN_DELETE_SELF | IN_MOVED_FROM | IN_MOVED_TO |        \
	 IN_ATTRIB | IN_EXCL_UNLINK)

struct wdir {
	int wd;
	char *rel; /* "" for the root, else "/a/b" */
};

struct watch {
	int ifd, rootfd;
	bool recursive, full;
	char *root;
	struct wdir *dirs;
	size_t n, cap;
};

/* inotify events to ours, as fsnotify (and so E2B) names them: a move into the tree is a
 * create, a move out of it a rename. */
static const struct {
	uint32_t in, ev;
} ev_map[] = {
	{IN_CREATE, FRAME_WATCH_EV_CREATE},	{IN_MOVED_TO, FRAME_WATCH_EV_CREATE},
	{IN_MODIFY, FRAME_WATCH_EV_WRITE},	{IN_DELETE, FRAME_WATCH_EV_REMOVE},
	{IN_MOVED_FROM, FRAME_WATCH_EV_RENAME}, {IN_ATTRIB, FRAME_WATCH_EV_CHMOD},
};

static uint32_t ev_of(uint32_t mask)
{
	uint32_t t = 0;
	for (size_t i = 0; i < sizeof(ev_map) / sizeof(ev_map[0]); i++)
		if (mask & ev_map[i].in)
			t |= ev_map[i].ev;
	return t;
}

static struct wdir *dir_find(struct watch *w, int wd)
{
	for (size_t i = 0; i < w->n; i++)
		if (w->dirs[i].wd == wd)
			return &w->dirs[i];
	return NULL;
}

static int dir_remember(struct watch *w, int wd, const char *rel)
{
	struct wdir *d = dir_find(w, wd);
	char *copy = strdup(rel);

	if (!copy)
		return -ENOMEM;
	if (d) { /* the same directory again (moved within the tree): its new name */
		free(d->rel);
		d->rel = copy;
		return 0;
	}
	if (w->n == w->cap) {
		size_t cap = w->cap ? 2 * w->cap : 16;
		struct wdir *p = realloc(w->dirs, cap * sizeof(*p));
		if (!p) {
			free(copy);
			return -ENOMEM;
		}
		w->dirs = p;
		w->cap = cap;
	}
	w->dirs[w->n++] = (struct wdir){wd, copy};
	return 0;
}

/* A directory beneath the root, no symlink on the way (RESOLVE_BENEATH|NO_SYMLINKS; without
 * openat2, a final symlink at least is refused). */
static int open_beneath(int rootfd, const char *rel)
{
	struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
			       .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS};
	const char *p = rel[0] == '/' ? rel + 1 : rel;
	int fd = (int)syscall(SYS_openat2, rootfd, p[0] ? p : ".", &how, sizeof(how));

	if (fd < 0 && errno == ENOSYS)
		fd = openat(rootfd, p[0] ? p : ".", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

static void add_tree(struct watch *w, int dirfd, const char *rel, unsigned depth);

static void add_children(struct watch *w, int dirfd, const char *rel, unsigned depth)
{
	int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *e;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while ((e = readdir(d)) && !w->full) {
		struct stat st;
		char sub[PATH_MAX];
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (e->d_type != DT_DIR &&
		    (e->d_type != DT_UNKNOWN ||
		     fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode)))
			continue;
		int n = snprintf(sub, sizeof(sub), "%s/%s", rel, e->d_name);
		int cfd = n > 0 && (size_t)n < sizeof(sub)
				  ? openat(dirfd, e->d_name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
				  : -1;
		if (cfd >= 0) {
			add_tree(w, cfd, sub, depth + 1);
			close(cfd);
		}
	}
	closedir(d);
}

/* Watches @dirfd (named @rel) and, for a recursive watch, what is beneath it. The magic link
 * of the fd names the very directory that was opened, whatever happened to its path. */
static void add_tree(struct watch *w, int dirfd, const char *rel, unsigned depth)
{
	char path[64];

	if (w->n >= WATCH_MAX_DIRS) {
		w->full = true;
		return;
	}
	snprintf(path, sizeof(path), "/proc/self/fd/%d", dirfd);
	int wd = inotify_add_watch(w->ifd, path, WATCH_MASK | IN_ONLYDIR);
	if (wd < 0) {
		w->full |= errno == ENOSPC; /* max_user_watches */
		return;
	}
	if (dir_remember(w, wd, rel) < 0)
		w->full = true;
	else if (w->recursive && depth < WATCH_MAX_DEPTH)
		add_children(w, dirfd, rel, depth);
}

int watch_open(int dirfd, const char *root, bool recursive, struct watch **ret)
{
	struct watch *w = calloc(1, sizeof(*w));

	if (!w) {
		close(dirfd);
		return -ENOMEM;
	}
	w->rootfd = dirfd;
	w->recursive = recursive;
	w->root = strdup(root);
	w->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (!w->root || w->ifd < 0) {
		int r = w->root ? -errno : -ENOMEM;
		watch_free(w);
		return r;
	}
	size_t n = strlen(w->root);
	while (n > 1 && w->root[n - 1] == '/')
		w->root[--n] = '\0';
	add_tree(w, dirfd, "", 0);
	if (w->n == 0) {
		watch_free(w);
		return -EACCES;
	}
	*ret = w;
	return 0;
}

int watch_fd(const struct watch *w)
{
	return w->ifd;
}

static void emit_path(struct watch *w, const char *rel, const char *name, uint32_t type,
		      watch_emit_fn emit, void *arg)
{
	char path[FRAME_MAX_PATH];
	const char *root = strcmp(w->root, "/") ? w->root : "";
	int n = snprintf(path, sizeof(path), "%s%s%s%s", root, rel, name[0] ? "/" : "", name);

	if (n > 0 && (size_t)n < sizeof(path))
		emit(arg, path[0] ? path : "/", type);
}

static void on_event(struct watch *w, const struct inotify_event *ev, watch_emit_fn emit,
		     void *arg)
{
	struct wdir *d = ev->wd >= 0 ? dir_find(w, ev->wd) : NULL;
	const char *name = ev->len ? ev->name : "";

	if (ev->mask & IN_Q_OVERFLOW) {
		emit(arg, w->root, FRAME_WATCH_EV_OVERFLOW);
		return;
	}
	if (!d)
		return;
	if (ev->mask & IN_IGNORED) {
		free(d->rel);
		*d = w->dirs[--w->n];
		return;
	}
	if ((ev->mask & IN_DELETE_SELF) && d->rel[0] == '\0')
		emit(arg, w->root, FRAME_WATCH_EV_REMOVE);
	uint32_t type = ev_of(ev->mask);
	if (type)
		emit_path(w, d->rel, name, type, emit, arg);
	if (w->recursive && (ev->mask & IN_ISDIR) && (ev->mask & (IN_CREATE | IN_MOVED_TO)) &&
	    !w->full) {
		char rel[PATH_MAX];
		int n = snprintf(rel, sizeof(rel), "%s/%s", d->rel, name);
		int fd = n > 0 && (size_t)n < sizeof(rel) ? open_beneath(w->rootfd, rel) : -1;
		if (fd >= 0) {
			add_tree(w, fd, rel, 1);
			close(fd);
		}
		if (w->full)
			emit(arg, w->root, FRAME_WATCH_EV_OVERFLOW);
	}
}

int watch_read(struct watch *w, watch_emit_fn emit, void *arg)
{
	char buf[16384] __attribute__((aligned(__alignof__(struct inotify_event))));
	ssize_t n = read(w->ifd, buf, sizeof(buf));

	if (n < 0)
		return -errno;
	for (char *p = buf; p + sizeof(struct inotify_event) <= buf + n;) {
		const struct inotify_event *ev = (const struct inotify_event *)(void *)p;
		on_event(w, ev, emit, arg);
		p += sizeof(*ev) + ev->len;
	}
	return 0;
}

struct watch *watch_free(struct watch *w)
{
	if (!w)
		return NULL;
	for (size_t i = 0; i < w->n; i++)
		free(w->dirs[i].rel);
	free(w->dirs);
	free(w->root);
	if (w->ifd >= 0)
		close(w->ifd);
	if (w->rootfd >= 0)
		close(w->rootfd);
	free(w);
	return NULL;
}
