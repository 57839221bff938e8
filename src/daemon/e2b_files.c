/* E2B's envd files (e2b.h): filesystem.Filesystem over Connect (unary), over the files
 * service (files.c); the /files REST download and upload are e2b_transfer.c. An operation envd does in one step
 * and Cordon's service in two (a write into a directory that is not there yet, a move that
 * answers the moved entry, a mkdir that must say "already exists") is two service calls in
 * a row, the sandbox looked up again between them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#include "daemon/daemon.h"
#include "daemon/e2b.h"
#include "daemon/e2b_envd.h"
#include "daemon/service.h"

/* ---- what the calls of both files share (e2b_envd.h) ---- */
struct fsop *fsop_new(void)
{
	struct fsop *op = calloc(1, sizeof(*op));
	if (op)
		op->body_fd = op->inflated_fd = -1;
	return op;
}

void fsop_free(void *arg)
{
	struct fsop *op = arg;
	free(op->mr);
	if (op->inflated_fd >= 0)
		close(op->inflated_fd);
	json_decref(op->written);
	free(op);
}

struct sbx *fsop_again(struct connect_call *cc)
{
	struct fsop *op = cc->arg;
	struct sbx *s = sbx_find(NULL, op->id);
	if (!s || s->state != SBX_RUNNING || s->paused || s->busy) {
		connect_answer_error(cc, CONNECT_UNAVAILABLE, "the sandbox was killed");
		return NULL;
	}
	return s;
}

void fsop_go_on(struct connect_call *cc, int r, const struct svc_err *err)
{
	if (r < 0)
		connect_answer_svc_err(cc, err);
}

int fsop_mkdir_p(struct connect_call *cc, struct sbx *s, const char *path, struct svc_err *err)
{
	struct cordon_err perr = {};
	_cleanup_(json_decrefp) json_t *j = json_pack("{s:s, s:b}", "path", path, "parents", 1);
	_cleanup_free_ char *b = j ? json_dumps(j, JSON_COMPACT) : NULL;
	struct api_mkdir *m = NULL;
	if (!b || api_mkdir_parse(b, strlen(b), &m, &perr) < 0)
		return svc_fail(err, API_ERR_INVALID_PATH, "%s", b ? perr.msg : "out of memory");
	int r = svc_file_mkdir(s, m, connect_reply(cc), err);
	api_mkdir_free(m);
	return r;
}

/* ---- envd's EntryInfo ---- */

static json_t *entry_info(const json_t *e)
{
	static const struct {
		const char *cordon, *e2b;
		char c;
	} types[] = {{"file", "FILE_TYPE_FILE", '-'}, {"dir", "FILE_TYPE_DIRECTORY", 'd'},
		     {"symlink", "FILE_TYPE_SYMLINK", 'l'}};
	const char *t = json_string_value(json_object_get(e, "type")) ?: "";
	const char *e2b = "FILE_TYPE_UNSPECIFIED";
	char perm[11] = "?";
	int mode = (int)json_integer_value(json_object_get(e, "mode"));
	for (size_t i = 0; i < ELEMENTSOF(types); i++)
		if (strcmp(t, types[i].cordon) == 0)
			e2b = types[i].e2b, perm[0] = types[i].c;
	for (int i = 0; i < 9; i++)
		perm[1 + i] = mode & (0400 >> i) ? "rwxrwxrwx"[i] : '-';
	perm[10] = '\0';
	json_t *o = json_pack("{s:O, s:s, s:O, s:O, s:i, s:s, s:s, s:s, s:O}", "name",
			      json_object_get(e, "name"), "type", e2b, "path", json_object_get(e, "path"),
			      "size", json_object_get(e, "size"), "mode", mode, "permissions", perm,
			      "owner", "", "group", "", "modifiedTime", json_object_get(e, "mtime"));
	if (o && json_object_get(e, "symlink_target"))
		json_object_set(o, "symlinkTarget", json_object_get(e, "symlink_target"));
	return o;
}

static void answer_entry(struct connect_call *cc, json_t *body)
{
	_cleanup_(json_decrefp) json_t *b = body;
	connect_answer(cc, 200, json_pack("{s:o}", "entry", entry_info(b)));
}

