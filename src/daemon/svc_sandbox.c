/* The sandbox service: the checks of a create, listing, deadlines, network policies, the
 * runtimes and the audit log of a sandbox, for any API surface (service.h). No HTTP here. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include <event2/buffer.h>

#include "basic/host.h"
#include "audit/audit.h"
#include "daemon/daemon.h"
#include "daemon/service.h"
#include "image/store.h"
#include "policy/egress.h"
#include "runtime/listing.h"
#include "runtime/scratch.h"

static const char *const policy_names[] = {"deny", "allow", "public"};

/* The policy is checked before anything is made, so that a bad rule is a 400 naming it. */
static int network_check(const struct net_eff *n, const char *prefix, struct svc_err *err)
{
	struct cordon_err e = {};
	struct egress_policy *p = NULL;
	size_t n_approve = json_array_size(n->approve);
	if (n->policy != API_NET_DENY && !D.egress)
		return svc_fail(err, API_ERR_INVALID_FIELD,
				"%spolicy: this server cannot give sandboxes a network (it does not run as root)",
				prefix);
	if (n_approve && (!D.egress || !secrets_bundle()))
		return svc_fail(err, API_ERR_INVALID_FIELD,
				"%sapprove: this server cannot hold requests (no network, or no egress CA)", prefix);
	if (egress_policy_parse((enum egress_mode)n->policy, n->allow, n->n_allow, &p, &e) < 0)
		return svc_fail(err, API_ERR_INVALID_FIELD, "%sallow: %s", prefix, e.msg);
	p = egress_policy_free(p);
	for (size_t i = 0; i < n_approve; i++) {
		const char *host = json_string_value(json_object_get(json_array_get(n->approve, i), "approve"));
		/* A host or wildcard the proxy can match a name against, never an address. */
		if (!host || egress_policy_parse(EGRESS_ALLOW, &host, 1, &p, &e) < 0 || p->rules[0].kind == RULE_CIDR) {
			egress_policy_free(p);
			return svc_fail(err, API_ERR_INVALID_FIELD, "%sapprove[%zu].approve: %s", prefix, i,
					e.msg[0] ? e.msg : "a host or \"*.\"-wildcard, not an address");
		}
		p = egress_policy_free(p);
	}
	return 0;
}

/* What this host can give one sandbox, read once (a syscall and /proc/meminfo): off the
 * create path after the first. */
static const struct api_host_max *host_max(void)
{
	static struct api_host_max max;
	uint64_t mem;
	if (max.cpus_milli)
		return &max;
	if (host_memory_bytes(&mem) == 0)
		max.memory_mb = mem >> 20 > UINT32_MAX ? UINT32_MAX : (uint32_t)(mem >> 20);
	max.cpus_milli = host_cpus_milli(); /* last: never 0, so it says "read" */
	return &max;
}

/* Limits over what this host has are a 400 naming the host's maximum (api_limits_check()). */
static int limits_check(const struct api_limits *l, struct svc_err *err)
{
	struct cordon_err e = {};
	if (api_limits_check(l, host_max(), &e) == 0)
		return 0;
	return svc_fail(err, API_ERR_INVALID_FIELD, "%s", e.msg);
}

/* Secrets need the proxy's CA, and a name the request's env does not also set (the env
 * would win over the placeholder). */
static int secrets_check(const struct api_create *req, struct svc_err *err)
{
	if (req->secrets.n && !secrets_bundle())
		return svc_fail(err, API_ERR_INVALID_FIELD,
				"secrets: this server cannot give sandboxes secrets (no network, or no egress CA)");
	for (size_t i = 0; i < req->secrets.n; i++)
		for (size_t k = 0; k < req->env.n; k++)
			if (strcmp(req->secrets.items[i].name, req->env.items[k].key) == 0)
				return svc_fail(err, API_ERR_INVALID_FIELD, "secrets.%s: also given in env",
						req->env.items[k].key);
	return 0;
}

/* A disk admitted only if, with what every live sandbox's sparse disk could still grow into,
 * it fits in --disk-overcommit percent of the free space of the filesystem the disks are on:
 * a host that fills answers its sandboxes' writes with I/O errors, not ENOSPC. */
static int disk_admit(uint64_t disk_bytes, struct svc_err *err)
{
	struct statvfs sv;
	if (!scratch_on_disk())
		return 0; /* tmpfs roots: memory, bounded by the memory cgroup instead */
	if (statvfs(scratch_dir(), &sv) < 0)
		return 0; /* not made yet: the first disk makes it, and says so if it cannot */
	uint64_t live = sbx_disk_growth(now_ms()), free_b = (uint64_t)sv.f_bavail * sv.f_frsize;
	long double cap = (long double)free_b * D.cfg.disk_overcommit / 100;
	if (disk_bytes <= free_b && (long double)(live + disk_bytes) <= cap)
		return 0;
	return svc_fail(err, API_ERR_INSUFFICIENT_STORAGE,
			"limits.disk_mb: %llu MiB does not fit: the host has %llu MiB free, and "
			"sandboxes' disks may grow into %llu MiB of it already (at most %llu%%)",
			(unsigned long long)(disk_bytes >> 20), (unsigned long long)(free_b >> 20),
			(unsigned long long)(live >> 20),
			(unsigned long long)D.cfg.disk_overcommit);
}

