/* The public sandbox API over the runtime ops tables (runtime.h): checks a spec once for
 * every runtime, allocates the runtime's object, dispatches each verb, and does what is the
 * same whatever the runtime (the deadline, signal forwarding, the cgroup's part of the
 * result, releasing the host's resources). */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "basic/cleanup.h"
#include "basic/clock.h"
#include "lib/cgroup.h"
#include "lib/rootfs.h"
#include "policy/seccomp_filter.h"
#include "runtime/runtime.h"

void cordon_spec_init(struct cordon_spec *spec)
{
	*spec = (struct cordon_spec){
		.memory_bytes = 512ULL << 20,
		.cpus_milli = 1000,
		.pids = 256,
		.disk_bytes = 4ULL << 30,
		.timeout_ms = 300 * 1000,
		.user = CORDON_USER_USER,
		.net = CORDON_NET_NONE,
		.agent_fd = -1,
		.stdio = {-1, -1, -1},
		.seccomp = &cordon_seccomp_sandbox,
	};
}

static int check_spec(const struct cordon_spec *spec, struct cordon_err *err)
{
	if (spec->memory_bytes < (8ULL << 20))
		return cordon_err_setf(err, -EINVAL, "memory: at least 8M is needed");
	if (spec->cpus_milli < 10)
		return cordon_err_setf(err, -EINVAL, "cpus: at least 0.01 is needed");
	if (spec->pids < 2)
		return cordon_err_setf(err, -EINVAL, "pids: at least 2 are needed");
	if (spec->disk_bytes < (1ULL << 20))
		return cordon_err_setf(err, -EINVAL, "disk: at least 1M is needed");
	if (spec->n_binds > CORDON_MAX_BINDS || spec->n_env > CORDON_MAX_ENV)
		return cordon_err_setf(err, -E2BIG, "too many binds or environment entries");
	for (size_t i = 0; i < spec->n_binds; i++) {
		int r = rootfs_check_sandbox_path(spec->binds[i].sandbox, err);
		if (r < 0)
			return r;
	}
	if (spec->n_volumes > CORDON_MAX_VOLUMES)
		return cordon_err_setf(err, -E2BIG, "volumes: at most %d", CORDON_MAX_VOLUMES);
	for (size_t i = 0; i < spec->n_volumes; i++) {
		const struct cordon_volume *v = &spec->volumes[i];
		int r = rootfs_check_sandbox_path(v->sandbox, err);
		if (r < 0)
			return r;
		if (!v->source || strcmp(v->sandbox, "/") == 0)
			return cordon_err_setf(err, -EINVAL, "volume at '%s': not a mount point", v->sandbox);
	}
	if (spec->net == CORDON_NET_EGRESS && geteuid() != 0)
		return cordon_err_setf(err, -EPERM, "network: only root can give a sandbox a network");
	if (spec->net == CORDON_NET_EGRESS && !spec->net_hook)
		return cordon_err_setf(err, -EINVAL, "network: no egress proxy");
	if (spec->overlay && (geteuid() != 0 || spec->rootfs || !spec->overlay->upper ||
			      !spec->overlay->work || !spec->overlay->stage || spec->overlay->n_lower == 0))
		return cordon_err_setf(err, -EINVAL, "overlay root: needs root, an upper and a work "
				       "directory and at least one layer, and no rootfs");
	if (spec->workdir && spec->workdir[0] != '/')
		return cordon_err_setf(err, -EINVAL, "workdir '%s': not an absolute path", spec->workdir);
	/* Fail closed: a sandbox without its filter is never made. */
	if (!spec->seccomp || !spec->seccomp->filter || spec->seccomp->len == 0)
		return cordon_err_setf(err, -EINVAL, "seccomp: no filter");
	return 0;
}

