/* Egress policy: rule parsing, the always-blocked ranges, matching. See egress.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "policy/egress.h"

#define V4(a, b, c, d) { a, b, c, d }
#define V6(...) { __VA_ARGS__ }

struct blocked_range {
	uint8_t addr[16];
	uint8_t prefix;
	const char *why;
};

static const struct blocked_range blocked_v4[] = {
	{ V4(0, 0, 0, 0), 8, "this network" },
	{ V4(10, 0, 0, 0), 8, "private, RFC 1918" },
	{ V4(100, 64, 0, 0), 10, "carrier-grade NAT" },
	{ V4(127, 0, 0, 0), 8, "loopback" },
	{ V4(169, 254, 0, 0), 16, "link-local, cloud metadata" },
	{ V4(172, 16, 0, 0), 12, "private, RFC 1918" },
	{ V4(192, 0, 0, 0), 24, "IETF protocol assignments" },
	{ V4(192, 168, 0, 0), 16, "private, RFC 1918" },
	{ V4(198, 18, 0, 0), 15, "benchmarking" },
	{ V4(224, 0, 0, 0), 4, "multicast" },
	{ V4(240, 0, 0, 0), 4, "reserved, broadcast" },
};

static const struct blocked_range blocked_v6[] = {
	{ V6(0), 128, "unspecified" },
	{ V6(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1), 128, "loopback" },
	{ V6(0xfe, 0x80), 10, "link-local" },
	{ V6(0xfe, 0xc0), 10, "site-local (deprecated)" },
	{ V6(0xfc), 7, "unique local (incl. fd00:ec2::254, cloud metadata)" },
	{ V6(0xff), 8, "multicast" },
	{ V6(0x00, 0x64, 0xff, 0x9b, 0x00, 0x01), 48, "local-use NAT64" },
};

/* Where IPv6 carries an IPv4 address that a host or a gateway may turn into IPv4 traffic:
 * the IPv4 range is blocked at @shift bits into the IPv6 prefix. */
static const struct {
	uint8_t addr[16];
	uint8_t prefix;
	const char *why;
} v4_in_v6[] = {
	{ V6(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff), 96, "IPv4-mapped" },
	{ V6(0), 96, "IPv4-compatible" },
	{ V6(0x00, 0x64, 0xff, 0x9b), 96, "NAT64" },
	{ V6(0x20, 0x02), 16, "6to4" },
};

static const struct egress_rule public_rule = {
	.kind = RULE_CIDR,
	.port_lo = 1,
	.port_hi = UINT16_MAX,
	.text = "public",
};

/* Names that resolve to blocked places by convention (RFC 6761, RFC 8375, the cloud
 * metadata names under .internal), refused as rules and never matched. */
static const char *const blocked_suffixes[] = {
	"localhost", "local", "internal", "home.arpa", "arpa", "localdomain",
};

static size_t addr_len(int family)
{
	return family == AF_INET ? 4 : family == AF_INET6 ? 16 : 0;
}

/* Do @a/@pa and @b/@pb share an address? They do when they agree on the shorter prefix. */
static bool prefix_overlap(const uint8_t *a, unsigned pa, const uint8_t *b, unsigned pb)
{
	unsigned bits = pa < pb ? pa : pb;
	unsigned bytes = bits / 8, rest = bits % 8;

	if (memcmp(a, b, bytes) != 0)
		return false;
	if (rest == 0)
		return true;
	uint8_t mask = (uint8_t)(0xff << (8 - rest));
	return (a[bytes] & mask) == (b[bytes] & mask);
}

/* Writes @v4 into @out at bit offset @shift (a multiple of 8) of @base. */
static void embed_v4(uint8_t out[16], const uint8_t *base, unsigned shift, const uint8_t *v4)
{
	memcpy(out, base, 16);
	memcpy(out + shift / 8, v4, 4);
}

struct overlap {
	int family;
	uint8_t addr[16];
	uint8_t prefix;
	const char *why;
};

static bool set_overlap(struct overlap *o, int family, const uint8_t *addr, unsigned prefix,
			const char *why)
{
	if (o) {
		o->family = family;
		memcpy(o->addr, addr, addr_len(family));
		o->prefix = (uint8_t)prefix;
		o->why = why;
	}
	return true;
}

