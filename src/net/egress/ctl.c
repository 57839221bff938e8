/* The control channel with the controller (cordond, or cordon run), JSON lines both ways on
 * the fd cordon-egress was given (net/egressctl.c is the other end):
 *
 *   -> {"op":"set","ip":..,"sandbox":..,"mode":"deny"|"allow"|"public","allow":[..],
 *       "ifname":..,                       (ifname: we own that interface's nftables entries)
 *       "secrets":[{"name":..,"placeholder":..,"value":..,"hosts":[..],"in":["header"|"query"|"body"]}]}
 *                                          (optional: absent keeps the sandbox's secrets, [] drops
 *                                          them; needs the CA, $CORDON_EGRESS_CA_DIR; "in"
 *                                          defaults to ["header"]; see secret.c, relay-tls.c)
 *       "approve":[{"approve":HOST,"methods":[..],"paths":[..],"timeout_s":N}]
 *                                          (optional, absent keeps them: requests held for a
 *                                          decision; approve.c)
 *       "limits":{"connections":N,"connections_per_s":N,"bytes_per_s":N}
 *                                          (optional, each at most the proxy's own; absent: the
 *                                          proxy's)
 *   -> {"op":"del","ip":..}
 *   -> {"op":"decide","id":..,"decision":"allow"|"deny","reason":..}   (approve.c)
 *   <- {"op":"reply","ok":true|false,"error":..}   one per request, in order
 *   <- {"op":"event",...}                  decisions (decide.c), dropped past CTL_BACKLOG_MAX;
 *                                          "kind":"secret.misuse" (refused) and "secret.use"
 *                                          (a value put in a request: secret and host only);
 *                                          "approval.pending" (never dropped), "approval.refused",
 *                                          "approval.timeout", "approval.gone" (approve.c)
 *   <- {"op":"ready","tcp_port":..,"dns_port":..}  once, first (main.c)
 *
 * The process ends when the channel closes. */
#include <arpa/inet.h>
#include <string.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "basic/cleanup.h"
#include "net/egress/egress.h"

static const char *const mode_names[] = {"deny", "allow", "public"};

void ctl_send(struct egress *e, const char *line, bool bounded)
{
	if (!e->ctl)
		return;
	if (bounded && evbuffer_get_length(bufferevent_get_output(e->ctl)) >= CTL_BACKLOG_MAX)
		return;
	bufferevent_write(e->ctl, line, strlen(line));
	bufferevent_write(e->ctl, "\n", 1);
}

static void reply(struct egress *e, bool ok, const char *error)
{
	_cleanup_(json_decrefp) json_t *r = json_pack("{s:s, s:b, s:s?}", "op", "reply", "ok", ok, "error", error);
	_cleanup_free_ char *line = r ? json_dumps(r, JSON_COMPACT) : NULL;
	if (line)
		ctl_send(e, line, false);
}

static int mode_from(const char *m)
{
	for (size_t i = 0; i < ELEMENTSOF(mode_names); i++)
		if (m && strcmp(m, mode_names[i]) == 0)
			return (int)i;
	return -1;
}

struct set_req {
	const char *ip, *id, *ifname;
	int mode;
	json_t *allow, *secrets, *approve;
	struct in_addr addr;
};

/* The fields of a set request, each checked against what the proxy can hold. */
static bool set_req_parse(json_t *msg, struct set_req *r)
{
	*r = (struct set_req){
		.ip = json_string_value(json_object_get(msg, "ip")),
		.id = json_string_value(json_object_get(msg, "sandbox")),
		.ifname = json_string_value(json_object_get(msg, "ifname")),
		.mode = mode_from(json_string_value(json_object_get(msg, "mode"))),
		.allow = json_object_get(msg, "allow"),
		.secrets = json_object_get(msg, "secrets"),
		.approve = json_object_get(msg, "approve"),
	};
	return r->ip && r->id && strlen(r->id) < sizeof(((struct sbx *)0)->id) && r->mode >= 0 &&
	       (!r->ifname || strlen(r->ifname) < sizeof(((struct sbx *)0)->ifname)) &&
	       inet_pton(AF_INET, r->ip, &r->addr) == 1 && (!r->allow || json_is_array(r->allow)) &&
	       json_array_size(r->allow) <= EGRESS_RULES_MAX && (!r->secrets || json_is_array(r->secrets));
}

