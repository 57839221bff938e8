/* Internal to the E2B envd surface (e2b_envd.c, e2b_files.c, e2b_transfer.c): see e2b.h. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "daemon/connect.h"
#include "daemon/daemon.h"
#include "daemon/multipart.h"

struct ctx;
struct sbx;
struct cordon_err;
struct svc_err;

/* The running sandbox the request names on port @port, which it may reach (its token, or
 * @signed_ok); else NULL with 502 (unknown, dead), 401, 404 (another port this surface
 * serves) or 501 (another port) answered. Sets c->principal to the sandbox's key. */
struct sbx *e2b_port_sbx(struct ctx *c, unsigned port, enum connect_mode mode,
			 bool (*signed_ok)(struct ctx *c, const struct sbx *s));
/* e2b_port_sbx() of envd's port. */
struct sbx *envd_sbx(struct ctx *c, enum connect_mode mode,
		     bool (*signed_ok)(struct ctx *c, const struct sbx *s));
/* The user of Authorization: Basic "user:" or "root:"; NULL (none given): the default. */
int envd_user(const struct ctx *c, const char **ret);
/* @p made absolute (relative to @user's home) into @buf and checked (api_path_check). */
int envd_path(const char *p, const char *user, char *buf, size_t size, struct cordon_err *err);
/* The call's request message (a JSON object); NULL with 400 answered. */
json_t *envd_message(struct ctx *c, enum connect_mode mode);

/* One file operation of envd (e2b_files.c, e2b_transfer.c): its sandbox, paths and what
 * the calls in a row need. */
enum fs_stage { FS_FIRST, FS_SECOND, FS_PARENT, FS_PUT };
struct fsop {
	char id[SBX_ID_LEN + 1];
	char path[API_MAX_PATH + 1], dst[API_MAX_PATH + 1];
	const char *user;  /* "user", "root" or NULL: static strings */
	enum fs_stage stage;
	bool gzip;         /* GET: the client takes gzip */
	/* POST /files: the files to write, one at a time */
	bool single_done;
	bool retried;      /* the file's parent was made after a first write found none */
	struct multipart_reader *mr;
	char qpath[API_MAX_PATH + 1]; /* ?path=, "" if none */
	const uint8_t *data; /* the file's bytes in memory, or NULL: at off in body_fd */
	int body_fd;         /* the gate's spool (not ours), or inflated_fd, or -1 */
	uint64_t off, len;
	int inflated_fd;     /* a gzip body, decoded into a file of the state directory */
	json_t *written;   /* what an upload wrote; a listing's entries */
	unsigned depth;    /* ListDir */
};
#define E2B_MAX_LIST 100000 /* entries of one ListDir, all pages */
struct fsop *fsop_new(void); /* zeroed, no fds */
void fsop_free(void *arg);
/* A filesystem call's sandbox, message (in *@ret_m, the caller's) and op (cc->arg), the path
 * of @field (and @field2) resolved as envd resolves it; NULL with the error answered. */
struct connect_call *fsop_begin(struct ctx *c, enum connect_mode mode, const struct connect_ops *ops,
				const char *field, const char *field2, struct sbx **ret_s, json_t **ret_m);
/* The sandbox again, between two service calls; NULL with the call answered. */
struct sbx *fsop_again(struct connect_call *cc);
/* Answers the error of a service call that failed at once (@r < 0). */
void fsop_go_on(struct connect_call *cc, int r, const struct svc_err *err);
/* mkdir -p @path inside @s, answered to @cc. */
int fsop_mkdir_p(struct connect_call *cc, struct sbx *s, const char *path, struct svc_err *err);

/* e2b_files.c */
void fs_stat(struct ctx *c);
void fs_list(struct ctx *c);
void fs_mkdir(struct ctx *c);
void fs_move(struct ctx *c);
void fs_remove(struct ctx *c);

/* e2b_watch.c: WatchDir, and the polling watcher over the same service call */
void fs_watch(struct ctx *c);
void fs_watch_create(struct ctx *c);
void fs_watch_events(struct ctx *c);
void fs_watch_remove(struct ctx *c);

/* Before the body of an upload is read (struct surface.admit): the sandbox its head names,
 * live, and its token or a valid signature; else 502 or 401 and why. */
int envd_admit(const struct reqhead *h, const char **ret_why);

/* e2b_transfer.c */
/* E2B's v1 signature of @operation ("read", "write") in @query (?signature=, ?path=,
 * ?username=, ?signature_expiration=) for sandbox @s. */
bool e2b_signature_ok(const struct sbx *s, const char *query, const char *operation);
void files_get(struct ctx *c);
void files_post(struct ctx *c);
