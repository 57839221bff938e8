/* cordon-egress: the only way out of a sandbox's network namespace.
 *
 *   cordon-egress CONTROL_FD
 *
 * nftables redirects every TCP connection and every DNS packet from a sandbox's host end to
 * this process (nft.c). Here the sandbox is recognised by its source address, its policy is
 * applied, and each decision is reported to the controller (cordond or cordon run), which
 * writes it to the audit log:
 *
 * - TCP: a CIDR rule (or, in `public` mode, any address that is not always blocked) relays
 *   to the original destination at once. Otherwise the first bytes must name the
 *   destination (TLS SNI, HTTP Host); the name is checked against the policy, resolved here,
 *   every always-blocked address is dropped from the answer (DNS rebinding), and the proxy
 *   dials the *name*, not the address the sandbox asked for. Then bytes are relayed both
 *   ways with large buffers and no per-byte work.
 * - DNS (UDP and TCP): a query for a name the policy allows is forwarded to the host's
 *   resolver, its answer checked; any other gets REFUSED. No other resolver is reachable.
 *
 * The controller speaks JSON lines on CONTROL_FD: {"op":"set","ip":..,"sandbox":..,
 * "mode":..,"allow":[..]}, {"op":"del","ip":..}; each gets {"op":"reply","ok":..}. Decisions
 * go the other way as {"op":"event",...}. The process ends when CONTROL_FD closes.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netfilter_ipv4.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <jansson.h>

#include "basic/cleanup.h"
#include "net/dnsmsg.h"
#include "lib/seccomp.h"
#include "policy/seccomp_filter.h"
#include "net/nft.h"
#include "net/sniff.h"
#include "policy/egress.h"

#define MAX_SANDBOXES       4096
/* Per-sandbox ceilings, with their defaults; $CORDON_EGRESS_LIMITS="CONNS,PER_SEC,BYTES"
 * (set by cordond's --egress-limits, or by hand for cordon run) overrides them. */
static unsigned max_conns = 256, conns_per_sec = 200, bytes_per_sec = 16u << 20;
#define SNIFF_MAX           SNIFF_TLS_WAIT_MAX
#define SNIFF_TIMEOUT_S     10
#define RELAY_HIGH          (1u << 20)
#define DNS_TIMEOUT_S       5
#define MAX_DNS_PENDING     1024
#define CTL_BACKLOG_MAX     (4u << 20)

struct sbx {
	struct in_addr ip;
	char id[72];
	char ifname[16]; /* set when we own its nftables entries (cordon run) */
	struct egress_policy *policy;
	unsigned conns;
	double tokens;
	struct timeval last;
	struct ev_token_bucket_cfg *rate;
	struct bufferevent_rate_limit_group *group;
};

static struct event_base *base;
static struct evdns_base *dns;
static struct bufferevent *ctl;
static struct sbx *sbxs[MAX_SANDBOXES];
static struct egress_blocklist host_blocks;
static const struct egress_blocklist *blocklist = &host_blocks;
static struct sockaddr_storage upstream;
static uint16_t tcp_port, dns_port;
static socklen_t upstream_len;

/* ---- the sandboxes' table ---- */

static struct sbx *sbx_by_ip(struct in_addr ip)
{
	for (size_t i = 0; i < MAX_SANDBOXES; i++)
		if (sbxs[i] && sbxs[i]->ip.s_addr == ip.s_addr)
			return sbxs[i];
	return NULL;
}

static void sbx_free(struct sbx *s)
{
	if (!s)
		return;
	egress_policy_free(s->policy);
	if (s->group)
		bufferevent_rate_limit_group_free(s->group);
	if (s->rate)
		ev_token_bucket_cfg_free(s->rate);
	free(s);
}

/* ---- events to the controller ---- */

static const char *const mode_names[] = {"deny", "allow", "public"};

