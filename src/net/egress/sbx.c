/* The sandboxes' table: one entry per source address the controller has set, with its
 * policy, its counters and its byte-rate group. A linear scan: the table is small and
 * looked up once per connection or query. */
#include <stdio.h>
#include <stdlib.h>

#include "net/egress/egress.h"
#include "net/nft.h"

struct sbx *sbx_by_ip(struct egress *e, struct in_addr ip)
{
	for (size_t i = 0; i < EGRESS_MAX_SANDBOXES; i++)
		if (e->sbxs[i] && e->sbxs[i]->ip.s_addr == ip.s_addr)
			return e->sbxs[i];
	return NULL;
}

/* The sandbox a peer address belongs to; NULL: not one we serve. */
struct sbx *sbx_by_sockaddr(struct egress *e, const struct sockaddr *sa)
{
	return sa->sa_family == AF_INET ? sbx_by_ip(e, ((const struct sockaddr_in *)sa)->sin_addr) : NULL;
}

static void sbx_free(struct sbx *s)
{
	if (!s)
		return;
	/* A query forwarded before the sandbox went must not report to a freed entry. */
	for (size_t i = 0; i < MAX_DNS_PENDING; i++)
		if (s->e->pending[i].s == s)
			s->e->pending[i].used = false;
	egress_policy_free(s->policy);
	secrets_free(s->secrets, s->n_secrets);
	if (s->group)
		bufferevent_rate_limit_group_free(s->group);
	if (s->rate)
		ev_token_bucket_cfg_free(s->rate);
	free(s);
}

/* A free slot: an empty one, or one deleted and idle (whose entry is freed). */
static size_t sbx_slot(struct egress *e)
{
	size_t i = 0;
	while (i < EGRESS_MAX_SANDBOXES && e->sbxs[i] && (e->sbxs[i]->ip.s_addr || e->sbxs[i]->conns))
		i++;
	if (i < EGRESS_MAX_SANDBOXES && e->sbxs[i]) {
		sbx_free(e->sbxs[i]);
		e->sbxs[i] = NULL;
	}
	return i;
}

static struct sbx *sbx_new(struct egress *e, struct in_addr ip)
{
	size_t i = sbx_slot(e);
	unsigned bps = e->limits.bytes_per_sec;
	struct sbx *s = i < EGRESS_MAX_SANDBOXES ? calloc(1, sizeof(*s)) : NULL;
	if (!s)
		return NULL;
	s->e = e;
	s->ip = ip;
	s->limits = e->limits;
	s->tokens = e->limits.conns_per_sec;
	event_base_gettimeofday_cached(e->base, &s->last);
	struct timeval tick = {1, 0};
	s->rate = ev_token_bucket_cfg_new(bps, bps, bps, bps, &tick);
	s->group = s->rate ? bufferevent_rate_limit_group_new(e->base, s->rate) : NULL;
	e->sbxs[i] = s;
	return s;
}

struct sbx *sbx_set(struct egress *e, struct in_addr ip, const char *id, struct egress_policy *pol)
{
	struct sbx *s = ip.s_addr ? sbx_by_ip(e, ip) : NULL;
	if (!s)
		s = sbx_new(e, ip);
	if (!s) {
		egress_policy_free(pol);
		return NULL;
	}
	snprintf(s->id, sizeof(s->id), "%s", id);
	/* A new policy applies to new connections at once; open ones keep theirs. */
	egress_policy_free(s->policy);
	s->policy = pol;
	return s;
}

void sbx_set_limits(struct sbx *s, const struct egress_limits *l)
{
	const struct egress_limits *max = &s->e->limits;
	struct egress_limits n = {
		.max_conns = l->max_conns && l->max_conns < max->max_conns ? l->max_conns : max->max_conns,
		.conns_per_sec = l->conns_per_sec && l->conns_per_sec < max->conns_per_sec ? l->conns_per_sec
											 : max->conns_per_sec,
		.bytes_per_sec = l->bytes_per_sec && l->bytes_per_sec < max->bytes_per_sec ? l->bytes_per_sec
											 : max->bytes_per_sec,
	};
	if (n.bytes_per_sec != s->limits.bytes_per_sec && s->group) {
		struct timeval tick = {1, 0};
		unsigned bps = n.bytes_per_sec;
		struct ev_token_bucket_cfg *cfg = ev_token_bucket_cfg_new(bps, bps, bps, bps, &tick);
		if (!cfg || bufferevent_rate_limit_group_set_cfg(s->group, cfg) < 0) {
			if (cfg)
				ev_token_bucket_cfg_free(cfg);
			n.bytes_per_sec = s->limits.bytes_per_sec; /* the group keeps its own copy */
		} else {
			ev_token_bucket_cfg_free(s->rate);
			s->rate = cfg;
		}
	}
	if (s->tokens > n.conns_per_sec)
		s->tokens = n.conns_per_sec;
	s->limits = n;
}

int sbx_own_nft(struct sbx *s, const char *ifname, struct cordon_err *err)
{
	int r = nft_sandbox_add(ifname, s->e->tcp_port, s->e->dns_port, err);
	if (r < 0)
		return r;
	snprintf(s->ifname, sizeof(s->ifname), "%s", ifname);
	return 0;
}

/* Open connections still point at the entry (they die with the sandbox's network
 * namespace): it stops matching and denies everything, and is reused once idle. */
void sbx_del(struct sbx *s)
{
	struct egress_policy *deny = NULL;
	if (egress_policy_parse(EGRESS_DENY, NULL, 0, &deny, NULL) == 0) {
		deny->extra = &s->e->blocks;
		egress_policy_free(s->policy);
		s->policy = deny;
	}
	s->ip.s_addr = 0;
	/* Its held requests are closed, and its approve rules go. */
	approve_drop_sbx(s->e, s);
	approve_rules_free(s->approve, s->n_approve);
	s->approve = NULL;
	s->n_approve = 0;
	/* Secrets die with the sandbox, even while its connections linger. */
	secrets_free(s->secrets, s->n_secrets);
	s->secrets = NULL;
	s->n_secrets = 0;
	if (s->ifname[0])
		nft_sandbox_del(s->ifname);
	s->ifname[0] = '\0';
}

/* The controller is gone: so is every redirect we own. */
void sbx_del_all_nft(struct egress *e)
{
	for (size_t i = 0; i < EGRESS_MAX_SANDBOXES; i++)
		if (e->sbxs[i] && e->sbxs[i]->ifname[0])
			nft_sandbox_del(e->sbxs[i]->ifname);
}

/* New connections (and DNS queries) per second per sandbox: a token bucket. */
bool sbx_rate_ok(struct sbx *s)
{
	unsigned per_sec = s->limits.conns_per_sec;
	struct timeval now, d;
	event_base_gettimeofday_cached(s->e->base, &now);
	timersub(&now, &s->last, &d);
	s->last = now;
	s->tokens += (d.tv_sec + d.tv_usec / 1e6) * per_sec;
	if (s->tokens > per_sec)
		s->tokens = per_sec;
	if (s->tokens < 1)
		return false;
	s->tokens -= 1;
	return true;
}
