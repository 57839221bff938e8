/* The template store: one directory per template under $CORDON_TEMPLATES or
 * /var/lib/cordon/templates (0700, root):
 *
 *     <store>/<name>/rootfs/         the tree a sandbox runs on (bound read-only)
 *     <store>/<name>/template.json   {"name", "created", "source", "digest", "env", "workdir",
 *                                     "user", "cmd", "size_bytes"}
 *
 * A template appears whole or not at all: store_import() fills <store>/.tmp-XXXXXX/rootfs
 * through a caller's callback (an OCI import, later a build), writes template.json and
 * renames the directory into place with RENAME_NOREPLACE (or RENAME_EXCHANGE to replace),
 * so concurrent imports of one name leave exactly one good template. Removal renames the
 * template aside first, then deletes the tree. The store knows nothing of image formats and
 * needs only jansson, so `cordon run --template NAME` can call store_path() without
 * libcrypto or libarchive.
 *
 *     char root[PATH_MAX];
 *     int r = store_path("python", root, sizeof(root));   // -EINVAL bad name, -ENOENT none
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include <cordon/cordon.h>
#include <cordon/err.h>

#define STORE_DEFAULT_DIR "/var/lib/cordon/templates"
#define STORE_ENV         "CORDON_TEMPLATES"
#define STORE_NAME_MAX    64u      /* ^[a-z0-9][a-z0-9._-]{0,63}$ */
#define STORE_RESERVED    "host"   /* the built-in template: the host's own view */
#define STORE_MAX_DEPTH   4096u    /* directory depth store_remove() descends */
#define STORE_MAX_META    (1u << 20) /* bytes of one template.json */
#define STORE_MAX_ENV     256u       /* ENV entries read (CORDON_MAX_ENV) */

/* Whether @name is a valid template name that is not reserved. */
bool store_name_valid(const char *name);

/* A recipe's USER (a template's "user") as one of the jail's two users: "root" or "0", "user"
 * or "1000", a ":group" part ignored; NULL is root (what build steps run as). -EINVAL for any
 * other: the jail has no other user. */
int store_user(const char *user, enum cordon_user *ret);

/* The store's directory ($CORDON_TEMPLATES if absolute, else STORE_DEFAULT_DIR) into @buf.
 * Returns 0 or -ENAMETOOLONG. */
int store_dir(char *buf, size_t size);

/* "<store>/<name>/rootfs" into @buf. -EINVAL if @name is not valid (or is "host": the caller
 * handles the built-in template first), -ENOENT if there is no such template. */
int store_path(const char *name, char *buf, size_t size);

/* Opens the store (making it) and takes its lock: shared for what adds to it (imports and
 * builds, which may run side by side), exclusive for what removes unreferenced parts (gc).
 * Returns the store's directory fd; *@ret_lock is the lock's fd, held until closed. A
 * temporary "<store>/.tmp-*" entry is safe from the sweep while a shared lock is held. */
int store_open_locked(bool exclusive, int *ret_lock, struct cordon_err *err);

/* Removes what dead imports and builds left and what replaced layers left aside, when no
 * one holds the lock (a no-op otherwise). */
void store_sweep(void);

#define STORE_TMP_PREFIX ".tmp-"
#define STORE_LAYERS     ".layers"

/* Fills the empty directory @rootfd (the caller's) and may add fields to @meta (borrowed:
 * "source", "digest", "env", "workdir", "user", "cmd"). Returns 0 or -errno with @err set. */
typedef int (*store_fill_fn)(int rootfd, json_t *meta, void *userdata, struct cordon_err *err);

/* Creates template @name: makes a private temporary directory in the store, calls @fill,
 * adds "name", "created" and "size_bytes", writes template.json and moves it into place.
 * An existing @name is an error (-EEXIST) unless @replace, in which case the old one is
 * swapped out atomically and deleted. On any failure nothing of it is left in the store.
 * On success *@ret_meta (may be NULL) is the new template.json, owned by the caller. */
int store_import(const char *name, bool replace, store_fill_fn fill, void *userdata,
		 json_t **ret_meta, struct cordon_err *err);

/* Removes template @name. A running sandbox that uses it keeps its bind mount of the old
 * tree (an open directory): removal only takes it out of the store. */
int store_remove(const char *name, struct cordon_err *err);

/* What template.json says about running a template, for cordon run and cordond alike. */
struct store_config {
	json_t *meta;             /* template.json; owns the strings below */
	const char *env[STORE_MAX_ENV]; /* its ENV, "K=V" (entries without '=' left out) */
	size_t n_env;
	const char *workdir;      /* absolute, or NULL */
	bool user_set;            /* it names a USER: */
	enum cordon_user user;    /* that user, or "user" for one the jail does not have */
	json_t *start, *ready;    /* START and READY as non-empty arrays, or NULL (borrowed) */
};

/* Reads template @name's config into @ret (store_config_done() frees it). */
int store_config_read(const char *name, struct store_config *ret, struct cordon_err *err);
void store_config_done(struct store_config *c);

/* template.json of @name into *@ret (owned by the caller). */
int store_read(const char *name, json_t **ret, struct cordon_err *err);

/* All templates' template.json, sorted by name, as a JSON array into *@ret (the caller's).
 * A missing store is an empty list; a directory without a readable template.json (another
 * process's import in flight, a damaged template) is left out. */
int store_list(json_t **ret, struct cordon_err *err);
