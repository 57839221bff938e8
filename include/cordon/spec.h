/* What a sandbox is made from, as plain data: struct cordon_spec and the types it is built
 * of. No function here: the runtime (cordon/cordon.h) fills in the defaults
 * (cordon_spec_init()) and builds sandboxes from a spec; the layers below it (src/spec turns a
 * request into a spec, src/policy compiles the seccomp program a spec points at, src/image
 * reads a template's user) see these types and nothing of the runtime's entry points. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cordon/err.h>

enum cordon_user {
	CORDON_USER_USER = 0, /* uid/gid 1000 inside, named "user" */
	CORDON_USER_ROOT,     /* uid 0 inside: CAPS_SANDBOX_ROOT, in its own user namespace only */
};

enum cordon_net {
	CORDON_NET_NONE = 0, /* loopback only */
	CORDON_NET_EGRESS,   /* a link whose every packet ends at the egress proxy (root only) */
};

/* Called by the runtime for a CORDON_NET_EGRESS sandbox once its address and host interface
 * name are known, before the interface exists and before the sandbox runs anything: the
 * controller points the interface at its proxy here (nftables map entries, replacing any a
 * dead sandbox of the same slot left) and registers the policy. Required. */
typedef int (*cordon_net_hook)(void *data, const char *sandbox_ip, const char *host_ifname,
			       struct cordon_err *err);

/* A classic BPF seccomp program, compiled at build time from a policy file: the policy
 * layer's (src/policy/seccomp_filter.h); a spec only points at one. */
struct cordon_seccomp;

#define CORDON_MAX_BINDS 32
#define CORDON_MAX_ENV   256

#define CORDON_MAX_VOLUMES 8

/* A persistent volume (src/runtime/volume.h): its filesystem, mounted by the caller, shown
 * at @sandbox idmapped through the sandbox's user namespace (files owned by 0 and 1000 on the
 * volume are its root's and user's), nosuid, nodev, read-only when @read_only. */
struct cordon_volume {
	const char *source; /* the block device the volume's ext4 is mounted from ("/dev/loop7") */
	const char *sandbox; /* absolute path inside the sandbox */
	bool read_only;
};

struct cordon_bind {
	char *host;    /* absolute path on the host */
	char *sandbox; /* absolute path inside the sandbox */
};

/* Build mode (`cordon template build`; root only): the sandbox's root is a writable overlay
 * of @lower (read-only directories, top first, 1 to 128) under the empty directory @upper,
 * @work being an empty directory on the same mount. The layers are shown idmapped, so that
 * a file owned by 0 in a layer is the sandbox root's; what the sandbox writes lands in
 * @upper owned by the sandbox's host ids (cordon_sandbox_host_uid() + the id inside), for
 * the caller to map back. /dev and /proc are mounted over it, nothing else. The layers are
 * attached under @stage (an empty directory, short path, in the caller's mount namespace,
 * which should be a private one of its own) while the overlay is made. */
struct cordon_overlay {
	const char *const *lower;
	size_t n_lower;
	const char *upper;
	const char *work;
	const char *stage;
};

/* Everything a sandbox is made from. Plain data; the caller owns every pointer, and the
 * runtime copies what it keeps. cordon_spec_init() sets the documented defaults. */
struct cordon_spec {
	const char *rootfs;   /* NULL: the `host` template */
	const struct cordon_overlay *overlay; /* build mode instead of @rootfs, or NULL */
	uint64_t memory_bytes;
	uint32_t cpus_milli;  /* 1000 = one CPU */
	uint32_t pids;
	uint64_t disk_bytes;  /* writable layer, /tmp included */
	uint64_t timeout_ms;  /* 0: none */
	enum cordon_user user;
	enum cordon_net net;
	const char *workdir;  /* NULL: the user's home */
	const char *hostname; /* NULL: "cordon" */
	const char *const *env; /* "K=V" entries added to PATH, HOME, LANG, TERM */
	size_t n_env;
	struct cordon_bind binds[CORDON_MAX_BINDS];
	size_t n_binds;
	struct cordon_volume volumes[CORDON_MAX_VOLUMES];
	size_t n_volumes;
	cordon_net_hook net_hook;
	void *net_hook_data;
	char *const *argv;    /* one-shot: run this and exit; NULL: agent mode on a channel */
	int agent_fd;         /* agent mode: filled in by the runtime; -1 otherwise */
	const char *runtime;  /* a name of cordon_runtime_resolve(); NULL: "auto" */
	/* One-shot mode: the caller's fds that become the command's 0, 1 and 2 (dup'd, not
	 * taken); -1 is /dev/null inside. Nothing is inherited: cordon_spec_init() sets all
	 * three to -1. Agent mode ignores them: PID 1 then has /dev/null on 0-2 and its channel. */
	int stdio[3];
	/* Installed last before cordon-init runs; cordon_spec_init(): &cordon_seccomp_sandbox. */
	const struct cordon_seccomp *seccomp;
	/* A start that would first make an image it caches (microvm: the template's erofs,
	 * minutes for the host's /usr) fails with -EINPROGRESS instead; cordon_runtime_warm()
	 * makes it. For a caller's event loop, which must not wait that long. */
	bool cached_only;
};
