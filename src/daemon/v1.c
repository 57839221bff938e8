/* The /v1 surface: its route table, and for each route a few lines that parse the request with
 * src/spec, call the service (service.h) and render what it returns. Everything a sandbox
 * does is in the service; a second surface is a second table like this one over the same
 * calls.
 *
 * A route's entry says which method and path it answers, the body it takes (its limit, which
 * the front enforces before the body is read) and which sandbox states it accepts ({id} is
 * looked up with ctx_sbx(), which answers 404 or 409 from that column). The handler calls it,
 * not dispatch(), so that each route keeps its order of checks: a file route's ?path= and a
 * mkdir's body are checked before the sandbox, everything else after it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "daemon/daemon.h"
#include "daemon/service.h"

static struct svc_reply *deferred(struct ctx *c);
static void wipe_body(struct ctx *c);

/* ---- sandboxes ---- */

static void v1_create(struct ctx *c)
{
	struct api_create *req = NULL;
	struct cordon_err perr = {};
	struct svc_err err = {};
	struct svc_caller who = {c->principal};
	int r = api_create_parse(c->body, c->body_len, D.cfg.max_timeout_s, &req, &perr);
	wipe_body(c); /* it may hold secrets' values; what was parsed is wiped when freed */
	if (r < 0) {
		reply_errno(c->req, r, perr.msg);
		return;
	}
	if (svc_sandbox_check(&who, req, &err) < 0) {
		reply_svc_err(c->req, &err);
	} else {
		struct svc_reply *rp = deferred(c); /* 201 once the sandbox is up */
		if (rp && svc_sandbox_create_from(&who, req, NULL, rp, &err) < 0)
			rp->error(rp, &err);
	}
	api_create_free(req);
}

static void v1_list(struct ctx *c)
{
	struct api_filter *f = NULL;
	struct cordon_err err = {};
	struct svc_caller who = {c->principal};
	int r = api_filter_parse(c->query, c->query ? strlen(c->query) : 0, &f, &err);
	if (r < 0) {
		reply_errno(c->req, r, err.msg);
		return;
	}
	reply_json(c->req, 200, svc_sandbox_list(&who, f));
	api_filter_free(f);
}

static void v1_info(struct ctx *c)
{
	struct sbx *s = ctx_sbx(c);
	if (s)
		reply_json(c->req, 200, svc_sandbox_info(s));
}

static void v1_destroy(struct ctx *c)
{
	struct sbx *s = ctx_sbx(c);
	if (!s)
		return;
	svc_sandbox_destroy(s);
	reply_empty(c->req, 204);
}

static void v1_timeout(struct ctx *c)
{
	struct cordon_err perr = {};
	struct svc_err err = {};
	json_t *out = NULL;
	uint32_t t;
	struct sbx *s = ctx_sbx(c);
	if (!s)
		return;
	int r = api_timeout_parse(c->body, c->body_len, D.cfg.max_timeout_s, &t, &perr);
	if (r < 0) {
		reply_errno(c->req, r, perr.msg);
		return;
	}
	r = svc_sandbox_timeout(s, t, &out, &err);
	reply_svc(c->req, r, 200, out, &err);
}

static void v1_sandbox_metrics(struct ctx *c)
{
	struct svc_err err = {};
	json_t *out = NULL;
	struct sbx *s = ctx_sbx(c);
	if (!s)
		return;
	int r = svc_sandbox_metrics(s, &out, &err); /* before @out is read */
	reply_svc(c->req, r, 200, out, &err);
}

static void v1_network(struct ctx *c)
{
	struct api_network_req *n = NULL;
	struct cordon_err perr = {};
	struct svc_err err = {};
	json_t *out = NULL;
	struct sbx *s = ctx_sbx(c);
	if (!s)
		return;
	int r = api_network_parse(c->body, c->body_len, &n, &perr);
	if (r < 0) {
		reply_errno(c->req, r, perr.msg);
		return;
	}
	struct svc_caller who = {c->principal};
	r = svc_sandbox_network(&who, s, &n->network, &out, &err);
	reply_svc(c->req, r, 200, out, &err);
	api_network_free(n);
}

/* ---- pause, snapshots, fork (svc_snapshot.c) ---- */

static void v1_pause_resume(struct ctx *c, bool pause)
{
	struct svc_err err = {};
	json_t *out = NULL;
	struct sbx *s = ctx_sbx(c);
	if (!s)
		return;
	int r = pause ? svc_sandbox_pause(s, &out, &err) : svc_sandbox_resume(s, &out, &err);
	reply_svc(c->req, r, 200, out, &err);
}

static void v1_pause(struct ctx *c)
{
	v1_pause_resume(c, true);
}