static void emit(const struct sbx *s, const char *proto, const char *dst, unsigned port,
		 const char *name, const struct egress_rule *rule, const char *reason)
{
	_cleanup_(json_decrefp) json_t *e = json_pack(
		"{s:s, s:s, s:s, s:s, s:i, s:s?, s:s, s:s?, s:s?}", "op", "event", "sandbox", s->id,
		"proto", proto, "dst", dst ? dst : "", "port", (int)port, "name", name, "verdict",
		rule ? "allow" : "block", "rule", rule ? rule->text : NULL, "reason", reason);
	_cleanup_free_ char *line = e ? json_dumps(e, JSON_COMPACT) : NULL;
	/* A controller that reads slowly (or, like cordon run, not at all) must not make a
	 * flooding sandbox grow our memory: past a bound, events are dropped. */
	if (line && ctl && evbuffer_get_length(bufferevent_get_output(ctl)) < CTL_BACKLOG_MAX) {
		bufferevent_write(ctl, line, strlen(line));
		bufferevent_write(ctl, "\n", 1);
	}
}

/* ---- TCP ---- */

struct conn {
	struct sbx *s;
	struct bufferevent *in, *out;
	struct sockaddr_in orig;
	char dst[INET_ADDRSTRLEN];
	char name[256];
	const char *proto;
	const struct egress_rule *rule;
	struct evdns_getaddrinfo_request *dnsreq;
	bool counted;
};

