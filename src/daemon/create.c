/* Making sandboxes for clients: the checks and records of a create, the warm pool that most
 * creates are served from, a template's START and READY, and the create requests waiting
 * for a sandbox to be up. sandbox.c runs a sandbox once made and tells us, through the hooks
 * registered in pool_start(), when one is up (HELLO_OK) or gone.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "basic/clock.h"
#include "basic/log.h"
#include "audit/audit.h"
#include "daemon/daemon.h"
#include "daemon/service.h"
#include "image/store.h"
#include "net/secretenv.h"

/* A create request waiting for its sandbox to be up (or its template's READY to pass). */
struct waiter {
	struct svc_reply *rep; /* NULL once the client left: the sandbox is made all the same */
	uint64_t started_ms;
	struct waiter *next;
};

static void on_waiter_gone(void *arg)
{
	struct waiter *w = arg;
	w->rep = NULL;
}

static void waiters_fail(struct sbx *s, enum api_error e, const char *msg)
{
	while (s->waiters) {
		struct waiter *w = s->waiters;
		struct svc_err err = {.code = e};
		s->waiters = w->next;
		snprintf(err.msg, sizeof(err.msg), "%s", msg);
		if (w->rep)
			w->rep->error(w->rep, &err);
		free(w);
	}
}

/* The 201 of a create, on @rp; NULL JSON is no memory (as reply_json() has it). */
static void answer_created(struct svc_reply *rp, struct sbx *s)
{
	struct svc_err err = {.code = API_ERR_INTERNAL, .msg = "out of memory"};
	json_t *body = sbx_json(s);
	if (body)
		rp->json(rp, 201, body);
	else
		rp->error(rp, &err);
}

static void waiters_ready(struct sbx *s)
{
	while (s->waiters) {
		struct waiter *w = s->waiters;
		s->waiters = w->next;
		metric_inc(M_CREATES);
		metric_observe(H_CREATE, (now_ms() - w->started_ms) / 1000.0);
		if (w->rep)
			answer_created(w->rep, s);
		free(w);
	}
}

/* Ready: the record first, then the create requests answered; without the record the
 * sandbox is not handed out. */
static void hand_out(struct sbx *s)
{
	if (sbx_audit_rc(s, AUDIT_SANDBOX_READY, NULL) < 0) {
		waiters_fail(s, API_ERR_AUDIT_UNAVAILABLE,
			     "the audit log cannot be written: the sandbox was not made");
		sbx_destroy(s, "create_failed");
		return;
	}
	waiters_ready(s);
}


static const struct sbx_hooks create_hooks;

/* ---- a template's START and READY ---- */

#define READY_INTERVAL_MS 100

static void ready_result(struct sbx *s, bool ok);

static void on_ready_retry(evutil_socket_t fd, short what, void *arg)
{
	struct sbx *s = arg;
	if (s->state == SBX_RUNNING && proc_spawn_template(s, s->ready, ready_result) < 0)
		ready_result(s, false);
}

static void ready_result(struct sbx *s, bool ok)
{
	if (s->state != SBX_RUNNING || !s->waiters)
		return;
	if (ok) {
		hand_out(s);
		return;
	}
	if (now_ms() >= s->ready_deadline_ms) {
		waiters_fail(s, API_ERR_INTERNAL, "the template's READY check did not pass in 30 s");
		sbx_destroy(s, "ready_failed");
		return;
	}
	if (!s->ready_ev && !(s->ready_ev = evtimer_new(D.base, on_ready_retry, s))) {
		waiters_fail(s, API_ERR_INTERNAL, "out of memory");
		sbx_destroy(s, "create_failed");
		return;
	}
	struct timeval tv = {0, READY_INTERVAL_MS * 1000};
	evtimer_add(s->ready_ev, &tv);
}

/* START runs in the background as the template's user; READY is tried every 100 ms until
 * it exits 0 (then the create request is answered) or --ready-timeout has passed (then it
 * fails). */
static int template_start(struct sbx *s)
{
	if (s->start && proc_spawn_template(s, s->start, NULL) < 0)
		return -EIO;
	if (!s->ready) {
		hand_out(s);
		return 0;
	}
	s->ready_deadline_ms = now_ms() + D.cfg.ready_timeout_s * 1000;
	return proc_spawn_template(s, s->ready, ready_result) < 0 ? -EIO : 0;
}


/* ---- the warm pool ----
 *
 * Starting a sandbox costs the starter a few milliseconds (uid slot, cgroups, clone() into
 * new namespaces, id maps). Pooled sandboxes are started on a thread of their own, so that
 * refilling the pool never delays a request; the thread hands each started jail back
 * through a pipe and the loop takes it from there. The jail's child is async-signal-safe
 * between clone() and exec(), so cloning from a threaded process is sound.
 *
 * The pool keeps --pool sandboxes ready for `host` on the jail and for each template and
 * runtime a create asked for (the POOL_TEMPLATES most recently asked for): a pooled gvisor
 * sandbox hides runsc's boot as a pooled jail hides clone(). A pooled sandbox of a template holds the
 * version it was made from, opened on the loop before the thread starts it. One whose
 * template has since been rebuilt or removed is retired (destroyed, and the pool refilled
 * from the new version) whenever the pool is looked at: every create and destroy, and the
 * end of a build or removal through the API. It is never handed out. */

