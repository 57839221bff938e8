/* Pause, resume, snapshots and fork (service.h): the records first, then the runtime's
 * verbs (cordon_sandbox_pause/resume/snapshot/restore) through sandbox.c, the snapshots on
 * disk through snapstore.c, and a fork's children through the create path (create.c), all
 * started before the first is up, each answered on its own. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "basic/log.h"
#include "audit/audit.h"
#include "daemon/daemon.h"
#include "daemon/service.h"

static const char *principal_name(const struct svc_caller *who)
{
	return who->principal ? who->principal->name : "local";
}

/* A runtime's -errno as the API says it: a runtime or host without the verb is the
 * client's to know (400 unsupported_runtime), anything else the server's. */
static int runtime_fail(struct svc_err *err, int r, const struct sbx *s, const char *verb,
			const char *msg)
{
	if (r == -EOPNOTSUPP || r == -ENOTSUP)
		return svc_fail(err, API_ERR_UNSUPPORTED_RUNTIME, "runtime '%s' cannot %s here%s%s",
				s->runtime, verb, msg && msg[0] ? ": " : "", msg ? msg : "");
	return svc_fail(err, API_ERR_INTERNAL, "%s: %s", verb, msg && msg[0] ? msg : strerror(-r));
}

/* ---- pause and resume ---- */

int svc_sandbox_pause(struct sbx *s, json_t **ret, struct svc_err *err)
{
	if (!s->paused) {
		int r = sbx_audit_rc(s, AUDIT_SANDBOX_PAUSE, NULL);
		if (r < 0)
			return svc_fail_audit(err, r);
		if ((r = sbx_pause(s, true)) < 0)
			return runtime_fail(err, r, s, "pause", NULL);
		metric_inc(M_PAUSES);
	}
	*ret = sbx_json(s);
	return 0;
}

int svc_sandbox_resume(struct sbx *s, json_t **ret, struct svc_err *err)
{
	if (s->paused) {
		int r = sbx_audit_rc(s, AUDIT_SANDBOX_RESUME,
				     json_pack("{s:I}", "paused_ms", (json_int_t)(now_ms() - s->paused_ms)));
		if (r < 0)
			return svc_fail_audit(err, r);
		if ((r = sbx_pause(s, false)) < 0)
			return runtime_fail(err, r, s, "resume", NULL);
	}
	*ret = sbx_json(s);
	return 0;
}

/* ---- snapshots ---- */

static json_t *snapshot_meta(const struct svc_caller *who, const struct sbx *s, const char *id,
			     const struct cordon_snapshot_info *info)
{
	char created[40];
	return json_pack("{s:s, s:s, s:s, s:s, s:b, s:I, s:s, s:O, s:s}", "id", id, "sandbox", s->id,
			 "template", s->template_name[0] ? s->template_name : "host", "runtime",
			 s->runtime, "memory", info->memory, "size_bytes", (json_int_t)info->bytes,
			 "created_at", iso_time(now_ms(), created), "limits", s->limits, "owner",
			 principal_name(who));
}

/* The copy into <state>/snapshots/.tmp-<id>, then its meta and the rename. */
static int snapshot_make(const struct svc_caller *who, struct sbx *s, const char *id,
			 json_t **ret, struct svc_err *err)
{
	struct cordon_snapshot_info info = {0};
	struct cordon_err cerr = {};
	size_t n;
	uint64_t used, t0 = now_ms();
	int fs = -1, r = snapstore_begin(id, &fs);
	if (r < 0)
		return svc_fail(err, API_ERR_INTERNAL, "snapshot: %s", strerror(-r));
	r = cordon_sandbox_snapshot(s->rt, fs, &info, &cerr);
	close(fs);
	if (r < 0) {
		snapstore_abort(id);
		return runtime_fail(err, r, s, "snapshot", cerr.msg);
	}
	snapstore_usage(&n, &used);
	if (used + info.bytes > D.cfg.max_snapshot_bytes) {
		snapstore_abort(id);
		return svc_fail(err, API_ERR_SNAPSHOT_LIMIT,
				"the snapshot takes %llu bytes, over what is left of --max-snapshot-bytes "
				"(%llu of %llu in use): delete snapshots first",
				(unsigned long long)info.bytes, (unsigned long long)used,
				(unsigned long long)D.cfg.max_snapshot_bytes);
	}
	json_t *meta = snapshot_meta(who, s, id, &info);
	if (!meta || (r = snapstore_commit(id, meta)) < 0) {
		json_decref(meta);
		if (!meta)
			snapstore_abort(id);
		return svc_fail(err, API_ERR_INTERNAL, "snapshot: write its meta: %s",
				strerror(meta ? -r : ENOMEM));
	}
	metric_inc(M_SNAPSHOTS);
	metric_observe(H_SNAPSHOT, (now_ms() - t0) / 1000.0);
	*ret = meta;
	return 0;
}

