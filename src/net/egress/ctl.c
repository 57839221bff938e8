/* The control channel with the controller (cordond, or cordon run), JSON lines both ways on
 * the fd cordon-egress was given (net/egressctl.c is the other end):
 *
 *   -> {"op":"set","ip":..,"sandbox":..,"mode":"deny"|"allow"|"public","allow":[..],
 *       "ifname":..}                       (ifname: we own that interface's nftables entries)
 *   -> {"op":"del","ip":..}
 *   <- {"op":"reply","ok":true|false,"error":..}   one per request, in order
 *   <- {"op":"event",...}                  decisions (decide.c), dropped past CTL_BACKLOG_MAX
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
	json_t *allow;
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
	};
	return r->ip && r->id && strlen(r->id) < sizeof(((struct sbx *)0)->id) && r->mode >= 0 &&
	       (!r->ifname || strlen(r->ifname) < sizeof(((struct sbx *)0)->ifname)) &&
	       inet_pton(AF_INET, r->ip, &r->addr) == 1 && (!r->allow || json_is_array(r->allow)) &&
	       json_array_size(r->allow) <= EGRESS_RULES_MAX;
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

static void ctl_set(struct egress *e, json_t *msg)
{
	struct set_req req;
	struct cordon_err err = {};
	struct egress_policy *pol = NULL;
	if (!set_req_parse(msg, &req)) {
		reply(e, false, "bad set request");
		return;
	}
	if (set_req_policy(e, &req, &pol, &err) < 0) {
		reply(e, false, err.msg);
		return;
	}
	struct sbx *s = sbx_set(e, req.addr, req.id, pol);
	if (!s) {
		reply(e, false, "too many sandboxes");
		return;
	}
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

static const struct {
	const char *op;
	void (*fn)(struct egress *e, json_t *msg);
} ctl_ops[] = {
	{"set", ctl_set},
	{"del", ctl_del},
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
