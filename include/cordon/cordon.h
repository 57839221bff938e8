/* libcordon: disposable sandboxes for untrusted code.
 *
 * A sandbox is described by a struct cordon_spec (what to run it from, its limits, its
 * network, which runtime) and built by a runtime (src/runtime/runtime.h: one ops table each;
 * today `jail`: namespaces, cgroups, seccomp, Landlock; `gvisor` and `microvm` are known names,
 * not built yet). A runtime does two things: it builds the boundary with cordon-init as PID 1
 * inside, and it hands the caller one byte stream to that agent, or, in one-shot mode
 * (spec->argv set), lets cordon-init run argv on the three fds of spec->stdio and exit with
 * its status.
 *
 *     struct cordon_spec spec;
 *     cordon_spec_init(&spec);
 *     spec.argv = argv;
 *     struct cordon_sandbox *sb;
 *     struct cordon_err err = {};
 *     if (cordon_sandbox_create(&spec, &sb, &err) < 0) { fprintf(stderr, "%s\n", err.msg); ... }
 *     struct cordon_result res;
 *     cordon_sandbox_wait(sb, -1, &res);   // honours spec.timeout_ms
 *     cordon_sandbox_free(sb);             // kills what is left and removes every trace
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <cordon/err.h>
#include <cordon/spec.h>

/* Exit statuses of `cordon run` other than the command's own (documented in the README). */
enum {
	CORDON_EXIT_USAGE = 2,
	CORDON_EXIT_OOM = 123,
	CORDON_EXIT_TIMEOUT = 124,
	CORDON_EXIT_SETUP = 125,
	CORDON_EXIT_NOEXEC = 126,
	CORDON_EXIT_NOTFOUND = 127,
};

/* The data of a sandbox's description (struct cordon_spec and its parts): cordon/spec.h. */

/* The filter of sandboxes, compiled at build time from policy/seccomp.policy: the default
 * of spec->seccomp. */
extern const struct cordon_seccomp cordon_seccomp_sandbox;

void cordon_spec_init(struct cordon_spec *spec);

/* ---- runtimes ----
 *
 * "jail" today. "auto" is the strongest runtime this host can run; a runtime that is known
 * but cannot run here (not built, no KVM) is refused with the reason. */

enum {
	CORDON_RUNTIME_CAP_ONESHOT = 1 << 0,  /* spec->argv */
	CORDON_RUNTIME_CAP_AGENT = 1 << 1,    /* an agent channel */
	CORDON_RUNTIME_CAP_EGRESS = 1 << 2,   /* CORDON_NET_EGRESS and attach_net */
	CORDON_RUNTIME_CAP_LIMITS = 1 << 3,   /* set_limits on a live sandbox */
	CORDON_RUNTIME_CAP_STATS = 1 << 4,
	CORDON_RUNTIME_CAP_OVERLAY = 1 << 5,  /* build mode (spec->overlay) */
	CORDON_RUNTIME_CAP_PAUSE = 1 << 6,
	CORDON_RUNTIME_CAP_SNAPSHOT = 1 << 7,
	_CORDON_RUNTIME_CAP_COUNT = 8,
};

struct cordon_runtime_info {
	const char *name;
	bool available;
	char reason[256]; /* why not, when not available */
	uint32_t caps;    /* CORDON_RUNTIME_CAP_* */
	/* How it runs here when there is a choice (microvm: "kvm" or "tcg"), else ""; and why
	 * not the stronger way, else "". */
	char mode[16];
	char mode_reason[256];
};

/* The @i-th runtime of the registry (strongest first); -ENOENT past the last. */
int cordon_runtime_get(size_t i, struct cordon_runtime_info *ret);
/* "oneshot", "agent", ... for the bit @cap, or NULL. */
const char *cordon_runtime_cap_name(uint32_t cap);
/* Resolves @name (NULL or "auto": the strongest available) to a runtime this host can run.
 * *ret_name is the registry's own string. -ENOENT for an unknown name, -EOPNOTSUPP for one
 * that cannot run here; @err then names the runtimes that can. */
int cordon_runtime_resolve(const char *name, const char **ret_name, struct cordon_err *err);
/* Makes what a start of @spec on its runtime would cache first (the microvm's images of
 * spec->rootfs); 0 at once where there is nothing to make. Slow the first time: for a thread
 * of its own (a start with spec->cached_only said -EINPROGRESS). */
