/* What every runtime needs on the host, whatever it builds: as root, a uid slot (the host id
 * range of the sandbox, and the number its other names come from), a cgroup with the
 * sandbox's limits, and the addresses of its egress link; unprivileged, none of them.
 *
 *     struct runtime_host h;
 *     runtime_host_init(&h);
 *     if (runtime_host_acquire(&h, spec, err) < 0) ...   // slot, cgroup, link addresses
 *     ... start the sandbox's process in h.cg, map its ids from runtime_host_uid(&h) ...
 *     runtime_host_link(&h, pid, spec->net_hook, spec->net_hook_data, err);  // egress
 *     runtime_host_release(&h);                            // cgroup first, then the slot
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <cordon/cordon.h>

#include "lib/idmap.h"
#include "lib/link.h"

struct cgroup;

struct runtime_host {
	bool privileged;	/* euid 0: the slot and the cgroup exist */
	struct idmap_slot slot;
	struct cgroup *cg;
	struct link_addrs link; /* the slot's, known from the start; made by runtime_host_link() */
	bool linked;
	char ip[16];		/* the sandbox's address once it has a link, or "" */
};

void runtime_host_init(struct runtime_host *h);
/* As root: a uid slot, the cgroup "sN" with @spec's limits, the slot's link addresses (and
 * the sandbox's ip when spec->net asks for a link). Nothing when unprivileged. */
int runtime_host_acquire(struct runtime_host *h, const struct cordon_spec *spec,
			 struct cordon_err *err);
/* The cgroup goes before the slot: whoever takes the slot next must not find it. Accepts a
 * half-acquired @h; may be called twice. */
void runtime_host_release(struct runtime_host *h);

/* The host uid (and gid) that is root inside; the caller's own when unprivileged. */
uid_t runtime_host_uid(const struct runtime_host *h);

/* Points the link at the proxy through @hook, then makes it with its far end in @pid's
 * network namespace: the interface never exists with a stale redirect of a dead sandbox of
 * this slot (to a port someone else may hold now). Root only. */
int runtime_host_link(struct runtime_host *h, pid_t pid, cordon_net_hook hook, void *data,
		      struct cordon_err *err);

/* A child that unshares a network namespace, writes a byte to *@ready_fd once it has, and
 * waits to be killed: the namespace a runtime links and keeps (by a bind or an fd) before
 * its sandbox runs (gvisor, microvm). Its pid, or -1 with errno. */
pid_t runtime_host_netns_holder(int *ready_fd);

/* After runtime_host_link(): eth0 inside @pid's network namespace up with its address and
 * route. On failure the sandbox is not linked. Root only. */
int runtime_host_link_inside(struct runtime_host *h, pid_t pid, struct cordon_err *err);

int runtime_host_set_limits(struct runtime_host *h, uint64_t memory_bytes, uint32_t cpus_milli,
			    uint32_t pids);
int runtime_host_stats(struct runtime_host *h, struct cordon_stats *ret);
uint64_t runtime_host_oom_kills(struct runtime_host *h);
/* Freezes or thaws the cgroup (cgroup_freeze()): pause and resume of a runtime whose
 * processes are in it. -EOPNOTSUPP without a cgroup or a freezer. */
int runtime_host_freeze(struct runtime_host *h, bool frozen);
/* The cgroup kill: the second fence after the runtime's own. */
void runtime_host_kill(struct runtime_host *h);
/* What the cgroup counted, over @res (cpu, peak memory, OOM kills). */
void runtime_host_result(struct runtime_host *h, struct cordon_result *res);

/* Removes the cgroups and links of slots nobody holds (cordon_sweep_stale()). */
int runtime_host_sweep(void);

/* In a sandbox's first process, before exec: every signal's disposition back to default and
 * none blocked (a caller's ignored SIGINT must not reach the sandbox). Async-signal-safe. */
void runtime_child_reset_signals(void);