static void conn_free(struct conn *c)
{
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

static void block(struct conn *c, const char *reason)
{
	emit(c->s, c->proto, c->dst, ntohs(c->orig.sin_port), c->name[0] ? c->name : NULL, NULL, reason);
	conn_free(c);
}

static struct bufferevent *other(struct conn *c, struct bufferevent *bev)
{
	return bev == c->in ? c->out : c->in;
}

static void relay_read(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	struct bufferevent *to = other(c, bev);
	struct evbuffer *dst = bufferevent_get_output(to);
	evbuffer_add_buffer(dst, bufferevent_get_input(bev));
	if (evbuffer_get_length(dst) >= RELAY_HIGH) {
		/* Backpressure: stop reading until the other side has drained. */
		bufferevent_disable(bev, EV_READ);
		bufferevent_setwatermark(to, EV_WRITE, RELAY_HIGH / 2, 0);
	}
}

static void relay_drained(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	bufferevent_setwatermark(bev, EV_WRITE, 0, 0);
	bufferevent_enable(other(c, bev), EV_READ);
}

static void close_when_flushed(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
		conn_free(c);
}

static void relay_event(struct bufferevent *bev, short what, void *arg)
{
	struct conn *c = arg;
	if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
		return;
	struct bufferevent *to = other(c, bev);
	if (to && evbuffer_get_length(bufferevent_get_output(to)) > 0) {
		/* Let what is queued reach the other side, then close. */
		bufferevent_setcb(to, NULL, close_when_flushed, relay_event, c);
		bufferevent_disable(to, EV_READ);
		return;
	}
	conn_free(c);
}

static void start_relay(struct conn *c)
{
	bufferevent_setcb(c->in, relay_read, relay_drained, relay_event, c);
	bufferevent_setcb(c->out, relay_read, relay_drained, relay_event, c);
	bufferevent_add_to_rate_limit_group(c->in, c->s->group);
	bufferevent_add_to_rate_limit_group(c->out, c->s->group);
	bufferevent_enable(c->in, EV_READ | EV_WRITE);
	bufferevent_enable(c->out, EV_READ | EV_WRITE);
	/* What the sandbox already sent (the ClientHello or the request) goes first. */
	if (evbuffer_get_length(bufferevent_get_input(c->in)))
		relay_read(c->in, c);
}

static void on_connected(struct bufferevent *bev, short what, void *arg)
{
	struct conn *c = arg;
	if (what & BEV_EVENT_CONNECTED) {
		emit(c->s, c->proto, c->dst, ntohs(c->orig.sin_port), c->name[0] ? c->name : NULL, c->rule, NULL);
		start_relay(c);
		return;
	}
	block(c, "upstream connect failed");
}

static void dial(struct conn *c, const struct sockaddr *sa, socklen_t len)
{
	c->out = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
	if (!c->out) {
		block(c, "out of memory");
		return;
	}
	bufferevent_setcb(c->out, NULL, NULL, on_connected, c);
	if (bufferevent_socket_connect(c->out, sa, len) < 0)
		block(c, "upstream connect failed");
}

static bool addr_ok(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return !egress_addr_blocked(blocklist, AF_INET,
					    (const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr);
	if (sa->sa_family == AF_INET6)
		return !egress_addr_blocked(blocklist, AF_INET6,
					    (const uint8_t *)&((const struct sockaddr_in6 *)sa)->sin6_addr);
	return false;
}

static void on_resolved(int result, struct evutil_addrinfo *res, void *arg)
{
	struct conn *c = arg;
	c->dnsreq = NULL;
	if (result != 0 || !res) {
		block(c, "name does not resolve");
		return;
	}
	for (struct evutil_addrinfo *ai = res; ai; ai = ai->ai_next) {
		if (!addr_ok(ai->ai_addr))
			continue;
		struct sockaddr_storage ss;
		memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
		((struct sockaddr_in *)&ss)->sin_port = c->orig.sin_port; /* same offset in v6 */
		socklen_t len = ai->ai_addrlen;
		evutil_freeaddrinfo(res);
		dial(c, (struct sockaddr *)&ss, len);
		return;
	}
	evutil_freeaddrinfo(res);
	block(c, "name resolves only to always-blocked addresses");
}

static void resolve_and_dial(struct conn *c)
{
	struct evutil_addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	bufferevent_disable(c->in, EV_READ);
	c->dnsreq = evdns_getaddrinfo(dns, c->name, NULL, &hints, on_resolved, c);
}

/* Decides from the first bytes: the name the connection is for. */
static void on_first_bytes(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t len = evbuffer_get_length(in);
	if (len > SNIFF_MAX)
		len = SNIFF_MAX; /* the parsers see no more than was made contiguous */
	const uint8_t *p = evbuffer_pullup(in, len);
	uint16_t port = ntohs(c->orig.sin_port);
	int r;

	if (len > 0 && p[0] == 0x16) {
		c->proto = "tls";
		r = sniff_tls_sni(p, len, c->name, sizeof(c->name));
	} else {
		c->proto = "http";
		uint16_t hport;
		r = sniff_http_host(p, len, c->name, sizeof(c->name), &hport);
	}
	if (r == -EAGAIN && len < SNIFF_MAX)
		return;
	if (r < 0) {
		c->name[0] = '\0';
		/* No name: only a rule on the address itself (or public mode) can allow it. */
		c->rule = egress_match_addr(c->s->policy, AF_INET, (const uint8_t *)&c->orig.sin_addr, port);
		if (c->rule && addr_ok((struct sockaddr *)&c->orig)) {
			bufferevent_disable(bev, EV_READ);
			dial(c, (struct sockaddr *)&c->orig, sizeof(c->orig));
		} else {
			block(c, r == -ENOENT ? "no SNI or Host to check" : "not TLS or HTTP with a name");
		}
		return;
	}
	c->rule = egress_match_name(c->s->policy, c->name, port);
	if (!c->rule) {
		block(c, "name not allowed");
		return;
	}
	resolve_and_dial(c);
}

static void on_first_event(struct bufferevent *bev, short what, void *arg)
{
	struct conn *c = arg;
	block(c, what & BEV_EVENT_TIMEOUT ? "no request within the time allowed" : "closed before a request");
}

/* New connections per second per sandbox: a token bucket. */
static bool rate_ok(struct sbx *s)
{
	struct timeval now, d;
	event_base_gettimeofday_cached(base, &now);
	timersub(&now, &s->last, &d);
	s->last = now;
	s->tokens += (d.tv_sec + d.tv_usec / 1e6) * conns_per_sec;
	if (s->tokens > conns_per_sec)
		s->tokens = conns_per_sec;
	if (s->tokens < 1)
		return false;
	s->tokens -= 1;
	return true;
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
		      void *arg)
{
	struct sockaddr_in orig;
	socklen_t olen = sizeof(orig);
	struct sbx *s = sa->sa_family == AF_INET ? sbx_by_ip(((struct sockaddr_in *)sa)->sin_addr) : NULL;
	if (!s || getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &orig, &olen) < 0) {
		close(fd); /* not from a sandbox we serve */
		return;
	}
	struct conn *c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return;
	}
	c->s = s;
	c->orig = orig;
	c->proto = "tcp";
	inet_ntop(AF_INET, &orig.sin_addr, c->dst, sizeof(c->dst));
	c->in = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (!c->in) {
		close(fd);
		free(c);
		return;
	}
	if (s->conns >= max_conns) {
		block(c, "too many connections");
		return;
	}
	if (!rate_ok(s)) {
		block(c, "too many new connections per second");
		return;
	}
	s->conns++;
	c->counted = true;
	uint16_t port = ntohs(orig.sin_port);
	/* An address rule relays at once: the server may be the one to speak first (ssh). */
	c->rule = egress_match_addr(s->policy, AF_INET, (const uint8_t *)&orig.sin_addr, port);
	if (c->rule && addr_ok((struct sockaddr *)&orig)) {
		dial(c, (struct sockaddr *)&orig, sizeof(orig));
		return;
	}
	c->rule = NULL;
	struct timeval tv = {SNIFF_TIMEOUT_S, 0};
	bufferevent_set_timeouts(c->in, &tv, NULL);
	bufferevent_setwatermark(c->in, EV_READ, 0, SNIFF_MAX);
	bufferevent_setcb(c->in, on_first_bytes, NULL, on_first_event, c);
	bufferevent_enable(c->in, EV_READ);
}

