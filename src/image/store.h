/* The template store under $CORDON_TEMPLATES or /var/lib/cordon/templates (0700, root).
 * A template name points to an immutable version; a build or an import makes a new version
 * and swaps the name to it in one rename(2):
 *
 *     <store>/<name>                          symlink to .versions/<name>@<id>
 *     <store>/.versions/<name>@<id>/rootfs/   the tree a sandbox runs on (bound read-only)
 *     <store>/.versions/<name>@<id>/template.json
 *                                             {"name", "version", "created", "source",
 *                                              "digest", "env", "workdir", "user", "cmd",
 *                                              "size_bytes", ...}
 *     <store>/.versions/<name>@<id>/.lock     held shared by whoever runs on the version
 *
 * A sandbox (or a build FROM the template) opens a version with store_version_open() and
 * keeps it, by a shared flock, until it ends: a rebuild, an import --replace or a removal
 * meanwhile changes only where the name points. A version goes when no name points to it
 * and nobody holds it: at once if unused, else when its last holder closes it, or at the
 * next `template gc` if that holder died (version.c). A template directory from before
 * versions (<store>/<name>/ itself) becomes a version the first time it is opened, replaced
 * or removed. A template appears whole or not at all: store_import() fills
 * <store>/.tmp-XXXXXX through a caller's callback (an OCI import, a build), writes
 * template.json, and publishes it. The store knows nothing of image formats and needs only
 * jansson, so `cordon run --template NAME` can open a version without libcrypto or
 * libarchive.
 *
 *     struct store_version v;
 *     int r = store_version_open("python", &v, &err);   // -EINVAL bad name, -ENOENT none
 *     spec.rootfs = v.rootfs;  ...  store_version_close(&v, false);
 */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include <cordon/spec.h>
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

/* "<store>/<name>/rootfs" into @buf, to check that a template exists: a sandbox runs on a
 * version it holds (store_version_open), never on this path, which a rebuild moves on.
 * -EINVAL if @name is not valid (or is "host": the caller handles the built-in template
 * first), -ENOENT if there is no such template. */
int store_path(const char *name, char *buf, size_t size);

#define STORE_VERSION_ID_LEN 16u /* hex: 8 of the creation time, 8 random */
#define STORE_VERSION_MAX    (STORE_NAME_MAX + 1 + STORE_VERSION_ID_LEN + 1)

/* One version of a template, held: its tree stays whole and in place until closed. */
struct store_version {
	int lock_fd;                /* shared flock on its .lock; O_CLOEXEC, never in a sandbox */
	char id[STORE_VERSION_MAX]; /* "<name>@<id>" */
	char path[PATH_MAX];        /* its directory */
	char rootfs[PATH_MAX];      /* path/rootfs: what a sandbox runs on */
};
#define STORE_VERSION_INIT {.lock_fd = -1}

/* Opens and holds the version @name points to now. *@ret is the caller's to close. */
int store_version_open(const char *name, struct store_version *ret, struct cordon_err *err);

/* Lets go of @v (NULL or closed is a no-op) and removes the version if it was the last holder
 * and no name points to it any more; with @detach that is left to the thread that runs
 * store_release_step() (cordond's loop does not wait for a tree's deletion). */
void store_version_close(struct store_version *v, bool detach);

/* A daemon's releases (store_version_close(v, true)) are finished by one thread of its own:
 * store_release_start() makes the channel and returns the fd that thread polls; the thread
 * calls store_release_step() when it is readable or the timeout the last step returned (in
 * ms, -1 for none) has passed. Without it, a detached close is done at once. */
int store_release_start(void);
int store_release_step(void);

/* The version @name points to now ("<name>@<id>") into @vid, without holding it: -ENOENT for
 * none, -EISDIR for a template from before versions (not opened yet). */
int store_version_current(const char *name, char vid[STORE_VERSION_MAX]);

/* template.json of the held version @v into *@ret (the caller's). */
int store_version_meta(const struct store_version *v, json_t **ret, struct cordon_err *err);

/* What `template gc` did to versions: removed (no name, no holder), kept as in use. */
struct store_gc {
	unsigned removed, in_use;
	uint64_t bytes;
};

/* Removes every version that no name points to and nobody holds. */
int store_gc_versions(struct store_gc *ret, struct cordon_err *err);

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

/* Creates a version of template @name: makes a private temporary directory in the store,
 * calls @fill, adds "name", "version", "created" and "size_bytes", writes template.json,
 * moves it into .versions and points @name at it. An existing @name is an error (-EEXIST)
 * unless @replace, in which case the name is swapped to the new version atomically and the
 * old version goes when nothing holds it. On any failure nothing of it is left in the store.
 * On success *@ret_meta (may be NULL) is the new template.json, owned by the caller. */
int store_import(const char *name, bool replace, store_fill_fn fill, void *userdata,
		 json_t **ret_meta, struct cordon_err *err);

/* Removes the name @name at once; its versions go when nothing holds them (a running
 * sandbox keeps the version it started from, whole). */
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

/* Reads the config of the held version @v into @ret (store_config_done() frees it). */
int store_config_read(const struct store_version *v, struct store_config *ret,
		      struct cordon_err *err);
void store_config_done(struct store_config *c);

/* template.json of @name into *@ret (owned by the caller). */
int store_read(const char *name, json_t **ret, struct cordon_err *err);

/* All templates' template.json, sorted by name, as a JSON array into *@ret (the caller's).
 * A missing store is an empty list; a directory without a readable template.json (another
 * process's import in flight, a damaged template) is left out. */
int store_list(json_t **ret, struct cordon_err *err);
