/* Internals of the gvisor runtime: the sandbox object (gvisor.c), runsc under deadlines and
 * the platform probe (runsc.c), the bundle on the host (bundle.c) and its OCI config (oci.c). */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <cordon/cordon.h>

#include "runtime/runtime.h"

/* Every runsc call ends within its deadline: killed past it, never waited for for ever. */
#define GVISOR_CALL_MS	 10000
#define GVISOR_KILL_MS	 5000
#define GVISOR_PROBE_MS	 5000 /* per platform: kvm hangs on some hosts */
/* The Sentry and the gofer are host tasks of the sandbox's cgroup too: the pids and memory
 * the sandbox asked for are its programs', these come on top (README, gvisor section). On
 * the ptrace platform an idle sandbox is about 150 host tasks, and each process inside costs
 * about 13 more (its stub and the Sentry's threads that trace it); past pids.max the Sentry
 * cannot make a thread and the sandbox ends. */
#define GVISOR_PIDS_BASE     192
#define GVISOR_PIDS_PER_TASK 16
#define GVISOR_MEM_EXTRA     (96ULL << 20)
#define GVISOR_HOST_PIDS(p)  (GVISOR_PIDS_BASE + (uint64_t)(p) * GVISOR_PIDS_PER_TASK)

/* Agent mode: the host listens in <dir>/sock, shown inside as GVISOR_AGENT_DIR, and
 * cordon-init connects (runsc --host-uds=open). Not the container's stdio: this runsc closes
 * a donated stdio socket for good when any process of the sandbox closes its copy. */
#define GVISOR_AGENT_DIR    "/dev/.cordon"
#define GVISOR_INIT_PATH    "/dev/.cordon-init"
/* stat-compat.c, preloaded into every program (src/init/preload.c) */
#define GVISOR_STAT_PATH    "/dev/.cordon-stat.so"
#define GVISOR_AGENT_SOCKET GVISOR_AGENT_DIR "/agent.sock"

struct gvisor {
	struct cordon_sandbox sb;
	int pidfd;    /* of `runsc run`: the exit fd */
	int agent_fd; /* agent mode: the connection cordon-init made */
	int setup_fd; /* agent mode: the listening socket, readable once cordon-init connects;
		       * one-shot: an eventfd, readable at once */
	char id[32];  /* the container's id, "cordon-s%04u" of the slot: the sweep keys on it */
	char dir[128]; /* <base>/s<slot>: bundle, disk, overlays, network namespace */
	bool made;    /* dir exists: free() takes it down */
	bool paused;
	bool oneshot;
	pid_t pump[2]; /* one-shot stdout, stderr to regular files (gvisor.c), or -1 */
};

static inline struct gvisor *gvisor_of(struct cordon_sandbox *sb)
{
	return (struct gvisor *)sb;
}

/* runsc.c */
/* $CORDON_GVISOR_DIR, else /run/cordon/gvisor: one directory per sandbox, and runsc's root. */
const char *gvisor_base(void);
/* 0 when runsc is there and a platform works here (probed once, remembered in the base
 * directory per runsc binary and boot); else why not. */
int gvisor_probe(struct cordon_err *err);
const char *gvisor_platform(void);
const char *gvisor_runsc(void);
/* Finds runsc ($CORDON_RUNSC, else the package's place) without probing: 0 or -ENOENT. */
int gvisor_find_runsc(void);
/* runsc's global flags and then @args into @argv (NULL-terminated); @network: "none" or
 * "sandbox"; @host_uds: the sandbox may connect to host unix sockets of its mounts (the
 * agent's). Returns the count, or -E2BIG. */
int gvisor_argv(const char **argv, size_t max, const char *network, bool host_uds,
		const char *const *args);
/* Runs runsc with @args, its output to /dev/null and its stderr's first line into @err, and
 * waits at most @ms: killed past it (-ETIMEDOUT). */
int gvisor_call(const char *const *args, int ms, struct cordon_err *err);

/* bundle.c and oci.c: what the config.json says, made on the host first. */
#define GVISOR_MAX_MOUNTS (CORDON_MAX_BINDS + 48)
struct gvisor_mount {
	char src[256], dst[128];
	bool rw;
};
struct gvisor_bundle {
	char root[160];	 /* host path of the container's root */
	char init[256];	 /* host path of cordon-init */
	char stat[256];	 /* host path of cordon-gvisor-stat.so */
	char netns[160]; /* the network namespace with the veth, or "" */
	char sock[160];	 /* agent mode: <dir>/sock, or "" */
	struct gvisor_mount m[GVISOR_MAX_MOUNTS];
	size_t n;
};

/* The sandbox's directory: its disk (the scratch, else a tmpfs of --disk), filled from the
 * snapshot directory @from unless -1, the root with a writable layer on that disk, the
 * overlays of the template, and for egress the network namespace with the veth, configured
 * before runsc boots. Fills @b. */
int gvisor_bundle_make(struct gvisor *g, const struct cordon_spec *spec, int from,
		       struct gvisor_bundle *b, struct cordon_err *err);
/* <dir>/disk's directory fd: what a snapshot copies (bundle.c); -errno. */
int gvisor_disk_open(const struct gvisor *g);
/* Creates (or truncates) @path with @content; -errno. */
int gvisor_create_file(const char *path, const char *content, mode_t mode);
/* Unmounts and removes @dir and all below it; quiet. */
void gvisor_bundle_remove(const char *dir);

/* oci.c: the config.json of the bundle at @path. */
int gvisor_oci_write(const char *path, const struct cordon_spec *spec,
		     const struct gvisor_bundle *b, struct cordon_err *err);

/* The sweep (gvisor.c's ops): what sandboxes of free slots left. */
void gvisor_sweep(void);