#define POOL_TEMPLATES 8

struct warm {
	char name[65];     /* "" for host */
	const char *runtime; /* the registry's name (static) */
	size_t pending;    /* asked of the creator thread, not back yet */
	uint64_t used_ms;  /* the last create that asked for it */
};

static struct warm warm[1 + POOL_TEMPLATES] = {{.name = ""}}; /* [0]: always; its runtime: pool_start() */
static size_t n_warm = 1;

struct started {
	char id[SBX_ID_LEN + 1];       /* the sandbox's, chosen on the loop */
	char name[65];                 /* its warm entry's */
	const char *runtime;           /* its warm entry's */
	struct store_version *version; /* NULL for host; the sandbox's once adopted */
	struct cordon_sandbox *rt;
	struct audit_log *audit;       /* its log, made here, or NULL: the loop makes it */
	struct cordon_err err;
	bool warm_only;                /* the runtime's images of it made, no sandbox */
	bool defer;                    /* a refill with stock: after the requests (creator_defer) */
	uint64_t disk_bytes, memory_bytes; /* warm_only: the create's shape (0: the default) */
	uint32_t cpus_milli;           /* (a microvm's template snapshot is of one shape) */
};

static void images_made(struct started *st);

/* The audit log of @st's sandbox, made on this thread: creating a file and syncing its
 * directory cost the loop a tenth of a lifecycle. NULL on failure: the first record makes
 * it then (sandbox.c's audit_prepare), and a failure there refuses the request. */
static void creator_audit(struct started *st)
{
	struct cordon_err err = {};
	char file[SBX_ID_LEN + 8];
	snprintf(file, sizeof(file), "%s.jsonl", st->id);
	st->audit = audit_open(D.audit_dirfd, file, &err);
}

/* What a started sandbox that the loop does not adopt leaves: its empty log too. */
static void started_free(struct started *st)
{
	char file[SBX_ID_LEN + 8];
	if (st->audit) {
		snprintf(file, sizeof(file), "%s.jsonl", st->id);
		unlinkat(D.audit_dirfd, file, 0);
		audit_free(st->audit);
	}
	cordon_sandbox_free(st->rt);
	version_free(st->version);
	free(st);
}

static int creator_req[2] = {-1, -1}, creator_res[2] = {-1, -1}, release_fd = -1;
static size_t creator_pending;
static struct event *creator_ev;

/* Starts one pooled sandbox for the loop, or makes the images a start needs (warm_only). */
static void creator_start(struct started *st)
{
	struct cordon_spec spec;
	cordon_spec_init(&spec);
	spec.timeout_ms = 0;
	spec.rootfs = st->version ? st->version->rootfs : NULL;
	spec.runtime = st->runtime;
	network_spec(&spec, st->runtime);
	if (st->disk_bytes)
		spec.disk_bytes = st->disk_bytes;
	if (st->memory_bytes)
		spec.memory_bytes = st->memory_bytes;
	if (st->cpus_milli)
		spec.cpus_milli = st->cpus_milli;
	if (st->warm_only)
		(void)cordon_runtime_warm(&spec, &st->err);
	else if (cordon_sandbox_start(&spec, &st->rt, &st->err) < 0)
		st->rt = NULL;
	else
		creator_audit(st);
	if (write(creator_res[1], &st, sizeof(st)) != sizeof(st))
		started_free(st);
}

/* A refill while more than half of the pool is ready waits for a pause in the clients'
 * requests (--pool-refill-quiet, 3 ms; http.c stamps every request but /healthz and
 * /metrics), for the pool's next job (a burst of creates), or for --pool-refill-defer (50 ms)
 * at the most, whichever comes first: the create that took a pooled sandbox is usually
 * followed by its client's exec at once, and on a small host that exec otherwise runs beside
 * the refill's build (8-10 ms of CPU) and costs half as much again (bench/RESULTS.md). With
 * half the pool or less ready a refill starts at once: a stream of creates is bounded by
 * builds, and waiting would only empty the pool. */
static _Atomic uint64_t last_request_ms;

void pool_request_seen(void)
{
	atomic_store_explicit(&last_request_ms, mono_ms(), memory_order_relaxed);
}

static void creator_defer(void)
{
	uint64_t start = mono_ms(), quiet = D.cfg.pool_refill_quiet_ms, most = D.cfg.pool_refill_defer_ms;
	struct pollfd p = {.fd = creator_req[0], .events = POLLIN};
	for (;;) {
		uint64_t now = mono_ms(), last = atomic_load_explicit(&last_request_ms, memory_order_relaxed);
		uint64_t idle = now > last ? now - last : 0, waited = now - start;
		if (idle >= quiet || waited >= most)
			return;
		/* asleep until the pause could be long enough: no wake-up per millisecond beside
		 * the requests it waits for */
		uint64_t ms = quiet - idle < most - waited ? quiet - idle : most - waited;
		if (poll(&p, 1, (int)(ms < 1000 ? ms : 1000)) > 0)
			return; /* the next job: a burst of creates */
	}
}

