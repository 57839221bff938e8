/* cgroup v1 and v2 behind one small interface.
 *
 * v2 has one directory per sandbox; v1 has one per controller (memory, pids, cpu, cpuacct, and
 * freezer where it is mounted: pause and resume; the kill switch is the pid namespace, see
 * jail.c). The layout differs
 * by little, so both are described by tables of (controller, file, value) rather than code.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <linux/magic.h>

#include "basic/cleanup.h"
#include "basic/clock.h"
#include "basic/fileio.h"
#include "lib/cgroup.h"

#define CGROUP_ROOT "/sys/fs/cgroup"
#define CORDON_DIR  "cordon"

enum ctl { CTL_UNIFIED, CTL_MEMORY, CTL_PIDS, CTL_CPU, CTL_CPUACCT, CTL_FREEZER, _CTL_MAX };

/* v1 controller mount points under CGROUP_ROOT; v2 uses CGROUP_ROOT itself for everything. */
static const char *const v1_dirs[_CTL_MAX] = {
	[CTL_MEMORY] = "memory", [CTL_PIDS] = "pids", [CTL_CPU] = "cpu", [CTL_CPUACCT] = "cpuacct",
	[CTL_FREEZER] = "freezer",
};

struct cgroup {
	enum cgroup_mode mode;
	char name[64];
	int dirfd[_CTL_MAX]; /* the sandbox's directory per controller, -1 if unused */
};

static enum cgroup_mode detected = -1;

static bool v2_has_controllers(void)
{
	char buf[512];
	if (read_file_at(AT_FDCWD, CGROUP_ROOT "/cgroup.controllers", buf, sizeof(buf)) < 0)
		return false;
	return strstr(buf, "memory") && strstr(buf, "pids") && strstr(buf, "cpu");
}

enum cgroup_mode cgroup_detect(void)
{
	struct statfs sfs;

	if ((int)detected != -1)
		return detected;
	detected = CGROUP_NONE;
	if (statfs(CGROUP_ROOT, &sfs) < 0)
		return detected;
	if (sfs.f_type == CGROUP2_SUPER_MAGIC) {
		if (v2_has_controllers())
			detected = CGROUP_V2;
	} else if (access(CGROUP_ROOT "/memory/memory.limit_in_bytes", F_OK) == 0 &&
		   access(CGROUP_ROOT "/pids/cgroup.procs", F_OK) == 0 &&
		   access(CGROUP_ROOT "/cpu/cpu.cfs_quota_us", F_OK) == 0) {
		detected = CGROUP_V1;
	}
	return detected;
}

static const char *ctl_base(enum cgroup_mode mode, enum ctl c)
{
	return mode == CGROUP_V2 ? "" : v1_dirs[c];
}

static bool ctl_used(enum cgroup_mode mode, enum ctl c)
{
	if (mode == CGROUP_V2)
		return c == CTL_UNIFIED;
	if (c == CTL_UNIFIED)
		return false;
	/* cpuacct is often co-mounted with cpu; then cpuacct's directory is the same one. The
	 * freezer is optional: without it a sandbox cannot be paused, nothing else. */
	if (c == CTL_FREEZER)
		return access(CGROUP_ROOT "/freezer/cgroup.procs", F_OK) == 0; /* the root has no state */
	return c != CTL_CPUACCT || access(CGROUP_ROOT "/cpuacct/cpuacct.usage", F_OK) == 0;
}

static int ctl_fd(const struct cgroup *cg, enum ctl c)
{
	if (cg->mode == CGROUP_V2)
		return cg->dirfd[CTL_UNIFIED];
	return cg->dirfd[c];
}

/* Makes CGROUP_ROOT/<base>/cordon and, on v2, delegates the controllers down to it. */
static int ensure_parent(enum cgroup_mode mode, const char *base)
{
	char path[256];

	snprintf(path, sizeof(path), CGROUP_ROOT "/%s%s" CORDON_DIR, base, *base ? "/" : "");
	if (mkdir(path, 0755) < 0 && errno != EEXIST)
		return -errno;
	if (mode != CGROUP_V2)
		return 0;
	/* Enabling an already enabled controller is a no-op; do both levels every time so that a
	 * parent created by an older run without them is fixed too. */
	int r = write_file_at(AT_FDCWD, CGROUP_ROOT "/cgroup.subtree_control", "+memory +pids +cpu");
	if (r < 0 && r != -EBUSY)
		return r;
	return write_file_at(AT_FDCWD, CGROUP_ROOT "/" CORDON_DIR "/cgroup.subtree_control",
			     "+memory +pids +cpu");
}