/* Refused before anything is copied when the cap is reached already. */
static int snapshot_admit(struct svc_err *err)
{
	size_t n;
	uint64_t used;
	snapstore_usage(&n, &used);
	if (used >= D.cfg.max_snapshot_bytes)
		return svc_fail(err, API_ERR_SNAPSHOT_LIMIT,
				"the snapshots take %llu bytes, --max-snapshot-bytes is %llu: delete "
				"snapshots first", (unsigned long long)used,
				(unsigned long long)D.cfg.max_snapshot_bytes);
	return 0;
}

static int snapshot_new(const struct svc_caller *who, struct sbx *s, const char *event,
			json_t *fields, char id[32], json_t **ret, struct svc_err *err)
{
	_cleanup_(json_decrefp) json_t *f = fields;
	if (snapshot_admit(err) < 0)
		return -1;
	snapstore_new_id(id);
	json_object_set_new(f, "snapshot", json_string(id));
	int r = sbx_audit_rc(s, event, json_incref(f)); /* before the copy */
	if (r < 0)
		return svc_fail_audit(err, r);
	return snapshot_make(who, s, id, ret, err);
}

int svc_snapshot_create(const struct svc_caller *who, struct sbx *s, json_t **ret,
			struct svc_err *err)
{
	char id[32];
	return snapshot_new(who, s, AUDIT_SANDBOX_SNAPSHOT, json_object(), id, ret, err);
}

/* The meta of snapshot @id if @who made it; the owner is not shown. */
static json_t *snapshot_find(const struct svc_caller *who, const char *id)
{
	json_t *m = NULL;
	if (snapstore_read(id, &m) < 0)
		return NULL;
	const char *owner = json_string_value(json_object_get(m, "owner"));
	if (!owner || strcmp(owner, principal_name(who)) != 0) {
		json_decref(m);
		return NULL;
	}
	json_object_del(m, "owner");
	return m;
}

int svc_snapshot_get(const struct svc_caller *who, const char *id, json_t **ret,
		     struct svc_err *err)
{
	json_t *m = snapshot_find(who, id);
	if (!m)
		return svc_fail(err, API_ERR_NOT_FOUND, "no snapshot '%.64s'", id);
	*ret = m;
	return 0;
}

int svc_snapshot_delete(const struct svc_caller *who, const char *id, struct svc_err *err)
{
	json_t *m = snapshot_find(who, id);
	if (!m)
		return svc_fail(err, API_ERR_NOT_FOUND, "no snapshot '%.64s'", id);
	json_decref(m);
	int r = snapstore_remove(id);
	return r < 0 ? svc_fail(err, API_ERR_INTERNAL, "delete snapshot: %s", strerror(-r)) : 0;
}

struct lister {
	const char *owner;
	json_t *out;
};

static void list_one(json_t *meta, void *arg)
{
	struct lister *l = arg;
	const char *owner = json_string_value(json_object_get(meta, "owner"));
	if (!owner || strcmp(owner, l->owner) != 0)
		return;
	json_t *m = json_deep_copy(meta);
	json_object_del(m, "owner");
	json_array_append_new(l->out, m);
}

json_t *svc_snapshot_list(const struct svc_caller *who)
{
	struct lister l = {principal_name(who), json_array()};
	snapstore_each(list_one, &l);
	return json_pack("{s:o}", "snapshots", l.out);
}

/* ---- a sandbox made from a snapshot ---- */

/* The request with what a snapshot's meta says in place of what the body left out: its
 * template, runtime and limits. Strings point into @meta. */
static void from_snapshot(struct api_create *c, json_t *meta)
{
	json_t *lim = json_object_get(meta, "limits");
	if (!c->template_set)
		c->template_name = json_string_value(json_object_get(meta, "template"));
	if (!c->runtime_set) /* the snapshot's, not --default-runtime */
		c->runtime_set = api_runtime_from_name(
				     json_string_value(json_object_get(meta, "runtime")), &c->runtime) == 0;
	uint32_t cpus = (uint32_t)(json_number_value(json_object_get(lim, "cpus")) * 1000 + 0.5);
	const struct {
		unsigned bit;
		uint32_t *dst, v;
	} from[] = {
		{API_LIMIT_CPUS, &c->limits.cpus_milli, cpus},
		{API_LIMIT_MEMORY, &c->limits.memory_mb, (uint32_t)json_integer_value(json_object_get(lim, "memory_mb"))},
		{API_LIMIT_PIDS, &c->limits.pids, (uint32_t)json_integer_value(json_object_get(lim, "pids"))},
		{API_LIMIT_DISK, &c->limits.disk_mb, (uint32_t)json_integer_value(json_object_get(lim, "disk_mb"))},
	};
	for (size_t i = 0; i < ELEMENTSOF(from); i++)
		if (!(c->limits_set & from[i].bit) && from[i].v)
			*from[i].dst = from[i].v;
}

