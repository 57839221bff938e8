/* The /v1 surface: its route table, and for each route a few lines that parse the request with
 * src/spec, call the service (service.h) and render what it returns. Everything a sandbox
 * does is in the service; a second surface is a second table like this one over the same
 * calls.
 *
 * A route's entry says which method and path it answers, the body it takes (its limit, which
 * the front enforces before the body is read) and which sandbox states it accepts ({id} is
 * looked up with ctx_sbx(), which answers 404 or 409 from that column). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "daemon/daemon.h"
#include "daemon/service.h"

/* ---- sandboxes ---- */

static void v1_create(struct ctx *c)
{
	struct api_create *req = NULL;
	struct cordon_err perr = {};
	struct svc_err err = {};
	struct svc_caller who = {c->principal};
	int r = api_create_parse(c->body, c->body_len, D.cfg.max_timeout_s, &req, &perr);
	if (r < 0) {
		reply_errno(c->req, r, perr.msg);
		return;
	}
	if (svc_sandbox_check(&who, req, &err) < 0)
		reply_svc_err(c->req, &err);
	else
		sbx_create(c, req);
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
	r = svc_sandbox_network(s, &n->network, &out, &err);
	reply_svc(c->req, r, 200, out, &err);
	api_network_free(n);
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

static void v1_runtimes(struct ctx *c)
{
	reply_json(c->req, 200, svc_runtimes());
}

/* ---- the table ---- */

#define GET EVHTTP_REQ_GET
#define POST EVHTTP_REQ_POST
#define PUT EVHTTP_REQ_PUT
#define DELETE EVHTTP_REQ_DELETE
#define SB "/v1/sandboxes/{id}"

static const struct route v1_routes[] = {
	{GET, "/healthz", v1_healthz},
	{GET, "/metrics", v1_metrics},
	{GET, "/v1/runtimes", v1_runtimes},
	{POST, "/v1/sandboxes", v1_create},
	{GET, "/v1/sandboxes", v1_list},
	{GET, SB, v1_info, BODY_API, ST_ANY},
	{DELETE, SB, v1_destroy, BODY_API, ST_ANY},
	{POST, SB "/timeout", v1_timeout, BODY_API, ST_ANY},
	{PUT, SB "/network", v1_network, BODY_API, ST_RUNNING},
	{POST, SB "/exec", handle_exec, BODY_API, ST_RUNNING},
	{POST, SB "/processes", handle_proc_start, BODY_API, ST_RUNNING},
	{GET, SB "/processes", handle_proc_list, BODY_API, ST_RUNNING},
	{POST, SB "/processes/{pid}/stdin", handle_proc_stdin, BODY_API, ST_RUNNING},
	{POST, SB "/processes/{pid}/signal", handle_proc_signal, BODY_API, ST_RUNNING},
	{GET, SB "/processes/{pid}/events", handle_proc_events, BODY_API, ST_RUNNING},
	{GET, SB "/files", handle_file_get, BODY_API, ST_RUNNING},
	{PUT, SB "/files", handle_file_put, BODY_UPLOAD, ST_RUNNING},
	{DELETE, SB "/files", handle_file_delete, BODY_API, ST_RUNNING},
	{GET, SB "/files/list", handle_file_list, BODY_API, ST_RUNNING},
	{GET, SB "/files/stat", handle_file_stat, BODY_API, ST_RUNNING},
	{POST, SB "/files/mkdir", handle_file_mkdir, BODY_API, ST_RUNNING},
	{POST, SB "/files/move", handle_file_move, BODY_API, ST_RUNNING},
	{GET, SB "/audit", v1_audit, BODY_API, ST_ANY},
	{GET, "/v1/templates", handle_template_list},
	{POST, "/v1/templates", handle_template_build, BODY_BUILD},
	{GET, "/v1/templates/{name}", handle_template_get},
	{DELETE, "/v1/templates/{name}", handle_template_delete},
};

const struct surface v1_surface = {"v1", v1_routes, ELEMENTSOF(v1_routes)};
