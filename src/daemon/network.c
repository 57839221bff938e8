/* Sandbox networks under cordond: one cordon-egress process for the daemon, every sandbox
 * linked to it (a `deny` sandbox's packets end there too, refused and audited), its policy
 * set at create and replaced live with PUT .../network, and every decision the proxy makes
 * written to the sandbox's audit log as net.decision. */
#include <errno.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "lib/link.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>

#include "basic/log.h"
#include "audit/audit.h"
#include "daemon/daemon.h"
#include "net/egressctl.h"
#include "net/nft.h"
#include "policy/egress.h"

static struct sbx *by_id(const char *id)
{
	return id ? sbx_lookup(id) : NULL;
}

/* The proxy refused a placeholder where its secret does not go (its report names the secret,
 * never a value): a record of its own rather than a net.decision. */
static void on_misuse(struct sbx *s, json_t *m)
{
	metric_inc(M_SECRET_MISUSE);
	if (!s || s->pooled)
		return;
	const char *name = json_string_value(json_object_get(m, "name"));
	const char *dst = json_string_value(json_object_get(m, "dst"));
	json_t *f = json_pack("{s:O, s:s, s:O, s:O, s:O?, s:O?}", "secret", json_object_get(m, "secret"), "host",
			      name ? name : dst ? dst : "", "port", json_object_get(m, "port"), "proto",
			      json_object_get(m, "proto"), "dst", json_object_get(m, "dst"), "reason",
			      json_object_get(m, "reason"));
	event_raise(EVK_SECRET_MISUSE, s, json_incref(f));
	sbx_audit(s, AUDIT_SECRET_MISUSE, f);
}

/* The proxy put a secret's value into a request: recorded by name and host (the request's
 * path and headers are not: they are the sandbox's, and a query may have held the value). */
static void on_use(struct sbx *s, json_t *m)
{
	metric_inc(M_SECRET_USES);
	if (s && !s->pooled)
		sbx_audit(s, AUDIT_SECRET_USE,
			  json_pack("{s:O, s:O, s:O, s:O}", "secret", json_object_get(m, "secret"), "host",
				    json_object_get(m, "name"), "port", json_object_get(m, "port"), "proto",
				    json_object_get(m, "proto")));
}

static void on_event(json_t *m)
{
	struct sbx *s = by_id(json_string_value(json_object_get(m, "sandbox")));
	const char *kind = json_string_value(json_object_get(m, "kind"));
	if (kind && strcmp(kind, "secret.misuse") == 0) {
		on_misuse(s, m);
		return;
	}
	if (kind && strcmp(kind, "secret.use") == 0) {
		on_use(s, m);
		return;
	}
	if (kind && strncmp(kind, "approval.", 9) == 0) {
		approvals_report(s, kind, m);
		return;
	}
	const char *verdict = json_string_value(json_object_get(m, "verdict"));
	bool allowed = verdict && strcmp(verdict, "allow") == 0;
	metric_inc(allowed ? M_NET_ALLOWED : M_NET_BLOCKED);
	if (!s || s->pooled)
		return;
	const char *name = json_string_value(json_object_get(m, "name"));
	const char *dst = json_string_value(json_object_get(m, "dst"));
	json_t *f = json_pack("{s:s, s:O, s:s, s:O, s:O, s:O?, s:O?}", "host",
			      name ? name : dst ? dst : "", "port", json_object_get(m, "port"), "action",
			      allowed ? "allow" : "deny", "proto", json_object_get(m, "proto"), "dst",
			      json_object_get(m, "dst"), "rule", json_object_get(m, "rule"), "reason",
			      json_object_get(m, "reason"));
	if (!allowed)
		event_raise(EVK_EGRESS_BLOCKED, s, json_deep_copy(f));
	/* The proxy decided before the record: one that cannot be written cannot refuse that
	 * connection, but it can the next ones. The sandbox's network is cut (policy deny, as
	 * GET .../{id} then shows) until a client sets a policy again, which is recorded. */
	const char *policy = json_string_value(json_object_get(s->network, "policy"));
	if (sbx_audit_rc(s, AUDIT_NET_DECISION, f) < 0 && allowed &&
	    (!policy || strcmp(policy, "deny") != 0)) {
		log_error("sandbox %s: a network decision cannot be recorded; its network is cut",
			  s->id);
		network_set(s, "deny", NULL, 0, NULL, NULL);
	}
}