/* What @spec asks of the runtime that it cannot do. */
static int check_caps(const struct runtime_ops *ops, const struct cordon_spec *spec,
		      struct cordon_err *err)
{
	static const struct {
		uint32_t cap;
		const char *what;
	} needs[] = {
	    {CORDON_RUNTIME_CAP_ONESHOT, "one-shot commands"},
	    {CORDON_RUNTIME_CAP_AGENT, "an agent"},
	    {CORDON_RUNTIME_CAP_EGRESS, "a network"},
	    {CORDON_RUNTIME_CAP_OVERLAY, "build mode"},
	};
	uint32_t want = (spec->argv ? CORDON_RUNTIME_CAP_ONESHOT : CORDON_RUNTIME_CAP_AGENT) |
			(spec->net == CORDON_NET_EGRESS ? CORDON_RUNTIME_CAP_EGRESS : 0) |
			(spec->overlay ? CORDON_RUNTIME_CAP_OVERLAY : 0);
	for (size_t i = 0; i < ELEMENTSOF(needs); i++)
		if ((want & needs[i].cap) && !(ops->caps & needs[i].cap))
			return cordon_err_setf(err, -EOPNOTSUPP, "runtime '%s': has no %s", ops->name,
					       needs[i].what);
	return 0;
}

static struct cordon_sandbox *sandbox_alloc(const struct runtime_ops *ops,
					    const struct cordon_spec *spec)
{
	struct cordon_sandbox *sb = calloc(1, ops->size);
	if (!sb)
		return NULL;
	sb->ops = ops;
	sb->pid = -1;
	runtime_host_init(&sb->host);
	sb->start_ms = mono_ms();
	sb->deadline_ms = spec->timeout_ms ? sb->start_ms + spec->timeout_ms : 0;
	return sb;
}

int runtime_start(const struct runtime_ops *ops, const struct cordon_spec *spec,
		  struct cordon_sandbox **ret_sb, struct cordon_err *err)
{
	int r;
	if ((r = check_spec(spec, err)) < 0 || (r = check_caps(ops, spec, err)) < 0)
		return r;
	struct cordon_sandbox *sb = sandbox_alloc(ops, spec);
	if (!sb)
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	if ((r = ops->start(sb, spec, err)) < 0) {
		cordon_sandbox_free(sb);
		return r;
	}
	*ret_sb = sb;
	return 0;
}

int cordon_sandbox_start(const struct cordon_spec *spec, struct cordon_sandbox **ret_sb,
			 struct cordon_err *err)
{
	const struct runtime_ops *ops;
	int r = runtime_pick(runtime_registry, runtime_registry_len, spec->runtime, &ops, err);
	return r < 0 ? r : runtime_start(ops, spec, ret_sb, err);
}

int cordon_runtime_warm(const struct cordon_spec *spec, struct cordon_err *err)
{
	const struct runtime_ops *ops;
	int r = runtime_pick(runtime_registry, runtime_registry_len, spec->runtime, &ops, err);
	return r < 0 || !ops->warm ? r : ops->warm(spec, err);
}

int cordon_sandbox_setup_fd(const struct cordon_sandbox *sb)
{
	return sb->ops->setup_fd(sb);
}

int cordon_sandbox_finish(struct cordon_sandbox *sb, struct cordon_err *err)
{
	return sb->ops->finish(sb, err);
}

void cordon_sandbox_setup_close(struct cordon_sandbox *sb)
{
	sb->ops->setup_close(sb);
}

int cordon_sandbox_create(const struct cordon_spec *spec, struct cordon_sandbox **ret_sb,
			  struct cordon_err *err)
{
	struct cordon_sandbox *sb;
	int r = cordon_sandbox_start(spec, &sb, err);
	if (r < 0)
		return r;
	while ((r = cordon_sandbox_finish(sb, err)) == -EAGAIN) {
		struct pollfd p = {cordon_sandbox_setup_fd(sb), POLLIN, 0};
		poll(&p, 1, -1);
	}
	cordon_sandbox_setup_close(sb);
	if (r < 0) {
		cordon_sandbox_free(sb);
		return r;
	}
	*ret_sb = sb;
	return 0;
}

const char *cordon_sandbox_ip(const struct cordon_sandbox *sb)
{
	return sb->host.ip[0] ? sb->host.ip : NULL;
}

