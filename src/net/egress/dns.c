/* The DNS filter: every DNS packet of a sandbox (UDP and TCP, whatever server it named)
 * arrives here. A query for a name the policy allows is forwarded to the host's resolver
 * under a random id; its answer is checked (net/dnsmsg.c) and refused when it points at an
 * always-blocked address. Any other query gets REFUSED. The pending table is shared by all
 * sandboxes and bounded (MAX_DNS_PENDING, DNS_TIMEOUT_S). */
#include <errno.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "net/egress/egress.h"

static void dns_reply(struct egress *e, struct dns_pending *p, const uint8_t *msg, size_t len)
{
	if (p->tcp) {
		uint16_t n = htons((uint16_t)len);
		bufferevent_write(p->tcp, &n, 2);
		bufferevent_write(p->tcp, msg, len);
		return;
	}
	sendto(e->dns_udp_fd, msg, len, 0, (struct sockaddr *)&p->client, sizeof(p->client));
}

static void dns_refuse(struct egress *e, struct dns_pending *p, const uint8_t *query, size_t len,
		       int rcode)
{
	uint8_t out[600];
	ssize_t n = dns_build_error(query, len, &p->q, rcode, out, sizeof(out));
	if (n > 0)
		dns_reply(e, p, out, (size_t)n);
}

/* Sends @buf upstream under a fresh id, remembered in a free slot; false when none is. */
static bool dns_forward(struct egress *e, const struct dns_pending *p, const uint8_t *buf, size_t len)
{
	time_t now = time(NULL);
	for (size_t i = 0; i < MAX_DNS_PENDING; i++) {
		struct dns_pending *slot = &e->pending[i];
		if (slot->used && now - slot->when < DNS_TIMEOUT_S)
			continue;
		*slot = *p;
		slot->used = true;
		slot->when = now;
		slot->orig_id = p->q.id;
		if (getrandom(&slot->id, sizeof(slot->id), 0) != sizeof(slot->id))
			slot->id = (uint16_t)(now ^ (time_t)i);
		uint8_t fwd[4096];
		if (len > sizeof(fwd))
			return true;
		memcpy(fwd, buf, len);
		fwd[0] = slot->id >> 8;
		fwd[1] = slot->id & 0xff;
		sendto(e->upstream_fd, fwd, len, 0, (struct sockaddr *)&e->upstream, e->upstream_len);
		return true;
	}
	return false;
}

static void dns_query(struct sbx *s, const uint8_t *buf, size_t len, const struct sockaddr_in *from,
		      struct bufferevent *tcp)
{
	struct dns_pending p = {.client = from ? *from : (struct sockaddr_in){0}, .s = s, .tcp = tcp};
	if (dns_parse_query(buf, len, &p.q) < 0)
		return; /* not a query we answer: dropped */
	if (p.q.qclass != DNS_CLASS_IN) { /* CHAOS and friends tell of the resolver, not the net */
		dns_refuse(s->e, &p, buf, len, DNS_RCODE_REFUSED);
		return;
	}
	/* The pending table is shared by every sandbox: one that floods it must not starve the
	 * others, so queries draw on its new-connections-per-second bucket too. */
	if (!sbx_rate_ok(s)) {
		decide_report_dns(s, p.q.name, NULL, "too many queries per second");
		dns_refuse(s->e, &p, buf, len, DNS_RCODE_REFUSED);
		return;
	}
	const struct egress_secret *sec = secret_in_name(s, p.q.name);
	if (sec) { /* a name is a way out too: the label would reach the name's servers */
		decide_report_misuse(s, NULL, NULL, sec, "in a DNS query name");
		dns_refuse(s->e, &p, buf, len, DNS_RCODE_REFUSED);
		return;
	}
	const struct egress_rule *rule = egress_match_dns(s->policy, p.q.name);
	if (!rule)
		rule = approve_dns_rule(s, p.q.name);
	decide_report_dns(s, p.q.name, rule, rule ? NULL : "name not allowed");
	if (!rule) {
		dns_refuse(s->e, &p, buf, len, DNS_RCODE_REFUSED);
		return;
	}
	if (!dns_forward(s->e, &p, buf, len))
		dns_refuse(s->e, &p, buf, len, DNS_RCODE_SERVFAIL); /* too many in flight */
}