/* ---- DNS ---- */

struct dns_pending {
	uint16_t id, orig_id;
	struct sockaddr_in client;
	struct dns_question q;
	struct sbx *s;
	struct bufferevent *tcp; /* NULL: the client asked over UDP */
	time_t when;
	bool used;
};

static struct dns_pending pending[MAX_DNS_PENDING];
static int dns_udp_fd, upstream_fd;

static void dns_reply(struct dns_pending *p, const uint8_t *msg, size_t len)
{
	if (p->tcp) {
		uint16_t n = htons((uint16_t)len);
		bufferevent_write(p->tcp, &n, 2);
		bufferevent_write(p->tcp, msg, len);
		return;
	}
	sendto(dns_udp_fd, msg, len, 0, (struct sockaddr *)&p->client, sizeof(p->client));
}

static void dns_refuse(struct dns_pending *p, const uint8_t *query, size_t len, int rcode)
{
	uint8_t out[600];
	ssize_t n = dns_build_error(query, len, &p->q, rcode, out, sizeof(out));
	if (n > 0)
		dns_reply(p, out, (size_t)n);
}

static void dns_query(struct sbx *s, const uint8_t *buf, size_t len, const struct sockaddr_in *from,
		      struct bufferevent *tcp)
{
	struct dns_pending p = {.client = from ? *from : (struct sockaddr_in){0}, .s = s, .tcp = tcp};
	if (dns_parse_query(buf, len, &p.q) < 0)
		return; /* not a query we answer: dropped */
	if (p.q.qclass != DNS_CLASS_IN) { /* CHAOS and friends tell of the resolver, not the net */
		dns_refuse(&p, buf, len, 5);
		return;
	}
	/* The pending table is shared by every sandbox: one that floods it must not starve the
	 * others, so queries draw on its new-connections-per-second bucket too. */
	if (!rate_ok(s)) {
		emit(s, "dns", NULL, 53, p.q.name, NULL, "too many queries per second");
		dns_refuse(&p, buf, len, 5);
		return;
	}
	const struct egress_rule *rule = egress_match_dns(s->policy, p.q.name);
	emit(s, "dns", NULL, 53, p.q.name, rule, rule ? NULL : "name not allowed");
	if (!rule) {
		dns_refuse(&p, buf, len, 5 /* REFUSED */);
		return;
	}
	time_t now = time(NULL);
	for (size_t i = 0; i < MAX_DNS_PENDING; i++) {
		struct dns_pending *slot = &pending[i];
		if (slot->used && now - slot->when < DNS_TIMEOUT_S)
			continue;
		*slot = p;
		slot->used = true;
		slot->when = now;
		slot->orig_id = p.q.id;
		if (getrandom(&slot->id, sizeof(slot->id), 0) != sizeof(slot->id))
			slot->id = (uint16_t)(now ^ (time_t)i);
		uint8_t fwd[4096];
		if (len > sizeof(fwd))
			return;
		memcpy(fwd, buf, len);
		fwd[0] = slot->id >> 8;
		fwd[1] = slot->id & 0xff;
		sendto(upstream_fd, fwd, len, 0, (struct sockaddr *)&upstream, upstream_len);
		return;
	}
	dns_refuse(&p, buf, len, 2 /* SERVFAIL: too many in flight */);
}