/* The pool's thread: sandboxes to start, and the deletion of template versions that the
 * sandboxes' ends let go (store_release_step), off the loop. Besides it there are the
 * teardown and snapshot threads (worker.c) and libcordon's spawners (runtime/jail/spawn.c):
 * a jail child runs beside them all, and calls the kernel's set*id(), never glibc's, which
 * would wait for every thread glibc knows of. */
static void *creator_main(void *arg)
{
	int timeout = -1;
	for (;;) {
		struct pollfd p[2] = {{.fd = creator_req[0], .events = POLLIN},
				      {.fd = release_fd, .events = POLLIN}};
		if (poll(p, 2, timeout) < 0 && errno != EINTR)
			return NULL;
		struct started *st;
		if ((p[0].revents & POLLIN) && read(creator_req[0], &st, sizeof(st)) == sizeof(st)) {
			if (st->defer)
				creator_defer();
			creator_start(st);
		} else if (p[0].revents & (POLLHUP | POLLERR))
			return NULL;
		timeout = store_release_step();
	}
}

/* @runtime NULL: of any runtime. */
static struct warm *warm_find(const char *name, const char *runtime)
{
	for (size_t i = 0; i < n_warm; i++)
		if (strcmp(warm[i].name, name) == 0 && (!runtime || strcmp(warm[i].runtime, runtime) == 0))
			return &warm[i];
	return NULL;
}

/* @name ("" for host) on @runtime is kept warm from now on, in place of the template least
 * recently asked for if there are POOL_TEMPLATES already (its pooled sandboxes are retired). */
static void warm_touch(const char *name, const char *runtime)
{
	struct warm *w = warm_find(name, runtime);
	if (!w && n_warm < ELEMENTSOF(warm))
		w = &warm[n_warm++];
	if (!w) {
		w = &warm[1];
		for (size_t i = 2; i < n_warm; i++)
			if (warm[i].used_ms < w->used_ms)
				w = &warm[i];
	}
	if (strcmp(w->name, name) != 0 || !w->runtime || strcmp(w->runtime, runtime) != 0)
		*w = (struct warm){0};
	snprintf(w->name, sizeof(w->name), "%s", name);
	w->runtime = runtime;
	w->used_ms = now_ms();
}

static void warm_drop(struct warm *w)
{
	if (w == warm)
		return;
	*w = warm[--n_warm];
	warm[n_warm] = (struct warm){0};
}

/* Whether pooled @s is of the version its template's name points to now (@cur, read once
 * per pass; NULL when the name is gone). */
static bool pooled_current(const struct sbx *s, const char *cur)
{
	if (!s->template_name[0])
		return true;
	return cur && s->version && strcmp(s->version->id, cur) == 0;
}

static bool pool_busy; /* retiring or filling: a destroy's pool_fill() waits for us */

/* The pooled sandboxes of template @name that are not current, one at a time (a destroy
 * changes the list); a template whose name is gone stops being warm. */
static void pool_retire(const char *name)
{
	char cur[STORE_VERSION_MAX], n[sizeof(warm[0].name)];
	snprintf(n, sizeof(n), "%s", name); /* @name may be a warm entry's, which moves */
	bool named = !n[0] || store_version_current(n, cur) == 0;
	for (struct sbx *s = D.pool; s;) {
		if (strcmp(s->template_name, n) == 0 && !pooled_current(s, named ? cur : NULL)) {
			sbx_destroy(s, "pool_retired");
			s = D.pool;
			continue;
		}
		s = s->pool_next;
	}
	for (struct warm *w; !named && (w = warm_find(n, NULL));)
		warm_drop(w);
}

/* Pooled sandboxes of a template no longer kept warm. */
static void pool_retire_cold(void)
{
	for (struct sbx *s = D.pool; s;) {
		if (!warm_find(s->template_name, s->runtime)) {
			sbx_destroy(s, "pool_retired");
			s = D.pool;
			continue;
		}
		s = s->pool_next;
	}
}

static void on_started(evutil_socket_t fd, short what, void *arg)
{
	struct started *st;
	while (read(creator_res[0], &st, sizeof(st)) == sizeof(st)) {
		struct warm *w = warm_find(st->name, st->runtime);
		creator_pending--;
		if (st->warm_only) {
			images_made(st);
			continue;
		}
		if (w && w->pending)
			w->pending--;
		struct sbx *s = st->rt && !D.stopping ? sbx_alloc(true, (uint64_t)API_DEFAULT_DISK_MB << 20) : NULL;
		if (!s) {
			if (!D.stopping) { /* started while we were stopping: it goes at once */
				log_error("warm pool: %s", st->err.msg[0] ? st->err.msg : "out of memory");
				metric_inc(M_CREATE_FAILURES);
			}
			started_free(st);
			continue;
		}
		memcpy(s->id, st->id, sizeof(s->id));
		s->rt = st->rt;
		s->audit = st->audit;
		s->runtime = cordon_sandbox_runtime(s->rt);
		s->version = st->version;
		snprintf(s->template_name, sizeof(s->template_name), "%s", st->name);
		sbx_adopt(s);
		free(st);
	}
	pool_fill();
}