static int secret_hosts(struct egress_secret *sec, json_t *hosts, struct cordon_err *err)
{
	size_t n = json_array_size(hosts);
	if (!json_is_array(hosts) || n == 0 || n > SECRET_HOSTS_MAX)
		return cordon_err_setf(err, -EINVAL, "secrets: %s: 1 to %d hosts", sec->name, SECRET_HOSTS_MAX);
	for (size_t i = 0; i < n; i++) {
		const char *h = json_string_value(json_array_get(hosts, i));
		if (!h || strlen(h) >= sizeof(sec->hosts[0]) || !egress_name_valid(h, strlen(h), false) ||
		    egress_name_is_ip_literal(h, strlen(h)))
			return cordon_err_setf(err, -EINVAL, "secrets: %s: a host is a DNS name", sec->name);
		snprintf(sec->hosts[i], sizeof(sec->hosts[i]), "%s", h);
	}
	sec->n_hosts = n;
	return 0;
}

static int secret_in(struct egress_secret *sec, json_t *in, struct cordon_err *err)
{
	sec->in = in ? 0 : SECRET_IN_HEADER;
	if (in && (!json_is_array(in) || json_array_size(in) == 0))
		return cordon_err_setf(err, -EINVAL, "secrets: %s: in is a list of header, query, body", sec->name);
	for (size_t i = 0; i < json_array_size(in); i++) {
		const char *w = json_string_value(json_array_get(in, i));
		int bit = w ? secret_in_from(w) : -1;
		if (bit < 0)
			return cordon_err_setf(err, -EINVAL, "secrets: %s: in is a list of header, query, body", sec->name);
		sec->in |= (unsigned)bit;
	}
	return 0;
}

static int secret_parse(struct egress_secret *sec, json_t *o, struct cordon_err *err)
{
	const char *name = json_string_value(json_object_get(o, "name"));
	const char *ph = json_string_value(json_object_get(o, "placeholder"));
	json_t *v = json_object_get(o, "value");
	if (!name || !ph || !json_is_string(v))
		return cordon_err_setf(err, -EINVAL, "secrets: each has a name, a placeholder and a value");
	int r = secret_init(sec, name, ph, json_string_value(v), json_string_length(v), err);
	if (r >= 0 && (r = secret_hosts(sec, json_object_get(o, "hosts"), err)) >= 0)
		r = secret_in(sec, json_object_get(o, "in"), err);
	return r;
}

/* The request's secrets in @ret (malloc'd, @ret_n of them); placeholders are unique. */
static int set_req_secrets(struct egress *e, const struct set_req *req, struct egress_secret **ret,
			   size_t *ret_n, struct cordon_err *err)
{
	size_t n = json_array_size(req->secrets);
	if (n > SECRETS_MAX)
		return cordon_err_setf(err, -E2BIG, "secrets: at most %d", SECRETS_MAX);
	if (n && !e->tls)
		return cordon_err_setf(err, -ENOTSUP, "secrets: this proxy has no CA to intercept with");
	struct egress_secret *secs = n ? calloc(n, sizeof(*secs)) : NULL;
	if (n && !secs)
		return cordon_err_setf(err, -ENOMEM, "secrets: out of memory");
	int r = 0;
	for (size_t i = 0; r >= 0 && i < n; i++) {
		r = secret_parse(&secs[i], json_array_get(req->secrets, i), err);
		for (size_t k = 0; r >= 0 && k < i; k++)
			if (strstr(secs[i].placeholder, secs[k].placeholder) || strstr(secs[k].placeholder, secs[i].placeholder))
				r = cordon_err_setf(err, -EINVAL, "secrets: placeholders must differ");
	}
	if (r < 0) {
		secrets_free(secs, n);
		return r;
	}
	*ret = secs;
	*ret_n = n;
	return 0;
}

/* The request's policy, checked against the always-blocked ranges, in @ret. */
static int set_req_policy(struct egress *e, const struct set_req *req, struct egress_policy **ret,
			  struct cordon_err *err)
{
	const char *rules[EGRESS_RULES_MAX];
	size_t n = json_array_size(req->allow);
	for (size_t i = 0; i < n; i++)
		if (!(rules[i] = json_string_value(json_array_get(req->allow, i))))
			return cordon_err_setf(err, -EINVAL, "allow: rules are strings");
	struct egress_policy *pol = NULL;
	int r = egress_policy_parse(req->mode, rules, n, &pol, err);
	if (r >= 0)
		r = egress_policy_check(pol, &e->blocks, err);
	if (r < 0) {
		egress_policy_free(pol);
		return r;
	}
	pol->extra = &e->blocks;
	*ret = pol;
	return 0;
}

/* A positive integer of @lim's, at most UINT_MAX; 0 when absent or bad (the proxy's own). */
static json_int_t limit_of(json_t *lim, const char *key)
{
	json_int_t v = json_integer_value(json_object_get(lim, key));
	return v > 0 && v <= 0xffffffff ? v : 0;
}

