/* Pause, resume, snapshots and fork (service.h): the records first, then the runtime's
 * verbs (cordon_sandbox_pause/resume/snapshot/restore) through sandbox.c, the runtime's
 * snapshot on a thread of its own (below), the snapshots on disk through snapstore.c, and a
 * fork's children through the create path (create.c), all started before the first is up,
 * each answered on its own. */
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

/* A sandbox whose snapshot is being made: its runtime handle is the snapshot thread's. */
static int busy_fail(const struct sbx *s, struct svc_err *err)
{
	return svc_fail(err, API_ERR_SANDBOX_BUSY,
			"a snapshot of sandbox %s is being made: try again once it is done", s->id);
}

/* ---- pause and resume ---- */

int svc_sandbox_pause(struct sbx *s, json_t **ret, struct svc_err *err)
{
	if (s->busy)
		return busy_fail(s, err);
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
	if (s->busy)
		return busy_fail(s, err);
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

/* ---- snapshots: the runtime's copy on a thread of its own ----
 *
 * The runtime's snapshot may take seconds (a microvm's RAM streamed and copied, runsc's
 * pause, a large scratch), so it runs on the snapshot thread (worker.c) and the request is
 * answered when it is done. Meanwhile the sandbox is busy (daemon.h): the thread has its
 * runtime handle, nothing else on the loop reaches it, and a destroy waits for the thread to
 * give it back. What is read or written on the loop stays there: the admission and the audit
 * record before, the cap's check, the meta and the rename after, so the store's usage
 * (/metrics, the cap) only ever counts whole snapshots. Snapshots of several sandboxes
 * queue on the one thread. */

static struct worker snapper = WORKER_INIT;

int svc_snapshot_start(void)
{
	return worker_start(&snapper, "cordond-snap");
}

size_t svc_snapshot_pending(void)
{
	return snapper.pending;
}

struct snap_job;
/* What follows a snapshot, on the loop: its meta (taken), or NULL and why not. */
typedef void (*snap_then_fn)(struct snap_job *j, json_t *meta, const struct svc_err *err);

struct snap_job {
	struct sbx *s;		   /* busy until snap_done() */
	struct cordon_sandbox *rt; /* the thread's: s->rt */
	struct api_key *principal; /* the snapshot's owner */
	char id[32];
	int fs; /* .tmp-<id>/fs, closed by the thread */
	int r;
	struct cordon_snapshot_info info;
	struct cordon_err cerr;
	uint64_t t0;
	snap_then_fn then;
	struct svc_reply *out; /* NULL once the client left */
	struct api_fork fork;  /* a fork's request */
};

static void snap_work(void *arg)
{
	struct snap_job *j = arg;
	j->r = cordon_sandbox_snapshot(j->rt, j->fs, &j->info, &j->cerr);
	close(TAKE_FD(j->fs));
}

static void snap_gone(void *arg)
{
	struct snap_job *j = arg;
	j->out = NULL;
}

static json_t *snapshot_meta(const struct snap_job *j)
{
	const struct sbx *s = j->s;
	char created[40];
	return json_pack("{s:s, s:s, s:s, s:s, s:b, s:I, s:s, s:O, s:s}", "id", j->id, "sandbox",
			 s->id, "template", s->template_name[0] ? s->template_name : "host", "runtime",
			 s->runtime, "memory", j->info.memory, "size_bytes", (json_int_t)j->info.bytes,
			 "created_at", iso_time(now_ms(), created), "limits", s->limits, "owner",
			 principal_name(&(struct svc_caller){j->principal}));
}

/* The cap checked again with what the copy took, the meta written and the rename. */
static int snapshot_keep(struct snap_job *j, json_t **ret, struct svc_err *err)
{
	size_t n;
	uint64_t used;
	snapstore_usage(&n, &used);
	if (used + j->info.bytes > D.cfg.max_snapshot_bytes)
		return svc_fail(err, API_ERR_SNAPSHOT_LIMIT,
				"the snapshot takes %llu bytes, over what is left of --max-snapshot-bytes "
				"(%llu of %llu in use): delete snapshots first",
				(unsigned long long)j->info.bytes, (unsigned long long)used,
				(unsigned long long)D.cfg.max_snapshot_bytes);
	json_t *meta = snapshot_meta(j);
	int r = meta ? snapstore_commit(j->id, meta) : -ENOMEM;
	if (r < 0) {
		json_decref(meta);
		return svc_fail(err, API_ERR_INTERNAL, "snapshot: write its meta: %s", strerror(-r));
	}
	metric_inc(M_SNAPSHOTS);
	metric_observe(H_SNAPSHOT, (now_ms() - j->t0) / 1000.0);
	*ret = meta;
	return 0;
}

/* What the thread made becomes a snapshot, or goes whole. */
static int snapshot_finish(struct snap_job *j, json_t **ret, struct svc_err *err)
{
	int r;
	if (j->s->state == SBX_DESTROYED)
		r = svc_fail(err, API_ERR_CONFLICT,
			     "sandbox %s was destroyed while its snapshot was being made", j->s->id);
	else if (j->r < 0)
		r = runtime_fail(err, j->r, j->s, "snapshot", j->cerr.msg);
	else
		r = snapshot_keep(j, ret, err);
	if (r < 0)
		snapstore_abort(j->id); /* what commit did not rename is still .tmp-<id> */
	return r;
}

static void snap_done(void *arg)
{
	struct snap_job *j = arg;
	struct svc_err err = {};
	json_t *meta = NULL;
	struct sbx *s = j->s;
	int r = snapshot_finish(j, &meta, &err);
	j->then(j, r < 0 ? NULL : meta, &err);
	free(j);
	sbx_busy_end(s); /* last: a destroy that waited may free @s */
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

/* The directory made and the job queued, the sandbox busy: 0, and @r is the job's. */
static int snapshot_queue(struct snap_job *j, struct svc_reply *r, struct svc_err *err)
{
	int q = snapstore_begin(j->id, &j->fs);
	if (q < 0)
		return svc_fail(err, API_ERR_INTERNAL, "snapshot: %s", strerror(-q));
	if ((q = worker_call(&snapper, snap_work, j, snap_done, j)) < 0) {
		close(TAKE_FD(j->fs));
		snapstore_abort(j->id);
		return svc_fail(err, API_ERR_UNAVAILABLE, "snapshot: cannot queue it: %s", strerror(-q));
	}
	j->s->busy = true;
	j->out = r;
	r->gone = snap_gone;
	r->gone_arg = j;
	return 0;
}

/* Admitted and recorded (the audit record before the copy), then queued; @then answers @r
 * when it is done. -1: nothing was made and @r is untouched. */
static int snapshot_new(const struct svc_caller *who, struct sbx *s, const char *event,
			json_t *fields, const struct api_fork *f, snap_then_fn then,
			struct svc_reply *r, struct svc_err *err)
{
	_cleanup_(json_decrefp) json_t *fl = fields;
	if (s->busy)
		return busy_fail(s, err);
	if (snapshot_admit(err) < 0)
		return -1;
	struct snap_job *j = calloc(1, sizeof(*j));
	if (!j)
		return svc_fail(err, API_ERR_INTERNAL, "out of memory");
	*j = (struct snap_job){.s = s, .rt = s->rt, .principal = who->principal, .fs = -1,
			       .t0 = now_ms(), .then = then, .fork = f ? *f : (struct api_fork){0}};
	snapstore_new_id(j->id);
	json_object_set_new(fl, "snapshot", json_string(j->id));
	int a = sbx_audit_rc(s, event, json_incref(fl));
	if (a < 0 || snapshot_queue(j, r, err) < 0) {
		free(j);
		return a < 0 ? svc_fail_audit(err, a) : -1;
	}
	return 0;
}

static void create_then(struct snap_job *j, json_t *meta, const struct svc_err *err)
{
	if (!j->out)
		json_decref(meta); /* the client left: the snapshot is kept all the same */
	else if (meta)
		j->out->json(j->out, 201, meta);
	else
		j->out->error(j->out, err);
}

int svc_snapshot_create(const struct svc_caller *who, struct sbx *s, struct svc_reply *r,
			struct svc_err *err)
{
	return snapshot_new(who, s, AUDIT_SANDBOX_SNAPSHOT, json_object(), NULL, create_then, r, err);
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

/* The fork's snapshot is made (or not): its children, all started before the first is up. */
static void fork_then(struct snap_job *j, json_t *meta, const struct svc_err *err)
{
	struct svc_caller who = {j->principal};
	struct svc_reply *r = j->out;
	struct svc_err oom = {.code = API_ERR_INTERNAL, .msg = "out of memory"};
	bool made = meta != NULL; /* and kept, whatever follows */
	json_decref(meta);
	struct fork_job *job = made ? calloc(1, sizeof(*job)) : NULL;
	if (job && !(job->results = json_array())) {
		free(job);
		job = NULL;
	}
	if (!job) {
		if (r)
			r->error(r, made ? &oom : err);
		return;
	}
	metric_inc(M_FORKS);
	job->out = r;
	job->pending = j->fork.count + 1; /* one for this call, settled last */
	if (r) {
		r->gone = job_gone;
		r->gone_arg = job;
	}
	for (size_t i = 0; i < j->fork.count; i++)
		json_array_append_new(job->results, json_null());
	for (size_t i = 0; i < j->fork.count; i++)
		fork_one(&who, j->s, &j->fork, j->id, job, i);
	job_finish(job); /* this call's share: the answer goes now if every child answered */
}

int svc_sandbox_fork(const struct svc_caller *who, struct sbx *s, const struct api_fork *f,
		     struct svc_reply *r, struct svc_err *err)
{
	json_t *fields = json_pack("{s:I}", "count", (json_int_t)f->count);
	return snapshot_new(who, s, AUDIT_SANDBOX_FORK, fields, f, fork_then, r, err);
}
