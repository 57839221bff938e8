/* Connecting upstream for an allowed connection: to the address the sandbox asked for (an
 * address rule), or to the checked name, resolved here, with every always-blocked address
 * dropped from the answer (DNS rebinding): the proxy dials the name, not the address. */
#include <string.h>

#include "net/egress/egress.h"

bool dial_addr_ok(const struct egress *e, const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return !egress_addr_blocked(&e->blocks, AF_INET,
					    (const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr);
	if (sa->sa_family == AF_INET6)
		return !egress_addr_blocked(&e->blocks, AF_INET6,
					    (const uint8_t *)&((const struct sockaddr_in6 *)sa)->sin6_addr);
	return false;
}

static void on_connected(struct bufferevent *bev, short what, void *arg)
{
	struct conn *c = arg;
	if (what & BEV_EVENT_CONNECTED) {
		decide_report(c, c->rule, NULL);
		relay_start(c);
		return;
	}
	conn_block(c, "upstream connect failed");
}

static void dial(struct conn *c, const struct sockaddr *sa, socklen_t len)
{
	c->out = bufferevent_socket_new(c->s->e->base, -1, BEV_OPT_CLOSE_ON_FREE);
	if (!c->out) {
		conn_block(c, "out of memory");
		return;
	}
	bufferevent_setcb(c->out, NULL, NULL, on_connected, c);
	/* libevent 2.1 reports a failure here by the return value only, never through
	 * on_connected as well (bufferevent_socket_connect's freesock path). */
	if (bufferevent_socket_connect(c->out, sa, len) < 0)
		conn_block(c, "upstream connect failed");
}

void dial_addr(struct conn *c)
{
	dial(c, (struct sockaddr *)&c->orig, sizeof(c->orig));
}

/* The first address of @res that is not always blocked, with the sandbox's port. */
static bool first_allowed(const struct egress *e, const struct evutil_addrinfo *res,
			  in_port_t port, struct sockaddr_storage *ret, socklen_t *ret_len)
{
	for (const struct evutil_addrinfo *ai = res; ai; ai = ai->ai_next) {
		if (!dial_addr_ok(e, ai->ai_addr))
			continue;
		memcpy(ret, ai->ai_addr, ai->ai_addrlen);
		((struct sockaddr_in *)ret)->sin_port = port; /* same offset in v6 */
		*ret_len = ai->ai_addrlen;
		return true;
	}
	return false;
}

static void on_resolved(int result, struct evutil_addrinfo *res, void *arg)
{
	struct conn *c = arg;
	struct sockaddr_storage ss;
	socklen_t len;
	c->dnsreq = NULL;
	if (result != 0 || !res) {
		conn_block(c, "name does not resolve");
		return;
	}
	bool ok = first_allowed(c->s->e, res, c->orig.sin_port, &ss, &len);
	evutil_freeaddrinfo(res);
	if (ok)
		dial(c, (struct sockaddr *)&ss, len);
	else
		conn_block(c, "name resolves only to always-blocked addresses");
}

void dial_name(struct conn *c)
{
	c->by_name = true;
	struct evutil_addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	struct evdns_getaddrinfo_request *req =
		evdns_getaddrinfo(c->s->e->dns, c->name, NULL, &hints, on_resolved, c);
	/* NULL: libevent has called on_resolved already (it does when it cannot start the
	 * request, out of memory for one), which may have freed @c. */
	if (req)
		c->dnsreq = req;
}