int pool_start(void)
{
	pthread_t t;
	sbx_hooks_add(&create_hooks);
	warm[0].runtime = D.cfg.runtime; /* the host template, on what a create gets by default */
	if (pipe2(creator_req, O_CLOEXEC) < 0 || pipe2(creator_res, O_CLOEXEC | O_NONBLOCK) < 0)
		return -errno;
	creator_ev = loop_event_new(creator_res[0], EV_READ | EV_PERSIST, on_started, NULL);
	if (!creator_ev || event_add(creator_ev, NULL) < 0)
		return -ENOMEM;
	/* What the jail caches per process (the sealed cordon-init, the cgroup mode) is made
	 * here, before the pool's thread exists; the teardown and snapshot threads only free or
	 * snapshot sandboxes, each handed to them (through a pipe) after the loop made it, so
	 * after this too. */
	struct cordon_err err = {};
	if (cordon_prepare(&err) < 0) {
		log_error("%s", err.msg);
		return err.code;
	}
	if ((release_fd = store_release_start()) < 0)
		return release_fd;
	int r = pthread_create(&t, NULL, creator_main, NULL);
	if (r != 0)
		return -r;
	pthread_setname_np(t, "cordond-pool"); /* what top, perf and bench_daemon.py show */
	pthread_detach(t);
	templates_watch(pool_fill);
	return 0;
}

/* @w's sandboxes in the pool (starting or ready), and with those asked of the thread. */
static size_t in_pool(const struct warm *w)
{
	size_t n = 0;
	for (struct sbx *s = D.pool; s; s = s->pool_next)
		n += strcmp(s->template_name, w->name) == 0 && strcmp(s->runtime, w->runtime) == 0;
	return n;
}

static size_t pooled_of(const struct warm *w)
{
	return w->pending + in_pool(w);
}

/* ---- images a runtime caches, made off the loop ----
 *
 * A start on the loop never makes the image a runtime caches per template version (the
 * microvm's erofs: minutes for the host's /usr): sbx_new() asks for cached_only, and a start
 * whose image is not made yet fails with -EINPROGRESS. The create is answered 503 and the image
 * made on the creator thread, one job per template and runtime at a time; the pool's starts,
 * on that thread already, make theirs as they go. */

static struct {
	char name[65];
	const char *runtime;
} making[8];

static bool making_find(const char *name, const char *runtime, size_t *ret)
{
	for (size_t i = 0; i < ELEMENTSOF(making); i++)
		if (making[i].runtime && making[i].runtime == runtime && strcmp(making[i].name, name) == 0)
			return *ret = i, true;
	return false;
}

/* The images of @name ("" for host) on @runtime for a create of @shape asked of the creator
 * thread, unless they are being made already (or eight others are). */
static void images_make(const char *name, const char *runtime, const struct sbx_start *shape)
{
	size_t i;
	struct cordon_err err = {};
	if (making_find(name, runtime, &i))
		return;
	for (i = 0; i < ELEMENTSOF(making) && making[i].runtime; i++)
		;
	if (i == ELEMENTSOF(making))
		return;
	struct started *st = calloc(1, sizeof(*st));
	if (!st)
		return;
	snprintf(st->name, sizeof(st->name), "%s", name);
	st->runtime = runtime;
	st->warm_only = true;
	st->disk_bytes = shape->disk_bytes;
	st->memory_bytes = shape->memory_bytes;
	st->cpus_milli = shape->cpus_milli;
	if (name[0] && ((st->version = malloc(sizeof(*st->version))) == NULL ||
			store_version_open(name, st->version, &err) < 0)) {
		free(st->version);
		free(st);
		return;
	}
	if (write(creator_req[1], &st, sizeof(st)) != sizeof(st)) {
		version_free(st->version);
		free(st);
		return;
	}
	snprintf(making[i].name, sizeof(making[i].name), "%s", name);
	making[i].runtime = runtime;
	creator_pending++;
}

static void images_made(struct started *st)
{
	size_t i;
	if (making_find(st->name, st->runtime, &i))
		making[i] = (typeof(making[i])){0};
	if (st->err.code)
		log_error("%s images of template '%s': %s", st->runtime, st->name[0] ? st->name : "host",
			  st->err.msg);
	else
		log_info("%s images of template '%s' made", st->runtime, st->name[0] ? st->name : "host");
	version_free(st->version);
	free(st);
}

/* One more pooled sandbox of @w asked of the thread; -errno if none can be (a template
 * whose name is gone stops being warm). */
static int pool_request(struct warm *w)
{
	struct cordon_err err = {};
	struct started *st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	make_id(st->id);
	snprintf(st->name, sizeof(st->name), "%s", w->name);
	st->runtime = w->runtime;
	st->defer = 2 * in_pool(w) > D.cfg.pool;
	int r = 0;
	if (w->name[0] && ((st->version = malloc(sizeof(*st->version))) == NULL ||
			   (r = store_version_open(w->name, st->version, &err)) < 0)) {
		free(st->version);
		free(st);
		if (r == -ENOENT)
			warm_drop(w);
		else
			log_warning("warm pool: template '%s': %s", w->name, err.msg[0] ? err.msg : "out of memory");
		return r < 0 ? r : -ENOMEM;
	}
	if (write(creator_req[1], &st, sizeof(st)) != sizeof(st)) {
		version_free(st->version);
		free(st);
		return -EIO;
	}
	w->pending++;
	creator_pending++;
	return 0;
}