static void on_read(struct bufferevent *bev, void *arg)
{
	char *line;
	size_t n;
	while ((line = evbuffer_readln(bufferevent_get_input(bev), &n, EVBUFFER_EOL_LF))) {
		json_t *m = json_loadb(line, n, 0, NULL);
		const char *op = json_string_value(json_object_get(m, "op"));
		if (op && strcmp(op, "event") == 0)
			on_event(m);
		else if (op && strcmp(op, "reply") == 0 && !json_is_true(json_object_get(m, "ok")))
			log_warning("egress proxy refused a request: %s",
				    json_string_value(json_object_get(m, "error")));
		json_decref(m);
		free(line);
	}
}

static void on_event_cb(struct bufferevent *bev, short what, void *arg)
{
	if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
		return;
	/* Without its proxy no sandbox reaches anything (fail closed), but none would work
	 * either: stop with a failure, and let the supervisor restart us (Restart=on-failure). */
	log_error("the egress proxy died; stopping");
	D.exit_status = 1;
	event_base_loopexit(D.base, NULL);
}

static const struct sbx_hooks network_hooks = {.down = network_forget};

/* The proxy's start (nftables' table, its exec, its CA loaded or made, its ready line) takes
 * tens of milliseconds that need nothing else of ours: it runs on the teardown thread from
 * the start's fifth step, beside the state database and the recovery, and network_start()
 * waits for it. Nothing clones then (the pool's thread starts later), and the environment is
 * set before the job is queued and not changed after. */
static struct {
	bool queued;
	sem_t ready;
	char ca_dir[4200];
	struct egressctl e;
	struct cordon_err err;
	int r;
} boot;

static void boot_work(void *arg)
{
	(void)arg;
	if (nft_setup(&boot.err) < 0 || egressctl_spawn_ca(&boot.e, boot.ca_dir, &boot.err) < 0)
		boot.r = boot.err.code ? boot.err.code : -EIO;
	sem_post(&boot.ready);
}

int network_boot(void)
{
	if (geteuid() != 0)
		return 0;
	setenv("CORDON_EGRESS_LIMITS", D.cfg.egress_limits, 1); /* read by cordon-egress */
	snprintf(boot.ca_dir, sizeof(boot.ca_dir), "%s/egress-ca", D.cfg.state_dir);
	if (sem_init(&boot.ready, 0, 0) < 0)
		return -errno;
	int r = teardown_call(boot_work, NULL, NULL, NULL);
	if (r < 0)
		return r;
	boot.queued = true;
	return 0;
}

int network_start(void)
{
	sbx_hooks_add(&network_hooks);
	if (!boot.queued)
		return 0;
	while (sem_wait(&boot.ready) < 0 && errno == EINTR)
		;
	boot.queued = false;
	if (boot.r < 0) {
		log_error("networking: %s", boot.err.msg);
		return boot.r;
	}
	/* The proxy made (or loaded) its CA before it was ready: sandboxes can trust it now. */
	if (secrets_setup(boot.ca_dir) < 0)
		log_warning("secrets: no trust bundle from %s/ca.crt; sandboxes cannot be given secrets",
			    boot.ca_dir);
	D.egress = loop_bev_new(boot.e.fd, BEV_OPT_CLOSE_ON_FREE);
	if (!D.egress)
		return -ENOMEM;
	D.egress_tcp_port = boot.e.tcp_port;
	D.egress_dns_port = boot.e.dns_port;
	bufferevent_setcb(D.egress, on_read, NULL, on_event_cb, NULL);
	bufferevent_enable(D.egress, EV_READ | EV_WRITE);
	return 0;
}

static void wipe_line(const void *data, size_t len, void *arg)
{
	explicit_bzero(arg, len);
	free(arg);
}

/* A set request for @s; @secrets (taken, NULL: the proxy keeps what it has) carries the
 * values, so the line goes into the output buffer by reference (no copy in libevent's
 * chains) and is wiped once written; jansson's own allocations are wiped on free
 * (secmem_free_wiped, main.c). */
static void send_set(const struct sbx *s, const char *ip, const char *policy,
		     const char *const *allow, size_t n, json_t *secrets)
{
	json_t *approve = json_object_get(s->network, "approve");
	/* Approve rules alone need a link and the proxy's reading: "deny" with approve rules is
	 * "allow" with no rule of its own (their hosts are reachable through them). */
	if (json_array_size(approve) && strcmp(policy, "deny") == 0)
		policy = "allow";
	json_t *extra = json_pack("{s:o, s:O*}", "approve", approve ? json_incref(approve) : json_array(), "limits",
				  json_object_get(s->network, "limits"));
	char *line = egressctl_set_line_extra(ip, s->id, policy, allow, n, NULL, secrets, extra);
	json_decref(extra);
	json_decref(secrets);
	size_t len = line ? strlen(line) : 0;
	char *full = line ? realloc(line, len + 2) : NULL;
	if (!full) {
		if (line)
			explicit_bzero(line, len);
		free(line);
		return;
	}
	memcpy(full + len, "\n", 2);
	if (!D.egress || evbuffer_add_reference(bufferevent_get_output(D.egress), full, len + 1, wipe_line, full) < 0)
		wipe_line(full, len + 1, full);
}