static void v1_resume(struct ctx *c)
{
	v1_pause_resume(c, false);
}

static void v1_snapshot(struct ctx *c)
{
	struct svc_err err = {};
	struct svc_caller who = {c->principal};
	struct sbx *s = ctx_sbx(c);
	if (!s)
		return;
	struct svc_reply *rp = deferred(c); /* 201 once the snapshot thread made it */
	if (rp && svc_snapshot_create(&who, s, rp, &err) < 0)
		rp->error(rp, &err);
}

static void v1_fork(struct ctx *c)
{
	struct api_fork f;
	struct cordon_err perr = {};
	struct svc_err err = {};
	struct svc_caller who = {c->principal};
	struct sbx *s = ctx_sbx(c);
	if (!s)
		return;
	int r = api_fork_parse(c->body, c->body_len, D.cfg.max_timeout_s, &f, &perr);
	if (r < 0) {
		reply_errno(c->req, r, perr.msg);
		return;
	}
	struct svc_reply *rp = deferred(c); /* when the last child is up */
	if (rp && svc_sandbox_fork(&who, s, &f, rp, &err) < 0)
		rp->error(rp, &err);
}

static void v1_snapshot_list(struct ctx *c)
{
	struct svc_caller who = {c->principal};
	reply_json(c->req, 200, svc_snapshot_list(&who));
}

static void v1_snapshot_get(struct ctx *c)
{
	struct svc_err err = {};
	struct svc_caller who = {c->principal};
	json_t *out = NULL;
	int r = svc_snapshot_get(&who, c->params[0], &out, &err);
	reply_svc(c->req, r, 200, out, &err);
}

static void v1_snapshot_delete(struct ctx *c)
{
	struct svc_err err = {};
	struct svc_caller who = {c->principal};
	int r = svc_snapshot_delete(&who, c->params[0], &err);
	reply_svc(c->req, r, 204, NULL, &err);
}

/* ---- secrets: the bodies carry values, so they are wiped once parsed ---- */

static void wipe_body(struct ctx *c)
{
	if (c->body && c->body_len)
		explicit_bzero((char *)c->body, c->body_len);
}

static void v1_secret_put(struct ctx *c)
{
	struct api_secret_put *p = NULL;
	struct cordon_err perr = {};
	struct svc_err err = {};
	json_t *out = NULL;
	struct sbx *s = ctx_sbx(c);
	int r = s ? api_secret_put_parse(c->params[1], c->body, c->body_len, &p, &perr) : 0;
	wipe_body(c);
	if (!s)
		return;
	if (r < 0) {
		reply_errno(c->req, r, perr.msg);
		return;
	}
	r = svc_secret_put(s, p, &out, &err);
	reply_svc(c->req, r, 200, out, &err);
	api_secret_put_free(p);
}

static void v1_secret_delete(struct ctx *c)
{
	struct svc_err err = {};
	struct sbx *s = ctx_sbx(c);
	if (!s)
		return;
	if (!api_secret_name_ok(c->params[1], strlen(c->params[1])))
		reply_error(c->req, API_ERR_INVALID_FIELD, "name: must match [A-Za-z_][A-Za-z0-9_]{0,%d}",
			    API_MAX_SECRET_NAME - 1);
	else
		reply_svc(c->req, svc_secret_delete(s, c->params[1], &err), 204, NULL, &err);
}

/* ---- processes ---- */

static void v1_start(struct ctx *c, bool exec)
{
	struct api_exec *e = NULL;
	struct cordon_err perr = {};
	struct svc_err err = {};
	struct sbx *s = ctx_sbx(c);
	if (!s)
		return;
	int r = api_exec_parse(c->body, c->body_len, exec ? API_EXEC_RUN : API_EXEC_START, &e, &perr);
	if (r < 0) {
		reply_errno(c->req, r, perr.msg);
		return;
	}
	struct svc_reply *rp = deferred(c);
	if (rp && svc_proc_start(s, e, exec, rp, &err) < 0)
		rp->error(rp, &err);
	api_exec_free(e);
}

static void v1_exec(struct ctx *c)
{
	v1_start(c, true);
}

static void v1_proc_start(struct ctx *c)
{
	v1_start(c, false);
}

static void v1_proc_list(struct ctx *c)
{
	struct sbx *s = ctx_sbx(c);
	if (s)
		reply_json(c->req, 200, svc_proc_list(s));
}

/* Process {pid} of sandbox {id}; else NULL with 404 (or the sandbox's 404/409) answered. */
static struct proc *ctx_proc(struct ctx *c)
{
	struct svc_err err = {};
	struct sbx *s = ctx_sbx(c);
	struct proc *p = s ? svc_proc_find(s, c->params[1], &err) : NULL;
	if (s && !p)
		reply_svc_err(c->req, &err);
	return p;
}

