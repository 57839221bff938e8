/* What store.c and version.c share inside the template store (store.h): the store's
 * directory and lock, and the versions a name points to. Not for use outside src/image. */
#pragma once

#include <stdbool.h>

#include <cordon/err.h>

#define STORE_VERSIONS	".versions" /* <store>/.versions/<name>@<id>/ */
#define STORE_RM_PREFIX ".rm-"	    /* set aside for removal; the sweep's if we die */

/* The store's directory fd; with @create, made 0700 if missing. A store others can write to
 * is refused. */
int store_open_dir(bool create, struct cordon_err *err);

/* The store's lock on @sfd, taken as @how (LOCK_SH, LOCK_EX, LOCK_EX | LOCK_NB); its fd. */
int store_lock(int sfd, int how, struct cordon_err *err);

/* What @name points to ("<name>@<id>") into @vid (STORE_VERSION_MAX bytes): -ENOENT for no
 * such name, -EISDIR for a template directory from before versions, -EINVAL for a link that
 * is not one of ours. */
int store_read_pointer(int sfd, const char *name, char *vid);

/* A fresh version id "<name>@<16 hex>" into @buf (STORE_VERSION_MAX bytes). */
int store_new_version_id(const char *name, char *buf);

/* Publishes the filled temporary directory @tmp (under @sfd, with its .lock) as version @vid
 * of @name: moves it into .versions and points @name at it (only if @name is free, unless
 * @replace). The caller holds the store lock shared. On failure nothing of it stays. */
int store_publish(int sfd, const char *tmp, const char *name, const char *vid, bool replace,
		  struct cordon_err *err);

/* Takes @name out of the store's name space; its versions go when nothing uses them. */
int store_unname(int sfd, const char *name, struct cordon_err *err);
