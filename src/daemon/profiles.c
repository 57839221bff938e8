/* Egress profiles: named networks the operator defines (--network-profiles FILE, a JSON object
 * of name -> {"description", "policy", "allow", "approve", "secret_hosts"}) and a create or a
 * PUT .../network names ({"profile": "packages"}). A client may narrow its profile: a policy no
 * wider (deny < allow < public), allow rules each covered by the profile's, approve rules added
 * to the profile's (on hosts the profile reaches), secrets only for the profile's
 * secret_hosts. It may widen it only from the unix socket or with an API key that has the
 * "widen-network" permission (the keys file's fourth column); then what it gives replaces the
 * profile's. GET /v1/network-profiles lists them. Built in, unless the file defines it: "build",
 * the template builder's registry-only network (the host's apt mirrors, net/aptsources.c, as
 * the builder allows them to its RUN steps). A leaf: it reads the request and the
 * profiles, and resolves them into the network that is set (struct net_eff). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "basic/log.h"
#include "daemon/daemon.h"
#include "daemon/service.h"
#include "net/aptsources.h"
#include "policy/egress.h"

#define PROFILES_MAX 64

struct profile {
	char name[API_MAX_PROFILE + 1];
	json_t *doc; /* as configured, for the list */
	struct api_network_req *net;
	json_t *secret_hosts; /* NULL: any host */
	json_t *limits;	      /* NULL: the server's egress limits */
};

static struct profile profiles[PROFILES_MAX];
static size_t n_profiles;
static const char *const policy_names[] = {"deny", "allow", "public"};

static const struct profile *find(const char *name)
{
	for (size_t i = 0; name && i < n_profiles; i++)
		if (strcmp(profiles[i].name, name) == 0)
			return &profiles[i];
	return NULL;
}

/* {"connections", "connections_per_s", "bytes_per_s"}: positive integers, each optional (the
 * proxy keeps the lower of the profile's and its own). */
static int limits_check(const char *name, json_t *lim)
{
	static const char *const keys[] = {"connections", "connections_per_s", "bytes_per_s"};
	size_t ok = 0;
	for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
		json_t *v = json_object_get(lim, keys[i]);
		if (v && (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 0xffffffff))
			break;
		ok += v != NULL;
	}
	if (json_is_object(lim) && ok == json_object_size(lim))
		return 0;
	log_error("network profile '%s': limits: positive integers connections, connections_per_s, bytes_per_s", name);
	return -EINVAL;
}

/* One profile of the file: its network part parsed as a request's would be. */
static int load_one(const char *name, json_t *v, struct profile *p)
{
	struct cordon_err err = {};
	json_t *net = json_deep_copy(v);
	json_t *sh = json_object_get(v, "secret_hosts"), *lim = json_object_get(v, "limits");
	json_object_del(net, "description");
	json_object_del(net, "secret_hosts");
	json_object_del(net, "limits");
	char *text = json_dumps(net, JSON_COMPACT);
	json_decref(net);
	int r = text ? api_network_parse(text, strlen(text), &p->net, &err) : -ENOMEM;
	free(text);
	if (r < 0) {
		log_error("network profile '%s': %s", name, err.msg);
		return -EINVAL;
	}
	if (sh && (!json_is_array(sh) || json_array_size(sh) > API_MAX_ALLOW)) {
		log_error("network profile '%s': secret_hosts: an array of host names", name);
		return -EINVAL;
	}
	if (lim && limits_check(name, lim) < 0)
		return -EINVAL;
	snprintf(p->name, sizeof(p->name), "%s", name);
	p->limits = lim ? json_incref(lim) : NULL;
	p->doc = json_incref(v);
	p->secret_hosts = sh ? json_incref(sh) : NULL;
	return 0;
}

static void add_mirror(const char *uri, void *arg)
{
	char rule[300];
	json_t *allow = arg;
	size_t i;
	json_t *v;
	if (aptsources_rule(uri, rule, sizeof(rule)) < 0)
		return;
	json_array_foreach(allow, i, v)
		if (strcmp(json_string_value(v), rule) == 0)
			return;
	json_array_append_new(allow, json_string(rule));
}

/* "build": what the builder's RUN steps may reach. */
static int load_builtin(void)
{
	if (find("build") || n_profiles >= PROFILES_MAX)
		return 0;
	_cleanup_(json_decrefp) json_t *p = json_pack("{s:s, s:s, s:[]}", "description",
						     "the template builder's network: the host's apt mirrors only",
						     "policy", "allow", "allow");
	if (!p)
		return -ENOMEM;
	aptsources_scan(add_mirror, json_object_get(p, "allow"));
	int r = load_one("build", p, &profiles[n_profiles]);
	if (r >= 0)
		n_profiles++;
	return r;
}