static void v1_proc_stdin(struct ctx *c)
{
	struct api_stdin in = {};
	struct cordon_err perr = {};
	struct svc_err err = {};
	struct proc *p = ctx_proc(c);
	if (!p)
		return;
	int r = api_stdin_parse(c->body, c->body_len, &in, &perr);
	if (r < 0) {
		reply_errno(c->req, r, perr.msg);
		return;
	}
	r = svc_proc_stdin(p, &in, &err);
	reply_svc(c->req, r, 204, NULL, &err);
	api_stdin_done(&in);
}

static void v1_proc_signal(struct ctx *c)
{
	struct cordon_err perr = {};
	struct svc_err err = {};
	int signo;
	struct proc *p = ctx_proc(c);
	if (!p)
		return;
	int r = api_signal_parse(c->body, c->body_len, &signo, &perr);
	if (r < 0) {
		reply_errno(c->req, r, perr.msg);
		return;
	}
	r = svc_proc_signal(p, signo, &err);
	reply_svc(c->req, r, 204, NULL, &err);
}

static void v1_proc_resize(struct ctx *c)
{
	struct cordon_err perr = {};
	struct svc_err err = {};
	struct api_winsize w;
	struct proc *p = ctx_proc(c);
	if (!p)
		return;
	int r = api_resize_parse(c->body, c->body_len, &w, &perr);
	if (r < 0) {
		reply_errno(c->req, r, perr.msg);
		return;
	}
	r = svc_proc_resize(p, &w, &err);
	reply_svc(c->req, r, 204, NULL, &err);
}

static void v1_proc_events(struct ctx *c)
{
	struct proc *p = ctx_proc(c);
	struct svc_reply *rp = p ? deferred(c) : NULL;
	if (rp)
		svc_proc_events(p, rp);
}

/* ---- ports: a tunnel to 127.0.0.1:{port} inside (ports.c) ---- */

#define TUNNEL_OK "HTTP/1.1 101 Switching Protocols\r\nUpgrade: tcp\r\nConnection: Upgrade\r\n\r\n"

/* The sandbox and port of a tunnel, as ST_RUNNING and the port's range say; else -1 with
 * @err set. */
static int port_target(struct raw_ctx *c, struct sbx **ret_s, uint32_t *ret_port,
		       struct svc_err *err)
{
	struct sbx *s = sbx_find(c->principal, c->params[0]);
	char *end;
	unsigned long port = strtoul(c->params[1], &end, 10);
	if (!s || s->state == SBX_DESTROYED)
		return svc_fail(err, API_ERR_NOT_FOUND, "no sandbox %.64s", c->params[0]);
	if (s->state != SBX_RUNNING)
		return svc_fail(err, API_ERR_CONFLICT, "sandbox %s is not running", s->id);
	if (s->busy)
		return svc_fail(err, API_ERR_SANDBOX_BUSY, "a snapshot of sandbox %s is being made", s->id);
	if (s->paused)
		return svc_fail(err, API_ERR_SANDBOX_PAUSED, "sandbox %s is paused", s->id);
	if (*end || end == c->params[1] || c->params[1][0] == '0' || port > 65535)
		return svc_fail(err, API_ERR_INVALID_FIELD, "port: must be 1..65535, not '%.16s'",
				c->params[1]);
	*ret_s = s;
	*ret_port = (uint32_t)port;
	return 0;
}

/* GET /v1/sandboxes/{id}/ports/{port}: 101, then the connection's bytes both ways; every
 * answer is written on the socket itself. */
static void v1_port(struct raw_ctx *c)
{
	struct svc_err err = {};
	struct sbx *s = NULL;
	uint32_t port = 0;
	if (port_target(c, &s, &port, &err) == 0) {
		svc_port_open(s, port, c->fd, c->rest, c->rest_len, TUNNEL_OK, http_error_answer,
			      &err); /* the service answers, either way */
		return;
	}
	_cleanup_free_ char *answer = http_error_answer(&err);
	if (answer)
		(void)!send(c->fd, answer, strlen(answer), MSG_NOSIGNAL | MSG_DONTWAIT);
	close(c->fd);
}

/* ---- files: the service answers when the agent has ---- */

/* ?path=, which must be there, have no NUL and be a path api_path_check() takes. */
static bool get_path(struct ctx *c, char *buf, size_t size)
{
	struct cordon_err err = {};
	if (c->query && strstr(c->query, "%00")) {
		reply_error(c->req, API_ERR_INVALID_FIELD, "path: must not contain NUL");
		return false;
	}
	const char *p = query_get(c, "path", buf, size);
	if (!p) {
		reply_error(c->req, API_ERR_INVALID_FIELD, "path: required");
		return false;
	}
	if (api_path_check(p, strlen(p), "path", &err) < 0) {
		reply_errno(c->req, -EINVAL, err.msg);
		return false;
	}
	return true;
}