int cordon_runtime_warm(const struct cordon_spec *spec, struct cordon_err *err);
/* Whether runtime @name can be given a network after it started (cordon_sandbox_attach_net);
 * one that cannot (gvisor: its netstack takes the interfaces it finds at boot) gets its link
 * at start (spec->net) from a caller that may give it one later. */
bool cordon_runtime_attaches_net(const char *name);
/* Whether a sandbox of runtime @name has its memory and CPUs from its start (microvm: the
 * guest's RAM and vCPUs), so that spec->memory_bytes and cpus_milli must be the sandbox's
 * own at start: cordon_sandbox_set_limits() then moves only the host's cgroup. */
bool cordon_runtime_fixed_shape(const char *name);

struct cordon_sandbox;

/* What a sandbox left when it ended. */
struct cordon_result {
	int exit_code;   /* the command's exit code, or -1 if it died of a signal */
	int signal;      /* the signal that killed it, or 0 */
	bool timed_out;  /* killed at spec->timeout_ms */
	bool oom_killed; /* the memory limit killed something inside */
	uint64_t wall_ms;
	uint64_t cpu_ms;
	uint64_t peak_memory_bytes; /* 0 when the kernel cannot tell */
};

/* Builds the boundary and starts cordon-init inside. On success *ret_sb owns the sandbox;
 * on failure nothing of it is left and @err says which step failed and why. @spec is read
 * during the call only. A jail's first process runs in this process's memory until it
 * execs, cloned by a thread that libcordon makes at a thread's first start and that lives
 * until the process exits: a sandbox dies with the process, not with the thread that
 * started it. */
int cordon_sandbox_create(const struct cordon_spec *spec, struct cordon_sandbox **ret_sb,
			  struct cordon_err *err);

/* The same in two steps, for event loops: start returns once the child is on its way; the
 * setup fd becomes readable when there is news, and finish returns 0 once cordon-init runs,
 * -EAGAIN while setup goes on, or the failure (then free the sandbox). The setup fd stays
 * open until cordon_sandbox_setup_close() or free: unwatch it first, then close it (a watch
 * outliving a close can fire for the fd number's next owner; basic/fdwatch.h). */
int cordon_sandbox_start(const struct cordon_spec *spec, struct cordon_sandbox **ret_sb,
			 struct cordon_err *err);
int cordon_sandbox_setup_fd(const struct cordon_sandbox *sb);
int cordon_sandbox_finish(struct cordon_sandbox *sb, struct cordon_err *err);
void cordon_sandbox_setup_close(struct cordon_sandbox *sb);

/* The host end of the byte stream to cordon-init (agent mode), or -1. Owned by the sandbox. */
int cordon_sandbox_agent_fd(const struct cordon_sandbox *sb);

/* The sandbox's address on its egress link ("10.201.0.6"), or NULL without one. */
const char *cordon_sandbox_ip(const struct cordon_sandbox *sb);

/* The host uid (and gid) that is root inside the sandbox: ids 0..65535 inside are this
 * plus the id. The caller's own uid when unprivileged. */
uid_t cordon_sandbox_host_uid(const struct cordon_sandbox *sb);

/* PID (in the caller's namespace) of the sandbox's PID 1. */
pid_t cordon_sandbox_pid(const struct cordon_sandbox *sb);

/* An fd that becomes readable when the sandbox ends (the jail: a pidfd of PID 1); owned by
 * the sandbox. cordon_sandbox_pidfd() is its older name. */
int cordon_sandbox_exit_fd(const struct cordon_sandbox *sb);
int cordon_sandbox_pidfd(const struct cordon_sandbox *sb);

/* The name of the runtime that made @sb ("jail"). */
const char *cordon_sandbox_runtime(const struct cordon_sandbox *sb);
/* How long the sandbox's setup may take at most, in ms (a microVM's boot, tried twice),
 * or @dflt when its runtime sets no bound of its own: a caller's setup deadline. */
uint64_t cordon_sandbox_setup_ms(const struct cordon_sandbox *sb, uint64_t dflt);

/* Waits for PID 1 to exit, killing the sandbox at its deadline, and fills @ret. If @sigfd is
 * a signalfd, signals read from it are forwarded to the sandbox (cordon-init passes them on to
 * the command); a second SIGINT or SIGTERM kills the sandbox. */