int svc_sandbox_check(const struct svc_caller *who, const struct api_create *req,
		      struct svc_err *err)
{
	char root[4096];
	const struct api_key *k = who->principal;
	if (limits_check(&req->limits, err) < 0 ||
	    disk_admit((uint64_t)req->limits.disk_mb << 20, err) < 0)
		return -1;
	if (strcmp(req->template_name, "host") != 0 &&
	    store_path(req->template_name, root, sizeof(root)) < 0)
		return svc_fail(err, API_ERR_NOT_FOUND, "no template '%s' (cordon template ls)",
				req->template_name);
	struct net_eff eff = {};
	int r = net_resolve(&req->network, k, &eff, "network.", err);
	if (r >= 0)
		r = network_check(&eff, "network.", err);
	net_eff_done(&eff);
	if (r < 0 || secrets_check(req, err) < 0 || profile_check_secrets(req, k, err) < 0)
		return -1;
	/* Volumes are the host's, not yet any key's own: a tenant could read another's. */
	if (k && req->n_volumes)
		return svc_fail(err, API_ERR_FORBIDDEN, "only the unix socket may mount volumes");
	if (k && k->live >= k->max_sandboxes)
		return svc_fail(err, API_ERR_QUOTA_EXCEEDED, "key '%s' may hold %llu sandboxes",
				k->name, (unsigned long long)k->max_sandboxes);
	return 0;
}

static bool metadata_match(const struct sbx *s, const struct api_filter *f)
{
	for (size_t i = 0; i < f->n; i++) {
		const char *v = json_string_value(json_object_get(s->metadata, f->items[i].key));
		if (!v || strcmp(v, f->items[i].value) != 0)
			return false;
	}
	return true;
}

json_t *svc_sandbox_list(const struct svc_caller *who, const struct api_filter *f)
{
	json_t *list = json_array();
	for (struct sbx *s = D.sandboxes; s; s = s->next) {
		if (s->pooled || s->state == SBX_DESTROYED)
			continue;
		if (who->principal && s->owner != who->principal)
			continue;
		if (metadata_match(s, f))
			json_array_append_new(list, sbx_json(s));
	}
	return json_pack("{s:o}", "sandboxes", list);
}

json_t *svc_sandbox_info(const struct sbx *s)
{
	return sbx_json(s);
}

void svc_sandbox_destroy(struct sbx *s)
{
	sbx_destroy(s, "api");
}

int svc_sandbox_timeout(struct sbx *s, uint32_t t, json_t **ret, struct svc_err *err)
{
	/* The record first: without it the deadline stays as it is. */
	int r = sbx_audit_rc(s, AUDIT_POLICY_CHANGE,
			     json_pack("{s:s, s:I, s:I}", "kind", "timeout", "old",
				       (json_int_t)s->timeout_s, "timeout_s", (json_int_t)t));
	if (r < 0)
		return svc_fail_audit(err, r);
	sbx_set_timeout(s, t);
	token_env(s); /* its exp is the new deadline, for processes started from now on */
	*ret = sbx_json(s);
	return 0;
}

int svc_sandbox_network(const struct svc_caller *who, struct sbx *s, const struct api_network *n,
			json_t **ret, struct svc_err *err)
{
	struct cordon_err e = {};
	_cleanup_(net_eff_done) struct net_eff eff = {};
	if (net_resolve(n, who->principal, &eff, "", err) < 0 || network_check(&eff, "", err) < 0)
		return -1;
	const char *policy = policy_names[eff.policy];
	json_t *rules = json_array();
	for (size_t i = 0; i < eff.n_allow; i++)
		json_array_append_new(rules, json_string(eff.allow[i]));
	/* The record first, then the change: it applies to new connections at once. Without
	 * the record the policy stays as it is. */
	int r = sbx_audit_rc(s, AUDIT_POLICY_CHANGE,
			     json_pack("{s:s, s:s, s:o, s:O, s:O, s:s?}", "kind", "network", "policy", policy,
				       "allow", rules, "approve", eff.approve, "old", s->network, "profile", eff.profile));
	if (r < 0)
		return svc_fail_audit(err, r);
	json_t *extra = net_eff_extra(&eff);
	r = network_set(s, policy, eff.allow, eff.n_allow, extra, &e);
	json_decref(extra);
	if (r < 0)
		return svc_fail(err, API_ERR_INVALID_FIELD, "%s", e.msg);
	*ret = json_incref(s->network);
	return 0;
}

/* ---- secrets: rotated or revoked on a live sandbox, from its next request on ---- */

