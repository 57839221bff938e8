/* cgroup limits for one sandbox, on cgroup v2 (stock distributions) and v1 (our build machines).
 *
 * cgroup_create() makes <root>/cordon/<name> in every hierarchy it needs and writes the limits;
 * the caller then moves the sandbox's first process in with cgroup_attach() before it runs
 * anything. cgroup_free() kills what is left, removes the directories and frees the object.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <cordon/err.h>

struct cgroup;

struct cgroup_limits {
	uint64_t memory_bytes;
	uint32_t cpus_milli;
	uint32_t pids;
};

struct cgroup_stats {
	uint64_t oom_kills;
	uint64_t cpu_usec;
	uint64_t peak_memory_bytes; /* 0 when the kernel cannot tell (v2 before 5.19) */
	uint64_t memory_bytes;      /* in use now (v2 memory.current, v1 memory.usage_in_bytes) */
};

enum cgroup_mode { CGROUP_NONE, CGROUP_V1, CGROUP_V2 };

/* Which hierarchy this host offers with the memory, pids and cpu controllers. Cached. */
enum cgroup_mode cgroup_detect(void);

int cgroup_create(const char *name, const struct cgroup_limits *lim, struct cgroup **ret,
		  struct cordon_err *err);
int cgroup_attach(struct cgroup *cg, pid_t pid, struct cordon_err *err);
int cgroup_set_limits(struct cgroup *cg, const struct cgroup_limits *lim, struct cordon_err *err);

/* Moving another process into a cgroup takes the kernel's global threadgroup lock for
 * writing, which waits for an RCU grace period (milliseconds). Two ways around it:
 * on v2, clone3(CLONE_INTO_CGROUP) with cgroup_clone_fd(); on v1, the child moves its own
 * (only) thread by writing "0" to each hierarchy's `tasks` file, through fds the host opened
 * (so the kernel checks the host's credentials, taken at open time). */
#define CGROUP_MAX_JOIN_FDS 8
int cgroup_clone_fd(const struct cgroup *cg); /* v2 directory fd, or -1 on v1 */
int cgroup_open_join_fds(const struct cgroup *cg, int fds[CGROUP_MAX_JOIN_FDS], size_t *ret_n);
/* In the child. Async-signal-safe. */
int cgroup_join_self(const int *fds, size_t n);
int cgroup_stats(struct cgroup *cg, struct cgroup_stats *ret);
/* Only the OOM kill count: one file read, for hot paths. */
uint64_t cgroup_oom_kills(struct cgroup *cg);
/* SIGKILLs every process in the cgroup, in one pass (no waiting); returns how many were
 * signalled. cgroup_free() waits until it is empty. */
int cgroup_kill(struct cgroup *cg);
/* Freezes (@frozen) or thaws every process of the cgroup, and returns once the kernel says
 * it is done (at most 5 s, then -ETIMEDOUT, thawed again). v2's cgroup.freeze, v1's freezer
 * controller; -EOPNOTSUPP where there is neither. A SIGKILL reaches a frozen process on v2;
 * on v1 cgroup_kill() and cgroup_free() thaw first. */
int cgroup_freeze(struct cgroup *cg, bool frozen);
/* Kills what is left, removes the directories. Accepts NULL; returns NULL. */
struct cgroup *cgroup_free(struct cgroup *cg);

/* Calls @is_stale for every sandbox cgroup under cordon/; kills the tasks of those it says are
 * stale, then removes them, waiting for the dying to leave (200 ms for each busy one, 15 s at
 * most: cgroup.c); -EBUSY if some were still busy then (the next sweep's). */
int cgroup_sweep(bool (*is_stale)(const char *name, void *data), void *data);