void pool_fill(void)
{
	if (D.stopping || pool_busy)
		return;
	pool_busy = true;
	templates_watch(pool_fill); /* if the store was not there before */
	pool_retire_cold();
	for (size_t i = n_warm; i-- > 0;) /* from the end: a dropped entry takes the last's place */
		pool_retire(warm[i].name);
	for (size_t i = 0; i < n_warm; i++) {
		struct warm *w = &warm[i];
		while (pooled_of(w) < D.cfg.pool && D.n_live + creator_pending < D.cfg.max_sandboxes)
			if (pool_request(w) < 0)
				break;
	}
	pool_busy = false;
}

/* A ready pooled sandbox of @name ("" for host) of its current version on @runtime, or
 * NULL. */
static struct sbx *pool_claim(const char *name, const char *runtime)
{
	if (!warm_find(name, runtime))
		return NULL;
	pool_busy = true; /* the caller fills once it has its sandbox */
	pool_retire(name); /* a rebuild by the CLI is seen here first */
	pool_busy = false;
	for (struct sbx *s = D.pool; s; s = s->pool_next)
		if (s->state == SBX_READY && strcmp(s->template_name, name) == 0 &&
		    strcmp(s->runtime, runtime) == 0) {
			sbx_pool_unlink(s);
			s->pooled = false;
			D.n_pool_ready--;
			s->state = SBX_RUNNING;
			s->created_ms = now_ms(); /* made for the client now, whenever it was built */
			return s;
		}
	return NULL;
}

/* The secrets into locked memory and their placeholders (and the CA variables) into the
 * sandbox's environment; then the policy, which with secrets and no network given is allow
 * with HOST:443 for each of their hosts (as cordon run --secret has it). */
static int apply_network(struct sbx *s, const struct svc_caller *who, const struct api_create *req)
{
	static const char *const policies[] = {"deny", "allow", "public"};
	char rules[API_MAX_SECRETS * API_MAX_SECRET_HOSTS][270];
	const char *ptrs[ELEMENTSOF(rules)];
	struct svc_err e = {};
	_cleanup_(net_eff_done) struct net_eff eff = {};
	if (net_resolve(&req->network, who->principal, &eff, "network.", &e) < 0)
		return -EINVAL; /* checked before (svc_sandbox_check): the profiles do not change */
	const char *policy = policies[eff.policy];
	const char *const *allow = eff.allow;
	size_t n = eff.n_allow;
	/* Approve rules read HTTPS requests through the same interception: the CA is trusted. */
	if (!req->secrets.n && json_array_size(eff.approve) &&
	    secrets_env(NULL, secretenv_bundle_dst(s->version ? s->version->rootfs : NULL), &s->env, &s->n_env) < 0)
		return -ENOMEM;
	if (req->secrets.n) {
		if (secrets_new(&req->secrets, &s->secrets, &e) < 0 ||
		    secrets_env(s->secrets, secretenv_bundle_dst(s->version ? s->version->rootfs : NULL),
				&s->env, &s->n_env) < 0)
			return -EINVAL;
		if (eff.policy == API_NET_DENY) {
			n = secrets_rules(s->secrets, rules, ELEMENTSOF(rules));
			for (size_t i = 0; i < n; i++)
				ptrs[i] = rules[i];
			policy = "allow";
			allow = ptrs;
		}
	}
	json_t *extra = net_eff_extra(&eff);
	int r = network_set(s, policy, allow, n, extra, NULL);
	json_decref(extra);
	return r;
}

static int apply_request(struct sbx *s, const struct svc_caller *who,
			 const struct api_create *req)
{
	struct cordon_spec spec;
	cordon_spec_init(&spec);
	api_create_to_spec(req, &spec);
	s->owner = who->principal;
	if (s->owner)
		s->owner->live++;
	s->timeout_s = req->timeout_s;
	s->deadline_ms = now_ms() + req->timeout_s * 1000;
	json_decref(s->limits);
	s->limits = json_pack("{s:f, s:I, s:I, s:I}", "cpus", spec.cpus_milli / 1000.0, "memory_mb",
			      (json_int_t)(spec.memory_bytes >> 20), "pids", (json_int_t)spec.pids,
			      "disk_mb", (json_int_t)(spec.disk_bytes >> 20));
	s->env = calloc(spec.n_env + 1, sizeof(char *));
	if (!s->env || !s->limits)
		return -ENOMEM;
	for (size_t i = 0; i < spec.n_env; i++)
		if (!(s->env[s->n_env++] = strdup(spec.env[i])))
			return -ENOMEM;
	json_decref(s->metadata);
	s->metadata = json_object();
	for (size_t i = 0; i < req->metadata.n; i++)
		json_object_set_new(s->metadata, req->metadata.items[i].key,
				    json_string(req->metadata.items[i].value));
	if (token_env(s) < 0) /* CORDON_TASK_TOKEN: id, template, metadata, deadline */
		return -ENOMEM;
	if (apply_network(s, who, req) < 0)
		return -EINVAL;
	/* A pooled sandbox already has the default limits; writing cgroup files costs. */
	if (spec.memory_bytes != s->spec.memory_bytes || spec.cpus_milli != s->spec.cpus_milli ||
	    spec.pids != s->spec.pids) {
		int r = cordon_sandbox_set_limits(s->rt, spec.memory_bytes, spec.cpus_milli, spec.pids);
		if (r < 0 && r != -ENOTSUP)
			return r;
		s->spec.memory_bytes = spec.memory_bytes;
		s->spec.cpus_milli = spec.cpus_milli;
		s->spec.pids = spec.pids;
	}
	/* The TTL counts from when the client gets the sandbox: a slow build must not eat it. */
	if (s->state == SBX_RUNNING)
		sbx_arm_ttl(s);
	state_put(s);
	return 0;
}