static int load_file(const char *path)
{
	json_error_t jerr;
	_cleanup_(json_decrefp) json_t *all = path ? json_load_file(path, 0, &jerr) : NULL;
	const char *name;
	json_t *v;
	if (!path)
		return 0;
	if (!json_is_object(all) || json_object_size(all) > PROFILES_MAX) {
		log_error("network profiles '%s': a JSON object of at most %d profiles (%s)", path, PROFILES_MAX,
			  all ? "not an object" : jerr.text);
		return -EINVAL;
	}
	json_object_foreach(all, name, v)
	{
		if (strlen(name) > API_MAX_PROFILE || !json_is_object(v) || load_one(name, v, &profiles[n_profiles]) < 0) {
			log_error("network profiles '%s': profile '%s' is not valid", path, name);
			return -EINVAL;
		}
		n_profiles++;
	}
	return 0;
}

int profiles_load(const char *path)
{
	int r = load_file(path);
	return r < 0 ? r : load_builtin();
}

json_t *svc_network_profiles(void)
{
	json_t *list = json_array();
	for (size_t i = 0; list && i < n_profiles; i++) {
		const struct api_network *n = &profiles[i].net->network;
		json_t *o = json_pack("{s:s, s:O?, s:s, s:o, s:o, s:O?, s:O?}", "name", profiles[i].name, "description",
				      json_object_get(profiles[i].doc, "description"), "policy", policy_names[n->policy],
				      "allow", json_array(), "approve", api_approve_json(n->approve, n->n_approve),
				      "secret_hosts", profiles[i].secret_hosts, "limits", profiles[i].limits);
		for (size_t k = 0; k < n->n_allow; k++)
			json_array_append_new(json_object_get(o, "allow"), json_string(n->allow[k]));
		json_array_append_new(list, o);
	}
	return json_pack("{s:o}", "profiles", list);
}

bool profile_has_approve(const char *name)
{
	const struct profile *p = find(name);
	return p && p->net->network.n_approve;
}

static bool may_widen(const struct api_key *who)
{
	return !who || who->widen_network;
}

/* Every port of @r's range (names: 80 and 443 when none) is one @ok() takes. */
static bool each_port(const struct egress_rule *r, const struct egress_policy *prof,
		      bool (*ok)(const struct egress_rule *r, const struct egress_policy *prof, uint16_t port))
{
	if (r->port_lo == 0 && r->kind != RULE_CIDR)
		return ok(r, prof, 80) && ok(r, prof, 443);
	for (uint32_t port = r->port_lo ? r->port_lo : 1; port <= (r->port_hi ? r->port_hi : 65535); port++)
		if (!ok(r, prof, (uint16_t)port))
			return false;
	return true;
}

static bool port_covered(const struct egress_rule *r, const struct egress_policy *prof, uint16_t port)
{
	char probe[EGRESS_NAME_MAX + 32];
	const struct egress_rule *m;
	switch (r->kind) {
	case RULE_DOMAIN:
		return egress_match_name(prof, r->name, port);
	case RULE_WILDCARD:
		/* Covered only by a wildcard at or above it: any name below it would match. */
		snprintf(probe, sizeof(probe), "cordon-probe.%s", r->name);
		m = egress_match_name(prof, probe, port);
		return m && (m->kind == RULE_WILDCARD || prof->mode == EGRESS_PUBLIC);
	case RULE_CIDR:
		m = egress_match_addr(prof, r->family, r->addr, port);
		return m && (prof->mode == EGRESS_PUBLIC || m->prefix <= r->prefix);
	}
	return false;
}

/* Whether every rule of @rules reaches nothing the profile's network does not (its policy,
 * its allow rules and the hosts of its approve rules); the first that does in *@ret_bad. */
