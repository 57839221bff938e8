/* Internal to the E2B envd surface (e2b_envd.c, e2b_files.c): see e2b.h. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "daemon/connect.h"

struct ctx;
struct sbx;
struct cordon_err;

/* The running sandbox the request names, which it may reach (its token, or @signed_ok);
 * else NULL with 502 (unknown, dead), 401 or 501 (another port) answered. Sets
 * c->principal to the sandbox's key. */
struct sbx *envd_sbx(struct ctx *c, enum connect_mode mode,
		     bool (*signed_ok)(struct ctx *c, const struct sbx *s));
/* The user of Authorization: Basic "user:" or "root:"; NULL (none given): the default. */
int envd_user(const struct ctx *c, const char **ret);
/* @p made absolute (relative to @user's home) into @buf and checked (api_path_check). */
int envd_path(const char *p, const char *user, char *buf, size_t size, struct cordon_err *err);
/* The call's request message (a JSON object); NULL with 400 answered. */
json_t *envd_message(struct ctx *c, enum connect_mode mode);
void envd_unimplemented(struct ctx *c, enum connect_mode mode, const char *what);

/* e2b_files.c */
void fs_stat(struct ctx *c);
void fs_list(struct ctx *c);
void fs_mkdir(struct ctx *c);
void fs_move(struct ctx *c);
void fs_remove(struct ctx *c);
void fs_watch(struct ctx *c);
void fs_watch_poll(struct ctx *c);
void files_get(struct ctx *c);
void files_post(struct ctx *c);