static void on_upstream(evutil_socket_t fd, short what, void *arg)
{
	uint8_t buf[4096];
	ssize_t n = recv(fd, buf, sizeof(buf), 0);
	if (n < 12)
		return;
	uint16_t id = (uint16_t)(buf[0] << 8 | buf[1]);
	for (size_t i = 0; i < MAX_DNS_PENDING; i++) {
		struct dns_pending *p = &pending[i];
		if (!p->used || p->id != id)
			continue;
		p->used = false;
		buf[0] = p->orig_id >> 8;
		buf[1] = p->orig_id & 0xff;
		int fam[32];
		uint8_t addrs[32][16];
		size_t na = 0;
		if (dns_check_answer(buf, (size_t)n, &p->q, fam, addrs, 32, &na) < 0)
			return;
		for (size_t k = 0; k < na; k++)
			if (egress_addr_blocked(blocklist, fam[k], addrs[k])) {
				emit(p->s, "dns", NULL, 53, p->q.name, NULL,
				     "answer points at an always-blocked address");
				dns_refuse(p, buf, (size_t)n, 5);
				return;
			}
		dns_reply(p, buf, (size_t)n);
		return;
	}
}

static void on_dns_udp(evutil_socket_t fd, short what, void *arg)
{
	uint8_t buf[4096];
	struct sockaddr_in from;
	socklen_t flen = sizeof(from);
	ssize_t n = recvfrom(fd, buf, sizeof(buf), 0, (struct sockaddr *)&from, &flen);
	if (n <= 0 || from.sin_family != AF_INET)
		return;
	struct sbx *s = sbx_by_ip(from.sin_addr);
	if (s)
		dns_query(s, buf, (size_t)n, &from, NULL);
}

static void on_dns_tcp_read(struct bufferevent *bev, void *arg)
{
	struct sbx *s = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	while (evbuffer_get_length(in) >= 2) {
		uint8_t hdr[2];
		evbuffer_copyout(in, hdr, 2);
		size_t len = (size_t)(hdr[0] << 8 | hdr[1]);
		if (evbuffer_get_length(in) < 2 + len)
			return;
		uint8_t buf[4096];
		evbuffer_drain(in, 2);
		if (len > sizeof(buf)) {
			bufferevent_free(bev);
			return;
		}
		evbuffer_remove(in, buf, len);
		dns_query(s, buf, len, NULL, bev);
	}
}

static void on_dns_tcp_event(struct bufferevent *bev, short what, void *arg)
{
	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)) {
		for (size_t i = 0; i < MAX_DNS_PENDING; i++)
			if (pending[i].tcp == bev)
				pending[i].used = false;
		bufferevent_free(bev);
	}
}