/* The first record of a sandbox's log; one from a snapshot names it (and a fork's child its
 * parent). */
static int audit_create(struct sbx *s, const struct api_create *req)
{
	json_t *f = json_pack("{s:s, s:s, s:O, s:O, s:s}", "template", req->template_name,
			      "runtime", s->runtime, "limits", s->limits, "network", s->network,
			      "principal", s->owner ? s->owner->name : "local");
	if (f && s->from_snapshot[0])
		json_object_set_new(f, "snapshot", json_string(s->from_snapshot));
	if (f && s->parent[0])
		json_object_set_new(f, "parent", json_string(s->parent));
	if (f && s->secrets) /* names and hosts only */
		json_object_set_new(f, "secrets", secrets_public_json(s->secrets));
	return sbx_audit_rc(s, AUDIT_SANDBOX_CREATE, f);
}

/* What the template's template.json says about running it: its ENV after the request's
 * (the first of a name wins), its WORKDIR and USER as the defaults of processes, and its
 * START and READY, run when the sandbox is up (on_hello_ok). */
static int apply_template(struct sbx *s)
{
	struct store_config cfg;
	if (store_config_read(s->version, &cfg, NULL) < 0)
		return -ENOENT;
	int r = -ENOMEM;
	char **v = realloc(s->env, (s->n_env + cfg.n_env + 1) * sizeof(char *));
	if (!v)
		goto out;
	s->env = v;
	for (size_t i = 0; i < cfg.n_env; i++)
		if ((s->env[s->n_env] = strdup(cfg.env[i])))
			s->n_env++;
	s->env[s->n_env] = NULL;
	if (cfg.workdir && !(s->workdir = strdup(cfg.workdir)))
		goto out;
	s->user_default_set = cfg.user_set;
	s->user_default = cfg.user;
	s->start = json_incref(cfg.start);
	s->ready = json_incref(cfg.ready);
	r = 0;
out:
	store_config_done(&cfg);
	return r;
}

/* The version template @name points to now, held by the sandbox for as long as it lives;
 * NULL with @e set if there is none. */
static struct store_version *template_open(const char *name, struct svc_err *e)
{
	struct cordon_err err = {};
	struct store_version *v = malloc(sizeof(*v));
	int r = v ? store_version_open(name, v, &err) : -ENOMEM;
	if (r >= 0)
		return v;
	free(v);
	if (r == -ENOENT || r == -EINVAL)
		svc_fail(e, API_ERR_NOT_FOUND, "no template '%s'", name);
	else
		svc_fail(e, API_ERR_INTERNAL, "template '%s': %s", name,
			 err.msg[0] ? err.msg : strerror(-r));
	return NULL;
}

static int add_waiter(struct sbx *s, struct svc_reply *rp, uint64_t t0)
{
	struct waiter *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	*w = (struct waiter){.rep = rp, .started_ms = t0, .next = s->waiters};
	s->waiters = w;
	rp->gone = on_waiter_gone;
	rp->gone_arg = w;
	return 0;
}

/* ---- svc_sandbox_create, step by step ---- */

/* What a create starts from besides its template: a snapshot's fs/ (-1: none) and, for a
 * fork's child, the parent's id. */
struct create_from {
	int fd;
	const char *parent;
};

/* The runtime @req names (none: --default-runtime), resolved on this host; -1 with @e set when it cannot run here. */
static int create_runtime(const struct api_create *req, const char **ret, struct svc_err *e)
{
	struct cordon_err err = {};
	const char *name = req->runtime_set ? api_runtime_name(req->runtime) : D.cfg.runtime;
	int r = cordon_runtime_resolve(name, ret, &err);
	if (r < 0) /* known to the API, refused by this host: nothing made */
		return svc_fail(e, r == -ENOENT ? API_ERR_INVALID_FIELD : API_ERR_UNSUPPORTED_RUNTIME,
				"%s", err.msg);
	return 0;
}

/* Room for one sandbox more: a pooled sandbox gives its place to a real request. */
static int make_room(struct svc_err *e)
{
	if (D.n_live < D.cfg.max_sandboxes)
		return 0;
	if (D.pool)
		sbx_destroy(D.pool, "pool_evicted");
	if (D.n_live < D.cfg.max_sandboxes)
		return 0;
	return svc_fail(e, API_ERR_CAPACITY, "the server runs its maximum of %llu sandboxes",
			(unsigned long long)D.cfg.max_sandboxes);
}