/* ---- the calls ---- */

struct connect_call *fsop_begin(struct ctx *c, enum connect_mode mode, const struct connect_ops *ops,
				const char *field, const char *field2, struct sbx **ret_s, json_t **ret_m)
{
	struct cordon_err perr = {};
	const char *user;
	struct sbx *s = envd_sbx(c, mode, NULL);
	json_t *m = s ? envd_message(c, mode) : NULL;
	struct fsop *op = m ? fsop_new() : NULL;
	if (m && !op)
		connect_refuse(c->req, mode, CONNECT_INTERNAL, 500, "out of memory");
	int r = op ? envd_user(c, &user) : -1;
	if (op && r == 0)
		r = envd_path(json_string_value(json_object_get(m, field)), user, op->path,
			      sizeof(op->path), &perr);
	if (op && r == 0 && field2)
		r = envd_path(json_string_value(json_object_get(m, field2)), user, op->dst,
			      sizeof(op->dst), &perr);
	if (op && r < 0)
		connect_refuse(c->req, mode, CONNECT_INVALID_ARGUMENT, 400,
			       perr.msg[0] ? perr.msg : "Authorization: expected Basic of \"user:\" or \"root:\"");
	struct connect_call *cc = op && r == 0 ? connect_call_new(c->req, mode, ops, op) : NULL;
	if (!cc) {
		free(op);
		json_decref(m);
		return NULL;
	}
	snprintf(op->id, sizeof(op->id), "%s", s->id);
	op->user = user;
	*ret_s = s;
	*ret_m = m;
	return cc;
}

static void stat_json(struct connect_call *cc, int status, json_t *body)
{
	answer_entry(cc, body);
}

static const struct connect_ops stat_ops = {.json = stat_json, .free = fsop_free};

/* A call on the message's "path" whose first service call is @first (a stat, a delete). */
static void on_path(struct ctx *c, const struct connect_ops *ops,
		    int (*first)(struct sbx *, const char *, struct svc_reply *, struct svc_err *))
{
	struct svc_err err = {};
	struct sbx *s;
	json_t *m;
	struct connect_call *cc = fsop_begin(c, CONNECT_MODE_UNARY, ops, "path", NULL, &s, &m);
	json_decref(cc ? m : NULL);
	if (cc)
		fsop_go_on(cc, first(s, ((struct fsop *)cc->arg)->path, connect_reply(cc), &err), &err);
}

void fs_stat(struct ctx *c)
{
	on_path(c, &stat_ops, svc_file_stat);
}

/* Each page of the service's listing into op->written, then the whole (envd has no pages),
 * up to E2B_MAX_LIST entries. */
static void list_json(struct connect_call *cc, int status, json_t *body)
{
	struct fsop *op = cc->arg;
	struct svc_err err = {};
	_cleanup_(json_decrefp) json_t *b = body;
	json_t *e;
	size_t i;
	json_array_foreach(json_object_get(b, "entries"), i, e)
		json_array_append_new(op->written, entry_info(e));
	const char *next = json_string_value(json_object_get(b, "next_cursor"));
	if (!next) {
		connect_answer(cc, 200, json_pack("{s:O}", "entries", op->written));
		return;
	}
	if (json_array_size(op->written) >= E2B_MAX_LIST) {
		connect_answer_error(cc, CONNECT_RESOURCE_EXHAUSTED, "%s: more than %d entries",
				     op->path, E2B_MAX_LIST);
		return;
	}
	struct sbx *s = fsop_again(cc);
	if (s)
		fsop_go_on(cc, svc_file_list(s, op->path, op->depth, strtoull(next, NULL, 10),
					     connect_reply(cc), &err), &err);
}

static const struct connect_ops list_ops = {.json = list_json, .free = fsop_free};

