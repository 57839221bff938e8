/* Egress policy: rules, the always-blocked address ranges, and matching.
 *
 * A policy is parsed once from the rule strings a client gave (`cordon run --allow RULE`,
 * the API's `network` object) and is then immutable; a live change builds a new policy and
 * swaps the pointer. Everything here is pure: no I/O, no logging, and the only allocation is
 * the one block egress_policy_parse() returns.
 *
 *     struct egress_policy *p = NULL;
 *     r = egress_policy_parse(EGRESS_ALLOW, argv, argc, &p, &err);   // refuses bad rules
 *     p->extra = &host_blocklist;                                   // host + sandbox pool
 *     rule = egress_match_name(p, sni, 443);                        // NULL: blocked
 *     rule = egress_match_addr(p, AF_INET, ip, port);               // NULL: blocked
 *
 * The matchers fail closed: anything they do not understand (a bad name, an unknown family,
 * port 0) is denied. Every verdict can name its rule (->text) for the audit log.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cordon/err.h>

enum egress_mode { EGRESS_DENY, EGRESS_ALLOW, EGRESS_PUBLIC };
enum egress_rule_kind { RULE_DOMAIN, RULE_WILDCARD, RULE_CIDR };

/* Limits on what a client may send. */
#define EGRESS_RULES_MAX 256
#define EGRESS_NAME_MAX 253  /* presentation form, no trailing dot (RFC 1035 2.3.4) */
#define EGRESS_LABEL_MAX 63
#define EGRESS_BLOCKLIST_MAX 64

struct egress_rule {
	enum egress_rule_kind kind;
	/* DOMAIN: "api.example.com"; WILDCARD: the suffix "example.com" (matches strictly
	 * below it). Lowercase, no trailing dot. Empty for CIDR. */
	char name[EGRESS_NAME_MAX + 1];
	int family; /* CIDR: AF_INET or AF_INET6 */
	uint8_t addr[16];
	uint8_t prefix;
	/* Names: port_lo == port_hi == 0 means the default {80, 443}. CIDR: default 1-65535. */
	uint16_t port_lo, port_hi;
	char text[300]; /* the rule as given, for the audit log */
};

struct egress_blocklist;

struct egress_policy {
	enum egress_mode mode;
	/* Extra always-blocked ranges (the host's own addresses, the sandbox pool), checked by
	 * egress_match_addr(). Not owned: set by the caller, must outlive the policy. */
	const struct egress_blocklist *extra;
	size_t n;
	struct egress_rule rules[];
};

/* Parses @n rule strings (@rules may be NULL when @n is 0) into a new policy in @ret, which
 * the caller frees with egress_policy_free(). Rules are only accepted in EGRESS_ALLOW mode.
 * Refuses, with a message naming the offending rule in @err: syntax errors, bad ports and
 * ranges, prefixes out of range or with host bits set, names that are not LDH or too long,
 * single-label names and wildcards ("*", "*.com"), IP literals written as names
 * ("127.1", "0x7f000001"), names under localhost/local/internal/home.arpa/arpa, more
 * than EGRESS_RULES_MAX rules, and any CIDR that overlaps an always-blocked range. */
int egress_policy_parse(enum egress_mode mode, const char *const *rules, size_t n,
			struct egress_policy **ret, struct cordon_err *err);

/* Accepts NULL. Returns NULL. */
struct egress_policy *egress_policy_free(struct egress_policy *p);

/* Refuses (-EPERM, message naming the rule) a policy whose CIDR rules overlap a range of
 * @bl: call it when the host's addresses and the sandbox pool are known. */
int egress_policy_check(const struct egress_policy *p, const struct egress_blocklist *bl,
			struct cordon_err *err);

/* The always-blocked ranges, whatever the policy: 0.0.0.0/8, 10/8, 100.64/10, 127/8,
 * 169.254/16, 172.16/12, 192.0.0.0/24, 192.168/16, 198.18/15, 224/4, 240/4; ::/128, ::1/128,
 * fe80::/10, fec0::/10 (site-local, deprecated), fc00::/7, ff00::/8, 64:ff9b:1::/48
 * (local-use NAT64), and the IPv4 ranges (built in and extra) in their IPv4-mapped
 * (::ffff:0:0/96), IPv4-compatible (::/96), NAT64 (64:ff9b::/96) and 6to4 (2002::/16) forms.
 * The documentation ranges (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32)
 * are not blocked: tests use them as the public internet.
 *
 * A blocklist holds up to EGRESS_BLOCKLIST_MAX extra ranges. It is a plain struct: zero it
 * (or egress_blocklist_init()) and add to it. */
struct egress_cidr {
	int family;
	uint8_t addr[16];
	uint8_t prefix;
};

struct egress_blocklist {
	size_t n;
	struct egress_cidr cidrs[EGRESS_BLOCKLIST_MAX];
};

void egress_blocklist_init(struct egress_blocklist *bl);
/* -EINVAL for a bad family or prefix, -ENOSPC when full. Host bits are cleared. */
int egress_blocklist_add(struct egress_blocklist *bl, int family, const uint8_t *addr,
			 uint8_t prefix);

/* True when @addr (4 bytes for AF_INET, 16 for AF_INET6) is in a built-in range or in
 * @extra (may be NULL). Any other family is blocked. */
bool egress_addr_blocked(const struct egress_blocklist *extra, int family, const uint8_t *addr);

/* Matching. Each returns the rule that allows the connection or NULL (denied). PUBLIC mode
 * returns a static pseudo-rule whose text is "public"; DENY matches nothing. Names are
 * compared case-insensitively, one trailing dot ignored; "*.example.com" matches
 * "a.example.com" and "a.b.example.com" but not "example.com". Names that are not valid
 * (LDH, '_' allowed for DNS), look like IP literals, or sit under a blocked suffix
 * ("localhost", "*.internal", ...) never match, in any mode. */
const struct egress_rule *egress_match_name(const struct egress_policy *p, const char *name,
					    uint16_t port);
/* CIDR rules (an IPv4-mapped IPv6 address is matched as IPv4); in PUBLIC mode any address
 * that is not blocked. Blocked addresses (built in and p->extra) never match. */
const struct egress_rule *egress_match_addr(const struct egress_policy *p, int family,
					    const uint8_t *addr, uint16_t port);
/* For the DNS filter: may this name be resolved at all (any port)? CIDR rules never allow
 * a name. */
const struct egress_rule *egress_match_dns(const struct egress_policy *p, const char *name);

/* The port ranges the proxy must take (80, 443 and every explicit name-rule port or range),
 * sorted and merged, for nftables. Writes up to @max of them into @ret_ranges and returns
 * how many there are (which may be more than @max). */
size_t egress_name_ports(const struct egress_policy *p, uint16_t (*ret_ranges)[2], size_t max);

/* The rule syntax's name check, shared with the sniffers: true when @name[0..len) is a
 * host name of at least one label, LDH (plus '_' when @underscore), labels 1-63 bytes not
 * starting or ending with '-', at most 253 bytes with no trailing dot. */
bool egress_name_valid(const char *name, size_t len, bool underscore);
/* True when the last label of @name[0..len) is numeric (decimal, or 0x hex), i.e. the name
 * would be read as an IPv4 address by inet_aton() or a URL parser. */
bool egress_name_is_ip_literal(const char *name, size_t len);
