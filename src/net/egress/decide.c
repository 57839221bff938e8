/* The proxy's verdicts: what the sandbox's policy (policy/egress.c) says of an address or a
 * sniffed name, and the report of every decision to the controller, which writes it to the
 * audit log: {"op":"event","sandbox":..,"proto":..,"dst":..,"port":..,"name":..,
 * "verdict":"allow"|"block","rule":..,"reason":..}. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "basic/cleanup.h"
#include "net/egress/egress.h"

static void report(const struct sbx *s, const char *proto, const char *dst, unsigned port,
		   const char *name, const struct egress_rule *rule, const char *reason)
{
	_cleanup_(json_decrefp) json_t *e = json_pack(
		"{s:s, s:s, s:s, s:s, s:i, s:s?, s:s, s:s?, s:s?}", "op", "event", "sandbox", s->id,
		"proto", proto, "dst", dst ? dst : "", "port", (int)port, "name", name, "verdict",
		rule ? "allow" : "block", "rule", rule ? rule->text : NULL, "reason", reason);
	_cleanup_free_ char *line = e ? json_dumps(e, JSON_COMPACT) : NULL;
	/* A controller that reads slowly (or, like cordon run, not at all) must not make a
	 * flooding sandbox grow our memory: past a bound, events are dropped. */
	if (line)
		ctl_send(s->e, line, true);
}

void decide_report(const struct conn *c, const struct egress_rule *rule, const char *reason)
{
	report(c->s, c->proto, c->dst, ntohs(c->orig.sin_port), c->name[0] ? c->name : NULL, rule,
	       reason);
}

void decide_report_dns(const struct sbx *s, const char *name, const struct egress_rule *rule,
		       const char *reason)
{
	report(s, "dns", NULL, 53, name, rule, reason);
}

const struct egress_rule *decide_addr(struct conn *c)
{
	const struct egress_rule *rule = egress_match_addr(
		c->s->policy, AF_INET, (const uint8_t *)&c->orig.sin_addr, ntohs(c->orig.sin_port));
	return rule && dial_addr_ok(c->s->e, (struct sockaddr *)&c->orig) ? rule : NULL;
}

bool decide_needs_name(const struct conn *c)
{
	uint16_t port = ntohs(c->orig.sin_port);
	return c->s->n_approve && c->s->policy->mode == EGRESS_PUBLIC && (port == 80 || port == 443);
}

void decide_sniffed(struct conn *c, int r)
{
	if (r < 0) {
		c->name[0] = '\0';
		/* No name: only a rule on the address itself (or public mode) can allow it. */
		c->rule = decide_addr(c);
		if (c->rule && !decide_needs_name(c))
			dial_addr(c);
		else
			conn_block(c, c->rule ? "no name to check against the approve rules"
				   : r == -ENOENT ? "no SNI or Host to check" : "not TLS or HTTP with a name");
		return;
	}
	c->rule = egress_match_name(c->s->policy, c->name, ntohs(c->orig.sin_port));
	/* An approve rule's host is reachable: its matching requests wait for a decision. */
	if (!c->rule)
		c->rule = approve_host_rule(c->s, c->name, ntohs(c->orig.sin_port));
	if (!c->rule) {
		conn_block(c, "name not allowed");
		return;
	}
	/* An approve rule reads HTTPS through interception: without the CA it would not see the
	 * request it must hold, so the connection is refused (fail closed). */
	if (!c->s->e->tls && strcmp(c->proto, "tls") == 0 && approve_host_rule(c->s, c->name, ntohs(c->orig.sin_port))) {
		conn_block(c, "an approve rule needs the proxy's CA to read this request");
		return;
	}
	dial_name(c);
}

void decide_report_misuse(const struct sbx *s, const struct conn *c, const char *name,
			  const struct egress_secret *sec, const char *where)
{
	char reason[160];
	snprintf(reason, sizeof(reason), "secret %s's placeholder %s", sec->name, where);
	_cleanup_(json_decrefp) json_t *e = json_pack(
		"{s:s, s:s, s:s, s:s, s:s, s:s, s:i, s:s?, s:s, s:s}", "op", "event", "kind",
		"secret.misuse", "sandbox", s->id, "secret", sec->name, "proto", c ? c->proto : "dns",
		"dst", c ? c->dst : "", "port", c ? (int)ntohs(c->orig.sin_port) : 53, "name",
		c ? (c->name[0] ? c->name : NULL) : name, "verdict", "block", "reason", reason);
	_cleanup_free_ char *line = e ? json_dumps(e, JSON_COMPACT) : NULL;
	/* A sandbox can repeat it at will: bounded like every report. */
	if (line)
		ctl_send(s->e, line, true);
}

void decide_report_use(const struct conn *c, const struct egress_secret *sec)
{
	_cleanup_(json_decrefp) json_t *e = json_pack(
		"{s:s, s:s, s:s, s:s, s:s, s:s, s:i}", "op", "event", "kind", "secret.use", "sandbox",
		c->s->id, "secret", sec->name, "proto", c->proto, "name", c->name, "port",
		(int)ntohs(c->orig.sin_port));
	_cleanup_free_ char *line = e ? json_dumps(e, JSON_COMPACT) : NULL;
	if (line)
		ctl_send(c->s->e, line, true);
}