struct limit_file {
	enum cgroup_mode mode;
	enum ctl ctl;
	const char *file;
	bool optional; /* absent on some kernels or configurations (no swap accounting) */
	enum { L_MEM, L_PIDS, L_CPU_QUOTA, L_CPU_PERIOD, L_CPU_MAX, L_ZERO, L_ONE } what;
	bool may_refuse; /* EINVAL is expected: see the v1 memory entries */
};

static const struct limit_file limit_files[] = {
	{CGROUP_V2, CTL_UNIFIED, "memory.max", false, L_MEM},
	{CGROUP_V2, CTL_UNIFIED, "memory.swap.max", true, L_ZERO},
	{CGROUP_V2, CTL_UNIFIED, "memory.oom.group", true, L_ONE},
	{CGROUP_V2, CTL_UNIFIED, "pids.max", false, L_PIDS},
	{CGROUP_V2, CTL_UNIFIED, "cpu.max", false, L_CPU_MAX},
	/* v1 keeps limit <= memsw.limit at every step: raising needs memsw first, lowering
	 * needs it last. Writing it on both sides covers both (the first may be refused). */
	{CGROUP_V1, CTL_MEMORY, "memory.memsw.limit_in_bytes", true, L_MEM, true},
	{CGROUP_V1, CTL_MEMORY, "memory.limit_in_bytes", false, L_MEM},
	{CGROUP_V1, CTL_MEMORY, "memory.memsw.limit_in_bytes", true, L_MEM},
	{CGROUP_V1, CTL_MEMORY, "memory.swappiness", true, L_ZERO},
	{CGROUP_V1, CTL_PIDS, "pids.max", false, L_PIDS},
	{CGROUP_V1, CTL_CPU, "cpu.cfs_period_us", false, L_CPU_PERIOD},
	{CGROUP_V1, CTL_CPU, "cpu.cfs_quota_us", false, L_CPU_QUOTA},
};

#define CPU_PERIOD_US 100000

static void limit_value(const struct limit_file *l, const struct cgroup_limits *lim, char *buf,
			size_t size)
{
	uint64_t quota = (uint64_t)lim->cpus_milli * CPU_PERIOD_US / 1000;

	switch (l->what) {
	case L_MEM:
		snprintf(buf, size, "%" PRIu64, lim->memory_bytes);
		break;
	case L_PIDS:
		snprintf(buf, size, "%" PRIu32, lim->pids);
		break;
	case L_CPU_QUOTA:
		snprintf(buf, size, "%" PRIu64, quota);
		break;
	case L_CPU_PERIOD:
		snprintf(buf, size, "%d", CPU_PERIOD_US);
		break;
	case L_CPU_MAX:
		snprintf(buf, size, "%" PRIu64 " %d", quota, CPU_PERIOD_US);
		break;
	case L_ZERO:
		snprintf(buf, size, "0");
		break;
	case L_ONE:
		snprintf(buf, size, "1");
		break;
	}
}

static int write_limits(struct cgroup *cg, const struct cgroup_limits *lim, struct cordon_err *err)
{
	for (size_t i = 0; i < ELEMENTSOF(limit_files); i++) {
		const struct limit_file *l = &limit_files[i];
		char val[64];

		if (l->mode != cg->mode)
			continue;
		limit_value(l, lim, val, sizeof(val));
		int r = write_file_at(ctl_fd(cg, l->ctl), l->file, val);
		if ((r == -ENOENT && l->optional) || (r == -EINVAL && l->may_refuse))
			continue;
		if (r < 0)
			return cordon_err_set(err, r, "cgroup: write %s=%s", l->file, val);
	}
	return 0;
}

int cgroup_create(const char *name, const struct cgroup_limits *lim, struct cgroup **ret,
		  struct cordon_err *err)
{
	enum cgroup_mode mode = cgroup_detect();
	if (mode == CGROUP_NONE)
		return cordon_err_setf(err, -ENOTSUP,
				       "cgroup: no cgroup v2 or v1 hierarchy with memory, pids and cpu");

	_cleanup_free_ struct cgroup *cg = calloc(1, sizeof(*cg));
	if (!cg)
		return -ENOMEM;
	cg->mode = mode;
	snprintf(cg->name, sizeof(cg->name), "%s", name);
	for (int c = 0; c < _CTL_MAX; c++)
		cg->dirfd[c] = -1;