/* ?cursor= of files/list: NULL or "" is the first page; else a next_cursor we gave. */
static int cursor_parse(const char *s, uint64_t *ret)
{
	uint64_t v = 0;
	*ret = 0;
	if (!s || !*s)
		return 0;
	for (const char *p = s; *p; p++) {
		if (*p < '0' || *p > '9' || v > (UINT32_MAX / 10))
			return -EINVAL; /* a walk of more than 4G entries is no listing we made */
		v = v * 10 + (uint64_t)(*p - '0');
	}
	*ret = v;
	return 0;
}

/* A file operation's answer comes later, through a svc_reply on the request; NULL with 500
 * answered when there is no memory for one. */
static struct svc_reply *deferred(struct ctx *c)
{
	struct svc_reply *rp = http_reply_new(c->req);
	if (!rp)
		reply_error(c->req, API_ERR_INTERNAL, "out of memory");
	return rp;
}

/* The routes of one sandbox path (?path=) and, for the uploads, the body: each one service
 * call, answered through a deferred reply (the agent answers later). */
typedef int (*path_fn)(struct sbx *s, const char *path, struct svc_reply *rp, struct svc_err *e);
typedef int (*path_body_fn)(struct sbx *s, const char *path, const struct svc_upload *u,
			    struct svc_reply *rp, struct svc_err *e);

static void path_route(struct ctx *c, path_fn fn, path_body_fn body_fn)
{
	char path[API_MAX_PATH + 1];
	struct sbx *s = get_path(c, path, sizeof(path)) ? ctx_sbx(c) : NULL;
	struct svc_err e = {};
	struct svc_reply *rp = s ? deferred(c) : NULL;
	struct svc_upload u = {.data = c->body, .fd = c->body_fd, .len = c->body_len};
	if (rp && (body_fn ? body_fn(s, path, &u, rp, &e) : fn(s, path, rp, &e)) < 0)
		rp->error(rp, &e); /* nothing was sent */
}

static void v1_file_get(struct ctx *c) { path_route(c, svc_file_get, NULL); }
static void v1_file_stat(struct ctx *c) { path_route(c, svc_file_stat, NULL); }
static void v1_file_delete(struct ctx *c) { path_route(c, svc_file_delete, NULL); }
static void v1_archive_get(struct ctx *c) { path_route(c, svc_file_archive_get, NULL); }
static void v1_file_put(struct ctx *c) { path_route(c, NULL, svc_file_put); }
static void v1_archive_put(struct ctx *c) { path_route(c, NULL, svc_file_archive_put); }

static void v1_file_list(struct ctx *c)
{
	char path[API_MAX_PATH + 1], dbuf[16], cbuf[24];
	unsigned depth = 1;
	uint64_t cursor;
	struct cordon_err err = {};
	if (!get_path(c, path, sizeof(path)))
		return;
	const char *d = query_get(c, "depth", dbuf, sizeof(dbuf));
	if (d && api_depth_parse(d, &depth, &err) < 0) {
		reply_errno(c->req, -EINVAL, err.msg);
		return;
	}
	if (cursor_parse(query_get(c, "cursor", cbuf, sizeof(cbuf)), &cursor) < 0) {
		reply_error(c->req, API_ERR_INVALID_FIELD, "cursor: not a next_cursor of a listing");
		return;
	}
	struct sbx *s = ctx_sbx(c);
	if (s) {
		struct svc_err e = {};
		struct svc_reply *rp = deferred(c);
		if (rp && svc_file_list(s, path, depth, cursor, rp, &e) < 0)
			rp->error(rp, &e); /* nothing was sent */
	}
}

/* ?recursive=: absent, 0, 1, true or false. */
static int bool_query(struct ctx *c, const char *key, bool *ret)
{
	char buf[8];
	const char *v = query_get(c, key, buf, sizeof(buf));
	static const struct {
		const char *s;
		bool v;
	} vals[] = {{"1", true}, {"true", true}, {"0", false}, {"false", false}};
	if (!v)
		return 0;
	for (size_t i = 0; i < ELEMENTSOF(vals); i++)
		if (!strcmp(v, vals[i].s)) {
			*ret = vals[i].v;
			return 0;
		}
	reply_error(c->req, API_ERR_INVALID_FIELD, "%s: must be 0, 1, true or false", key);
	return -1;
}