void fs_list(struct ctx *c)
{
	struct svc_err err = {};
	struct sbx *s;
	json_t *m;
	struct connect_call *cc = fsop_begin(c, CONNECT_MODE_UNARY, &list_ops, "path", NULL, &s, &m);
	if (!cc)
		return;
	json_int_t depth = json_is_integer(json_object_get(m, "depth"))
				   ? json_integer_value(json_object_get(m, "depth")) : 1;
	json_decref(m);
	if (depth < 1 || depth > API_MAX_LIST_DEPTH) {
		connect_answer_error(cc, CONNECT_INVALID_ARGUMENT, "depth: must be 1..%d",
				     API_MAX_LIST_DEPTH);
		return;
	}
	struct fsop *op = cc->arg;
	op->depth = (unsigned)depth;
	op->written = json_array();
	if (!op->written) {
		connect_answer_error(cc, CONNECT_INTERNAL, "out of memory");
		return;
	}
	fsop_go_on(cc, svc_file_list(s, op->path, op->depth, 0, connect_reply(cc), &err), &err);
}

/* MakeDir: a stat first, for envd's already_exists; then mkdir -p. */
static void mkdir_json(struct connect_call *cc, int status, json_t *body)
{
	struct fsop *op = cc->arg;
	if (op->stage == FS_FIRST) {
		json_decref(body);
		connect_answer_error(cc, CONNECT_ALREADY_EXISTS, "%s already exists", op->path);
		return;
	}
	answer_entry(cc, body);
}

static void mkdir_error(struct connect_call *cc, const struct svc_err *e)
{
	struct fsop *op = cc->arg;
	struct svc_err err = {};
	struct sbx *s = op->stage == FS_FIRST && e->code == API_ERR_NOT_FOUND ? fsop_again(cc) : NULL;
	if (op->stage != FS_FIRST || e->code != API_ERR_NOT_FOUND) {
		connect_answer_svc_err(cc, e);
		return;
	}
	if (s) {
		op->stage = FS_SECOND;
		fsop_go_on(cc, fsop_mkdir_p(cc, s, op->path, &err), &err);
	}
}

static const struct connect_ops mkdir_ops = {.json = mkdir_json, .error = mkdir_error,
					     .free = fsop_free};

void fs_mkdir(struct ctx *c)
{
	on_path(c, &mkdir_ops, svc_file_stat);
}

/* Move, then a stat of where it went (envd answers the entry). */
static void move_json(struct connect_call *cc, int status, json_t *body)
{
	struct fsop *op = cc->arg;
	struct svc_err err = {};
	if (op->stage == FS_SECOND) {
		answer_entry(cc, body);
		return;
	}
	json_decref(body);
	struct sbx *s = fsop_again(cc);
	if (s) {
		op->stage = FS_SECOND;
		fsop_go_on(cc, svc_file_stat(s, op->dst, connect_reply(cc), &err), &err);
	}
}

static const struct connect_ops move_ops = {.json = move_json, .free = fsop_free};

void fs_move(struct ctx *c)
{
	struct cordon_err perr = {};
	struct svc_err err = {};
	struct sbx *s;
	json_t *m;
	struct connect_call *cc = fsop_begin(c, CONNECT_MODE_UNARY, &move_ops, "source", "destination", &s, &m);
	if (!cc)
		return;
	json_decref(m);
	struct fsop *op = cc->arg;
	_cleanup_(json_decrefp) json_t *j = json_pack("{s:s, s:s}", "from", op->path, "to", op->dst);
	_cleanup_free_ char *b = j ? json_dumps(j, JSON_COMPACT) : NULL;
	struct api_move *mv = NULL;
	if (!b || api_move_parse(b, strlen(b), &mv, &perr) < 0) {
		connect_answer_error(cc, CONNECT_INVALID_ARGUMENT, "%s", b ? perr.msg : "out of memory");
		return;
	}
	fsop_go_on(cc, svc_file_move(s, mv, connect_reply(cc), &err), &err);
	api_move_free(mv);
}

static void remove_json(struct connect_call *cc, int status, json_t *body)
{
	json_decref(body);
	connect_answer(cc, 200, json_object());
}

static const struct connect_ops remove_ops = {.json = remove_json, .free = fsop_free};

void fs_remove(struct ctx *c)
{
	on_path(c, &remove_ops, svc_file_delete);
}