int cordon_sandbox_wait(struct cordon_sandbox *sb, int sigfd, struct cordon_result *ret);


/* Rewrites the cgroup limits of a live sandbox (a pooled sandbox claimed with other limits).
 * -ENOTSUP (== -EOPNOTSUPP) when it has no cgroup (unprivileged) or its runtime cannot. */
int cordon_sandbox_set_limits(struct cordon_sandbox *sb, uint64_t memory_bytes,
			      uint32_t cpus_milli, uint32_t pids);

struct cordon_stats {
	uint64_t oom_kills;
	uint64_t cpu_ms;
	uint64_t peak_memory_bytes;
	uint64_t memory_bytes; /* in use now */
};

/* What the kernel counts for the sandbox so far; zeros without a cgroup. */
int cordon_sandbox_stats(struct cordon_sandbox *sb, struct cordon_stats *ret);
/* Bytes the sandbox's disk takes on the host now (its sparse image's blocks); 0 when its
 * disk is not an image (a tmpfs) or the runtime cannot say. With spec.disk_bytes, what the
 * disk could still grow into: a host's admission of new disks counts it. */
uint64_t cordon_sandbox_disk_used(const struct cordon_sandbox *sb);
/* Only the OOM kill count (one file read, for every exit of a process). */
uint64_t cordon_sandbox_oom_kills(struct cordon_sandbox *sb);

/* Gives a live sandbox made with CORDON_NET_NONE its egress link now (root only): the hook
 * points it at the proxy, then the veth is made and eth0 set up inside. Idempotent. */
int cordon_sandbox_attach_net(struct cordon_sandbox *sb, cordon_net_hook hook, void *data,
			      struct cordon_err *err);

/* Freezes and thaws every process of the sandbox (the jail: its cgroup's freezer); paused,
 * a sandbox keeps its memory and its processes but runs nothing. -EOPNOTSUPP from a runtime
 * without them, or a host without a freezer. Paused twice or resumed while running is 0. */
int cordon_sandbox_pause(struct cordon_sandbox *sb);
int cordon_sandbox_resume(struct cordon_sandbox *sb);
bool cordon_sandbox_paused(const struct cordon_sandbox *sb);

/* What a snapshot holds. */
struct cordon_snapshot_info {
	bool memory;	     /* memory and processes too (not the jail: its filesystem only) */
	uint64_t bytes;	     /* what it takes on disk (allocated: holes cost nothing) */
};

/* Writes the sandbox's state into the empty directory @dirfd (the caller's): the writable
 * trees of its scratch disk, owners made relative to its uid range, and what else the
 * runtime can keep. The sandbox is paused for the copy unless it is paused already. Half a
 * snapshot may be left on failure: the caller removes the directory. */
int cordon_sandbox_snapshot(struct cordon_sandbox *sb, int dirfd, struct cordon_snapshot_info *ret,
			    struct cordon_err *err);
/* cordon_sandbox_start() of a sandbox whose scratch disk is filled from the snapshot in
 * @dirfd (the caller's) before its trees are made; spec->runtime must be the snapshot's. */
int cordon_sandbox_restore(const struct cordon_spec *spec, int dirfd,
			   struct cordon_sandbox **ret_sb, struct cordon_err *err);

/* Kills every process of the sandbox at once (the pid namespace's init, then the cgroup). */
int cordon_sandbox_kill(struct cordon_sandbox *sb);

/* Kills what is left, reaps, removes the cgroups and releases the uid range. Accepts NULL.
 * Returns NULL. */
struct cordon_sandbox *cordon_sandbox_free(struct cordon_sandbox *sb);

/* Makes what libcordon caches per process (the sealed cordon-init, the cgroup layout). Call
 * it once before starting sandboxes from more than one thread; optional otherwise. */
int cordon_prepare(struct cordon_err *err);

/* Removes what sandboxes of processes that died without cleaning up (SIGKILL) left behind:
 * their cgroups. A readdir when there is nothing to do; call it before making sandboxes
 * (cordon run does before each, cordond at start). */
int cordon_sweep_stale(void);

/* The size and duration parsers (cordon_parse_size(), cordon_parse_duration_ms()) live in
 * basic/parse.h and are re-exported here for the CLI and cordond. */
#include "basic/parse.h"