static void v1_file_watch(struct ctx *c)
{
	char path[API_MAX_PATH + 1];
	bool recursive = false;
	if (!get_path(c, path, sizeof(path)) || bool_query(c, "recursive", &recursive) < 0)
		return;
	struct sbx *s = ctx_sbx(c);
	struct svc_err e = {};
	struct svc_reply *rp = s ? deferred(c) : NULL;
	if (rp && svc_watch_open(s, path, recursive, rp, &e) < 0)
		rp->error(rp, &e);
}

static void v1_file_mkdir(struct ctx *c)
{
	struct api_mkdir *m = NULL;
	struct cordon_err err = {};
	int r = api_mkdir_parse(c->body, c->body_len, &m, &err);
	if (r < 0) {
		reply_errno(c->req, r, err.msg);
		return;
	}
	struct sbx *s = ctx_sbx(c);
	if (s) {
		struct svc_err e = {};
		struct svc_reply *rp = deferred(c);
		if (rp && svc_file_mkdir(s, m, rp, &e) < 0)
			rp->error(rp, &e); /* nothing was sent */
	}
	api_mkdir_free(m);
}

static void v1_file_move(struct ctx *c)
{
	struct api_move *m = NULL;
	struct cordon_err err = {};
	int r = api_move_parse(c->body, c->body_len, &m, &err);
	if (r < 0) {
		reply_errno(c->req, r, err.msg);
		return;
	}
	struct sbx *s = ctx_sbx(c);
	if (s) {
		struct svc_err e = {};
		struct svc_reply *rp = deferred(c);
		if (rp && svc_file_move(s, m, rp, &e) < 0)
			rp->error(rp, &e); /* nothing was sent */
	}
	api_move_free(m);
}

/* ---- the code interpreter (svc_code.c) ---- */

static void v1_code_run(struct ctx *c)
{
	struct api_code *req = NULL;
	struct cordon_err perr = {};
	struct svc_err err = {};
	struct sbx *s = ctx_sbx(c);
	if (!s)
		return;
	int r = api_code_parse(c->body, c->body_len, &req, &perr);
	if (r < 0) {
		reply_errno(c->req, r, perr.msg);
		return;
	}
	struct svc_reply *rp = deferred(c); /* the cell's events, streamed */
	if (rp && svc_code_run(s, req, rp, &err) < 0)
		rp->error(rp, &err);
	api_code_free(req);
}

static void v1_code_ctx_create(struct ctx *c)
{
	struct api_code_context *req = NULL;
	struct cordon_err perr = {};
	struct svc_err err = {};
	struct sbx *s = ctx_sbx(c);
	if (!s)
		return;
	int r = api_code_context_parse(c->body, c->body_len, &req, &perr);
	if (r < 0) {
		reply_errno(c->req, r, perr.msg);
		return;
	}
	struct svc_reply *rp = deferred(c); /* 201 once its kernel is up */
	if (rp && svc_code_context_create(s, req, rp, &err) < 0)
		rp->error(rp, &err);
	api_code_context_free(req);
}

static void v1_code_ctx_list(struct ctx *c)
{
	struct svc_err err = {};
	json_t *out = NULL;
	struct sbx *s = ctx_sbx(c);
	if (!s)
		return;
	int r = svc_code_context_list(s, &out, &err);
	reply_svc(c->req, r, 200, out, &err);
}

static void v1_code_ctx_delete(struct ctx *c)
{
	struct svc_err err = {};
	struct sbx *s = ctx_sbx(c);
	if (s)
		reply_svc(c->req, svc_code_context_delete(s, c->params[1], &err), 204, NULL, &err);
}

static void v1_code_ctx_restart(struct ctx *c)
{
	struct svc_err err = {};
	struct sbx *s = ctx_sbx(c);
	struct svc_reply *rp = s ? deferred(c) : NULL; /* 200 once its new kernel is up */
	if (rp && svc_code_context_restart(s, c->params[1], rp, &err) < 0)
		rp->error(rp, &err);
}

/* ---- volumes ---- */

/* Volumes are the host's, not yet any API key's own: only the unix socket may touch them. */
static bool vol_local(struct ctx *c)
{
	if (c->principal)
		reply_error(c->req, API_ERR_FORBIDDEN, "only the unix socket may manage volumes");
	return !c->principal;
}

/* {name} of the route, checked: 400 when it cannot be a volume's name. */
static const char *vol_name(struct ctx *c)
{
	if (!vol_local(c))
		return NULL;
	const char *name = c->params[0];
	if (!name || !api_volume_name_ok(name, strlen(name))) {
		reply_error(c->req, API_ERR_INVALID_FIELD,
			    "name: must match [a-z0-9][a-z0-9._-]{0,62}");
		return NULL;
	}
	return name;
}

