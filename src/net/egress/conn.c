/* A TCP connection from a sandbox, from accept() until a relay takes it (or it is
 * blocked): who it is from, whether the sandbox may open one more, and the first bytes
 * that name its destination, read within SNIFF_TIMEOUT_S. */
#include <arpa/inet.h> /* before linux/netfilter_ipv4.h, which would define in_addr again */
#include <errno.h>
#include <linux/netfilter_ipv4.h>
#include <stdlib.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "net/egress/egress.h"

void conn_close(struct conn *c)
{
	if (c->relay && c->relay->free)
		c->relay->free(c);
	if (c->dnsreq)
		evdns_getaddrinfo_cancel(c->dnsreq);
	if (c->in)
		bufferevent_free(c->in);
	if (c->out)
		bufferevent_free(c->out);
	if (c->counted && c->s)
		c->s->conns--;
	free(c);
}

void conn_block(struct conn *c, const char *reason)
{
	decide_report(c, NULL, reason);
	conn_close(c);
}

/* Takes ownership of @fd, even on failure. */
static struct conn *conn_new(struct sbx *s, int fd, const struct sockaddr_in *orig)
{
	struct conn *c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return NULL;
	}
	c->s = s;
	c->orig = *orig;
	c->proto = "tcp";
	inet_ntop(AF_INET, &orig->sin_addr, c->dst, sizeof(c->dst));
	c->in = bufferevent_socket_new(s->e->base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (!c->in) {
		close(fd);
		free(c);
		return NULL;
	}
	return c;
}

/* The sandbox's limits on open connections and new ones per second; blocks @c past them. */
static bool conn_admit(struct conn *c)
{
	struct sbx *s = c->s;
	if (s->conns >= s->limits.max_conns) {
		conn_block(c, "too many connections");
		return false;
	}
	if (!sbx_rate_ok(s)) {
		conn_block(c, "too many new connections per second");
		return false;
	}
	s->conns++;
	c->counted = true;
	return true;
}

/* Which sniffer reads @p: a TLS handshake record, or else HTTP. */
static int conn_sniff_name(struct conn *c, const uint8_t *p, size_t len)
{
	uint16_t hport;
	if (len > 0 && p[0] == 0x16) {
		c->proto = "tls";
		return sniff_tls_sni(p, len, c->name, sizeof(c->name));
	}
	c->proto = "http";
	return sniff_http_host(p, len, c->name, sizeof(c->name), &hport);
}

static void on_first_bytes(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t len = evbuffer_get_length(in);
	if (len > SNIFF_MAX)
		len = SNIFF_MAX; /* the parsers see no more than was made contiguous */
	int r = conn_sniff_name(c, evbuffer_pullup(in, len), len);
	if (r == -EAGAIN && len < SNIFF_MAX)
		return;
	/* What was read stays queued: the relay sends it first. */
	bufferevent_disable(bev, EV_READ);
	decide_sniffed(c, r);
}

static void on_first_event(struct bufferevent *bev, short what, void *arg)
{
	struct conn *c = arg;
	conn_block(c, what & BEV_EVENT_TIMEOUT ? "no request within the time allowed" : "closed before a request");
}

/* Waits for the first bytes; the deadline ends when a relay starts. */
static void conn_sniff(struct conn *c)
{
	struct timeval tv = {SNIFF_TIMEOUT_S, 0};
	bufferevent_set_timeouts(c->in, &tv, NULL);
	bufferevent_setwatermark(c->in, EV_READ, 0, SNIFF_MAX);
	bufferevent_setcb(c->in, on_first_bytes, NULL, on_first_event, c);
	bufferevent_enable(c->in, EV_READ);
}

void conn_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
		 void *arg)
{
	struct sockaddr_in orig;
	socklen_t olen = sizeof(orig);
	struct sbx *s = sbx_by_sockaddr(arg, sa);
	if (!s || getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &orig, &olen) < 0) {
		close(fd); /* not from a sandbox we serve */
		return;
	}
	struct conn *c = conn_new(s, fd, &orig);
	if (!c || !conn_admit(c))
		return;
	c->rule = decide_addr(c);
	if (c->rule && !decide_needs_name(c))
		dial_addr(c);
	else
		conn_sniff(c);
}
