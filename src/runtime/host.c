/* The host side every runtime shares: uid slot, cgroup, link addresses (host.h). */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <signal.h>
#include <sys/syscall.h>
#include <arpa/inet.h>

#include "basic/cleanup.h"
#include "lib/cgroup.h"
#include "lib/ns.h"
#include "runtime/host.h"
#include "runtime/scratch.h"

void runtime_host_init(struct runtime_host *h)
{
	*h = (struct runtime_host){.privileged = geteuid() == 0, .slot.lock_fd = -1};
}

int runtime_host_acquire(struct runtime_host *h, const struct cordon_spec *spec,
			 struct cordon_err *err)
{
	int r;

	if (!h->privileged)
		return 0;
	char name[32];
	if ((r = idmap_slot_acquire(&h->slot, err)) < 0)
		return r;
	snprintf(name, sizeof(name), "s%u", h->slot.slot);
	struct cgroup_limits lim = {spec->memory_bytes, spec->cpus_milli, spec->pids};
	if ((r = cgroup_create(name, &lim, &h->cg, err)) < 0)
		return r;
	link_addrs_for_slot(h->slot.slot, &h->link);
	if (spec->net == CORDON_NET_EGRESS)
		inet_ntop(AF_INET, &h->link.sandbox, h->ip, sizeof(h->ip));
	return 0;
}

void runtime_host_release(struct runtime_host *h)
{
	/* The veth pair went with the sandbox's network namespace; its redirect is the
	 * controller's. */
	h->cg = cgroup_free(h->cg);
	/* A project-quota disk is a directory: removed while the slot is still held. */
	if (h->slot.lock_fd >= 0)
		scratch_release(h->slot.slot);
	idmap_slot_release(&h->slot);
}

uid_t runtime_host_uid(const struct runtime_host *h)
{
	return h->privileged ? idmap_slot_base(&h->slot) : geteuid();
}

int runtime_host_link(struct runtime_host *h, pid_t pid, cordon_net_hook hook, void *data,
		      struct cordon_err *err)
{
	char ip[16];
	int r;

	if (!h->privileged || !hook)
		return cordon_err_setf(err, -EPERM, "network: only root can give a sandbox a network");
	inet_ntop(AF_INET, &h->link.sandbox, ip, sizeof(ip));
	if ((r = hook(data, ip, h->link.host_ifname, err)) < 0 ||
	    (r = link_create(pid, &h->link, err)) < 0)
		return r;
	memcpy(h->ip, ip, sizeof(ip));
	h->linked = true;
	return 0;
}

pid_t runtime_host_netns_holder(int *ready_fd)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		close(p[0]);
		if (unshare(CLONE_NEWNET) < 0 || write(p[1], "n", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(p[1]);
	if (pid < 0)
		close(p[0]);
	else
		*ready_fd = p[0];
	return pid;
}

/* From a host thread that enters @pid's network namespace for the few ioctls of eth0 and
 * comes back. */
int runtime_host_link_inside(struct runtime_host *h, pid_t pid, struct cordon_err *err)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
	_cleanup_close_ int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	_cleanup_close_ int target = open(path, O_RDONLY | O_CLOEXEC);
	if (self < 0 || target < 0)
		return cordon_err_set(err, -errno, "network: open network namespaces");
	if (setns(target, CLONE_NEWNET) < 0)
		return cordon_err_set(err, -errno, "network: enter the sandbox's namespace");
	int r = link_configure_inside(&h->link, err);
	/* lo too: the jail's child brought it up already, but gvisor's holder namespace is made
	 * here, and runsc copies into its netstack only the interfaces that are up (without lo,
	 * nothing inside can listen on 127.0.0.1, nor the agent reach it for a port). */
	if (r == 0)
		(void)ns_loopback_up(NULL);
	if (setns(self, CLONE_NEWNET) < 0)
		abort(); /* a host thread left in a sandbox's network: never go on */
	if (r < 0) { /* not linked until eth0 is up inside */
		h->linked = false;
		h->ip[0] = '\0';
	}
	return r;
}