int cordon_sandbox_agent_fd(const struct cordon_sandbox *sb)
{
	return sb->ops->agent_fd(sb);
}

uid_t cordon_sandbox_host_uid(const struct cordon_sandbox *sb)
{
	return runtime_host_uid(&sb->host);
}

pid_t cordon_sandbox_pid(const struct cordon_sandbox *sb)
{
	return sb->pid;
}

int cordon_sandbox_exit_fd(const struct cordon_sandbox *sb)
{
	return sb->ops->exit_fd(sb);
}

int cordon_sandbox_pidfd(const struct cordon_sandbox *sb)
{
	return cordon_sandbox_exit_fd(sb);
}

uint64_t cordon_sandbox_setup_ms(const struct cordon_sandbox *sb, uint64_t dflt)
{
	return sb->ops->setup_ms > dflt ? sb->ops->setup_ms : dflt;
}

const char *cordon_sandbox_runtime(const struct cordon_sandbox *sb)
{
	return sb->ops->name;
}

int cordon_sandbox_set_limits(struct cordon_sandbox *sb, uint64_t memory_bytes,
			      uint32_t cpus_milli, uint32_t pids)
{
	if (!sb->ops->set_limits)
		return -EOPNOTSUPP;
	return sb->ops->set_limits(sb, memory_bytes, cpus_milli, pids);
}

int cordon_sandbox_stats(struct cordon_sandbox *sb, struct cordon_stats *ret)
{
	if (!sb->ops->stats)
		return -EOPNOTSUPP;
	return sb->ops->stats(sb, ret);
}

uint64_t cordon_sandbox_disk_used(const struct cordon_sandbox *sb)
{
	return sb && sb->ops->disk_used ? sb->ops->disk_used(sb) : 0;
}

uint64_t cordon_sandbox_oom_kills(struct cordon_sandbox *sb)
{
	return runtime_host_oom_kills(&sb->host);
}

int cordon_sandbox_attach_net(struct cordon_sandbox *sb, cordon_net_hook hook, void *data,
			      struct cordon_err *err)
{
	if (sb->host.linked)
		return 0;
	if (!sb->ops->attach_net)
		return cordon_err_setf(err, -EOPNOTSUPP, "runtime '%s': cannot attach a network",
				       sb->ops->name);
	return sb->ops->attach_net(sb, hook, data, err);
}

int cordon_sandbox_pause(struct cordon_sandbox *sb)
{
	if (!sb->ops->pause)
		return -EOPNOTSUPP;
	if (sb->paused)
		return 0;
	int r = sb->ops->pause(sb);
	sb->paused = r == 0;
	return r;
}

int cordon_sandbox_resume(struct cordon_sandbox *sb)
{
	if (!sb->ops->resume)
		return -EOPNOTSUPP;
	if (!sb->paused)
		return 0;
	int r = sb->ops->resume(sb);
	sb->paused = r != 0;
	return r;
}

bool cordon_sandbox_paused(const struct cordon_sandbox *sb)
{
	return sb->paused;
}

/* The copy sees the sandbox still: paused for it unless paused already (or the runtime
 * cannot pause, then it copies what it can, as a running sandbox leaves it). */
int cordon_sandbox_snapshot(struct cordon_sandbox *sb, int dirfd, struct cordon_snapshot_info *ret,
			    struct cordon_err *err)
{
	if (!sb->ops->snapshot)
		return cordon_err_setf(err, -EOPNOTSUPP, "runtime '%s': cannot snapshot", sb->ops->name);
	bool was = sb->paused;
	int p = cordon_sandbox_pause(sb);
	if (p < 0 && p != -EOPNOTSUPP)
		return cordon_err_set(err, p, "snapshot: pause the sandbox");
	*ret = (struct cordon_snapshot_info){0};
	int r = sb->ops->snapshot(sb, dirfd, ret, err);
	if (!was && p == 0)
		(void)cordon_sandbox_resume(sb);
	return r;
}