static void on_dns_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
			  int salen, void *arg)
{
	struct sbx *s = sa->sa_family == AF_INET ? sbx_by_ip(((struct sockaddr_in *)sa)->sin_addr) : NULL;
	struct bufferevent *bev = s ? bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE) : NULL;
	if (!bev) {
		close(fd);
		return;
	}
	struct timeval tv = {DNS_TIMEOUT_S * 2, 0};
	bufferevent_set_timeouts(bev, &tv, NULL);
	bufferevent_setcb(bev, on_dns_tcp_read, NULL, on_dns_tcp_event, s);
	bufferevent_enable(bev, EV_READ | EV_WRITE);
}

/* ---- control ---- */

static void reply(bool ok, const char *error)
{
	_cleanup_(json_decrefp) json_t *r = json_pack("{s:s, s:b, s:s?}", "op", "reply", "ok", ok, "error", error);
	_cleanup_free_ char *line = r ? json_dumps(r, JSON_COMPACT) : NULL;
	if (line) {
		bufferevent_write(ctl, line, strlen(line));
		bufferevent_write(ctl, "\n", 1);
	}
}

static int mode_from(const char *m)
{
	for (size_t i = 0; i < ELEMENTSOF(mode_names); i++)
		if (m && strcmp(m, mode_names[i]) == 0)
			return (int)i;
	return -1;
}

static void control_set(json_t *msg)
{
	const char *ip = json_string_value(json_object_get(msg, "ip"));
	const char *id = json_string_value(json_object_get(msg, "sandbox"));
	const char *ifname = json_string_value(json_object_get(msg, "ifname"));
	int mode = mode_from(json_string_value(json_object_get(msg, "mode")));
	json_t *allow = json_object_get(msg, "allow");
	struct in_addr a;
	struct cordon_err err = {};
	const char *rules[256];
	size_t n = 0;

	if (!ip || !id || strlen(id) >= sizeof(((struct sbx *)0)->id) || mode < 0 ||
	    (ifname && strlen(ifname) >= sizeof(((struct sbx *)0)->ifname)) ||
	    inet_pton(AF_INET, ip, &a) != 1 || (allow && !json_is_array(allow)) ||
	    json_array_size(allow) > ELEMENTSOF(rules)) {
		reply(false, "bad set request");
		return;
	}
	for (size_t i = 0; i < json_array_size(allow); i++)
		if (!(rules[n++] = json_string_value(json_array_get(allow, i)))) {
			reply(false, "allow: rules are strings");
			return;
		}
	struct egress_policy *pol = NULL;
	if (egress_policy_parse(mode, rules, n, &pol, &err) < 0 ||
	    egress_policy_check(pol, blocklist, &err) < 0) {
		egress_policy_free(pol);
		reply(false, err.msg);
		return;
	}
	pol->extra = blocklist;
	struct sbx *s = a.s_addr ? sbx_by_ip(a) : NULL;
	if (!s) {
		size_t i = 0;
		while (i < MAX_SANDBOXES && sbxs[i] && (sbxs[i]->ip.s_addr || sbxs[i]->conns))
			i++;
		if (i < MAX_SANDBOXES && sbxs[i]) {
			sbx_free(sbxs[i]);
			sbxs[i] = NULL;
		}
		s = i < MAX_SANDBOXES ? calloc(1, sizeof(*s)) : NULL;
		if (!s) {
			egress_policy_free(pol);
			reply(false, "too many sandboxes");
			return;
		}
		s->ip = a;
		s->tokens = conns_per_sec;
		event_base_gettimeofday_cached(base, &s->last);
		struct timeval tick = {1, 0};
		s->rate = ev_token_bucket_cfg_new(bytes_per_sec, bytes_per_sec, bytes_per_sec,
						  bytes_per_sec, &tick);
		s->group = s->rate ? bufferevent_rate_limit_group_new(base, s->rate) : NULL;
		sbxs[i] = s;
	}
	snprintf(s->id, sizeof(s->id), "%s", id);
	/* A new policy applies to new connections at once; open ones keep theirs. */
	egress_policy_free(s->policy);
	s->policy = pol;
	if (ifname && nft_sandbox_add(ifname, tcp_port, dns_port, &err) < 0) {
		reply(false, err.msg);
		return;
	}
	if (ifname)
		snprintf(s->ifname, sizeof(s->ifname), "%s", ifname);
	reply(true, NULL);
}