/* The pending query an upstream answer is for; it leaves the table. */
static struct dns_pending *dns_take(struct egress *e, uint16_t id)
{
	for (size_t i = 0; i < MAX_DNS_PENDING; i++) {
		struct dns_pending *p = &e->pending[i];
		if (p->used && p->id == id) {
			p->used = false;
			return p;
		}
	}
	return NULL;
}

/* False when the answer is malformed or not for @q; else whether it names an always-blocked
 * address in @ret_blocked. */
static bool dns_answer_check(const struct egress *e, const uint8_t *buf, size_t n,
			     const struct dns_question *q, bool *ret_blocked)
{
	int fam[32];
	uint8_t addrs[32][16];
	size_t na = 0;
	if (dns_check_answer(buf, n, q, fam, addrs, 32, &na) < 0)
		return false;
	*ret_blocked = false;
	for (size_t k = 0; k < na && !*ret_blocked; k++)
		*ret_blocked = egress_addr_blocked(&e->blocks, fam[k], addrs[k]);
	return true;
}

static void on_upstream(evutil_socket_t fd, short what, void *arg)
{
	struct egress *e = arg;
	uint8_t buf[4096];
	bool blocked;
	ssize_t n = recv(fd, buf, sizeof(buf), 0);
	if (n < 12)
		return;
	struct dns_pending *p = dns_take(e, (uint16_t)(buf[0] << 8 | buf[1]));
	if (!p)
		return;
	buf[0] = p->orig_id >> 8;
	buf[1] = p->orig_id & 0xff;
	if (!dns_answer_check(e, buf, (size_t)n, &p->q, &blocked))
		return; /* malformed, or not the answer to that question: dropped */
	if (blocked) {
		decide_report_dns(p->s, p->q.name, NULL, "answer points at an always-blocked address");
		dns_refuse(e, p, buf, (size_t)n, DNS_RCODE_REFUSED);
		return;
	}
	dns_reply(e, p, buf, (size_t)n);
}

static void on_dns_udp(evutil_socket_t fd, short what, void *arg)
{
	uint8_t buf[4096];
	struct sockaddr_in from;
	socklen_t flen = sizeof(from);
	ssize_t n = recvfrom(fd, buf, sizeof(buf), 0, (struct sockaddr *)&from, &flen);
	if (n <= 0 || from.sin_family != AF_INET)
		return;
	struct sbx *s = sbx_by_ip(arg, from.sin_addr);
	if (s)
		dns_query(s, buf, (size_t)n, &from, NULL);
}

/* Every query still waiting for its answer forgets @bev before it is freed: an answer that
 * arrives later must not be written to freed memory. */
static void dns_tcp_close(struct sbx *s, struct bufferevent *bev)
{
	for (size_t i = 0; i < MAX_DNS_PENDING; i++)
		if (s->e->pending[i].tcp == bev)
			s->e->pending[i].used = false;
	bufferevent_free(bev);
	s->conns--;
}

#define DNS_TCP_OUT_MAX (64u << 10)

static void on_dns_tcp_read(struct bufferevent *bev, void *arg);
static void on_dns_tcp_event(struct bufferevent *bev, short what, void *arg);
static void on_dns_tcp_drained(struct bufferevent *bev, void *arg);

/* A client that does not read its answers must not grow our memory: past
 * DNS_TCP_OUT_MAX queued, its queries wait in the kernel (TCP backpressure) until half of
 * the answers have gone. */