int network_set(struct sbx *s, const char *policy, const char *const *allow, size_t n,
		json_t *extra, struct cordon_err *err)
{
	static const char *const modes[] = {"deny", "allow", "public"};
	struct egress_policy *p = NULL;
	int mode = -1;
	for (int i = 0; i < 3; i++)
		if (strcmp(policy, modes[i]) == 0)
			mode = i;
	if (mode < 0)
		return cordon_err_setf(err, -EINVAL, "policy: expected deny, allow or public");
	if (egress_policy_parse(mode, allow, n, &p, err) < 0)
		return -EINVAL;
	egress_policy_free(p);
	/* A sandbox gets its link the first time its policy lets anything out: links cost
	 * (a veth, and a heavier network namespace to tear down), and most sandboxes never
	 * need one. Without a link a sandbox has loopback only, which is what deny means. */
	if ((mode != 0 || json_array_size(json_object_get(extra, "approve"))) && s->rt && (!D.egress || cordon_sandbox_attach_net(s->rt, network_hook, s, err) < 0)) {
		if (!D.egress)
			cordon_err_setf(err, -EINVAL, "policy: this server cannot give sandboxes a network (not root)");
		return -EINVAL;
	}
	const char *ip = s->rt ? cordon_sandbox_ip(s->rt) : NULL;
	json_t *a = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_string(allow[i]));
	json_decref(s->network);
	s->network = json_pack("{s:s, s:o}", "policy", policy, "allow", a);
	/* approve rules, limits and the profile's name (a profile's: net_eff_extra()) */
	if (extra)
		json_object_update(s->network, extra);
	if (ip)
		send_set(s, ip, policy, allow, n, s->secrets ? secrets_proxy_json(s->secrets) : NULL);
	return 0;
}

int network_secrets_push(struct sbx *s)
{
	json_t *allow = json_object_get(s->network, "allow");
	const char *policy = json_string_value(json_object_get(s->network, "policy"));
	const char *rules[API_MAX_ALLOW];
	size_t n = 0;
	for (; n < json_array_size(allow) && n < ELEMENTSOF(rules); n++)
		rules[n] = json_string_value(json_array_get(allow, n));
	const char *ip = s->rt ? cordon_sandbox_ip(s->rt) : NULL;
	if (!ip || !D.egress)
		return -ENOTCONN;
	/* [] when the last one was revoked: the proxy drops them (absent would keep them). */
	json_t *secrets = s->secrets ? secrets_proxy_json(s->secrets) : json_array();
	send_set(s, ip, policy ? policy : "deny", rules, n, secrets);
	return 0;
}

void network_forget(struct sbx *s)
{
	const char *ip = s->rt ? cordon_sandbox_ip(s->rt) : NULL;
	if (!ip)
		return;
	egress_send_line(egressctl_del_line(ip));
	char ifname[16];
	struct in_addr a;
	if (inet_pton(AF_INET, ip, &a) == 1) {
		snprintf(ifname, sizeof(ifname), "cdn%u", (unsigned)((ntohl(a.s_addr) - LINK_POOL_BASE) / 4));
		nft_sandbox_del(ifname);
	}
}

static bool runtime_has_egress(const char *runtime)
{
	struct cordon_runtime_info info;
	for (size_t i = 0; runtime && cordon_runtime_get(i, &info) == 0; i++)
		if (strcmp(info.name, runtime) == 0)
			return info.caps & CORDON_RUNTIME_CAP_EGRESS;
	return false;
}

/* A runtime without a network at all (microvm, so far) gets none. */
void network_spec(struct cordon_spec *spec, const char *runtime)
{
	if (!D.egress || cordon_runtime_attaches_net(runtime) || !runtime_has_egress(runtime))
		return;
	/* Linked now, answered by nothing until its policy lets something out (deny: the proxy
	 * refuses all, as for a jail whose policy went back to deny). */
	spec->net = CORDON_NET_EGRESS;
	spec->net_hook = network_hook;
	spec->net_hook_data = NULL;
}

int network_hook(void *data, const char *ip, const char *ifname, struct cordon_err *err)
{
	/* The policy follows from the main thread; until then the proxy answers nothing. */
	return nft_sandbox_add(ifname, D.egress_tcp_port, D.egress_dns_port, err);
}