static void control_del(json_t *msg)
{
	const char *ip = json_string_value(json_object_get(msg, "ip"));
	struct in_addr a;
	if (!ip || inet_pton(AF_INET, ip, &a) != 1) {
		reply(false, "bad del request");
		return;
	}
	struct sbx *s = sbx_by_ip(a);
	if (s) {
		/* Open connections still point at the entry (they die with the sandbox's network
		 * namespace): it stops matching and denies everything, and is reused once idle. */
		struct egress_policy *deny = NULL;
		if (egress_policy_parse(EGRESS_DENY, NULL, 0, &deny, NULL) == 0) {
			deny->extra = blocklist;
			egress_policy_free(s->policy);
			s->policy = deny;
		}
		s->ip.s_addr = 0;
		if (s->ifname[0])
			nft_sandbox_del(s->ifname);
		s->ifname[0] = '\0';
	}
	reply(true, NULL);
}

static void on_control(struct bufferevent *bev, void *arg)
{
	struct evbuffer *in = bufferevent_get_input(bev);
	char *line;
	size_t n;
	while ((line = evbuffer_readln(in, &n, EVBUFFER_EOL_LF))) {
		json_t *msg = json_loadb(line, n, 0, NULL);
		const char *op = json_string_value(json_object_get(msg, "op"));
		if (op && strcmp(op, "set") == 0)
			control_set(msg);
		else if (op && strcmp(op, "del") == 0)
			control_del(msg);
		else
			reply(false, "unknown op");
		json_decref(msg);
		free(line);
	}
}

static void on_control_event(struct bufferevent *bev, short what, void *arg)
{
	if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
		return;
	/* The controller is gone: so is every redirect we own. */
	for (size_t i = 0; i < MAX_SANDBOXES; i++)
		if (sbxs[i] && sbxs[i]->ifname[0])
			nft_sandbox_del(sbxs[i]->ifname);
	event_base_loopexit(base, NULL);
}

/* ---- setup ---- */

/* Every address of the host itself is always blocked, not only loopback: a name that
 * resolves to one must not reach the host's own services. */
static int read_limits(void)
{
	const char *v = getenv("CORDON_EGRESS_LIMITS");
	unsigned a, b, c;
	char end;
	if (!v || !*v)
		return 0;
	if (sscanf(v, "%u,%u,%u%c", &a, &b, &c, &end) != 3 || !a || !b || c < 1024) {
		fprintf(stderr, "cordon-egress: CORDON_EGRESS_LIMITS '%s': expected CONNS,PER_SEC,BYTES_PER_SEC\n", v);
		return -EINVAL;
	}
	max_conns = a;
	conns_per_sec = b;
	bytes_per_sec = c;
	return 0;
}

