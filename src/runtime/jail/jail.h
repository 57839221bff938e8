/* Internals of the jail runtime, shared by its host side (jail.c) and child side (child.c). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <cordon/cordon.h>

#include "basic/cleanup.h"
#include "lib/idmap.h"
#include "lib/rootfs.h"
#include "lib/link.h"
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
 * nothing. */
struct jail_child {
	const struct cordon_spec *spec;
	bool privileged;
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
	char **init_argv;
	int cg_join_fds[8]; /* v1: the `tasks` files the child writes itself into */
	const struct link_addrs *link; /* CORDON_NET_EGRESS */
	char resolv_conf[64];
	size_t n_cg_join_fds;
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

int jail_child_env(struct jail_child *c, const struct cordon_spec *spec, struct cordon_err *err);
void jail_child_free(struct jail_child *c);
_noreturn_ void jail_child_main(struct jail_child *c);
