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
};

enum cgroup_mode { CGROUP_NONE, CGROUP_V1, CGROUP_V2 };

/* Which hierarchy this host offers with the memory, pids and cpu controllers. Cached. */
enum cgroup_mode cgroup_detect(void);

int cgroup_create(const char *name, const struct cgroup_limits *lim, struct cgroup **ret,
		  struct cordon_err *err);
int cgroup_attach(struct cgroup *cg, pid_t pid, struct cordon_err *err);
int cgroup_stats(struct cgroup *cg, struct cgroup_stats *ret);
/* SIGKILLs every process in the cgroup. */
int cgroup_kill(struct cgroup *cg);
/* Kills what is left, removes the directories. Accepts NULL; returns NULL. */
struct cgroup *cgroup_free(struct cgroup *cg);

/* Calls @is_stale for every sandbox cgroup under cordon/; removes those it says are stale. */
int cgroup_sweep(bool (*is_stale)(const char *name, void *data), void *data);