static int host_blocklist(void)
{
	struct ifaddrs *ifa0;
	egress_blocklist_init(&host_blocks);
	if (getifaddrs(&ifa0) < 0)
		return -errno;
	for (struct ifaddrs *ifa = ifa0; ifa; ifa = ifa->ifa_next) {
		if (!ifa->ifa_addr)
			continue;
		if (ifa->ifa_addr->sa_family == AF_INET)
			egress_blocklist_add(&host_blocks, AF_INET,
					     (uint8_t *)&((struct sockaddr_in *)ifa->ifa_addr)->sin_addr, 32);
		else if (ifa->ifa_addr->sa_family == AF_INET6)
			egress_blocklist_add(&host_blocks, AF_INET6,
					     (uint8_t *)&((struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr, 128);
	}
	freeifaddrs(ifa0);
	return 0;
}

static int read_upstream(void)
{
	/* $CORDON_RESOLV_CONF lets tests (and unusual hosts) name the upstream resolver. */
	const char *path = secure_getenv("CORDON_RESOLV_CONF");
	_cleanup_fclose_ FILE *f = fopen(path && *path == '/' ? path : "/etc/resolv.conf", "re");
	char line[256], addr[128];
	struct sockaddr_in *sin = (struct sockaddr_in *)&upstream;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&upstream;
	while (f && fgets(line, sizeof(line), f)) {
		if (sscanf(line, "nameserver %127s", addr) != 1)
			continue;
		if (inet_pton(AF_INET, addr, &sin->sin_addr) == 1) {
			sin->sin_family = AF_INET;
			sin->sin_port = htons(53);
			upstream_len = sizeof(*sin);
			return 0;
		}
		if (inet_pton(AF_INET6, addr, &sin6->sin6_addr) == 1) {
			sin6->sin6_family = AF_INET6;
			sin6->sin6_port = htons(53);
			upstream_len = sizeof(*sin6);
			return 0;
		}
	}
	return -ENOENT;
}

static struct evconnlistener *listen_tcp(evconnlistener_cb cb, uint16_t *ret_port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	struct evconnlistener *l = evconnlistener_new_bind(
		base, cb, NULL, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC,
		1024, (struct sockaddr *)&sa, sizeof(sa));
	if (!l)
		return NULL;
	socklen_t len = sizeof(sa);
	getsockname(evconnlistener_get_fd(l), (struct sockaddr *)&sa, &len);
	*ret_port = ntohs(sa.sin_port);
	return l;
}

int main(int argc, char **argv)
{
	struct cordon_err err = {};
	if (argc != 2) {
		fprintf(stderr, "usage: cordon-egress CONTROL_FD (started by cordond or cordon run)\n");
		return 2;
	}
	int cfd = atoi(argv[1]);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	json_object_seed(0); /* jansson reads /dev/urandom once: before seccomp forbids files */
	signal(SIGPIPE, SIG_IGN);
	base = event_base_new();
	dns = base ? evdns_base_new(base, 0) : NULL;
	if (read_limits() < 0)
		return 2;
	if (!dns || host_blocklist() < 0 || read_upstream() < 0 ||
	    evdns_base_nameserver_sockaddr_add(dns, (struct sockaddr *)&upstream, upstream_len, 0) < 0) {
		fprintf(stderr, "cordon-egress: no resolver (check /etc/resolv.conf)\n");
		return 1;
	}
	struct evconnlistener *tl = listen_tcp(on_accept, &tcp_port);
	struct evconnlistener *dl = listen_tcp(on_dns_accept, &dns_port);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(dns_port)};
	dns_udp_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	upstream_fd = socket(upstream.ss_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (!tl || !dl || dns_udp_fd < 0 || upstream_fd < 0 ||
	    bind(dns_udp_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		fprintf(stderr, "cordon-egress: cannot listen: %m\n");
		return 1;
	}
	event_add(event_new(base, dns_udp_fd, EV_READ | EV_PERSIST, on_dns_udp, NULL), NULL);
	event_add(event_new(base, upstream_fd, EV_READ | EV_PERSIST, on_upstream, NULL), NULL);
	ctl = bufferevent_socket_new(base, cfd, BEV_OPT_CLOSE_ON_FREE);
	bufferevent_setcb(ctl, on_control, NULL, on_control_event, NULL);
	bufferevent_enable(ctl, EV_READ | EV_WRITE);
	/* The table, and a libnftables context made now, while files may still be opened. */
	if (nft_setup(&err) < 0) {
		fprintf(stderr, "cordon-egress: %s\n", err.msg);
		return 1;
	}
	/* From here on, only what relaying needs (policy/egress.policy). */
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || seccomp_apply(cordon_seccomp_egress.filter, cordon_seccomp_egress.len) < 0) {
		fprintf(stderr, "cordon-egress: seccomp: %m\n");
		return 1;
	}
	char ready[96];
	int n = snprintf(ready, sizeof(ready), "{\"op\":\"ready\",\"tcp_port\":%u,\"dns_port\":%u}\n",
			 tcp_port, dns_port);
	bufferevent_write(ctl, ready, (size_t)n);
	event_base_dispatch(base);
	return 0;
}
