/* The runtime interface: one ops table per runtime, and the sandbox object they share.
 *
 * The public cordon_sandbox_*() functions (include/cordon/cordon.h) are runtime.c: they
 * resolve spec->runtime in the registry, allocate the runtime's object (@size bytes that
 * start with a struct cordon_sandbox), and dispatch every call through sb->ops. A runtime
 * supplies the verbs every runtime has; an optional verb left NULL answers -EOPNOTSUPP.
 * What every runtime needs on the host (uid slot, cgroup, link addresses) is host.h, which
 * a runtime calls; what only a jail does stays in jail/.
 *
 * Adding a runtime: write src/runtime/NAME/NAME.c with a `const struct runtime_ops
 * NAME_ops`, give it a strength (auto picks the strongest available), an available() probe
 * that says in @err why not (no KVM, no binary), and list it in runtime_registry[]
 * (registry.c). Nothing outside src/runtime changes.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cordon/cordon.h>

#include "runtime/host.h"

struct runtime_ops {
	const char *name;
	unsigned strength; /* auto: the highest that is available */
	uint32_t caps;	   /* CORDON_RUNTIME_CAP_* */
	size_t size;	   /* of the runtime's object, >= sizeof(struct cordon_sandbox) */
	uint32_t setup_ms; /* the longest its setup may take, if longer than a caller's usual */
	bool fixed_shape;  /* memory and CPUs are its guest's from the start (microvm) */

	/* 0 if this host can run it; else -errno with @err saying why ("not built yet"). */
	int (*available)(struct cordon_err *err);
	/* Optional: how it runs on this host when available (microvm: "kvm" or "tcg"), and in
	 * @why why not the stronger way ("" when nothing is missing). */
	const char *(*mode)(char *why, size_t size);
	/* Optional: false when `auto` must not take it here though it is available (microvm
	 * under TCG). */
	bool (*auto_ok)(void);
	/* Optional: what the runtime caches per process (cordon_prepare()). */
	int (*prepare)(struct cordon_err *err);
	/* Optional: what it caches per spec, made before a start (cordon_runtime_warm()). */
	int (*warm)(const struct cordon_spec *spec, struct cordon_err *err);

	/* Every runtime has these. start() returns once the sandbox is on its way; the setup fd
	 * becomes readable with news, and finish() returns 0 once cordon-init runs, -EAGAIN while
	 * setup goes on, or the failure; the setup fd stays open until setup_close() (the
	 * caller's loop unwatches it first) or free(). The exit fd becomes readable when the sandbox ends;
	 * reap() then fills the runtime's part of the result. free() releases what start() made
	 * (the object itself and the host resources are runtime.c's). */
	int (*start)(struct cordon_sandbox *sb, const struct cordon_spec *spec,
		     struct cordon_err *err);
	int (*setup_fd)(const struct cordon_sandbox *sb);
	int (*finish)(struct cordon_sandbox *sb, struct cordon_err *err);
	void (*setup_close)(struct cordon_sandbox *sb); /* the caller has unwatched the setup fd */
	int (*agent_fd)(const struct cordon_sandbox *sb);
	int (*exit_fd)(const struct cordon_sandbox *sb);
	int (*signal)(struct cordon_sandbox *sb, int sig);
	int (*kill)(struct cordon_sandbox *sb);
	int (*reap)(struct cordon_sandbox *sb, struct cordon_result *ret);
	void (*free)(struct cordon_sandbox *sb);

	/* Optional: NULL answers -EOPNOTSUPP. */
	int (*set_limits)(struct cordon_sandbox *sb, uint64_t memory_bytes, uint32_t cpus_milli,
			  uint32_t pids);
	int (*stats)(struct cordon_sandbox *sb, struct cordon_stats *ret);
	uint64_t (*disk_used)(const struct cordon_sandbox *sb);
	int (*attach_net)(struct cordon_sandbox *sb, cordon_net_hook hook, void *data,
			  struct cordon_err *err);
	int (*pause)(struct cordon_sandbox *sb);
	int (*resume)(struct cordon_sandbox *sb);
	/* snapshot() is called with the sandbox paused (runtime.c pauses it when the runtime
	 * has pause, and resumes it after); it writes into the empty directory @dirfd and says
	 * in @ret what it kept. The filesystem part is scratch_snapshot() for any runtime on a
	 * per-sandbox scratch (scratch.h). restore() is start() with the sandbox's scratch
	 * filled from @dirfd (scratch_trees()' @from) before its trees are made. */
	int (*snapshot)(struct cordon_sandbox *sb, int dirfd, struct cordon_snapshot_info *ret,
			struct cordon_err *err);
	int (*restore)(struct cordon_sandbox *sb, const struct cordon_spec *spec, int dirfd,
		       struct cordon_err *err);
	/* Optional: removes what this runtime's sandboxes of free uid slots left (a killed
	 * daemon's); cordon_sweep_stale() calls it before the host's sweep. */
	void (*sweep)(void);
};

/* What every sandbox has, whatever made it; the first member of each runtime's object. */
struct cordon_sandbox {
	const struct runtime_ops *ops;
	struct runtime_host host; /* uid slot, cgroup, link: host.c */
	pid_t pid;		  /* the host process that is the sandbox (the jail's PID 1) */
	uint64_t start_ms, deadline_ms;
	bool reaped;
	bool timed_out;
	bool paused;		  /* cordon_sandbox_pause()'s, cleared by resume */
	int signals_forwarded;
	struct cordon_result result;
};

/* The registry, strongest first (registry.c). */
extern const struct runtime_ops *const runtime_registry[];
extern const size_t runtime_registry_len;

/* Looks @name up in @list (NULL or "auto": the strongest available one). -ENOENT when no
 * runtime has that name, -EOPNOTSUPP when it cannot run here or nothing can: @err says why
 * and names the ones that can. The registry is the usual @list; tests pass their own. */
int runtime_pick(const struct runtime_ops *const *list, size_t n, const char *name,
		 const struct runtime_ops **ret, struct cordon_err *err);

/* cordon_sandbox_start() with the runtime chosen: checks the spec, allocates ops->size
 * bytes and calls ops->start(). */
int runtime_start(const struct runtime_ops *ops, const struct cordon_spec *spec,
		  struct cordon_sandbox **ret_sb, struct cordon_err *err);

/* The jail (jail/jail.c), gVisor (gvisor/gvisor.c) and the microVM (microvm/microvm.c). */
extern const struct runtime_ops jail_ops;
extern const struct runtime_ops gvisor_ops;
extern const struct runtime_ops microvm_ops;