int cordon_sandbox_restore(const struct cordon_spec *spec, int dirfd,
			   struct cordon_sandbox **ret_sb, struct cordon_err *err)
{
	const struct runtime_ops *ops;
	int r = runtime_pick(runtime_registry, runtime_registry_len, spec->runtime, &ops, err);
	if (r < 0)
		return r;
	if (!ops->restore)
		return cordon_err_setf(err, -EOPNOTSUPP, "runtime '%s': cannot restore", ops->name);
	if ((r = check_spec(spec, err)) < 0)
		return r;
	struct cordon_sandbox *sb = sandbox_alloc(ops, spec);
	if (!sb)
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	if ((r = ops->restore(sb, spec, dirfd, err)) < 0) {
		cordon_sandbox_free(sb);
		return r;
	}
	*ret_sb = sb;
	return 0;
}

int cordon_sandbox_kill(struct cordon_sandbox *sb)
{
	if (!sb->reaped)
		sb->ops->kill(sb);
	runtime_host_kill(&sb->host);
	return 0;
}

static int reap(struct cordon_sandbox *sb)
{
	struct cordon_result *res = &sb->result;
	*res = (struct cordon_result){.exit_code = -1};
	int r = sb->ops->reap(sb, res);
	if (r < 0)
		return r;
	sb->reaped = true;
	res->timed_out = sb->timed_out;
	res->wall_ms = mono_ms() - sb->start_ms;
	runtime_host_result(&sb->host, res);
	return 0;
}

static void forward_signal(struct cordon_sandbox *sb, int sigfd)
{
	struct signalfd_siginfo ssi;
	if (read(sigfd, &ssi, sizeof(ssi)) != sizeof(ssi))
		return;
	int sig = ssi.ssi_signo;
	if ((sig == SIGINT || sig == SIGTERM) && sb->signals_forwarded++ > 0) {
		cordon_sandbox_kill(sb);
		return;
	}
	sb->ops->signal(sb, sig);
}

int cordon_sandbox_wait(struct cordon_sandbox *sb, int sigfd, struct cordon_result *ret)
{
	while (!sb->reaped) {
		struct pollfd p[2] = {{sb->ops->exit_fd(sb), POLLIN, 0}, {sigfd, POLLIN, 0}};
		int timeout = -1;
		if (sb->deadline_ms) {
			uint64_t now = mono_ms();
			timeout = now >= sb->deadline_ms ? 0 : (int)(sb->deadline_ms - now);
		}
		int n = poll(p, sigfd >= 0 ? 2 : 1, timeout);
		if (n < 0 && errno != EINTR)
			return -errno;
		if (n == 0) {
			sb->timed_out = true;
			cordon_sandbox_kill(sb);
			sb->deadline_ms = 0;
			continue;
		}
		if (n > 0 && sigfd >= 0 && (p[1].revents & POLLIN))
			forward_signal(sb, sigfd);
		if (n > 0 && (p[0].revents & POLLIN)) {
			int r = reap(sb);
			if (r < 0)
				return r;
		}
	}
	*ret = sb->result;
	return 0;
}

struct cordon_sandbox *cordon_sandbox_free(struct cordon_sandbox *sb)
{
	if (!sb)
		return NULL;
	if (sb->pid > 0 && !sb->reaped) {
		cordon_sandbox_kill(sb);
		reap(sb);
	}
	sb->ops->free(sb);
	runtime_host_release(&sb->host);
	free(sb);
	return NULL;
}

int cordon_prepare(struct cordon_err *err)
{
	cgroup_detect();
	for (size_t i = 0; i < runtime_registry_len; i++) {
		const struct runtime_ops *ops = runtime_registry[i];
		if (ops->prepare && ops->available(NULL) == 0) {
			int r = ops->prepare(err);
			if (r < 0)
				return r;
		}
	}
	return 0;
}

int cordon_sweep_stale(void)
{
	for (size_t i = 0; i < runtime_registry_len; i++)
		if (runtime_registry[i]->sweep)
			runtime_registry[i]->sweep();
	return runtime_host_sweep();
}