	for (int c = 0; c < _CTL_MAX; c++) {
		char path[256];
		if (!ctl_used(mode, c))
			continue;
		int r = ensure_parent(mode, ctl_base(mode, c));
		if (r < 0) {
			cgroup_free(TAKE_PTR(cg));
			return cordon_err_set(err, r, "cgroup: prepare %s/%s", ctl_base(mode, c),
					      CORDON_DIR);
		}
		snprintf(path, sizeof(path), CGROUP_ROOT "/%s/" CORDON_DIR "/%s", ctl_base(mode, c),
			 name);
		/* EEXIST is a leftover of a dead sandbox of the same name that the sweep has not
		 * seen yet: reuse it, the limits are rewritten below. */
		if (mkdir(path, 0755) < 0 && errno != EEXIST) {
			r = -errno;
			cgroup_free(TAKE_PTR(cg));
			return cordon_err_set(err, r, "cgroup: mkdir %s", path);
		}
		cg->dirfd[c] = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (cg->dirfd[c] < 0) {
			r = -errno;
			cgroup_free(TAKE_PTR(cg));
			return cordon_err_set(err, r, "cgroup: open %s", path);
		}
	}
	int r = write_limits(cg, lim, err);
	if (r < 0) {
		cgroup_free(TAKE_PTR(cg));
		return r;
	}
	*ret = TAKE_PTR(cg);
	return 0;
}

int cgroup_set_limits(struct cgroup *cg, const struct cgroup_limits *lim, struct cordon_err *err)
{
	return write_limits(cg, lim, err);
}

int cgroup_attach(struct cgroup *cg, pid_t pid, struct cordon_err *err)
{
	char buf[32];
	snprintf(buf, sizeof(buf), "%d", (int)pid);
	for (int c = 0; c < _CTL_MAX; c++) {
		if (cg->dirfd[c] < 0)
			continue;
		int r = write_file_at(cg->dirfd[c], "cgroup.procs", buf);
		if (r < 0)
			return cordon_err_set(err, r, "cgroup: attach to %s", cg->name);
	}
	return 0;
}

int cgroup_clone_fd(const struct cgroup *cg)
{
	return cg->mode == CGROUP_V2 ? cg->dirfd[CTL_UNIFIED] : -1;
}

int cgroup_open_join_fds(const struct cgroup *cg, int fds[CGROUP_MAX_JOIN_FDS], size_t *ret_n)
{
	size_t n = 0;
	for (int c = 0; c < _CTL_MAX && cg->mode == CGROUP_V1; c++) {
		if (cg->dirfd[c] < 0)
			continue;
		int fd = openat(cg->dirfd[c], "tasks", O_WRONLY | O_CLOEXEC);
		if (fd < 0) {
			int r = -errno;
			while (n > 0)
				close(fds[--n]);
			return r;
		}
		fds[n++] = fd;
	}
	*ret_n = n;
	return 0;
}

int cgroup_join_self(const int *fds, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (write(fds[i], "0", 1) != 1)
			return -errno;
	return 0;
}

uint64_t cgroup_oom_kills(struct cgroup *cg)
{
	uint64_t v = 0;
	if (cg->mode == CGROUP_V2)
		read_keyed_u64_at(cg->dirfd[CTL_UNIFIED], "memory.events", "oom_kill", &v);
	else
		read_keyed_u64_at(cg->dirfd[CTL_MEMORY], "memory.oom_control", "oom_kill", &v);
	return v;
}

int cgroup_stats(struct cgroup *cg, struct cgroup_stats *ret)
{
	struct cgroup_stats s = {};
	uint64_t v;

	if (cg->mode == CGROUP_V2) {
		int fd = cg->dirfd[CTL_UNIFIED];
		if (read_keyed_u64_at(fd, "memory.events", "oom_kill", &v) == 0)
			s.oom_kills = v;
		if (read_keyed_u64_at(fd, "cpu.stat", "usage_usec", &v) == 0)
			s.cpu_usec = v;
		if (read_u64_at(fd, "memory.peak", &v) == 0) /* 5.19+ */
			s.peak_memory_bytes = v;
		if (read_u64_at(fd, "memory.current", &v) == 0)
			s.memory_bytes = v;
	} else {
		int mem = cg->dirfd[CTL_MEMORY];
		int acct = cg->dirfd[CTL_CPUACCT] >= 0 ? cg->dirfd[CTL_CPUACCT] : cg->dirfd[CTL_CPU];
		if (read_keyed_u64_at(mem, "memory.oom_control", "oom_kill", &v) == 0)
			s.oom_kills = v;
		if (read_u64_at(mem, "memory.max_usage_in_bytes", &v) == 0)
			s.peak_memory_bytes = v;
		if (read_u64_at(mem, "memory.usage_in_bytes", &v) == 0)
			s.memory_bytes = v;
		if (read_u64_at(acct, "cpuacct.usage", &v) == 0)
			s.cpu_usec = v / 1000;
	}
	*ret = s;
	return 0;
}