/* Secrets and approve rules are read through TLS interception: their sandbox trusts the
 * Cordon CA, bound in at start. */
static bool trusts_ca(const struct api_create *req)
{
	return req->secrets.n || req->network.n_approve || profile_has_approve(req->network.profile);
}

/* A sandbox made now for @req, of @version (NULL: the host's), which it takes; its disk
 * filled from @from's snapshot when there is one. */
static struct sbx *sandbox_make(const struct api_create *req, const char *runtime,
				struct store_version *version, const char *warm_name,
				const struct create_from *from, struct svc_err *e)
{
	struct cordon_err err = {};
	struct cordon_volume vols[API_MAX_VOLUMES];
	struct sbx_volumes *claim = NULL;
	json_t *vjson = NULL;
	const char *rootfs = version ? version->rootfs : NULL;
	struct cordon_bind trust = {(char *)secrets_bundle(), (char *)secretenv_bundle_dst(rootfs)};
	struct sbx_start st = {.disk_bytes = (uint64_t)req->limits.disk_mb << 20, .rootfs = rootfs,
			       .memory_bytes = (uint64_t)req->limits.memory_mb << 20,
			       .cpus_milli = req->limits.cpus_milli,
			       .runtime = runtime, .from = from->fd,
			       .bind = trusts_ca(req) ? &trust : NULL, .vols = vols,
			       .n_vols = req->n_volumes, .spec_hook = network_spec};
	if (make_room(e) < 0 || (req->n_volumes && svc_volumes_claim(req, vols, &claim, &vjson, e) < 0)) {
		version_free(version);
		return NULL;
	}
	struct sbx *s = sbx_new(false, &st, &err);
	if (!s) {
		version_free(version);
		sbx_volumes_free(claim);
		json_decref(vjson);
		/* Whatever the errno, a sandbox that cannot be made is the server's failure,
		 * but for a snapshot that does not fit the disk the request asked for. */
		metric_inc(M_CREATE_FAILURES);
		if (from->fd >= 0 && err.code == -ENOSPC)
			svc_fail(e, API_ERR_INVALID_FIELD, "limits.disk_mb: the snapshot does not "
				 "fit in a disk of %u MiB", req->limits.disk_mb);
		else if (from->fd >= 0 && err.code == -EINVAL) /* a request the snapshot cannot be */
			svc_fail(e, API_ERR_INVALID_FIELD, "snapshot: %s", err.msg);
		else if (err.code == -EINPROGRESS) { /* cached_only: made on the thread */
			images_make(warm_name, runtime, &st);
			svc_fail(e, API_ERR_UNAVAILABLE, "%s: it is being made now (minutes the "
				 "first time); retry later", err.msg);
		} else
			svc_fail(e, err.code == -EAGAIN ? API_ERR_UNAVAILABLE : API_ERR_INTERNAL,
				 "could not make the sandbox: %s", err.msg);
		return NULL;
	}
	s->vol_claim = claim;
	s->volumes = vjson;
	s->version = version;
	snprintf(s->template_name, sizeof(s->template_name), "%s", warm_name);
	snprintf(s->from_snapshot, sizeof(s->from_snapshot), "%s", from->fd >= 0 ? req->snapshot : "");
	snprintf(s->parent, sizeof(s->parent), "%s", from->parent ? from->parent : "");
	return s;
}

/* A microvm's guest has its RAM and vCPUs from its boot: the pool's have the default ones. */
static bool default_shape(const struct api_create *req, const char *runtime)
{
	return !cordon_runtime_fixed_shape(runtime) ||
	       (req->limits.memory_mb == API_DEFAULT_MEMORY_MB &&
		req->limits.cpus_milli == API_DEFAULT_CPUS_MILLI);
}

/* A sandbox for @req: a pooled one when the pool has it (it holds sandboxes with the default
 * disk and no snapshot only), else one made now; NULL with @e set. */
static struct sbx *create_obtain(const struct api_create *req, const char *runtime, bool host,
				 const struct create_from *from, bool *ret_from_pool,
				 struct svc_err *e)
{
	const char *warm_name = host ? "" : req->template_name;
	/* The pool holds sandboxes with the default disk and nothing of their own: no
	 * snapshot, no secrets or approve rules (trusts_ca()), no volume. */
	bool from_pool = req->limits.disk_mb == API_DEFAULT_DISK_MB && from->fd < 0 &&
			 !trusts_ca(req) && req->n_volumes == 0 && default_shape(req, runtime);
	struct sbx *s = from_pool ? pool_claim(warm_name, runtime) : NULL;
	struct store_version *version = NULL;

	*ret_from_pool = from_pool;
	if (!s && !host && !(version = template_open(req->template_name, e)))
		return NULL;
	if (from_pool)
		warm_touch(warm_name, runtime); /* kept warm from now on */
	return s ? s : sandbox_make(req, runtime, version, warm_name, from, e);
}

/* The request and the template applied to @s. @ret_ready: it is up already (pooled, with no
 * START or READY to run), to be answered now; else @rp waits for it. */
