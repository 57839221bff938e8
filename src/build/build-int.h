/* Internals of the template builder (build.h), shared by its parts:
 *
 *     build.c        keys, layers, the steps in order, the template, gc
 *     build-run.c    RUN: a step in a jail, its output as events, the registry-only network
 *     build-copy.c   COPY/ADD: the context into the template, nothing outside either
 *     build-from.c   FROM: scratch, a template, an OCI archive, a Debian suite
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>
#include <openssl/evp.h>

#include <cordon/cordon.h>

#include "build/build.h"
#include "image/layer.h"
#include "image/recipe.h"
#include "image/store.h"
#include "lib/overlay.h"
#include "net/egressctl.h"

#define MAX_LAYERS     OVERLAY_MAX_LOWER
#define MAX_ALLOW      16
#define DEFAULT_PATH   "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define IMPORT_MAX     (16ULL << 30)
#define CONTEXT_MAX_BYTES (256ULL << 20) /* unpacked from --context-tar */

struct build {
	const struct build_opts *o;
	struct recipe *recipe;
	int sfd, lock_fd, ctx_fd;
	int base_fd;                 /* FROM <template>: its rootfs, pinned */
	struct store_version base;   /* ... and its version, held until the build ends */
	char store[2048];            /* short enough that every path under it fits PATH_MAX */
	char work[2304];             /* <store>/.tmp-build-XXXXXX: tmpfs mounts and scratch */
	char key[LAYER_KEY_LEN + 1]; /* of everything so far */
	char *lowers[MAX_LAYERS];    /* bottom first */
	size_t n_lowers;
	json_t *layers;              /* keys of the layers made or reused, bottom first */
	json_t *env;                 /* ENV, "K=V" */
	json_t *args;                /* names of the ARGs declared so far: only those reach RUN */
	char *workdir, *user;
	json_t *start, *ready;
	size_t step;                 /* 1-based, for events */
	unsigned char carry[4];      /* a UTF-8 character split between two reads of output */
	size_t n_carry;
	bool cached;                 /* the step's layer was there */
	uint64_t step_bytes;         /* what the step's layer holds */
	struct egressctl egress;
	const char *allow[MAX_ALLOW];
	char allow_buf[MAX_ALLOW][256];
	size_t n_allow;
	char mirror[256], security[256];
	struct cordon_err *err;
};

struct hasher {
	EVP_MD_CTX *c;
};

struct jail_run {
	char *const *argv;
	bool network;
	enum cordon_user user;
	const char *workdir;
	const char **env;
	size_t n_env;
};

/* build.c: events, keys, layers, the scratch tmpfs of a step. */
double bld_now(void);
void bld_emit(struct build *b, json_t *ev);
int bld_hash_begin(struct hasher *h, const char *parent);
void bld_hash_str(struct hasher *h, const char *s);
void bld_hash_bytes(struct hasher *h, const void *p, size_t n);
void bld_hash_end(struct hasher *h, char out[LAYER_KEY_LEN + 1]);
bool bld_arg_in_scope(struct build *b, const char *kv);
void bld_layer_path(struct build *b, const char *key, char *buf, size_t size);
bool bld_layer_exists(struct build *b, const char *key);
int bld_push_lower(struct build *b, const char *path);
int bld_push_layer(struct build *b, const char *key);
void bld_remove_path(const char *path);
int bld_layer_tmp(struct build *b, char *tmp, size_t size, int *ret_diff);
int bld_layer_commit(struct build *b, const char *tmp, const char *key, const char *what,
		     uint64_t bytes, json_t *extra);
json_t *bld_layer_meta(struct build *b, const char *key);
int bld_mount_scratch(struct build *b, char *up, size_t size);
void bld_umount_scratch(struct build *b);
int bld_capture_commit(struct build *b, const char *key, const char *what, uid_t base);

/* build-run.c */
void bld_scan_sources(struct build *b);
void bld_emit_log(struct build *b, const char *buf, size_t n);
void bld_flush_log(struct build *b);
int64_t bld_run_in_jail(struct build *b, const struct jail_run *jr);
int bld_run_step(struct build *b, const struct recipe_step *s, const char *key);

/* build-copy.c */
int bld_open_beneath(int dirfd, const char *path, int flags, uint64_t resolve);
int bld_hash_file(struct hasher *h, int fd, uint64_t limit);
int bld_copy_dest(struct build *b, const struct recipe_step *s, char *dest, size_t size, bool *dest_dir);
int bld_copy_key(struct build *b, const struct recipe_step *s, const char *dest, bool dest_dir,
		 char out[LAYER_KEY_LEN + 1]);
int bld_copy_step(struct build *b, const struct recipe_step *s, const char *key, const char *dest,
		  bool dest_dir);

/* build-from.c */
int bld_from_step(struct build *b, const struct recipe_step *s);