static int kill_procs_at(int dirfd)
{
	char buf[8192];
	int killed = 0;

	ssize_t n = read_file_at(dirfd, "cgroup.procs", buf, sizeof(buf));
	if (n < 0)
		return n;
	for (char *p = buf; *p;) {
		char *end;
		long pid = strtol(p, &end, 10);
		if (end == p)
			break;
		if (pid > 0 && kill(pid, SIGKILL) == 0)
			killed++;
		p = end + (*end != '\0');
	}
	return killed;
}

/* One pass, no waiting: the caller goes on (cordond's loop must not sleep here). */
int cgroup_kill(struct cgroup *cg)
{
	if (cg->mode == CGROUP_V2 && write_file_at(cg->dirfd[CTL_UNIFIED], "cgroup.kill", "1") == 0)
		return 0;
	int fd = cg->mode == CGROUP_V2 ? cg->dirfd[CTL_UNIFIED] : cg->dirfd[CTL_PIDS];
	int n = fd >= 0 ? kill_procs_at(fd) : 0;
	/* A task frozen by v1's freezer dies only once thawed (v2 lets SIGKILL through). */
	if (cg->mode == CGROUP_V1 && cg->dirfd[CTL_FREEZER] >= 0)
		(void)write_file_at(cg->dirfd[CTL_FREEZER], "freezer.state", "THAWED");
	return n;
}

/* v1, or v2 before 5.14: kill until empty, since a process may fork while we read, and a
 * killed one stays listed until it has exited. The sandbox's pid namespace makes this a
 * second fence: once its PID 1 is reaped, every member is gone and this is one read. */