/* Is the IPv4 range @v4/@pv4 blocked, as IPv4 (@embed < 0) or embedded in IPv6 form
 * v4_in_v6[@embed], overlapping the IPv6 range @a/@pa? */
static bool v4range_hits(int embed, const uint8_t *v4, unsigned pv4, const char *why,
			 const uint8_t *a, unsigned pa, struct overlap *o)
{
	if (embed < 0) {
		if (!prefix_overlap(a, pa, v4, pv4))
			return false;
		return set_overlap(o, AF_INET, v4, pv4, why);
	}
	uint8_t r[16];
	unsigned shift = v4_in_v6[embed].prefix;
	embed_v4(r, v4_in_v6[embed].addr, shift, v4);
	if (!prefix_overlap(a, pa, r, shift + pv4))
		return false;
	return set_overlap(o, AF_INET6, r, shift + pv4, v4_in_v6[embed].why);
}

/* The IPv4 ranges, built in and extra, against @a/@pa (IPv4, or IPv6 through @embed). */
static bool v4_blocked(const struct egress_blocklist *extra, int embed, const uint8_t *a,
		       unsigned pa, struct overlap *o)
{
	for (size_t i = 0; i < sizeof(blocked_v4) / sizeof(blocked_v4[0]); i++)
		if (v4range_hits(embed, blocked_v4[i].addr, blocked_v4[i].prefix, blocked_v4[i].why,
				 a, pa, o))
			return true;
	for (size_t i = 0; extra && i < extra->n; i++)
		if (extra->cidrs[i].family == AF_INET &&
		    v4range_hits(embed, extra->cidrs[i].addr, extra->cidrs[i].prefix,
				 "host or sandbox address", a, pa, o))
			return true;
	return false;
}

static bool v6_blocked(const struct egress_blocklist *extra, const uint8_t *a, unsigned pa,
		       struct overlap *o)
{
	for (size_t i = 0; i < sizeof(blocked_v6) / sizeof(blocked_v6[0]); i++)
		if (prefix_overlap(a, pa, blocked_v6[i].addr, blocked_v6[i].prefix))
			return set_overlap(o, AF_INET6, blocked_v6[i].addr, blocked_v6[i].prefix,
					   blocked_v6[i].why);
	for (size_t i = 0; extra && i < extra->n; i++)
		if (extra->cidrs[i].family == AF_INET6 &&
		    prefix_overlap(a, pa, extra->cidrs[i].addr, extra->cidrs[i].prefix))
			return set_overlap(o, AF_INET6, extra->cidrs[i].addr, extra->cidrs[i].prefix,
					   "host or sandbox address");
	for (int e = 0; e < (int)(sizeof(v4_in_v6) / sizeof(v4_in_v6[0])); e++)
		if (v4_blocked(extra, e, a, pa, o))
			return true;
	return false;
}

/* Does the range @addr/@prefix share an address with a blocked range? Fills @o (may be
 * NULL) with the first one found. Unknown families are blocked. */
static bool range_blocked(const struct egress_blocklist *extra, int family, const uint8_t *addr,
			  unsigned prefix, struct overlap *o)
{
	if (family == AF_INET)
		return v4_blocked(extra, -1, addr, prefix, o);
	if (family == AF_INET6)
		return v6_blocked(extra, addr, prefix, o);
	if (o)
		*o = (struct overlap){ .why = "unknown address family" };
	return true;
}

bool egress_addr_blocked(const struct egress_blocklist *extra, int family, const uint8_t *addr)
{
	return range_blocked(extra, family, addr, family == AF_INET ? 32 : 128, NULL);
}

void egress_blocklist_init(struct egress_blocklist *bl)
{
	bl->n = 0;
}

static void clear_host_bits(uint8_t *addr, size_t len, unsigned prefix)
{
	for (size_t i = 0; i < len; i++) {
		unsigned keep = prefix > i * 8 ? prefix - (unsigned)i * 8 : 0;
		if (keep < 8)
			addr[i] &= (uint8_t)(0xff00 >> keep);
	}
}