static bool dns_tcp_throttled(struct bufferevent *bev, struct sbx *s)
{
	if (evbuffer_get_length(bufferevent_get_output(bev)) < DNS_TCP_OUT_MAX)
		return false;
	bufferevent_disable(bev, EV_READ);
	bufferevent_setwatermark(bev, EV_WRITE, DNS_TCP_OUT_MAX / 2, 0);
	bufferevent_setcb(bev, on_dns_tcp_read, on_dns_tcp_drained, on_dns_tcp_event, s);
	return true;
}

/* Messages after their 2-byte length (RFC 1035 4.2.2); one over our buffer ends the
 * connection. */
static void on_dns_tcp_read(struct bufferevent *bev, void *arg)
{
	struct sbx *s = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	while (evbuffer_get_length(in) >= 2 && !dns_tcp_throttled(bev, s)) {
		uint8_t hdr[2];
		evbuffer_copyout(in, hdr, 2);
		size_t len = (size_t)(hdr[0] << 8 | hdr[1]);
		if (evbuffer_get_length(in) < 2 + len)
			return;
		uint8_t buf[4096];
		evbuffer_drain(in, 2);
		if (len > sizeof(buf)) {
			dns_tcp_close(s, bev);
			return;
		}
		evbuffer_remove(in, buf, len);
		dns_query(s, buf, len, NULL, bev);
	}
}

static void on_dns_tcp_drained(struct bufferevent *bev, void *arg)
{
	bufferevent_setwatermark(bev, EV_WRITE, 0, 0);
	bufferevent_setcb(bev, on_dns_tcp_read, NULL, on_dns_tcp_event, arg);
	bufferevent_enable(bev, EV_READ);
	on_dns_tcp_read(bev, arg); /* the queries read before the pause */
}

static void on_dns_tcp_event(struct bufferevent *bev, short what, void *arg)
{
	struct sbx *s = arg;
	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT))
		dns_tcp_close(s, bev);
}

/* A TCP connection holds a descriptor and a buffer here like any other: it counts toward
 * the sandbox's connection limits. */
static bool dns_tcp_admit(struct sbx *s)
{
	if (s->conns >= s->limits.max_conns) {
		decide_report_dns(s, NULL, NULL, "too many connections");
		return false;
	}
	if (!sbx_rate_ok(s)) {
		decide_report_dns(s, NULL, NULL, "too many new connections per second");
		return false;
	}
	return true;
}

static void on_dns_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
			  int salen, void *arg)
{
	struct egress *e = arg;
	struct sbx *s = sbx_by_sockaddr(e, sa);
	struct bufferevent *bev = s && dns_tcp_admit(s) ? bufferevent_socket_new(e->base, fd, BEV_OPT_CLOSE_ON_FREE) : NULL;
	if (!bev) {
		close(fd);
		return;
	}
	s->conns++; /* which also keeps the entry while the connection points at it */
	struct timeval tv = {DNS_TIMEOUT_S * 2, 0};
	bufferevent_set_timeouts(bev, &tv, NULL);
	bufferevent_setcb(bev, on_dns_tcp_read, NULL, on_dns_tcp_event, s);
	bufferevent_enable(bev, EV_READ | EV_WRITE);
}

static int dns_watch(struct egress *e, int fd, event_callback_fn cb)
{
	struct event *ev = event_new(e->base, fd, EV_READ | EV_PERSIST, cb, e);
	return ev && event_add(ev, NULL) == 0 ? 0 : -ENOMEM;
}

/* The TCP listener, the UDP socket on the same port, and the socket to the upstream
 * resolver. -errno (errno set) when one cannot be made. */
int dns_setup(struct egress *e)
{
	struct evconnlistener *l = host_listen_tcp(e, on_dns_accept, &e->dns_port);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(e->dns_port)};
	e->dns_udp_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	e->upstream_fd = socket(e->upstream.ss_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (!l || e->dns_udp_fd < 0 || e->upstream_fd < 0 ||
	    bind(e->dns_udp_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -errno;
	if (dns_watch(e, e->dns_udp_fd, on_dns_udp) < 0 || dns_watch(e, e->upstream_fd, on_upstream) < 0)
		return -(errno = ENOMEM);
	return 0;
}