static void v1_volume_create(struct ctx *c)
{
	struct api_volume *v = NULL;
	struct cordon_err perr = {};
	struct svc_err err = {};
	json_t *out = NULL;
	if (!vol_local(c))
		return;
	int r = api_volume_parse(c->body, c->body_len, &v, &perr);
	if (r < 0) {
		reply_errno(c->req, r, perr.msg);
		return;
	}
	r = svc_volume_create(v, &out, &err);
	reply_svc(c->req, r, 201, out, &err);
	api_volume_free(v);
}

static void v1_volume_list(struct ctx *c)
{
	if (vol_local(c))
		reply_json(c->req, 200, svc_volume_list());
}

static void v1_volume_get(struct ctx *c)
{
	struct svc_err err = {};
	json_t *out = NULL;
	const char *name = vol_name(c);
	if (!name)
		return;
	int r = svc_volume_get(name, &out, &err); /* before @out is read */
	reply_svc(c->req, r, 200, out, &err);
}

static void v1_volume_delete(struct ctx *c)
{
	struct svc_err err = {};
	const char *name = vol_name(c);
	if (name) {
		int r = svc_volume_delete(name, &err);
		reply_svc(c->req, r, 204, NULL, &err);
	}
}

/* ---- a sandbox's audit log, whole or followed ---- */

static void v1_audit(struct ctx *c)
{
	char fbuf[16];
	bool follow = false;
	struct cordon_err perr = {};
	struct svc_err err = {};
	off_t next = 0;
	struct sbx *s = ctx_sbx(c);
	if (!s)
		return;
	const char *fv = query_get(c, "follow", fbuf, sizeof(fbuf));
	if (fv && api_query_bool_parse(fv, "follow", &follow, &perr) < 0) {
		reply_errno(c->req, -EINVAL, perr.msg);
		return;
	}
	struct evbuffer *buf = evbuffer_new();
	int r = buf ? svc_audit_log(s, buf, &next, &err)
		    : svc_fail(&err, api_error_from_errno(-ENOMEM), "cannot read the audit log");
	if (r < 0) {
		if (buf)
			evbuffer_free(buf);
		reply_svc_err(c->req, &err);
		return;
	}
	struct stream_sink *k = follow ? http_sink_new(c->req) : NULL;
	if (k && svc_audit_follow(s, next, k, &err) == 0) {
		http_sink_start(k, "application/x-ndjson");
		if (evbuffer_get_length(buf))
			k->write(k, evbuffer_pullup(buf, -1), evbuffer_get_length(buf));
	} else {
		free(k); /* not started: nothing else knows of it */
		reply_buf(c->req, 200, "application/x-ndjson", buf);
	}
	evbuffer_free(buf);
}

/* ---- templates ---- */

/* The caller, with what it asked for the audit record. */
static struct svc_caller caller(const struct ctx *c, const char *method)
{
	return (struct svc_caller){c->principal, method, c->path};
}

static void v1_template_list(struct ctx *c)
{
	struct svc_err err = {};
	json_t *out = NULL;
	int r = svc_template_list(&out, &err);
	reply_svc(c->req, r, 200, out, &err);
}

static void v1_template_get(struct ctx *c)
{
	struct svc_err err = {};
	json_t *out = NULL;
	int r = svc_template_get(c->params[0], &out, &err);
	reply_svc(c->req, r, 200, out, &err);
}

static void v1_template_delete(struct ctx *c)
{
	struct svc_err err = {};
	struct svc_caller who = caller(c, "DELETE");
	struct svc_reply *rp = deferred(c); /* 204 once cordon-template rm is done */
	if (rp && svc_template_delete(&who, c->params[0], rp, &err) < 0)
		rp->error(rp, &err);
}

static void v1_template_build(struct ctx *c)
{
	struct api_build *b = NULL;
	struct cordon_err perr = {};
	struct svc_err err = {};
	struct svc_caller who = caller(c, "POST");
	if (svc_template_may_change(&who, "build", &err) < 0) {
		reply_svc_err(c->req, &err);
		return;
	}
	int r = api_build_parse(c->body, c->body_len, &b, &perr);
	if (r < 0) {
		reply_errno(c->req, r, perr.msg);
		return;
	}
	struct svc_reply *rp = deferred(c); /* the build's events, streamed */
	if (rp && svc_template_build(&who, b, rp, &err) < 0)
		rp->error(rp, &err);
	api_build_free(b);
}

/* ---- security events: ?follow=1, ?sandbox=ID, ?kind=K[,K...] ---- */