static int create_setup(struct sbx *s, const struct svc_caller *who, const struct api_create *req,
			bool host, struct svc_reply *rp, uint64_t t0, bool *ret_ready)
{
	int r = apply_request(s, who, req);
	if (r >= 0 && !host)
		r = apply_template(s);
	bool pooled = s->state == SBX_RUNNING; /* from the pool: ready already */
	bool starts = pooled && (s->start || s->ready); /* its template's START and READY run now */
	*ret_ready = pooled && !starts;
	if (r >= 0 && !*ret_ready)
		r = add_waiter(s, rp, t0);
	if (r >= 0 && starts && template_start(s) < 0)
		r = -EIO;
	return r;
}

/* The records before the sandbox is handed out; without them it is not. */
static int create_records(struct sbx *s, const struct api_create *req, bool ready)
{
	int r = audit_create(s, req);
	if (r >= 0)
		r = svc_volumes_audit_attach(s);
	if (r >= 0 && ready)
		r = sbx_audit_rc(s, AUDIT_SANDBOX_READY, NULL);
	return r;
}

/* @s cannot be handed out (-@r; @audit: its record could not be written): destroyed, which
 * answers its waiter if it has one (then 0); else -1 with @e set. */
static int create_failed(struct sbx *s, int r, bool audit, struct svc_err *e)
{
	if (audit)
		svc_fail_audit(e, r);
	else
		svc_fail(e, API_ERR_INTERNAL, "could not set the sandbox up: %s", strerror(-r));
	bool waiting = s->waiters != NULL;
	waiters_fail(s, e->code, e->msg); /* the request's own waiter, if it has one */
	metric_inc(M_CREATE_FAILURES);
	sbx_destroy(s, "create_failed");
	return waiting ? 0 : -1;
}

int svc_sandbox_create_at(const struct svc_caller *who, const struct api_create *req, int from_fd,
			  const char *parent, struct svc_reply *rp, struct svc_err *e)
{
	const struct create_from from = {.fd = from_fd, .parent = parent};
	uint64_t t0 = now_ms();
	bool host = strcmp(req->template_name, "host") == 0, from_pool, ready;
	const char *runtime;
	struct sbx *s;

	if (create_runtime(req, &runtime, e) < 0 ||
	    !(s = create_obtain(req, runtime, host, &from, &from_pool, e)))
		return -1;
	int r = create_setup(s, who, req, host, rp, t0, &ready);
	if (r < 0)
		return create_failed(s, r, false, e);
	if ((r = create_records(s, req, ready)) < 0)
		return create_failed(s, r, true, e);
	if (s->code) /* a warm pooled one: its interpreter runs already */
		code_claimed(s);
	if (ready) {
		metric_inc(M_CREATES);
		metric_observe(H_CREATE, (now_ms() - t0) / 1000.0);
		answer_created(rp, s);
	}
	if (from_pool)
		pool_fill(); /* what the claim took or retired, or a template warm from now on */
	return 0;
}

int svc_sandbox_create(const struct svc_caller *who, const struct api_create *req,
		       struct svc_reply *rp, struct svc_err *e)
{
	return svc_sandbox_create_at(who, req, -1, NULL, rp, e);
}

/* True once every destroyed sandbox is reaped and freed and no pooled one is on its way. */
bool pool_settled(void)
{
	return D.n_dying == 0 && creator_pending == 0 && teardown_pending() == 0;
}


/* ---- what sandbox.c tells us ---- */

/* HELLO_OK of a sandbox made for a client (a pooled one waits to be claimed). */
static int on_up(struct sbx *s)
{
	if (s->start || s->ready)
		return template_start(s);
	hand_out(s);
	return 0;
}

/* What a create is told of a sandbox that ended before it was up. */
static const char *down_message(const struct sbx *s, char *buf, size_t size)
{
	static const struct {
		const char *reason, *what;
	} whats[] = {
	    {"exited", "it exited before its agent answered"},
	    {"setup_failed", "its setup failed"},
	    {"agent_failed", "its agent failed"},
	};
	const char *what = s->end_reason;
	for (size_t i = 0; i < ELEMENTSOF(whats); i++)
		if (s->end_reason && strcmp(s->end_reason, whats[i].reason) == 0)
			what = whats[i].what;
	snprintf(buf, size, "the sandbox failed while it was being made: %s%s%s",
		 what ? what : "unknown", s->end_why[0] ? ": " : "", s->end_why);
	return buf;
}

/* A setup that failed for want of the host's disk is the operator's to free (507), not a
 * fault of ours. */
static void on_down(struct sbx *s)
{
	char msg[256];
	if (!s->waiters)
		return;
	if (s->setup_err == -ENOSPC || s->setup_err == -EDQUOT)
		waiters_fail(s, API_ERR_INSUFFICIENT_STORAGE, "no space on the host to make the "
			     "sandbox (its disk or state): the sandbox was not made");
	else
		waiters_fail(s, API_ERR_INTERNAL, down_message(s, msg, sizeof(msg)));
}

static const struct sbx_hooks create_hooks = {.up = on_up, .down = on_down, .after = pool_fill};