static void ctl_set(struct egress *e, json_t *msg)
{
	struct set_req req;
	struct cordon_err err = {};
	struct egress_policy *pol = NULL;
	struct egress_secret *secs = NULL;
	struct approve_rule *appr = NULL;
	size_t n_secs = 0, n_appr = 0;
	if (!set_req_parse(msg, &req)) {
		reply(e, false, "bad set request");
		return;
	}
	if (set_req_policy(e, &req, &pol, &err) < 0 ||
	    (req.secrets && set_req_secrets(e, &req, &secs, &n_secs, &err) < 0) ||
	    (req.approve && approve_rules_parse(e, req.approve, &appr, &n_appr, &err) < 0)) {
		egress_policy_free(pol);
		secrets_free(secs, n_secs);
		reply(e, false, err.msg);
		return;
	}
	struct sbx *s = sbx_set(e, req.addr, req.id, pol);
	if (!s) {
		secrets_free(secs, n_secs);
		approve_rules_free(appr, n_appr);
		reply(e, false, "too many sandboxes");
		return;
	}
	if (req.secrets) {
		secrets_free(s->secrets, s->n_secrets);
		s->secrets = secs;
		s->n_secrets = n_secs;
	}
	if (req.approve) {
		/* Held requests keep what they were held for; new ones follow the new rules. */
		approve_rules_free(s->approve, s->n_approve);
		s->approve = appr;
		s->n_approve = n_appr;
	}
	json_t *lim = json_object_get(msg, "limits");
	sbx_set_limits(s, &(struct egress_limits){
				  .max_conns = (unsigned)limit_of(lim, "connections"),
				  .conns_per_sec = (unsigned)limit_of(lim, "connections_per_s"),
				  .bytes_per_sec = (unsigned)limit_of(lim, "bytes_per_s"),
			  });
	if (req.ifname && sbx_own_nft(s, req.ifname, &err) < 0) {
		reply(e, false, err.msg);
		return;
	}
	reply(e, true, NULL);
}

static void ctl_del(struct egress *e, json_t *msg)
{
	const char *ip = json_string_value(json_object_get(msg, "ip"));
	struct in_addr a;
	if (!ip || inet_pton(AF_INET, ip, &a) != 1) {
		reply(e, false, "bad del request");
		return;
	}
	struct sbx *s = sbx_by_ip(e, a);
	if (s)
		sbx_del(s);
	reply(e, true, NULL);
}

static void ctl_decide(struct egress *e, json_t *msg)
{
	const char *id = json_string_value(json_object_get(msg, "id"));
	const char *d = json_string_value(json_object_get(msg, "decision"));
	const char *reason = json_string_value(json_object_get(msg, "reason"));
	char why[256] = "";
	if (!id || !d || (strcmp(d, "allow") != 0 && strcmp(d, "deny") != 0)) {
		reply(e, false, "bad decide request");
		return;
	}
	/* The reason goes into an HTTP answer's body: printable bytes only. */
	for (size_t i = 0; reason && reason[i] && i + 1 < sizeof(why); i++)
		why[i] = reason[i] >= 0x20 && reason[i] < 0x7f ? reason[i] : '?';
	int r = approve_decide(e, id, strcmp(d, "allow") == 0, why);
	reply(e, r == 0, r == 0 ? NULL : "no request waits under that approval id");
}

static const struct {
	const char *op;
	void (*fn)(struct egress *e, json_t *msg);
} ctl_ops[] = {
	{"set", ctl_set},
	{"del", ctl_del},
	{"decide", ctl_decide},
};

static void ctl_dispatch(struct egress *e, json_t *msg)
{
	const char *op = json_string_value(json_object_get(msg, "op"));
	for (size_t i = 0; op && i < ELEMENTSOF(ctl_ops); i++)
		if (strcmp(op, ctl_ops[i].op) == 0) {
			ctl_ops[i].fn(e, msg);
			return;
		}
	reply(e, false, "unknown op");
}

static void on_control(struct bufferevent *bev, void *arg)
{
	struct evbuffer *in = bufferevent_get_input(bev);
	char *line;
	size_t n;
	while ((line = evbuffer_readln(in, &n, EVBUFFER_EOL_LF))) {
		json_t *msg = json_loadb(line, n, 0, NULL);
		ctl_dispatch(arg, msg);
		json_decref(msg);
		explicit_bzero(line, n); /* it may have held a secret's value */
		free(line);
	}
}

static void on_control_event(struct bufferevent *bev, short what, void *arg)
{
	struct egress *e = arg;
	if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
		return;
	sbx_del_all_nft(e);
	event_base_loopexit(e->base, NULL);
}

int ctl_setup(struct egress *e, int fd)
{
	e->ctl = bufferevent_socket_new(e->base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (!e->ctl)
		return -ENOMEM;
	bufferevent_setcb(e->ctl, on_control, NULL, on_control_event, e);
	bufferevent_enable(e->ctl, EV_READ | EV_WRITE);
	return 0;
}