static int events_filter_parse(struct ctx *c, struct events_filter *f, bool *follow, struct cordon_err *err)
{
	char fbuf[16], sbuf[64], kbuf[256];
	*f = (struct events_filter){.principal = c->principal};
	const char *fv = query_get(c, "follow", fbuf, sizeof(fbuf));
	if (fv && api_query_bool_parse(fv, "follow", follow, err) < 0)
		return -EINVAL;
	const char *sv = query_get(c, "sandbox", sbuf, sizeof(sbuf));
	if (sv && *sv && !valid_id(sv))
		return cordon_err_setf(err, -EINVAL, "sandbox: not a sandbox id");
	snprintf(f->sandbox, sizeof(f->sandbox), "%s", sv ? sv : "");
	const char *kv = query_get(c, "kind", kbuf, sizeof(kbuf));
	for (const char *p = kv; p && *p;) {
		size_t n = strcspn(p, ",");
		int k = event_kind_from(p, n);
		if (k < 0)
			return cordon_err_setf(err, -EINVAL, "kind: expected egress.blocked, secret.misuse, oom, "
							  "timeout, agent.violation or sandbox.destroyed");
		f->kinds |= 1u << k;
		p += n + (p[n] == ',');
	}
	return 0;
}

static void v1_events(struct ctx *c)
{
	struct events_filter f;
	struct cordon_err perr = {};
	struct svc_err err = {};
	bool follow = false;
	if (events_filter_parse(c, &f, &follow, &perr) < 0) {
		reply_errno(c->req, -EINVAL, perr.msg);
		return;
	}
	struct evbuffer *buf = evbuffer_new();
	if (!buf || svc_events(&f, buf) < 0) {
		if (buf)
			evbuffer_free(buf);
		reply_error(c->req, API_ERR_INTERNAL, "out of memory");
		return;
	}
	struct stream_sink *k = follow ? http_sink_new(c->req) : NULL;
	if (k) {
		http_sink_start(k, "application/x-ndjson");
		if (svc_events_follow(&f, k, &err) < 0)
			k->end(k, NULL, 0);
		else if (evbuffer_get_length(buf))
			k->write(k, evbuffer_pullup(buf, -1), evbuffer_get_length(buf));
	} else {
		reply_buf(c->req, 200, "application/x-ndjson", buf);
	}
	evbuffer_free(buf);
}

/* ---- the daemon ---- */

static void v1_healthz(struct ctx *c)
{
	reply_json(c->req, 200, svc_health());
}

static void v1_metrics(struct ctx *c)
{
	_cleanup_free_ char *text = metrics_render();
	struct evbuffer *buf = evbuffer_new();
	if (!text || !buf) {
		if (buf)
			evbuffer_free(buf);
		reply_error(c->req, API_ERR_INTERNAL, "out of memory");
		return;
	}
	evbuffer_add(buf, text, strlen(text));
	reply_buf(c->req, 200, "text/plain; version=0.0.4", buf);
	evbuffer_free(buf);
}

/* The key of CORDON_TASK_TOKEN, for an operator's services to verify tokens with: on the
 * unix socket only (whoever may use it runs the server's sandboxes anyway). */
static void v1_token_key(struct ctx *c)
{
	if (c->principal) {
		reply_error(c->req, API_ERR_FORBIDDEN, "the task token key is given on the unix socket only");
		return;
	}
	json_t *k = token_key_json();
	if (k)
		reply_json(c->req, 200, k);
	else
		reply_error(c->req, API_ERR_UNAVAILABLE, "this server has no task token key");
}

static void v1_runtimes(struct ctx *c)
{
	reply_json(c->req, 200, svc_runtimes());
}

/* ---- the table ---- */

static void v1_network_profiles(struct ctx *c)
{
	reply_json(c->req, 200, svc_network_profiles());
}

static void v1_approvals(struct ctx *c)
{
	struct svc_caller who = {c->principal};
	char sbx[SBX_ID_LEN + 2];
	reply_json(c->req, 200, svc_approval_list(&who, query_get(c, "sandbox", sbx, sizeof(sbx))));
}

static void v1_approval_decide(struct ctx *c)
{
	struct svc_caller who = {c->principal};
	struct api_decision *d = NULL;
	struct cordon_err perr = {};
	struct svc_err err = {};
	json_t *out = NULL;
	int r = api_decision_parse(c->body, c->body_len, &d, &perr);
	if (r < 0) {
		reply_errno(c->req, r, perr.msg);
		return;
	}
	r = svc_approval_decide(&who, c->params[0], d, &out, &err);
	api_decision_free(d);
	reply_svc(c->req, r, 200, out, &err);
}

#define GET EVHTTP_REQ_GET
#define POST EVHTTP_REQ_POST
#define PUT EVHTTP_REQ_PUT
#define DELETE EVHTTP_REQ_DELETE
#define SB "/v1/sandboxes/{id}"