int egress_blocklist_add(struct egress_blocklist *bl, int family, const uint8_t *addr,
			 uint8_t prefix)
{
	size_t len = addr_len(family);

	if (len == 0 || prefix > len * 8)
		return -EINVAL;
	if (bl->n >= EGRESS_BLOCKLIST_MAX)
		return -ENOSPC;
	struct egress_cidr *c = &bl->cidrs[bl->n++];
	*c = (struct egress_cidr){ .family = family, .prefix = prefix };
	memcpy(c->addr, addr, len);
	clear_host_bits(c->addr, len, prefix);
	return 0;
}

/* ---- names ---- */

static bool is_ldh(char c, bool underscore)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || (underscore && c == '_');
}

bool egress_name_valid(const char *name, size_t len, bool underscore)
{
	size_t label = 0;

	if (len == 0 || len > EGRESS_NAME_MAX)
		return false;
	for (size_t i = 0; i <= len; i++) {
		if (i == len || name[i] == '.') {
			if (label == 0 || label > EGRESS_LABEL_MAX || name[i - 1] == '-' ||
			    name[i - label] == '-')
				return false;
			label = 0;
			continue;
		}
		if (!is_ldh(name[i], underscore))
			return false;
		label++;
	}
	return true;
}

bool egress_name_is_ip_literal(const char *name, size_t len)
{
	size_t start = len;

	while (start > 0 && name[start - 1] != '.')
		start--;
	const char *l = name + start;
	size_t n = len - start, i = 0;
	bool hex = n > 2 && l[0] == '0' && (l[1] == 'x' || l[1] == 'X');

	if (n == 0)
		return false;
	for (i = hex ? 2 : 0; i < n; i++) {
		char c = l[i];
		bool ok = (c >= '0' && c <= '9') ||
			  (hex && ((c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')));
		if (!ok)
			return false;
	}
	return true;
}

/* Is @name[0..len) @suffix or below it (case-insensitive)? */
static bool name_at_or_below(const char *name, size_t len, const char *suffix)
{
	size_t sl = strlen(suffix);

	if (len < sl || strncasecmp(name + len - sl, suffix, sl) != 0)
		return false;
	return len == sl || name[len - sl - 1] == '.';
}

static const char *blocked_suffix(const char *name, size_t len)
{
	for (size_t i = 0; i < sizeof(blocked_suffixes) / sizeof(blocked_suffixes[0]); i++)
		if (name_at_or_below(name, len, blocked_suffixes[i]))
			return blocked_suffixes[i];
	return NULL;
}

/* ---- rule parsing ---- */

/* Parses 1-5 decimal digits into 1..65535. */
static int parse_port(const char *s, size_t len, uint16_t *ret)
{
	unsigned v = 0;

	if (len == 0 || len > 5)
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	if (v == 0 || v > UINT16_MAX)
		return -EINVAL;
	*ret = (uint16_t)v;
	return 0;
}

static int parse_ports(const char *s, struct egress_rule *r, struct cordon_err *err)
{
	const char *dash = strchr(s, '-');
	size_t len = strlen(s);

	if (parse_port(s, dash ? (size_t)(dash - s) : len, &r->port_lo) < 0 ||
	    parse_port(dash ? dash + 1 : s, dash ? len - (size_t)(dash - s) - 1 : len, &r->port_hi) < 0)
		return cordon_err_setf(err, -EINVAL,
				       "rule '%s': bad port '%s' (want 1-65535 or a range lo-hi)",
				       r->text, s);
	if (r->port_lo > r->port_hi)
		return cordon_err_setf(err, -EINVAL, "rule '%s': port range '%s' is backwards",
				       r->text, s);
	return 0;
}

static int parse_prefix(const char *s, unsigned max, uint8_t *ret)
{
	unsigned v = 0;
	size_t len = strlen(s);

	if (len == 0 || len > 3 || (len > 1 && s[0] == '0'))
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	if (v > max)
		return -EINVAL;
	*ret = (uint8_t)v;
	return 0;
}

static void format_range(char *buf, size_t size, int family, const uint8_t *addr, unsigned prefix)
{
	char a[INET6_ADDRSTRLEN] = "?";

	inet_ntop(family, addr, a, sizeof(a));
	snprintf(buf, size, "%s/%u", a, prefix);
}

/* @s is an address with an optional /prefix, already split off the port. */
static int parse_cidr(char *s, int family, struct egress_rule *r, struct cordon_err *err)
{
	char *slash = strchr(s, '/');
	unsigned max = family == AF_INET ? 32 : 128;

	r->kind = RULE_CIDR;
	r->family = family;
	r->prefix = (uint8_t)max;
	if (slash) {
		*slash = '\0';
		if (parse_prefix(slash + 1, max, &r->prefix) < 0)
			return cordon_err_setf(err, -EINVAL, "rule '%s': prefix '/%s' is not 0-%u",
					       r->text, slash + 1, max);
	}
	if (inet_pton(family, s, r->addr) != 1)
		return cordon_err_setf(err, -EINVAL, "rule '%s': '%s' is not an IPv%c address",
				       r->text, s, family == AF_INET ? '4' : '6');
	uint8_t masked[16];
	memcpy(masked, r->addr, sizeof(masked));
	clear_host_bits(masked, addr_len(family), r->prefix);
	if (memcmp(masked, r->addr, addr_len(family)) != 0)
		return cordon_err_setf(err, -EINVAL, "rule '%s': host bits set after /%u",
				       r->text, r->prefix);
	if (r->port_lo == 0) {
		r->port_lo = 1;
		r->port_hi = UINT16_MAX;
	}
	return 0;
}

static int check_cidr(const struct egress_rule *r, const struct egress_blocklist *bl,
		      struct cordon_err *err)
{
	struct overlap o;
	char range[INET6_ADDRSTRLEN + 8];

	if (!range_blocked(bl, r->family, r->addr, r->prefix, &o))
		return 0;
	/* a rule wider than what it hits was probably meant as "the internet" */
	bool wide = r->prefix < o.prefix && r->prefix <= (r->family == AF_INET ? 8 : 16);
	format_range(range, sizeof(range), o.family, o.addr, o.prefix);
	return cordon_err_setf(err, -EPERM,
			       "rule '%s': overlaps always-blocked range %s (%s)%s", r->text, range,
			       o.why, wide ? "; for the whole internet use --net public" : "");
}

static int parse_name(char *s, struct egress_rule *r, struct cordon_err *err)
{
	size_t len = strlen(s);
	const char *suffix;

	if (len > 0 && s[len - 1] == '.')
		s[--len] = '\0';
	if (strcmp(s, "*") == 0)
		return cordon_err_setf(err, -EINVAL,
				       "rule '%s': '*' would allow every name; use --net public",
				       r->text);
	bool wild = strncmp(s, "*.", 2) == 0;
	const char *name = wild ? s + 2 : s;
	len -= wild ? 2 : 0;
	if (len > EGRESS_NAME_MAX)
		return cordon_err_setf(err, -EINVAL, "rule '%s': name longer than %d bytes",
				       r->text, EGRESS_NAME_MAX);
	if (!egress_name_valid(name, len, false))
		return cordon_err_setf(err, -EINVAL,
				       "rule '%s': not a host name (letters, digits, '-', labels of "
				       "1-63 bytes, optionally '*.' in front)", r->text);
	if (egress_name_is_ip_literal(name, len))
		return cordon_err_setf(err, -EINVAL,
				       "rule '%s': an IP address written as a name; write it in "
				       "dotted-quad form", r->text);
	if ((suffix = blocked_suffix(name, len)))
		return cordon_err_setf(err, -EPERM,
				       "rule '%s': names under '%s' resolve to blocked addresses",
				       r->text, suffix);
	if (!memchr(name, '.', len))
		return cordon_err_setf(err, -EINVAL, "rule '%s': %s", r->text,
				       wild ? "a wildcard needs at least two labels after '*.'"
					    : "a single-label name is not allowed");
	r->kind = wild ? RULE_WILDCARD : RULE_DOMAIN;
	for (size_t i = 0; i <= len; i++)
		r->name[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] + 32 : name[i]);
	return 0;
}

/* Splits "host:ports" or "[v6]:ports" or a bare IPv6 CIDR in @s (modified in place); points
 * @ret_ports at the ports or NULL, and says whether the host is bracketed. */
static int split_port(char *s, char **ret_host, char **ret_ports, bool *ret_bracket,
		      const struct egress_rule *r, struct cordon_err *err)
{
	char *colon;

	*ret_ports = NULL;
	*ret_bracket = s[0] == '[';
	if (*ret_bracket) {
		char *close = strchr(s, ']');
		if (!close || (close[1] != '\0' && close[1] != ':'))
			return cordon_err_setf(err, -EINVAL,
					       "rule '%s': want [IPv6]:port or [IPv6/prefix]:port",
					       r->text);
		*close = '\0';
		*ret_host = s + 1;
		if (close[1] == ':')
			*ret_ports = close + 2;
		return 0;
	}
	*ret_host = s;
	colon = strchr(s, ':');
	if (colon && strchr(colon + 1, ':'))
		return 0; /* a bare IPv6 address: no port (write [addr]:port) */
	if (colon) {
		*colon = '\0';
		*ret_ports = colon + 1;
	}
	return 0;
}

static bool looks_v4(const char *s)
{
	return strspn(s, "0123456789./") == strlen(s) && strchr(s, '.');
}

static int parse_rule(const char *text, struct egress_rule *r, struct cordon_err *err)
{
	char buf[sizeof(r->text)];
	char *host = NULL, *ports = NULL;
	bool bracket;
	int k;

	*r = (struct egress_rule){};
	if (strlen(text) >= sizeof(r->text))
		return cordon_err_setf(err, -EINVAL, "rule '%.40s...': longer than %zu bytes", text,
				       sizeof(r->text) - 1);
	strcpy(r->text, text);
	strcpy(buf, text);
	if (buf[0] == '\0')
		return cordon_err_setf(err, -EINVAL, "empty rule");
	if ((k = split_port(buf, &host, &ports, &bracket, r, err)) < 0)
		return k;
	if (ports && (k = parse_ports(ports, r, err)) < 0)
		return k;
	if (bracket || strchr(host, ':'))
		k = parse_cidr(host, AF_INET6, r, err);
	else if (looks_v4(host))
		k = parse_cidr(host, AF_INET, r, err);
	else if (strchr(host, '/'))
		return cordon_err_setf(err, -EINVAL, "rule '%s': a prefix needs an IP address",
				       text);
	else
		k = parse_name(host, r, err);
	if (k < 0)
		return k;
	return r->kind == RULE_CIDR ? check_cidr(r, NULL, err) : 0;
}

static const char *const mode_names[] = {
	[EGRESS_DENY] = "deny",
	[EGRESS_ALLOW] = "allow",
	[EGRESS_PUBLIC] = "public",
};

int egress_policy_parse(enum egress_mode mode, const char *const *rules, size_t n,
			struct egress_policy **ret, struct cordon_err *err)
{
	struct egress_policy *p;

	if ((unsigned)mode > EGRESS_PUBLIC || (n > 0 && !rules))
		return cordon_err_setf(err, -EINVAL, "bad network policy");
	if (n > 0 && mode != EGRESS_ALLOW)
		return cordon_err_setf(err, -EINVAL, "rules are only for an 'allow' policy, not '%s'",
				       mode_names[mode]);
	if (n > EGRESS_RULES_MAX)
		return cordon_err_setf(err, -E2BIG, "%zu rules, at most %d", n, EGRESS_RULES_MAX);
	p = calloc(1, sizeof(*p) + n * sizeof(p->rules[0]));
	if (!p)
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	p->mode = mode;
	for (size_t i = 0; i < n; i++) {
		int r = rules[i] ? parse_rule(rules[i], &p->rules[i], err)
				 : cordon_err_setf(err, -EINVAL, "rule %zu is null", i);
		if (r < 0) {
			free(p);
			return r;
		}
	}
	p->n = n;
	*ret = p;
	return 0;
}

struct egress_policy *egress_policy_free(struct egress_policy *p)
{
	free(p);
	return NULL;
}

int egress_policy_check(const struct egress_policy *p, const struct egress_blocklist *bl,
			struct cordon_err *err)
{
	for (size_t i = 0; i < p->n; i++) {
		if (p->rules[i].kind != RULE_CIDR)
			continue;
		int r = check_cidr(&p->rules[i], bl, err);
		if (r < 0)
			return r;
	}
	return 0;
}

/* ---- matching ---- */

static bool port_ok(const struct egress_rule *r, uint16_t port)
{
	if (r->port_lo == 0)
		return port == 80 || port == 443;
	return port >= r->port_lo && port <= r->port_hi;
}

/* The length of @name without one trailing dot, or 0 when it may never match. */
static size_t match_len(const char *name)
{
	size_t len = name ? strnlen(name, EGRESS_NAME_MAX + 2) : 0;

	if (len > 0 && name[len - 1] == '.')
		len--;
	if (!egress_name_valid(name, len, true) || egress_name_is_ip_literal(name, len) ||
	    blocked_suffix(name, len))
		return 0;
	return len;
}

static bool name_matches(const struct egress_rule *r, const char *name, size_t len)
{
	size_t rl = strlen(r->name);

	if (r->kind == RULE_DOMAIN)
		return len == rl && strncasecmp(name, r->name, len) == 0;
	if (r->kind == RULE_WILDCARD)
		return len > rl && name_at_or_below(name, len, r->name);
	return false;
}

/* @port < 0: any port. */
static const struct egress_rule *match_name(const struct egress_policy *p, const char *name,
					    int port)
{
	size_t len;

	if (!p || p->mode == EGRESS_DENY || port == 0 || (len = match_len(name)) == 0)
		return NULL;
	if (p->mode == EGRESS_PUBLIC)
		return &public_rule;
	for (size_t i = 0; i < p->n; i++)
		if (name_matches(&p->rules[i], name, len) &&
		    (port < 0 || port_ok(&p->rules[i], (uint16_t)port)))
			return &p->rules[i];
	return NULL;
}

const struct egress_rule *egress_match_name(const struct egress_policy *p, const char *name,
					    uint16_t port)
{
	return match_name(p, name, port);
}

const struct egress_rule *egress_match_dns(const struct egress_policy *p, const char *name)
{
	return match_name(p, name, -1);
}

static const uint8_t v4_mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

const struct egress_rule *egress_match_addr(const struct egress_policy *p, int family,
					    const uint8_t *addr, uint16_t port)
{
	if (!p || !addr || p->mode == EGRESS_DENY || port == 0 ||
	    egress_addr_blocked(p->extra, family, addr))
		return NULL;
	if (p->mode == EGRESS_PUBLIC)
		return &public_rule;
	if (family == AF_INET6 && memcmp(addr, v4_mapped, sizeof(v4_mapped)) == 0) {
		family = AF_INET;
		addr += 12;
	}
	for (size_t i = 0; i < p->n; i++) {
		const struct egress_rule *r = &p->rules[i];
		if (r->kind == RULE_CIDR && r->family == family &&
		    prefix_overlap(addr, family == AF_INET ? 32 : 128, r->addr, r->prefix) &&
		    port_ok(r, port))
			return r;
	}
	return NULL;
}

static void add_range(uint16_t (*v)[2], size_t *n, uint16_t lo, uint16_t hi)
{
	size_t i = *n;

	/* insertion sort by lo: at most EGRESS_RULES_MAX + 2 entries */
	while (i > 0 && v[i - 1][0] > lo) {
		v[i][0] = v[i - 1][0];
		v[i][1] = v[i - 1][1];
		i--;
	}
	v[i][0] = lo;
	v[i][1] = hi;
	(*n)++;
}

size_t egress_name_ports(const struct egress_policy *p, uint16_t (*ret_ranges)[2], size_t max)
{
	uint16_t v[EGRESS_RULES_MAX + 2][2];
	size_t n = 0, out = 0;

	add_range(v, &n, 80, 80);
	add_range(v, &n, 443, 443);
	for (size_t i = 0; p && i < p->n && i < EGRESS_RULES_MAX; i++)
		if (p->rules[i].kind != RULE_CIDR && p->rules[i].port_lo != 0)
			add_range(v, &n, p->rules[i].port_lo, p->rules[i].port_hi);
	for (size_t i = 0; i < n; i++) {
		/* merge with the previous range when they overlap or touch */
		if (out > 0 && v[i][0] <= (unsigned)v[out - 1][1] + 1) {
			if (v[i][1] > v[out - 1][1])
				v[out - 1][1] = v[i][1];
			continue;
		}
		v[out][0] = v[i][0];
		v[out][1] = v[i][1];
		out++;
	}
	for (size_t i = 0; i < out && i < max; i++) {
		ret_ranges[i][0] = v[i][0];
		ret_ranges[i][1] = v[i][1];
	}
	return out;
}
