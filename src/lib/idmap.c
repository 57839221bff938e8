#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/sysmacros.h>
#include <sys/stat.h>
#include <time.h>

#include "basic/cleanup.h"
#include "basic/fileio.h"
#include "lib/idmap.h"

/* The slots are host-wide, like the uid ranges and the cgroup tree they name: one registry
 * for every cordon run and cordond of the host, whatever runtime directory each uses.
 * (Two registries would hand out the same range twice, and each would sweep the other's
 * cgroups as stale.) */
#define SLOTS_DIR "/run/cordon/slots"

/* Opened first, made only when missing: the sweep opens it once per cgroup it looks at
 * (thousands on a busy host), and two mkdir() that fail with EEXIST were most of that. */
static int open_slots_dir(void)
{
	int fd = open(SLOTS_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (fd >= 0 || errno != ENOENT)
		return fd < 0 ? -errno : fd;
	if (mkdir("/run/cordon", 0755) < 0 && errno != EEXIST)
		return -errno;
	if (mkdir(SLOTS_DIR, 0700) < 0 && errno != EEXIST)
		return -errno;
	fd = open(SLOTS_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	return fd < 0 ? -errno : fd;
}

/* Lock files are removed on release, so a lock can be taken on a file that its holder is just
 * unlinking: after the lock, check that the name still points at our file, else retry. */
static int slot_lock(int dirfd, unsigned slot)
{
	char name[32];
	snprintf(name, sizeof(name), "%u", slot);
	for (int attempt = 0; attempt < 8; attempt++) {
		int fd = openat(dirfd, name, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd < 0)
			return -errno;
		if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
			int r = -errno;
			close(fd);
			return r;
		}
		struct stat a, b;
		if (fstat(fd, &a) == 0 && fstatat(dirfd, name, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
		    a.st_ino == b.st_ino && a.st_dev == b.st_dev)
			return fd;
		close(fd);
	}
	return -EAGAIN;
}

int idmap_slot_try(unsigned slot, struct idmap_slot *ret)
{
	_cleanup_close_ int dirfd = open_slots_dir();
	if (dirfd < 0)
		return dirfd;
	int fd = slot_lock(dirfd, slot);
	if (fd < 0)
		return fd;
	*ret = (struct idmap_slot){.lock_fd = fd, .slot = slot};
	return 0;
}

#define ACQUIRE_BLIND_TRIES 4u

struct locked_inodes {
	uint64_t *v;
	size_t n, cap;
	unsigned major, minor; /* the slots directory's filesystem */
};

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* One line of /proc/locks: "N: FLOCK  ADVISORY  WRITE PID MAJ:MIN:INODE START END". */
static void locked_add(struct locked_inodes *l, const char *line)
{
	unsigned maj, min;
	unsigned long long ino;
	if (!strstr(line, " FLOCK ") ||
	    sscanf(strstr(line, " FLOCK "), " FLOCK %*s %*s %*s %x:%x:%llu", &maj, &min, &ino) != 3 ||
	    maj != l->major || min != l->minor)
		return;
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 256;
		uint64_t *v = realloc(l->v, cap * sizeof(*v));
		if (!v)
			return; /* a hint the smaller */
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = ino;
}

static void held_mark(struct idmap_held *h, const struct locked_inodes *l, int dirfd)
{
	int fd = dup(dirfd);
	_cleanup_closedir_ DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *de;
	if (!d && fd >= 0)
		close(fd);
	while (d && (de = readdir(d))) {
		char *end;
		unsigned long slot = strtoul(de->d_name, &end, 10);
		uint64_t ino = de->d_ino;
		if (*end || end == de->d_name || slot >= CORDON_IDMAP_SLOTS ||
		    !bsearch(&ino, l->v, l->n, sizeof(*l->v), cmp_u64))
			continue;
		h->bits[slot / 64] |= 1ULL << (slot % 64);
	}
}

void idmap_held_load(struct idmap_held *ret)
{
	*ret = (struct idmap_held){};
	_cleanup_close_ int dirfd = open_slots_dir();
	struct stat st;
	if (dirfd < 0 || fstat(dirfd, &st) < 0)
		return;
	char buf[1 << 16]; /* declared first: it outlives f, whose buffer it is */
	_cleanup_fclose_ FILE *f = fopen("/proc/locks", "re");
	if (!f)
		return;
	setvbuf(f, buf, _IOFBF, sizeof(buf)); /* a few reads, not one per KiB */
	struct locked_inodes l = {.major = major(st.st_dev), .minor = minor(st.st_dev)};
	char line[256];
	while (fgets(line, sizeof(line), f))
		locked_add(&l, line);
	qsort(l.v, l.n, sizeof(*l.v), cmp_u64);
	held_mark(ret, &l, dirfd);
	free(l.v);
}

bool idmap_held_test(const struct idmap_held *h, unsigned slot)
{
	return slot < CORDON_IDMAP_SLOTS && (h->bits[slot / 64] >> (slot % 64) & 1);
}

/* Tries @n slots from @start on, those @held calls free (all of them when it is NULL). */
static int acquire_from(int dirfd, unsigned start, unsigned n, const struct idmap_held *held,
			struct idmap_slot *ret)
{
	for (unsigned i = 0; i < n; i++) {
		unsigned slot = (start + i) % CORDON_IDMAP_SLOTS;
		if (held && idmap_held_test(held, slot))
			continue;
		int fd = slot_lock(dirfd, slot);
		if (fd == -EWOULDBLOCK)
			continue;
		if (fd < 0)
			return fd;
		*ret = (struct idmap_slot){.lock_fd = fd, .slot = slot};
		return 0;
	}
	return -EAGAIN;
}

int idmap_slot_acquire(struct idmap_slot *ret, struct cordon_err *err)
{
	_cleanup_close_ int dirfd = open_slots_dir();
	if (dirfd < 0)
		return cordon_err_set(err, dirfd, "uid range: open " SLOTS_DIR);

	/* Start at a pseudo-random slot so that concurrent starters rarely collide. A few tries
	 * find a free slot on a host with few held (no /proc/locks to read); past them, skip what
	 * was held a moment ago, then, should that find nothing, try every slot. */
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	unsigned start = (unsigned)(ts.tv_nsec ^ getpid()) % CORDON_IDMAP_SLOTS;
	int r = acquire_from(dirfd, start, ACQUIRE_BLIND_TRIES, NULL, ret);
	if (r == -EAGAIN) {
		struct idmap_held held;
		idmap_held_load(&held);
		r = acquire_from(dirfd, start, CORDON_IDMAP_SLOTS, &held, ret);
	}
	if (r == -EAGAIN)
		r = acquire_from(dirfd, start, CORDON_IDMAP_SLOTS, NULL, ret);
	if (r == -EAGAIN)
		return cordon_err_setf(err, r, "uid range: all %u host uid ranges are in use",
				       CORDON_IDMAP_SLOTS);
	return r < 0 ? cordon_err_set(err, r, "uid range: lock a slot") : 0;
}

void idmap_slot_release(struct idmap_slot *s)
{
	if (s->lock_fd < 0)
		return;
	/* Unlink while still holding the lock; see slot_lock(). */
	_cleanup_close_ int dirfd = open_slots_dir();
	if (dirfd >= 0) {
		char name[32];
		snprintf(name, sizeof(name), "%u", s->slot);
		unlinkat(dirfd, name, 0);
	}
	close(s->lock_fd);
	s->lock_fd = -1;
}

uid_t idmap_slot_base(const struct idmap_slot *s)
{
	return CORDON_IDMAP_BASE + s->slot * CORDON_IDMAP_SIZE;
}

static int write_map(pid_t pid, const char *file, const char *map)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
	return write_file_at(AT_FDCWD, path, map);
}

int idmap_write(pid_t pid, const struct idmap_slot *s, uid_t inside_id, struct cordon_err *err)
{
	char umap[64], gmap[64];
	int r;

	if (s) {
		snprintf(umap, sizeof(umap), "0 %u %u\n", idmap_slot_base(s), CORDON_IDMAP_SIZE);
		snprintf(gmap, sizeof(gmap), "%s", umap);
	} else {
		snprintf(umap, sizeof(umap), "%u %u 1\n", inside_id, getuid());
		snprintf(gmap, sizeof(gmap), "%u %u 1\n", inside_id, getgid());
		r = write_map(pid, "setgroups", "deny");
		if (r < 0 && r != -ENOENT)
			return cordon_err_set(err, r, "user namespace: write setgroups");
	}
	r = write_map(pid, "uid_map", umap);
	if (r < 0)
		return cordon_err_set(err, r, "user namespace: write uid_map '%.*s'",
				      (int)strcspn(umap, "\n"), umap);
	r = write_map(pid, "gid_map", gmap);
	if (r < 0)
		return cordon_err_set(err, r, "user namespace: write gid_map");
	return 0;
}