int svc_sandbox_create_from(const struct svc_caller *who, const struct api_create *req,
			    const char *parent, struct svc_reply *rp, struct svc_err *e)
{
	if (!req->snapshot)
		return svc_sandbox_create(who, req, rp, e);
	_cleanup_(json_decrefp) json_t *meta = NULL;
	int r = snapstore_read(req->snapshot, &meta);
	const char *owner = meta ? json_string_value(json_object_get(meta, "owner")) : NULL;
	if (r < 0 || !owner || strcmp(owner, principal_name(who)) != 0)
		return svc_fail(e, API_ERR_NOT_FOUND, "no snapshot '%s'", req->snapshot);
	if (!json_is_string(json_object_get(meta, "template")) ||
	    !json_is_string(json_object_get(meta, "runtime")))
		return svc_fail(e, API_ERR_INTERNAL, "snapshot '%s': its meta.json is damaged", req->snapshot);
	struct api_create c = *req;
	from_snapshot(&c, meta);
	/* What the snapshot gave is checked as a request's would be (a fork's children too):
	 * the limits this host has, the template, the key's quota. */
	if (svc_sandbox_check(who, &c, e) < 0)
		return -1;
	_cleanup_close_ int fs = snapstore_fs(req->snapshot);
	if (fs < 0)
		return svc_fail(e, API_ERR_NOT_FOUND, "no snapshot '%s'", req->snapshot);
	return svc_sandbox_create_at(who, &c, fs, parent, rp, e);
}

/* ---- fork: one snapshot, N children through the create path ---- */

struct fork_job {
	struct svc_reply *out; /* NULL once the client left: the children are made all the same */
	json_t *results;       /* one entry per child, filled as each is up or fails */
	size_t pending;
};

struct fork_child {
	struct svc_reply r; /* what the create path answers */
	struct fork_job *job;
	size_t i;
};

static void job_gone(void *arg)
{
	struct fork_job *job = arg;
	job->out = NULL;
}

static void job_finish(struct fork_job *job)
{
	if (--job->pending > 0)
		return;
	if (job->out)
		job->out->json(job->out, 200, json_incref(job->results));
	json_decref(job->results);
	free(job);
}

static void job_settle(struct fork_child *c, json_t *entry)
{
	struct fork_job *job = c->job;
	json_array_set_new(job->results, c->i, entry ? entry : json_null());
	free(c);
	job_finish(job);
}

static void child_json(struct svc_reply *r, int status, json_t *body)
{
	struct fork_child *c = (struct fork_child *)r;
	json_t *id = json_object_get(body, "id");
	job_settle(c, json_pack("{s:O}", "id", id ? id : json_null()));
	json_decref(body);
}

static void child_error(struct svc_reply *r, const struct svc_err *err)
{
	job_settle((struct fork_child *)r,
		   json_pack("{s:{s:s, s:s}}", "error", "code", api_error_code(err->code), "message",
			     err->msg));
}

static void child_bytes(struct svc_reply *r, const char *type, struct evbuffer *buf)
{
	struct svc_err e = {.code = API_ERR_INTERNAL, .msg = "unexpected answer"};
	child_error(r, &e);
}

static struct stream_sink *child_stream(struct svc_reply *r, const char *type)
{
	return NULL;
}

static void fork_one(const struct svc_caller *who, struct sbx *parent, const struct api_fork *f,
		     const char *snap, struct fork_job *job, size_t i)
{
	struct svc_err e = {};
	struct fork_child *c = calloc(1, sizeof(*c));
	if (!c) {
		json_array_set_new(job->results, i, json_pack("{s:{s:s, s:s}}", "error", "code",
							      "internal", "message", "out of memory"));
		job_finish(job);
		return;
	}
	*c = (struct fork_child){{child_json, child_bytes, child_error, child_stream}, job, i};
	struct api_create req = {
		.template_name = parent->template_name[0] ? parent->template_name : "host",
		.timeout_s = f->timeout_s ? f->timeout_s : (uint32_t)parent->timeout_s,
		.network.policy = API_NET_DENY,
		.snapshot = snap,
	};
	(void)api_runtime_from_name(parent->runtime, &req.runtime);
	req.runtime_set = req.template_set = true;
	if (svc_sandbox_create_from(who, &req, parent->id, &c->r, &e) < 0)
		child_error(&c->r, &e);
}

int svc_sandbox_fork(const struct svc_caller *who, struct sbx *s, const struct api_fork *f,
		     struct svc_reply *r, struct svc_err *err)
{
	char snap[32];
	_cleanup_(json_decrefp) json_t *meta = NULL;
	json_t *fields = json_pack("{s:I}", "count", (json_int_t)f->count);
	if (snapshot_new(who, s, AUDIT_SANDBOX_FORK, fields, snap, &meta, err) < 0)
		return -1;
	struct fork_job *job = calloc(1, sizeof(*job));
	if (!job || !(job->results = json_array())) {
		free(job);
		return svc_fail(err, API_ERR_INTERNAL, "out of memory");
	}
	metric_inc(M_FORKS);
	job->out = r;
	job->pending = f->count + 1; /* one for this call, settled last */
	r->gone = job_gone;
	r->gone_arg = job;
	for (size_t i = 0; i < f->count; i++)
		json_array_append_new(job->results, json_null());
	for (size_t i = 0; i < f->count; i++)
		fork_one(who, s, f, snap, job, i);
	job_finish(job); /* this call's share: the answer goes now if every child answered */
	return 0;
}