static bool covered(const struct api_network *pn, const char *const *rules, size_t n, const char **ret_bad)
{
	struct egress_policy *prof = NULL, *mine = NULL;
	const char *hosts[API_MAX_ALLOW + API_MAX_APPROVE];
	size_t k = 0;
	for (size_t i = 0; i < pn->n_allow && k < ELEMENTSOF(hosts); i++)
		hosts[k++] = pn->allow[i];
	for (size_t i = 0; i < pn->n_approve && k < ELEMENTSOF(hosts); i++)
		hosts[k++] = pn->approve[i].host;
	bool ok = egress_policy_parse(pn->policy == API_NET_PUBLIC ? EGRESS_PUBLIC : EGRESS_ALLOW,
				      pn->policy == API_NET_PUBLIC ? NULL : hosts,
				      pn->policy == API_NET_PUBLIC ? 0 : k, &prof, NULL) == 0;
	for (size_t i = 0; ok && i < n; i++) {
		ok = egress_policy_parse(EGRESS_ALLOW, &rules[i], 1, &mine, NULL) == 0 &&
		     each_port(&mine->rules[0], prof, port_covered);
		mine = egress_policy_free(mine);
		if (!ok)
			*ret_bad = rules[i];
	}
	egress_policy_free(prof);
	return ok;
}

json_t *net_eff_extra(const struct net_eff *e)
{
	return json_pack("{s:O*, s:O*, s:s*}", "approve", json_array_size(e->approve) ? e->approve : NULL,
			 "limits", e->limits, "profile", e->profile);
}

void net_eff_done(struct net_eff *e)
{
	json_decref(e->approve);
	e->approve = NULL;
}

static int narrow(const struct profile *p, const struct api_network *n, const char *prefix, struct svc_err *err)
{
	const struct api_network *pn = &p->net->network;
	const char *bad = NULL;
	const char *hosts[API_MAX_APPROVE];
	if (n->policy_given && n->policy > pn->policy)
		return svc_fail(err, API_ERR_FORBIDDEN, "%spolicy: \"%s\" is wider than profile '%s' (\"%s\"), and "
				"this client may not widen it", prefix, policy_names[n->policy], p->name,
				policy_names[pn->policy]);
	for (size_t i = 0; i < n->n_approve; i++)
		hosts[i] = n->approve[i].host;
	if (!covered(pn, n->allow, n->n_allow, &bad) || !covered(pn, hosts, n->n_approve, &bad))
		return svc_fail(err, API_ERR_FORBIDDEN, "%s: '%s' reaches more than profile '%s' does, and this "
				"client may not widen it", prefix[0] ? "network" : "request", bad, p->name);
	return 0;
}

int net_resolve(const struct api_network *n, const struct api_key *who, struct net_eff *ret, const char *prefix,
		struct svc_err *err)
{
	const struct profile *p = n->profile ? find(n->profile) : NULL;
	*ret = (struct net_eff){.policy = n->policy, .allow = n->allow, .n_allow = n->n_allow};
	if (n->profile && !p)
		return svc_fail(err, API_ERR_INVALID_FIELD, "%sprofile: no profile '%s' (GET /v1/network-profiles)",
				prefix, n->profile);
	if (p && !may_widen(who) && narrow(p, n, prefix, err) < 0)
		return -1;
	ret->approve = api_approve_json(n->approve, n->n_approve);
	if (!p)
		return ret->approve ? 0 : svc_fail(err, API_ERR_INTERNAL, "out of memory");
	const struct api_network *pn = &p->net->network;
	ret->profile = p->name;
	ret->limits = p->limits;
	if (!n->policy_given) /* rules of the client's own narrow a public profile to them */
		ret->policy = n->allow_given ? API_NET_ALLOW : pn->policy;
	if (!n->allow_given && ret->policy == API_NET_ALLOW && pn->policy == API_NET_ALLOW) {
		ret->allow = pn->allow;
		ret->n_allow = pn->n_allow;
	}
	/* The profile's approvals stay whatever the client adds. */
	json_t *mine = ret->approve;
	ret->approve = api_approve_json(pn->approve, pn->n_approve);
	json_array_extend(ret->approve, mine);
	json_decref(mine);
	return 0;
}

int profile_check_secrets(const struct api_create *req, const struct api_key *who, struct svc_err *err)
{
	const struct profile *p = find(req->network.profile);
	if (!p || !p->secret_hosts || may_widen(who))
		return 0;
	for (size_t i = 0; i < req->secrets.n; i++)
		for (size_t k = 0; k < req->secrets.items[i].n_hosts; k++) {
			const char *h = req->secrets.items[i].hosts[k];
			bool found = false;
			for (size_t j = 0; !found && j < json_array_size(p->secret_hosts); j++)
				found = strcmp(json_string_value(json_array_get(p->secret_hosts, j)) ?: "", h) == 0;
			if (!found)
				return svc_fail(err, API_ERR_FORBIDDEN, "secrets.%s.hosts: '%s' is not among profile "
						"'%s''s secret_hosts", req->secrets.items[i].name, h, p->name);
		}
	return 0;
}