static int cgroup_kill_wait(struct cgroup *cg)
{
	for (int round = 0; round < 50; round++) {
		if (cgroup_kill(cg) <= 0)
			return 0;
		struct timespec ts = {0, 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	return -EBUSY;
}

/* ---- the freezer ---- */

#define FREEZE_DEADLINE_MS 5000

/* Whether the cgroup has reached @frozen: v2's cgroup.events "frozen", v1's freezer.state
 * (FREEZING until every task has stopped). */
static int freeze_reached(const struct cgroup *cg, bool frozen)
{
	if (cg->mode == CGROUP_V2) {
		uint64_t v = 0;
		int r = read_keyed_u64_at(cg->dirfd[CTL_UNIFIED], "cgroup.events", "frozen", &v);
		return r < 0 ? r : (v == 1) == frozen;
	}
	char buf[32];
	ssize_t n = read_file_at(cg->dirfd[CTL_FREEZER], "freezer.state", buf, sizeof(buf));
	if (n < 0)
		return (int)n;
	return strncmp(buf, frozen ? "FROZEN" : "THAWED", 6) == 0;
}

int cgroup_freeze(struct cgroup *cg, bool frozen)
{
	int r;
	if (cg->mode == CGROUP_V2)
		r = write_file_at(cg->dirfd[CTL_UNIFIED], "cgroup.freeze", frozen ? "1" : "0");
	else if (cg->dirfd[CTL_FREEZER] >= 0)
		r = write_file_at(cg->dirfd[CTL_FREEZER], "freezer.state", frozen ? "FROZEN" : "THAWED");
	else
		return -EOPNOTSUPP;
	if (r < 0)
		return r == -ENOENT ? -EOPNOTSUPP : r; /* v2 before 5.2: no cgroup.freeze */
	/* A task in an uninterruptible sleep (D state) freezes when it wakes: bounded, the
	 * caller is an event loop. */
	for (int ms = 0; ms < FREEZE_DEADLINE_MS; ms++) {
		if ((r = freeze_reached(cg, frozen)) != 0)
			return r < 0 ? r : 0;
		struct timespec ts = {0, 1000 * 1000};
		nanosleep(&ts, NULL);
		if (cg->mode == CGROUP_V1 && frozen) /* v1 may stay FREEZING: ask again */
			(void)write_file_at(cg->dirfd[CTL_FREEZER], "freezer.state", "FROZEN");
	}
	if (frozen)
		(void)cgroup_freeze(cg, false);
	return -ETIMEDOUT;
}

/* Removes one sandbox directory; dying processes may hold it for a moment (EBUSY). */
static int rmdir_retry(int parentfd, const char *name)
{
	for (int i = 0; i < 200; i++) {
		if (unlinkat(parentfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT)
			return 0;
		if (errno != EBUSY)
			return -errno;
		struct timespec ts = {0, 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	return -EBUSY;
}

static int open_parent(enum cgroup_mode mode, enum ctl c)
{
	char path[256];
	snprintf(path, sizeof(path), CGROUP_ROOT "/%s/" CORDON_DIR, ctl_base(mode, c));
	return open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

struct cgroup *cgroup_free(struct cgroup *cg)
{
	if (!cg)
		return NULL;
	bool any = false;
	for (int c = 0; c < _CTL_MAX; c++)
		any |= cg->dirfd[c] >= 0;
	if (any)
		cgroup_kill_wait(cg);
	for (int c = 0; c < _CTL_MAX; c++) {
		if (cg->dirfd[c] < 0)
			continue;
		close(cg->dirfd[c]);
		_cleanup_close_ int parent = open_parent(cg->mode, c);
		if (parent >= 0)
			rmdir_retry(parent, cg->name);
	}
	free(cg);
	return NULL;
}

/* Kills the tasks of @name's cgroups and removes them, without waiting: false while one is
 * still busy (its tasks not yet gone). */
static bool sweep_one(enum cgroup_mode mode, const char *name)
{
	bool done = true;
	/* A sandbox frozen when its holder died: its tasks die only once thawed (v1). */
	char path[256];
	snprintf(path, sizeof(path), CGROUP_ROOT "/freezer/" CORDON_DIR "/%s/freezer.state", name);
	if (mode == CGROUP_V1)
		(void)write_file_at(AT_FDCWD, path, "THAWED");
	for (int c = 0; c < _CTL_MAX; c++) {
		if (!ctl_used(mode, c))
			continue;
		_cleanup_close_ int parent = open_parent(mode, c);
		if (parent < 0)
			continue;
		_cleanup_close_ int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0)
			continue;
		kill_procs_at(fd);
		if (unlinkat(parent, name, AT_REMOVEDIR) < 0 && errno == EBUSY)
			done = false;
	}
	return done;
}

/* How long a sweep waits for the cgroups of dying sandboxes to empty: 200 ms for each still
 * busy after the kill, 15 s at most in all. A daemon killed with hundreds alive leaves them
 * all tearing down their disks at once (an ext4 unmount and a loop device's release each,
 * before a task leaves its cgroup): seconds for all, which one cgroup's 200 ms did not give
 * them; a task that cannot die (stuck in D state) costs a `cordon run` 200 ms, as before.
 * Killed all first, then waited for together. */
#define SWEEP_WAIT_MS	  200
#define SWEEP_DEADLINE_MS 15000

int cgroup_sweep(bool (*is_stale)(const char *name, void *data), void *data)
{
	enum cgroup_mode mode = cgroup_detect();
	if (mode == CGROUP_NONE)
		return 0;
	/* The pids hierarchy (or the unified one) lists every sandbox once. */
	enum ctl c = mode == CGROUP_V2 ? CTL_UNIFIED : CTL_PIDS;
	int fd = open_parent(mode, c);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	_cleanup_closedir_ DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	_cleanup_free_ char (*busy)[NAME_MAX + 1] = NULL;
	size_t n_busy = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_type != DT_DIR || de->d_name[0] == '.' || !is_stale(de->d_name, data) ||
		    sweep_one(mode, de->d_name))
			continue;
		if (n_busy == cap) {
			size_t nc = cap ? 2 * cap : 64;
			void *v = realloc(busy, nc * sizeof(*busy));
			if (!v)
				continue; /* the next sweep's */
			busy = v;
			cap = nc;
		}
		snprintf(busy[n_busy++], sizeof(*busy), "%s", de->d_name);
	}
	uint64_t wait = n_busy * SWEEP_WAIT_MS < SWEEP_DEADLINE_MS ? n_busy * SWEEP_WAIT_MS
								    : SWEEP_DEADLINE_MS;
	for (uint64_t end = now_ms() + wait; n_busy > 0 && now_ms() < end;) {
		struct timespec ts = {0, 10 * 1000 * 1000};
		nanosleep(&ts, NULL);
		for (size_t i = 0; i < n_busy;)
			if (sweep_one(mode, busy[i]))
				memcpy(busy[i], busy[--n_busy], sizeof(*busy));
			else
				i++;
	}
	return n_busy ? -EBUSY : 0;
}