int runtime_host_set_limits(struct runtime_host *h, uint64_t memory_bytes, uint32_t cpus_milli,
			    uint32_t pids)
{
	if (!h->cg)
		return -ENOTSUP;
	struct cgroup_limits lim = {memory_bytes, cpus_milli, pids};
	return cgroup_set_limits(h->cg, &lim, NULL);
}

int runtime_host_stats(struct runtime_host *h, struct cordon_stats *ret)
{
	struct cgroup_stats cs = {};
	if (h->cg)
		cgroup_stats(h->cg, &cs);
	*ret = (struct cordon_stats){cs.oom_kills, cs.cpu_usec / 1000, cs.peak_memory_bytes,
				     cs.memory_bytes};
	return 0;
}

uint64_t runtime_host_oom_kills(struct runtime_host *h)
{
	return h->cg ? cgroup_oom_kills(h->cg) : 0;
}

int runtime_host_freeze(struct runtime_host *h, bool frozen)
{
	return h->cg ? cgroup_freeze(h->cg, frozen) : -EOPNOTSUPP;
}

void runtime_host_kill(struct runtime_host *h)
{
	if (h->cg)
		cgroup_kill(h->cg);
}

void runtime_host_result(struct runtime_host *h, struct cordon_result *res)
{
	struct cgroup_stats cs;
	if (h->cg && cgroup_stats(h->cg, &cs) == 0) {
		res->oom_killed = cs.oom_kills > 0;
		res->cpu_ms = cs.cpu_usec / 1000;
		res->peak_memory_bytes = cs.peak_memory_bytes;
	}
}

struct held_slots {
	struct idmap_slot *v;
	size_t n, cap;
	struct idmap_held live; /* locked when the sweep met its first slot: not worth a try */
	bool live_loaded;
};

static bool slot_is_stale(const char *name, void *data)
{
	char *end;
	if (name[0] != 's')
		return false;
	unsigned long slot = strtoul(name + 1, &end, 10);
	struct held_slots *h = data;
	if (*end || slot >= CORDON_IDMAP_SLOTS)
		return false;
	if (!h->live_loaded) { /* only once there is a cgroup to judge */
		idmap_held_load(&h->live);
		h->live_loaded = true;
	}
	if (idmap_held_test(&h->live, slot))
		return false;
	struct idmap_slot s;
	if (idmap_slot_try(slot, &s) < 0)
		return false; /* held: a live sandbox */
	/* A dead sandbox's link, should its namespace linger. */
	struct link_addrs a;
	link_addrs_for_slot(slot, &a);
	link_delete(a.host_ifname);
	/* Held while its cgroup goes, released when the sweep is over; any number of them (a
	 * daemon killed with hundreds alive left them all). */
	if (h->n == h->cap) {
		size_t cap = h->cap ? 2 * h->cap : 64;
		struct idmap_slot *v = realloc(h->v, cap * sizeof(*v));
		if (!v) {
			idmap_slot_release(&s);
			return false; /* the next sweep's */
		}
		h->v = v;
		h->cap = cap;
	}
	h->v[h->n++] = s;
	return true;
}

int runtime_host_sweep(void)
{
	if (geteuid() != 0)
		return 0;
	/* What a killed holder left of a scratch: keyed by the slot's lock, like the cgroups. */
	scratch_sweep();
	if (cgroup_detect() == CGROUP_NONE)
		return 0;
	struct held_slots held = {};
	int r = cgroup_sweep(slot_is_stale, &held);
	for (size_t i = 0; i < held.n; i++)
		idmap_slot_release(&held.v[i]);
	free(held.v);
	return r;
}

/* Nothing of the host's signal state crosses into the sandbox: a caller that ignores SIGINT
 * (nohup, a background job) or blocks signals (cordon run itself) must not pass that on. */
void runtime_child_reset_signals(void)
{
	/* The raw syscall: glibc's signal() refuses 32 and 33, which it keeps for itself, yet a
	 * caller may have them ignored, and an ignored disposition survives exec. */
	struct {
		void *handler;
		unsigned long flags;
		void *restorer;
		uint64_t mask;
	} dfl = {SIG_DFL, 0, NULL, 0};
	for (int sig = 1; sig <= 64; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			syscall(SYS_rt_sigaction, sig, &dfl, NULL, sizeof(dfl.mask));
	uint64_t none = 0;
	syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, sizeof(none));
}
