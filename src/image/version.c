/* Template versions (store.h): the immutable trees a name points to, who holds one, and when
 * one goes.
 *
 *     <store>/<name>                   symlink ".versions/<name>@<id>", replaced by rename(2)
 *     <store>/.versions/<name>@<id>/   rootfs/, template.json, .lock: never changed once there
 *
 * A holder (a sandbox of cordond or of cordon run, a build FROM it) keeps a shared flock on
 * the version's .lock while it runs on it. The kernel drops that lock when the holder's fd is
 * closed, by exit or by any death, so a crash leaves no reference behind to forget (the uid
 * slots of src/lib/idmap.c work the same way). A version is removed only by whoever gets its
 * lock exclusively without waiting while no name points to it; a holder checks, once it has
 * its lock, that the version is still in place, and starts over if a removal was first. A
 * name never comes back to an old version: every publish makes a new one. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "basic/cleanup.h"
#include "basic/tree.h"
#include "image/store-int.h"
#include "image/store.h"

#define VLOCK	      ".lock"
#define LINK_MAX_LEN  (sizeof(STORE_VERSIONS "/") + STORE_VERSION_MAX)
#define HOLD_ATTEMPTS 200 /* retries (1 ms apart) while a publish or removal races a holder */
#define NAME_ATTEMPTS 4	  /* migrations of one name a caller sits through */