static const struct route v1_routes[] = {
	{GET, "/healthz", v1_healthz},
	{GET, "/metrics", v1_metrics},
	{GET, "/v1/runtimes", v1_runtimes},
	{GET, "/v1/task-token-key", v1_token_key},
	{GET, "/v1/events", v1_events},
	{GET, "/v1/approvals", v1_approvals},
	{GET, "/v1/network-profiles", v1_network_profiles},
	{POST, "/v1/approvals/{id}", v1_approval_decide},
	{POST, "/v1/sandboxes", v1_create},
	{GET, "/v1/sandboxes", v1_list},
	{GET, SB, v1_info, BODY_API, ST_ANY},
	{DELETE, SB, v1_destroy, BODY_API, ST_ANY},
	{POST, SB "/timeout", v1_timeout, BODY_API, ST_ANY},
	{GET, SB "/metrics", v1_sandbox_metrics, BODY_API, ST_LIVE},
	{POST, SB "/pause", v1_pause, BODY_API, ST_LIVE},
	{POST, SB "/resume", v1_resume, BODY_API, ST_LIVE},
	{POST, SB "/snapshots", v1_snapshot, BODY_API, ST_LIVE},
	{POST, SB "/fork", v1_fork, BODY_API, ST_LIVE},
	{GET, "/v1/snapshots", v1_snapshot_list},
	{GET, "/v1/snapshots/{id}", v1_snapshot_get},
	{DELETE, "/v1/snapshots/{id}", v1_snapshot_delete},
	{PUT, SB "/network", v1_network, BODY_API, ST_RUNNING},
	{PUT, SB "/secrets/{name}", v1_secret_put, BODY_API, ST_RUNNING},
	{DELETE, SB "/secrets/{name}", v1_secret_delete, BODY_API, ST_RUNNING},
	{POST, SB "/exec", v1_exec, BODY_API, ST_RUNNING},
	{POST, SB "/processes", v1_proc_start, BODY_API, ST_RUNNING},
	{GET, SB "/processes", v1_proc_list, BODY_API, ST_RUNNING},
	{POST, SB "/processes/{pid}/stdin", v1_proc_stdin, BODY_API, ST_RUNNING},
	{POST, SB "/processes/{pid}/signal", v1_proc_signal, BODY_API, ST_RUNNING},
	{POST, SB "/processes/{pid}/resize", v1_proc_resize, BODY_API, ST_RUNNING},
	{GET, SB "/processes/{pid}/events", v1_proc_events, BODY_API, ST_RUNNING},
	{GET, SB "/ports/{port}", NULL, BODY_API, ST_RUNNING, v1_port},
	{GET, SB "/files", v1_file_get, BODY_API, ST_RUNNING},
	{PUT, SB "/files", v1_file_put, BODY_SPOOL, ST_RUNNING},
	{DELETE, SB "/files", v1_file_delete, BODY_API, ST_RUNNING},
	{GET, SB "/files/list", v1_file_list, BODY_API, ST_RUNNING},
	{GET, SB "/files/watch", v1_file_watch, BODY_API, ST_RUNNING},
	{GET, SB "/files/archive", v1_archive_get, BODY_API, ST_RUNNING},
	{PUT, SB "/files/archive", v1_archive_put, BODY_SPOOL, ST_RUNNING},
	{GET, SB "/files/stat", v1_file_stat, BODY_API, ST_RUNNING},
	{POST, SB "/files/mkdir", v1_file_mkdir, BODY_API, ST_RUNNING},
	{POST, SB "/files/move", v1_file_move, BODY_API, ST_RUNNING},
	{GET, SB "/audit", v1_audit, BODY_API, ST_ANY},
	{POST, SB "/code", v1_code_run, BODY_API, ST_RUNNING},
	{POST, SB "/code/contexts", v1_code_ctx_create, BODY_API, ST_RUNNING},
	{GET, SB "/code/contexts", v1_code_ctx_list, BODY_API, ST_RUNNING},
	{DELETE, SB "/code/contexts/{ctx}", v1_code_ctx_delete, BODY_API, ST_RUNNING},
	{POST, SB "/code/contexts/{ctx}/restart", v1_code_ctx_restart, BODY_API, ST_RUNNING},
	{POST, "/v1/volumes", v1_volume_create},
	{GET, "/v1/volumes", v1_volume_list},
	{GET, "/v1/volumes/{name}", v1_volume_get},
	{DELETE, "/v1/volumes/{name}", v1_volume_delete},
	{GET, "/v1/templates", v1_template_list},
	{POST, "/v1/templates", v1_template_build, BODY_BUILD},
	{GET, "/v1/templates/{name}", v1_template_get},
	{DELETE, "/v1/templates/{name}", v1_template_delete},
};

const struct surface v1_surface = {
	"v1", v1_routes, ELEMENTSOF(v1_routes), api_error_render,
	(1u << LISTEN_UNIX) | (1u << LISTEN_TCP),
};
