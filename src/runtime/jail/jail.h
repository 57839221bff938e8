/* Internals of the jail runtime, shared by its host side (jail.c) and child side (child.c). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <cordon/cordon.h>

#include "basic/cleanup.h"
#include "lib/idmap.h"
#include "lib/rootfs.h"
#include "lib/link.h"
#include "policy/seccomp_filter.h"
#include "runtime/runtime.h"
#include "runtime/scratch.h"

/* A jail: the shared sandbox object (runtime.h) and what only a jail has. */
struct jail {
	struct cordon_sandbox sb;
	int pidfd;     /* of PID 1: the exit fd */
	int agent_fd;  /* agent mode: the byte stream to cordon-init */
	int status_fd; /* one-shot mode: cordon-init's struct init_status */
	int sync_fd;   /* until setup is over */
	int setup_stage; /* 0: building, 1: child said ok, 2: exec'd */
	bool cg_attach_needed;
	struct scratch scratch; /* the sandbox's disk, for its life (snapshots read it) */
	int restore_fd;		/* a snapshot to fill the scratch from, during start; else -1 */
	int disk_fd; /* the scratch's image (scratch.img), for cordon_sandbox_disk_used() */
};

static inline struct jail *jail_of(struct cordon_sandbox *sb)
{
	return (struct jail *)sb;
}

static inline const struct jail *jail_of_const(const struct cordon_sandbox *sb)
{
	return (const struct jail *)sb;
}

/* What the child needs, prepared by the host before clone() so that the child allocates
 * nothing. It is the child's only input: the child runs in the host's memory (spawn.c) until
 * it execs, and the caller's spec may be gone by then, so what it needs of the spec is copied
 * here, owned by this struct (jail_child_free()). */
struct jail_child {
	bool privileged;
	bool one_shot;	 /* spec->argv: cordon-init runs one command and exits */
	bool as_user;	 /* one-shot, as "user" (uid 1000) */
	bool overlay;	 /* build mode: the root is an overlay the host makes */
	int stdio[3];	 /* one-shot: the caller's fds for 0-2, -1 for /dev/null */
	uint32_t pids;
	uint64_t disk_bytes;
	uint64_t caps;	 /* init_caps() */
	char *rootfs;	 /* --rootfs, or NULL */
	char *hostname;
	char *bind_hosts[CORDON_MAX_BINDS];
	size_t n_bind_hosts;
	char *volume_dsts[CORDON_MAX_VOLUMES];
	size_t n_volumes;
	struct sock_filter *filter;
	unsigned short filter_len;
	int sync_fd;  /* SOCK_SEQPACKET to the host */
	int host_fds[3]; /* the host's ends and locks: closed first thing in the child */
	int chan_fd;  /* becomes fd 3 of cordon-init */
	int init_fd;  /* the sealed cordon-init, shared: not closed here */
	int image_fd; /* --rootfs, or -1 */
	int image_tree; /* --rootfs as an idmapped detached mount from the host, or -1 */
	bool image_writable; /* image_tree is its writable overlay on the scratch */
	int root_tree;  /* the disk-backed scratch root from the host (scratch.h), or -1 */
	int host_trees[ROOTFS_HOST_TREES_N]; /* overlays of the `host` template's, or -1 */
	struct rootfs_bind binds[CORDON_MAX_BINDS + CORDON_MAX_VOLUMES]; /* the volumes' last */
	size_t n_binds;
	char **envp;
	char **init_argv; /* owned, each string too */
	int cg_join_fds[8]; /* v1: the `tasks` files the child writes itself into */
	bool has_link;	    /* CORDON_NET_EGRESS: configure eth0 from @link */
	struct link_addrs link;
	char resolv_conf[64];
	size_t n_cg_join_fds;
	int timens_fd; /* the child's own: /proc/self/timens_offsets (lib/ns.h), or -1 */
};

/* The host's "go": which trees follow as SCM_RIGHTS, in this order: the image tree, the
 * scratch root, one per bit of host_mask, then the spec's volumes (all of them, in order). */
struct jail_go {
	uint8_t image, image_writable, root, n_volumes;
	uint16_t host_mask;
};
_Static_assert(ROOTFS_HOST_TREES_N <= 16, "a bit of jail_go.host_mask per host tree");
#define JAIL_GO_MAX_FDS (2 + ROOTFS_HOST_TREES_N + CORDON_MAX_VOLUMES)

enum { JAIL_MSG_OK = 1, JAIL_MSG_ERR = 2 };

struct jail_msg {
	int32_t kind;
	struct cordon_err err;
};

/* A sealed, read-only memfd holding cordon-init, made once per process and shared by every
 * sandbox. The returned fd stays owned by the runtime. */
int jail_init_memfd(struct cordon_err *err);

/* Opens a host path for a read-only bind: a regular file or a directory, nothing else. */
int jail_open_bind_source(const char *path, struct cordon_err *err);

/* A new struct jail_child with every fd -1 and what the child reads of @spec copied into it;
 * NULL when out of memory. */
struct jail_child *jail_child_new(const struct cordon_spec *spec, bool privileged);
/* cordon-init's argv and environment, copied into @c. */
int jail_child_env(struct jail_child *c, const struct cordon_spec *spec, struct cordon_err *err);
/* Frees @c and closes the host's fds it holds (not the child's). Accepts NULL. */
void jail_child_free(struct jail_child *c);
_noreturn_ void jail_child_main(struct jail_child *c);

/* Starts the child in our memory (spawn.c): clone3() with @flags (CLONE_VM added) and, when
 * @cgroup_fd >= 0, CLONE_INTO_CGROUP; the child runs jail_child_main(@c).
 * Returns its pid and sets @ret_pidfd; on success @c is the spawner's from then on (freed
 * once the child has exec'd or died) and *@ret_into_cgroup says whether the child was born
 * in @cgroup_fd's cgroup (a kernel before 5.7 refuses it: the host then moves the child).
 * -ENOSYS: this host cannot (no clone3, or an architecture without the trampoline); @c is
 * still the caller's then, as on every other failure. */
pid_t jail_spawn(struct jail_child *c, uint64_t flags, int cgroup_fd, int *ret_pidfd,
		 bool *ret_into_cgroup);