static bool hex_id(const char *s)
{
	size_t i = 0;
	for (; s[i]; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return i == STORE_VERSION_ID_LEN;
}

/* Whether @vid is "<name>@<id>"; its name part into @name. */
static bool version_split(const char *vid, char name[STORE_NAME_MAX + 1])
{
	const char *at = strrchr(vid, '@');
	size_t n = at ? (size_t)(at - vid) : 0;
	if (!at || n == 0 || n > STORE_NAME_MAX || !hex_id(at + 1))
		return false;
	memcpy(name, vid, n);
	name[n] = '\0';
	return store_name_valid(name);
}

int store_new_version_id(const char *name, char *buf)
{
	uint32_t rnd;
	if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
		return -EIO;
	/* Seconds first: `ls .versions` lists a name's versions oldest first. */
	snprintf(buf, STORE_VERSION_MAX, "%s@%08x%08x", name, (uint32_t)time(NULL), rnd);
	return 0;
}

int store_read_pointer(int sfd, const char *name, char *vid)
{
	char target[LINK_MAX_LEN + 1], owner[STORE_NAME_MAX + 1];
	const size_t pre = strlen(STORE_VERSIONS "/");
	struct stat st;
	ssize_t n = readlinkat(sfd, name, target, sizeof(target) - 1);
	if (n < 0) {
		if (errno == EINVAL && fstatat(sfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISDIR(st.st_mode))
			return -EISDIR;
		return -errno;
	}
	target[n] = '\0';
	if (strncmp(target, STORE_VERSIONS "/", pre) != 0 || !version_split(target + pre, owner) ||
	    strcmp(owner, name) != 0 || (size_t)n - pre >= STORE_VERSION_MAX)
		return -EINVAL;
	memcpy(vid, target + pre, (size_t)n - pre + 1);
	return 0;
}

static bool named(int sfd, const char *name, const char *vid)
{
	char cur[STORE_VERSION_MAX];
	return store_read_pointer(sfd, name, cur) == 0 && strcmp(cur, vid) == 0;
}

/* A symlink to @target at a fresh ".tmp-" name (the sweep's if we die), into @ret. */
static int make_link(int sfd, const char *target, char ret[64])
{
	for (int i = 0; i < 16; i++) {
		uint32_t rnd;
		if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
			return -EIO;
		snprintf(ret, 64, STORE_TMP_PREFIX "link-%d-%08x", (int)getpid(), rnd);
		if (symlinkat(target, sfd, ret) == 0)
			return 0;
		if (errno != EEXIST)
			return -errno;
	}
	return -EEXIST;
}

/* A template directory from before versions becomes a version: a link to where it will be is
 * exchanged with it (the name is never missing), then it moves there. Between the two renames
 * the link dangles, which a holder sits out (HOLD_ATTEMPTS). Two migrators take turns by a
 * flock on the directory itself. The caller holds the store lock shared, which keeps the
 * sweep away from the ".tmp-" name the directory has for that moment. */
static int migrate(int sfd, const char *name, struct cordon_err *err)
{
	char vid[STORE_VERSION_MAX], target[LINK_MAX_LEN], tmp[64];
	struct stat a, b;
	_cleanup_close_ int dfd =
	    openat(sfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return errno == ENOTDIR || errno == ELOOP || errno == ENOENT
			   ? 0 /* migrated (or removed) meanwhile */
			   : cordon_err_set(err, -errno, "template '%s'", name);
	if (flock(dfd, LOCK_EX) < 0 || fstat(dfd, &a) < 0)
		return cordon_err_set(err, -errno, "template '%s'", name);
	if (fstatat(sfd, name, &b, AT_SYMLINK_NOFOLLOW) < 0 || a.st_ino != b.st_ino ||
	    a.st_dev != b.st_dev)
		return 0; /* another migrator was first */
	int r = store_new_version_id(name, vid);
	if (r < 0)
		return cordon_err_set(err, r, "version id");
	if (mkdirat(sfd, STORE_VERSIONS, 0700) < 0 && errno != EEXIST)
		return cordon_err_set(err, -errno, "mkdir " STORE_VERSIONS);
	snprintf(target, sizeof(target), STORE_VERSIONS "/%s", vid);
	if ((r = make_link(sfd, target, tmp)) < 0)
		return cordon_err_set(err, r, "link for template '%s'", name);
	if (renameat2(sfd, tmp, sfd, name, RENAME_EXCHANGE) < 0) {
		r = cordon_err_set(err, -errno, "migrate template '%s' to a version", name);
		unlinkat(sfd, tmp, 0);
		return r;
	}
	if (renameat2(sfd, tmp, sfd, target, RENAME_NOREPLACE) < 0) {
		r = cordon_err_set(err, -errno, "migrate template '%s' to a version", name);
		(void)renameat2(sfd, tmp, sfd, name, RENAME_EXCHANGE); /* as it was */
		unlinkat(sfd, tmp, 0);
		return r;
	}
	return 0;
}

/* @name's version into @vid; a template directory from before versions is migrated first. */
static int resolve(int sfd, const char *name, char vid[STORE_VERSION_MAX], struct cordon_err *err)
{
	for (int i = 0; i < NAME_ATTEMPTS; i++) {
		int r = store_read_pointer(sfd, name, vid);
		if (r == -ENOENT)
			return cordon_err_setf(err, -ENOENT, "no template '%s'", name);
		if (r == -EINVAL)
			return cordon_err_setf(err, -EINVAL,
					       "template '%s' is not a link to one of its "
					       "versions (" STORE_VERSIONS "/%s@...)",
					       name, name);
		if (r != -EISDIR)
			return r < 0 ? cordon_err_set(err, r, "template '%s'", name) : 0;
		_cleanup_close_ int lock = store_lock(sfd, LOCK_SH, err);
		if (lock < 0)
			return lock;
		if ((r = migrate(sfd, name, err)) < 0)
			return r;
	}
	return cordon_err_setf(err, -EBUSY, "template '%s' keeps changing", name);
}

/* Holds version @vid: its directory open, a shared flock on its .lock, and then a check that
 * it is still in place; -ESTALE if a removal moved it aside before we had the lock. */
static int hold(int sfd, const char *dir, const char *vid, struct store_version *ret,
		struct cordon_err *err)
{
	char rel[LINK_MAX_LEN];
	struct stat a, b;
	snprintf(rel, sizeof(rel), STORE_VERSIONS "/%s", vid);
	_cleanup_close_ int vfd = openat(sfd, rel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (vfd < 0)
		return errno == ENOENT ? -ESTALE
				       : cordon_err_set(err, -errno, "template version %s", vid);
	_cleanup_close_ int lock =
	    openat(vfd, VLOCK, O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (lock < 0)
		return cordon_err_set(err, -errno, "lock of template version %s", vid);
	/* Never waiting: an exclusive taker is a removal, done in a moment (or a child cloned in
	 * that moment, holding a copy of its fd until it closes its fds); then it is gone, or in
	 * place again. A daemon's loop must not sleep in flock(). */
	if (flock(lock, LOCK_SH | LOCK_NB) < 0)
		return errno == EWOULDBLOCK
			   ? -ESTALE
			   : cordon_err_set(err, -errno, "lock of template version %s", vid);
	if (fstat(vfd, &a) < 0 || fstatat(sfd, rel, &b, AT_SYMLINK_NOFOLLOW) < 0 ||
	    a.st_ino != b.st_ino || a.st_dev != b.st_dev)
		return -ESTALE;
	if ((size_t)snprintf(ret->path, sizeof(ret->path), "%s/%s", dir, rel) >=
		sizeof(ret->path) ||
	    (size_t)snprintf(ret->rootfs, sizeof(ret->rootfs), "%s/rootfs", ret->path) >=
		sizeof(ret->rootfs))
		return cordon_err_setf(err, -ENAMETOOLONG, "store path too long");
	snprintf(ret->id, sizeof(ret->id), "%s", vid);
	ret->lock_fd = TAKE_FD(lock);
	return 0;
}

int store_version_open(const char *name, struct store_version *ret, struct cordon_err *err)
{
	char dir[PATH_MAX], vid[STORE_VERSION_MAX];
	*ret = (struct store_version)STORE_VERSION_INIT;
	if (!store_name_valid(name))
		return cordon_err_setf(err, -EINVAL, "not a template name");
	if (store_dir(dir, sizeof(dir)) < 0)
		return cordon_err_setf(err, -ENAMETOOLONG, "$%s is too long", STORE_ENV);
	_cleanup_close_ int sfd = store_open_dir(false, err);
	if (sfd < 0)
		return sfd == -ENOENT ? cordon_err_setf(err, -ENOENT, "no template '%s'", name)
				      : sfd;
	for (int i = 0; i < HOLD_ATTEMPTS; i++) {
		int r = resolve(sfd, name, vid, err);
		if (r < 0)
			return r;
		r = hold(sfd, dir, vid, ret, err);
		if (r != -ESTALE)
			return r;
		usleep(1000);
	}
	char rel[LINK_MAX_LEN];
	snprintf(rel, sizeof(rel), STORE_VERSIONS "/%s", vid);
	if (faccessat(sfd, rel, F_OK, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT)
		return cordon_err_setf(err, -ENOENT, "template '%s': its version %s is missing",
				       name, vid);
	return cordon_err_setf(err, -EBUSY, "template '%s' keeps changing", name);
}

int store_version_current(const char *name, char vid[STORE_VERSION_MAX])
{
	_cleanup_close_ int sfd = store_open_dir(false, NULL);
	if (!store_name_valid(name))
		return -EINVAL;
	if (sfd < 0)
		return sfd;
	return store_read_pointer(sfd, name, vid);
}

/* A daemon's releases are finished by a thread it already has (cordond's pool thread), which
 * calls store_release_step() whenever store_release_start()'s fd is readable or the step's
 * timeout has passed: deleting a big tree must not stall the loop, and no thread may be added
 * to cordond (glibc's setresgid() in a jail cloned from a process with a third thread waits
 * for that thread forever). A daemon that clones sandboxes all the time also has, for a
 * moment in each clone, a copy of every lock fd in a child that has not closed it yet: a lock
 * busy without a holder. So a busy version is tried again for a while before it is left to
 * the next gc (a real holder left, if any, removes it when it lets go). */
#define RELEASE_FOR_MS	1000 /* a busy version is tried for this long, */
#define RELEASE_GAP_MS	20   /* this far apart */
#define RELEASE_PENDING 256u /* busy versions kept at once; more are gc's */

static int release_pipe[2] = {-1, -1};

static int try_remove(int sfd, const char *vid, uint64_t *bytes);

struct retry {
	char vid[STORE_VERSION_MAX];
	uint64_t until_ms;
};

static struct retry busy[RELEASE_PENDING]; /* the stepping thread's alone */
static size_t n_busy;

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One attempt at @vid: true while it is busy (try again). */
static bool busy_once(const char *vid)
{
	_cleanup_close_ int sfd = store_open_dir(false, NULL);
	return sfd >= 0 && try_remove(sfd, vid, NULL) == -EBUSY;
}

int store_release_start(void)
{
	if (pipe2(release_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return -errno;
	return release_pipe[0];
}

int store_release_step(void)
{
	char vid[STORE_VERSION_MAX];
	uint64_t now = mono_ms();
	while (read(release_pipe[0], vid, sizeof(vid)) == sizeof(vid)) {
		vid[sizeof(vid) - 1] = '\0';
		size_t i = 0;
		while (i < n_busy && strcmp(busy[i].vid, vid) != 0)
			i++;
		if (i == n_busy && busy_once(vid) && n_busy < RELEASE_PENDING) {
			snprintf(busy[n_busy].vid, sizeof(busy[n_busy].vid), "%s", vid);
			busy[n_busy++].until_ms = now + RELEASE_FOR_MS;
		}
	}
	for (size_t i = 0; i < n_busy;)
		if (now < busy[i].until_ms && busy_once(busy[i].vid))
			i++;
		else
			busy[i] = busy[--n_busy];
	return n_busy ? RELEASE_GAP_MS : -1;
}

/* @vid to the stepping thread, if there is one; else tried here once. */
static void release_detached(int sfd, const char *vid)
{
	char msg[STORE_VERSION_MAX] = "";
	snprintf(msg, sizeof(msg), "%s", vid);
	if (release_pipe[1] < 0)
		(void)try_remove(sfd, vid, NULL);
	else if (write(release_pipe[1], msg, sizeof(msg)) != sizeof(msg))
		return; /* the stepping thread is that far behind: gc's */
}

/* Removes version @vid if no name points to it and nobody holds it: its lock taken
 * exclusively without waiting, the name checked again (a publish points the name before it
 * lets go of its new version), the version moved aside, then deleted. 0 when removed (its
 * bytes added to *@bytes) or gone, -EBUSY when held, -EEXIST when named. */
static int try_remove(int sfd, const char *vid, uint64_t *bytes)
{
	char name[STORE_NAME_MAX + 1], rel[LINK_MAX_LEN],
	    aside[sizeof(STORE_RM_PREFIX) + STORE_VERSION_MAX];
	if (!version_split(vid, name))
		return -EINVAL;
	if (named(sfd, name, vid))
		return -EEXIST;
	snprintf(rel, sizeof(rel), STORE_VERSIONS "/%s", vid);
	_cleanup_close_ int vfd = openat(sfd, rel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (vfd < 0)
		return errno == ENOENT ? 0 : -errno;
	_cleanup_close_ int lock =
	    openat(vfd, VLOCK, O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (lock < 0)
		return -errno;
	if (flock(lock, LOCK_EX | LOCK_NB) < 0)
		return errno == EWOULDBLOCK ? -EBUSY : -errno;
	if (named(sfd, name, vid))
		return -EEXIST;
	if (bytes)
		(void)tree_size(vfd, bytes);
	snprintf(aside, sizeof(aside), STORE_RM_PREFIX "%s", vid);
	if (renameat2(sfd, rel, sfd, aside, RENAME_NOREPLACE) < 0)
		return errno == ENOENT ? 0 : -errno;
	close(TAKE_FD(lock)); /* aside: a holder that opened it before now fails its check */
	return tree_remove_at(sfd, aside, TREE_MAX_DEPTH);
}

void store_version_close(struct store_version *v, bool detach)
{
	if (!v || v->lock_fd < 0)
		return;
	close(v->lock_fd);
	v->lock_fd = -1;
	char name[STORE_NAME_MAX + 1];
	_cleanup_close_ int sfd = store_open_dir(false, NULL);
	if (sfd < 0 || !version_split(v->id, name) || named(sfd, name, v->id))
		return; /* the usual case: still the template's version */
	if (detach)
		release_detached(sfd, v->id);
	else
		(void)try_remove(sfd, v->id, NULL); /* we may have been its last holder */
}

/* Calls @fn on every entry of .versions whose name starts with @prefix. */
static int each_version(int sfd, const char *prefix,
			void (*fn)(int sfd, const char *vid, void *data), void *data)
{
	_cleanup_close_ int vfd =
	    openat(sfd, STORE_VERSIONS, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (vfd < 0)
		return errno == ENOENT ? 0 : -errno;
	_cleanup_closedir_ DIR *d = tree_opendir_dup(vfd);
	if (!d)
		return -errno;
	struct dirent *de;
	while ((de = readdir(d)))
		if (!tree_is_dot(de->d_name) && strncmp(de->d_name, prefix, strlen(prefix)) == 0)
			fn(sfd, de->d_name, data);
	return 0;
}

static void prune_one(int sfd, const char *vid, void *data) { (void)try_remove(sfd, vid, NULL); }

/* Removes the versions of @name that nothing names or holds. */
static void prune(int sfd, const char *name)
{
	char prefix[STORE_NAME_MAX + 2];
	snprintf(prefix, sizeof(prefix), "%s@", name);
	(void)each_version(sfd, prefix, prune_one, NULL);
}

static void gc_one(int sfd, const char *vid, void *data)
{
	struct store_gc *g = data;
	uint64_t bytes = 0;
	int r = try_remove(sfd, vid, &bytes);
	if (r == 0) {
		g->removed++;
		g->bytes += bytes;
	} else if (r == -EBUSY) {
		g->in_use++;
	}
}

int store_gc_versions(struct store_gc *ret, struct cordon_err *err)
{
	*ret = (struct store_gc){0};
	_cleanup_close_ int sfd = store_open_dir(false, err);
	if (sfd == -ENOENT)
		return 0;
	if (sfd < 0)
		return sfd;
	_cleanup_close_ int lock = store_lock(sfd, LOCK_SH, err); /* our .rm-* stay ours */
	if (lock < 0)
		return lock;
	int r = each_version(sfd, "", gc_one, ret);
	return r < 0 ? cordon_err_set(err, r, "read " STORE_VERSIONS) : 0;
}

/* Points @name at @target: a new link only if the name is free, or, with @replace, a link
 * renamed over it (a template directory from before versions is migrated first). */
static int point(int sfd, const char *name, const char *target, bool replace,
		 struct cordon_err *err)
{
	char tmp[64];
	if (!replace) {
		if (symlinkat(target, sfd, name) == 0)
			return 0;
		return errno == EEXIST ? cordon_err_setf(err, -EEXIST,
							 "template '%s' exists "
							 "(--replace replaces it)",
							 name)
				       : cordon_err_set(err, -errno, "name template '%s'", name);
	}
	int r = make_link(sfd, target, tmp);
	if (r < 0)
		return cordon_err_set(err, r, "link for template '%s'", name);
	for (int i = 0; i < NAME_ATTEMPTS; i++) {
		if (renameat(sfd, tmp, sfd, name) == 0)
			return 0;
		r = cordon_err_set(err, -errno, "replace template '%s'", name);
		if (r != -EISDIR || (r = migrate(sfd, name, err)) < 0)
			break;
	}
	unlinkat(sfd, tmp, 0);
	return r < 0 ? r : cordon_err_setf(err, -EBUSY, "template '%s' keeps changing", name);
}

int store_publish(int sfd, const char *tmp, const char *name, const char *vid, bool replace,
		  struct cordon_err *err)
{
	char lockrel[64 + sizeof(VLOCK)], rel[LINK_MAX_LEN];
	snprintf(lockrel, sizeof(lockrel), "%s/" VLOCK, tmp);
	snprintf(rel, sizeof(rel), STORE_VERSIONS "/%s", vid);
	/* Held until the name points to it: a gc between the two renames sees it in use. */
	_cleanup_close_ int hold =
	    openat(sfd, lockrel, O_RDONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (hold < 0 || flock(hold, LOCK_SH) < 0)
		return cordon_err_set(err, -errno, "lock of the new version");
	if (mkdirat(sfd, STORE_VERSIONS, 0700) < 0 && errno != EEXIST)
		return cordon_err_set(err, -errno, "mkdir " STORE_VERSIONS);
	if (renameat2(sfd, tmp, sfd, rel, RENAME_NOREPLACE) < 0)
		return cordon_err_set(err, -errno, "move the new version into " STORE_VERSIONS);
	int r = point(sfd, name, rel, replace, err);
	close(TAKE_FD(hold));
	prune(sfd, name); /* what it replaced, unless in use; itself if it could not be named */
	return r;
}

int store_unname(int sfd, const char *name, struct cordon_err *err)
{
	char vid[STORE_VERSION_MAX];
	int r = -EISDIR;
	for (int i = 0; i < NAME_ATTEMPTS && r == -EISDIR; i++)
		if ((r = store_read_pointer(sfd, name, vid)) == -EISDIR &&
		    (r = migrate(sfd, name, err)) >= 0)
			r = -EISDIR;
	if (r == -ENOENT)
		return cordon_err_setf(err, -ENOENT, "no template '%s'", name);
	if (r < 0 && r != -EINVAL) /* a link that is not ours goes all the same */
		return err && err->code ? r : cordon_err_set(err, r, "template '%s'", name);
	if (unlinkat(sfd, name, 0) < 0)
		return errno == ENOENT ? cordon_err_setf(err, -ENOENT, "no template '%s'", name)
				       : cordon_err_set(err, -errno, "remove template '%s'", name);
	prune(sfd, name); /* versions in use go with their last holder */
	return 0;
}