static int secret_change(struct sbx *s, const char *action, const char *name, json_t *hosts,
			 struct svc_err *err)
{
	int r = sbx_audit_rc(s, AUDIT_POLICY_CHANGE,
			     json_pack("{s:s, s:s, s:s, s:o*}", "kind", "secret", "action", action, "name", name,
				       "hosts", hosts));
	return r < 0 ? svc_fail_audit(err, r) : 0;
}

int svc_secret_put(struct sbx *s, const struct api_secret_put *p, json_t **ret, struct svc_err *err)
{
	json_t *now = s->secrets ? secrets_one_json(s->secrets, p->secret.name) : NULL;
	if (!now)
		return svc_fail(err, API_ERR_NOT_FOUND, "no secret '%s' in this sandbox (secrets are named at create)",
				p->secret.name);
	json_decref(now);
	if (secret_change(s, "rotate", p->secret.name, NULL, err) < 0 ||
	    secrets_update(s->secrets, p, err) < 0)
		return -1;
	network_secrets_push(s);
	*ret = secrets_one_json(s->secrets, p->secret.name);
	return 0;
}

int svc_secret_delete(struct sbx *s, const char *name, struct svc_err *err)
{
	json_t *now = s->secrets && name ? secrets_one_json(s->secrets, name) : NULL;
	if (!now)
		return svc_fail(err, API_ERR_NOT_FOUND, "no secret '%s' in this sandbox", name ? name : "");
	json_decref(now);
	if (secret_change(s, "revoke", name, NULL, err) < 0 || secrets_revoke(s->secrets, name, err) < 0)
		return -1;
	network_secrets_push(s);
	return 0;
}

/* The registry as this host sees it, for a client to choose before it asks (a runtime it
 * cannot run is refused at create with unsupported_runtime). */
json_t *svc_runtimes(void)
{
	return runtime_list_json(D.cfg.runtime);
}

json_t *svc_health(void)
{
	return json_pack("{s:s, s:I, s:I}", "status", "ok", "sandboxes", (json_int_t)D.n_live,
			 "pool_ready", (json_int_t)D.n_pool_ready);
}

/* ---- audit: the sandbox's JSON Lines, and new records as they are written ---- */

struct follower {
	struct audit_listener l;
	struct stream_sink *k;
	off_t off;
	struct sbx *s;
};

struct collect {
	struct evbuffer *buf;
};

static int collect_line(const char *line, size_t len, off_t offset, void *data)
{
	struct collect *c = data;
	evbuffer_add(c->buf, line, len); /* the record's own newline included */
	return evbuffer_get_length(c->buf) > (16u << 20) ? 1 : 0;
}

static int read_audit(const char *id, off_t from, struct evbuffer *buf, off_t *ret_next)
{
	char name[80];
	struct collect c = {buf};
	snprintf(name, sizeof(name), "%s.jsonl", id);
	return audit_read_from(D.audit_dirfd, name, from, collect_line, &c, ret_next);
}

int svc_audit_log(const struct sbx *s, struct evbuffer *out, off_t *ret_next, struct svc_err *err)
{
	*ret_next = 0;
	int r = read_audit(s->id, 0, out, ret_next);
	if (r < 0 && r != -ENOENT)
		return svc_fail(err, api_error_from_errno(r), "cannot read the audit log");
	return 0;
}

static void follower_drop(struct follower *f)
{
	sbx_unlisten(f->s, &f->l);
	free(f);
}

static void follower_gone(void *arg)
{
	follower_drop(arg);
}

static void follower_end(struct follower *f)
{
	struct stream_sink *k = f->k;
	follower_drop(f);
	k->end(k, NULL, 0);
}

/* A record was written: what the reader has not seen yet, read back from the log (so that it
 * gets exactly the bytes on disk); a reader too far behind is cut off. */
static void on_record(struct audit_listener *l)
{
	struct follower *f = OWNER_OF(l, struct follower, l);
	struct evbuffer *buf = evbuffer_new();
	off_t to = f->off;
	if (buf && read_audit(f->s->id, f->off, buf, &to) >= 0 && evbuffer_get_length(buf)) {
		size_t n = evbuffer_get_length(buf);
		if (f->k->write(f->k, evbuffer_pullup(buf, -1), n) < 0)
			follower_end(f);
		else
			f->off = to;
	}
	if (buf)
		evbuffer_free(buf);
}

static void on_sandbox_end(struct audit_listener *l)
{
	follower_end(OWNER_OF(l, struct follower, l));
}

int svc_audit_follow(struct sbx *s, off_t from, struct stream_sink *k, struct svc_err *err)
{
	struct follower *f = calloc(1, sizeof(*f));
	if (!f)
		return svc_fail(err, API_ERR_INTERNAL, "out of memory");
	*f = (struct follower){.l = {.record = on_record, .end = on_sandbox_end}, .k = k,
			       .off = from, .s = s};
	k->gone = follower_gone;
	k->gone_arg = f;
	sbx_listen(s, &f->l);
	return 0;
}
