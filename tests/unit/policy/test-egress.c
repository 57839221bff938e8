/* Egress policy: every accepted rule form, every refused class (with a message naming the
 * rule), matching of names, ports and addresses in each mode, the edges of every built-in
 * blocked range and its IPv6 forms, extra blocked ranges, and the proxy's port list. */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "policy/egress.h"

static struct egress_policy *parse_ok(enum egress_mode mode, const char *const *rules, size_t n)
{
	struct egress_policy *p = NULL;
	struct cordon_err err = {};
	int r = egress_policy_parse(mode, rules, n, &p, &err);
	if (r < 0)
		fail_msg("parse: %s", err.msg);
	return p;
}

/* ---- accepted forms ---- */

static const struct {
	const char *rule;
	enum egress_rule_kind kind;
	const char *name; /* or the address for CIDR */
	uint8_t prefix;
	uint16_t lo, hi;
} accepted[] = {
	{ "api.example.com", RULE_DOMAIN, "api.example.com", 0, 0, 0 },
	{ "API.Example.COM.", RULE_DOMAIN, "api.example.com", 0, 0, 0 },
	{ "*.example.com", RULE_WILDCARD, "example.com", 0, 0, 0 },
	{ "*.Example.com.", RULE_WILDCARD, "example.com", 0, 0, 0 },
	{ "api.example.com:8443", RULE_DOMAIN, "api.example.com", 0, 8443, 8443 },
	{ "*.x.org:8000-8100", RULE_WILDCARD, "x.org", 0, 8000, 8100 },
	{ "example.com:1-65535", RULE_DOMAIN, "example.com", 0, 1, 65535 },
	{ "xn--bcher-kva.example", RULE_DOMAIN, "xn--bcher-kva.example", 0, 0, 0 },
	{ "a-b.0.c9.example.com", RULE_DOMAIN, "a-b.0.c9.example.com", 0, 0, 0 },
	{ "203.0.113.7", RULE_CIDR, "203.0.113.7", 32, 1, 65535 },
	{ "203.0.113.0/24:22", RULE_CIDR, "203.0.113.0", 24, 22, 22 },
	{ "198.51.100.0/24:1000-2000", RULE_CIDR, "198.51.100.0", 24, 1000, 2000 },
	{ "8.8.8.8:53", RULE_CIDR, "8.8.8.8", 32, 53, 53 },
	{ "2001:db8::/32", RULE_CIDR, "2001:db8::", 32, 1, 65535 },
	{ "2001:db8::1", RULE_CIDR, "2001:db8::1", 128, 1, 65535 },
	{ "[2001:db8::1]:443", RULE_CIDR, "2001:db8::1", 128, 443, 443 },
	{ "[2001:db8::/48]:80-81", RULE_CIDR, "2001:db8::", 48, 80, 81 },
	{ "2606:4700::/32", RULE_CIDR, "2606:4700::", 32, 1, 65535 },
};

static void test_accepted(void **state)
{
	for (size_t i = 0; i < sizeof(accepted) / sizeof(accepted[0]); i++) {
		const char *rules[] = { accepted[i].rule };
		struct egress_policy *p = parse_ok(EGRESS_ALLOW, rules, 1);
		const struct egress_rule *r = &p->rules[0];
		assert_int_equal(p->n, 1);
		assert_int_equal(r->kind, accepted[i].kind);
		assert_string_equal(r->text, accepted[i].rule);
		assert_int_equal(r->port_lo, accepted[i].lo);
		assert_int_equal(r->port_hi, accepted[i].hi);
		if (r->kind == RULE_CIDR) {
			char a[INET6_ADDRSTRLEN];
			assert_non_null(inet_ntop(r->family, r->addr, a, sizeof(a)));
			assert_string_equal(a, accepted[i].name);
			assert_int_equal(r->prefix, accepted[i].prefix);
		} else {
			assert_string_equal(r->name, accepted[i].name);
		}
		egress_policy_free(p);
	}
}

/* ---- refused classes ---- */

static const struct {
	const char *rule;
	int code;
	const char *says;
} refused[] = {
	/* names */
	{ "", -EINVAL, "empty rule" },
	{ "*", -EINVAL, "use --net public" },
	{ "*.", -EINVAL, "use --net public" },
	{ "*.com", -EINVAL, "two labels" },
	{ "com", -EINVAL, "single-label" },
	{ "intranet", -EINVAL, "single-label" },
	{ "a..example.com", -EINVAL, "not a host name" },
	{ ".example.com", -EINVAL, "not a host name" },
	{ "-a.example.com", -EINVAL, "not a host name" },
	{ "a-.example.com", -EINVAL, "not a host name" },
	{ "a_b.example.com", -EINVAL, "not a host name" },
	{ "ex ample.com", -EINVAL, "not a host name" },
	{ "a.*.example.com", -EINVAL, "not a host name" },
	{ "*foo.example.com", -EINVAL, "not a host name" },
	{ "**.example.com", -EINVAL, "not a host name" },
	{ "example.com..", -EINVAL, "not a host name" },
	{ "ex\xc3\xa4mple.com", -EINVAL, "not a host name" },
	{ "http://example.com", -EINVAL, "bad port" },
	{ "example.com/24", -EINVAL, "prefix needs an IP" },
	/* IP literals written as names */
	{ "127.1", -EINVAL, "not an IPv4 address" },
	{ "10.0.0.0.1", -EINVAL, "not an IPv4 address" },
	{ "0x7f.1", -EINVAL, "IP address written as a name" },
	{ "0x7f000001", -EINVAL, "IP address written as a name" },
	{ "2130706433", -EINVAL, "IP address written as a name" },
	{ "foo.0x0a", -EINVAL, "IP address written as a name" },
	/* conventional names for blocked places */
	{ "localhost", -EPERM, "'localhost'" },
	{ "a.localhost", -EPERM, "'localhost'" },
	{ "metadata.google.internal", -EPERM, "'internal'" },
	{ "*.internal", -EPERM, "'internal'" },
	{ "printer.local", -EPERM, "'local'" },
	{ "*.local", -EPERM, "'local'" },
	{ "router.home.arpa", -EPERM, "'home.arpa'" },
	{ "1.0.0.10.in-addr.arpa", -EPERM, "'arpa'" },
	/* ports */
	{ "example.com:0", -EINVAL, "bad port" },
	{ "example.com:65536", -EINVAL, "bad port" },
	{ "example.com:", -EINVAL, "bad port" },
	{ "example.com:80-", -EINVAL, "bad port" },
	{ "example.com:-80", -EINVAL, "bad port" },
	{ "example.com:8a", -EINVAL, "bad port" },
	{ "example.com:+80", -EINVAL, "bad port" },
	{ "example.com:000080", -EINVAL, "bad port" },
	{ "example.com:90-80", -EINVAL, "backwards" },
	{ "example.com:1-2-3", -EINVAL, "bad port" },
	{ "203.0.113.7:0", -EINVAL, "bad port" },
	{ "[2001:db8::1]:", -EINVAL, "bad port" },
	/* addresses and prefixes */
	{ "203.0.113.0/33", -EINVAL, "prefix" },
	{ "203.0.113.0/024", -EINVAL, "prefix" },
	{ "203.0.113.0/", -EINVAL, "prefix" },
	{ "203.0.113.0/-1", -EINVAL, "prefix" },
	{ "203.0.113.7/24", -EINVAL, "host bits" },
	{ "2001:db8::/129", -EINVAL, "prefix" },
	{ "2001:db8::1/32", -EINVAL, "host bits" },
	{ "2001:db8:::1", -EINVAL, "not an IPv6 address" },
	{ "fe80::1%eth0", -EINVAL, "not an IPv6 address" },
	{ "[2001:db8::1", -EINVAL, "want [IPv6]" },
	{ "[2001:db8::1]x", -EINVAL, "want [IPv6]" },
	{ "[example.com]:443", -EINVAL, "not an IPv6 address" },
	{ "example.com:80:90", -EINVAL, "not an IPv6 address" },
	/* always-blocked ranges */
	{ "0.0.0.0/0", -EPERM, "use --net public" },
	{ "::/0", -EPERM, "use --net public" },
	{ "0.0.0.0", -EPERM, "0.0.0.0/8" },
	{ "10.0.0.0/8", -EPERM, "10.0.0.0/8" },
	{ "10.1.2.3:443", -EPERM, "10.0.0.0/8" },
	{ "8.0.0.0/6", -EPERM, "10.0.0.0/8" },
	{ "100.64.0.0/10", -EPERM, "100.64.0.0/10" },
	{ "127.0.0.1", -EPERM, "127.0.0.0/8" },
	{ "169.254.169.254", -EPERM, "169.254.0.0/16" },
	{ "172.31.255.255", -EPERM, "172.16.0.0/12" },
	{ "192.0.0.8", -EPERM, "192.0.0.0/24" },
	{ "192.168.1.1/32", -EPERM, "192.168.0.0/16" },
	{ "198.19.0.0/16", -EPERM, "198.18.0.0/15" },
	{ "224.0.0.251", -EPERM, "224.0.0.0/4" },
	{ "255.255.255.255", -EPERM, "240.0.0.0/4" },
	{ "::", -EPERM, "unspecified" },
	{ "::1", -EPERM, "loopback" },
	{ "[fe80::1]:443", -EPERM, "fe80::/10" },
	{ "fd00:ec2::254", -EPERM, "fc00::/7" },
	{ "ff02::1", -EPERM, "ff00::/8" },
	{ "::ffff:10.0.0.1", -EPERM, "IPv4-mapped" },
	{ "::ffff:169.254.169.254", -EPERM, "IPv4-mapped" },
	{ "64:ff9b::a9fe:a9fe", -EPERM, "NAT64" },
	{ "64:ff9b:1::/48", -EPERM, "local-use NAT64" },
	{ "2002:a00::/24", -EPERM, "6to4" },
	{ "2000::/3", -EPERM, "6to4" },
};

static void test_refused(void **state)
{
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		const char *rules[] = { "ok.example.com", refused[i].rule };
		struct egress_policy *p = NULL;
		struct cordon_err err = {};
		int r = egress_policy_parse(EGRESS_ALLOW, rules, 2, &p, &err);
		if (r != refused[i].code || !strstr(err.msg, refused[i].says) ||
		    (refused[i].rule[0] && !strstr(err.msg, refused[i].rule)))
			fail_msg("rule '%s': %d '%s'", refused[i].rule, r, err.msg);
		assert_int_equal(err.code, r);
		assert_null(p);
	}
}

static void test_refused_policy(void **state)
{
	static const char *const one[] = { "example.com" };
	struct egress_policy *p = NULL;
	struct cordon_err err = {};
	char big[400];

	assert_int_equal(egress_policy_parse(EGRESS_DENY, one, 1, &p, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "'deny'"));
	assert_int_equal(egress_policy_parse(EGRESS_PUBLIC, one, 1, &p, &err), -EINVAL);
	assert_int_equal(egress_policy_parse(EGRESS_ALLOW, NULL, 1, &p, &err), -EINVAL);
	assert_int_equal(egress_policy_parse((enum egress_mode)7, NULL, 0, &p, &err), -EINVAL);

	const char *many[EGRESS_RULES_MAX + 1];
	for (size_t i = 0; i < EGRESS_RULES_MAX + 1; i++)
		many[i] = "example.com";
	assert_int_equal(egress_policy_parse(EGRESS_ALLOW, many, EGRESS_RULES_MAX + 1, &p, &err),
			 -E2BIG);
	p = parse_ok(EGRESS_ALLOW, many, EGRESS_RULES_MAX);
	assert_int_equal(p->n, EGRESS_RULES_MAX);
	p = egress_policy_free(p);

	/* names: 253 bytes pass, 254 do not; a 63-byte label passes, 64 do not */
	memset(big, 'a', sizeof(big));
	for (size_t i = 63; i < 253; i += 64)
		big[i] = '.';
	big[253] = '\0';
	const char *r253[] = { big };
	p = parse_ok(EGRESS_ALLOW, r253, 1);
	assert_int_equal(strlen(p->rules[0].name), 253);
	p = egress_policy_free(p);
	big[253] = 'a';
	big[254] = '\0';
	assert_int_equal(egress_policy_parse(EGRESS_ALLOW, r253, 1, &p, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "longer than 253"));
	strcpy(big, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.example.com");
	p = parse_ok(EGRESS_ALLOW, r253, 1);
	p = egress_policy_free(p);
	strcpy(big, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.example.com");
	assert_int_equal(egress_policy_parse(EGRESS_ALLOW, r253, 1, &p, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "not a host name"));

	/* a rule longer than the audit text */
	memset(big, 'a', 350);
	big[350] = '\0';
	assert_int_equal(egress_policy_parse(EGRESS_ALLOW, r253, 1, &p, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "longer than 299"));
	assert_null(p);

	/* no rules: fine in every mode */
	p = parse_ok(EGRESS_DENY, NULL, 0);
	assert_int_equal(p->mode, EGRESS_DENY);
	egress_policy_free(p);
	assert_null(egress_policy_free(NULL));
}

/* ---- matching ---- */

static const char *const match_rules[] = {
	"api.example.com",	   /* 0 */
	"*.example.org",	   /* 1 */
	"svc.example.net:8443",	   /* 2 */
	"*.x.org:8000-8100",	   /* 3 */
	"203.0.113.0/24:22",	   /* 4 */
	"198.51.100.7",		   /* 5 */
	"2001:db8::/32",	   /* 6 */
	"[2001:db8:1::1]:443",	   /* 7: shadowed by 6 */
	"[2606:4700::1]:443-444",  /* 8 */
	"_svc.example.net",	   /* refused: not LDH; not in the policy */
};

static const struct {
	const char *name;
	int port; /* -1: egress_match_dns() */
	int rule; /* -1: denied */
} name_cases[] = {
	{ "api.example.com", 443, 0 },
	{ "api.example.com", 80, 0 },
	{ "api.example.com", 8080, -1 },
	{ "api.example.com", 0, -1 },
	{ "API.Example.Com", 443, 0 },
	{ "api.example.com.", 443, 0 },
	{ "api.example.com..", 443, -1 },
	{ "x.api.example.com", 443, -1 },
	{ "example.com", 443, -1 },
	{ "pi.example.com", 443, -1 },
	{ "aapi.example.com", 443, -1 },
	{ "api.example.co", 443, -1 },
	{ "a.example.org", 443, 1 },
	{ "a.b.c.example.org", 80, 1 },
	{ "A.B.EXAMPLE.ORG.", 443, 1 },
	{ "example.org", 443, -1 },
	{ "example.org.", 443, -1 },
	{ "aexample.org", 443, -1 },
	{ ".example.org", 443, -1 },
	{ "a..example.org", 443, -1 },
	{ "a.example.org", 22, -1 },
	{ "svc.example.net", 8443, 2 },
	{ "svc.example.net", 443, -1 },
	{ "svc.example.net", 80, -1 },
	{ "a.x.org", 8000, 3 },
	{ "a.x.org", 8100, 3 },
	{ "a.x.org", 8050, 3 },
	{ "a.x.org", 7999, -1 },
	{ "a.x.org", 8101, -1 },
	{ "a.x.org", 443, -1 },
	{ "x.org", 8000, -1 },
	{ "", 443, -1 },
	{ ".", 443, -1 },
	{ "203.0.113.7", 22, -1 },
	{ "localhost", 443, -1 },
	/* DNS: any port, '_' allowed */
	{ "api.example.com", -1, 0 },
	{ "api.example.com.", -1, 0 },
	{ "svc.example.net", -1, 2 },
	{ "_https._tcp.a.example.org", -1, 1 },
	{ "a.x.org", -1, 3 },
	{ "example.org", -1, -1 },
	{ "other.example.com", -1, -1 },
	{ "7.100.51.198.in-addr.arpa", -1, -1 },
	{ "api.example.com.internal", -1, -1 },
};

static void test_match_name(void **state)
{
	struct egress_policy *p = parse_ok(EGRESS_ALLOW, match_rules, 9);

	for (size_t i = 0; i < sizeof(name_cases) / sizeof(name_cases[0]); i++) {
		const struct egress_rule *r =
			name_cases[i].port < 0
				? egress_match_dns(p, name_cases[i].name)
				: egress_match_name(p, name_cases[i].name, (uint16_t)name_cases[i].port);
		const struct egress_rule *want =
			name_cases[i].rule < 0 ? NULL : &p->rules[name_cases[i].rule];
		if (r != want)
			fail_msg("'%s':%d matched '%s', want '%s'", name_cases[i].name,
				 name_cases[i].port, r ? r->text : "(none)", want ? want->text : "(none)");
	}
	/* a name longer than any valid one is denied, not overread */
	char big[600];
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_null(egress_match_dns(p, big));
	assert_null(egress_match_name(p, NULL, 443));
	assert_null(egress_match_name(NULL, "api.example.com", 443));
	egress_policy_free(p);
}

static void pton(const char *s, int *family, uint8_t addr[16])
{
	memset(addr, 0, 16);
	*family = strchr(s, ':') ? AF_INET6 : AF_INET;
	if (inet_pton(*family, s, addr) != 1)
		fail_msg("bad test address %s", s);
}

static const struct {
	const char *addr;
	uint16_t port;
	int rule;
} addr_cases[] = {
	{ "203.0.113.7", 22, 4 },
	{ "203.0.113.0", 22, 4 },
	{ "203.0.113.255", 22, 4 },
	{ "203.0.113.7", 23, -1 },
	{ "203.0.112.255", 22, -1 },
	{ "203.0.114.0", 22, -1 },
	{ "198.51.100.7", 1, 5 },
	{ "198.51.100.7", 65535, 5 },
	{ "198.51.100.7", 0, -1 },
	{ "198.51.100.8", 80, -1 },
	{ "::ffff:198.51.100.7", 80, 5 },
	{ "::ffff:203.0.113.9", 22, 4 },
	{ "2001:db8::1", 5432, 6 },
	{ "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", 1, 6 },
	{ "2001:db9::", 443, -1 },
	{ "2001:db8:1::1", 443, 6 },
	{ "2606:4700::1", 443, 8 },
	{ "2606:4700::1", 444, 8 },
	{ "2606:4700::1", 445, -1 },
	{ "2606:4700::2", 443, -1 },
	{ "10.0.0.1", 22, -1 },
	{ "169.254.169.254", 80, -1 },
	{ "::1", 22, -1 },
};

static void test_match_addr(void **state)
{
	struct egress_policy *p = parse_ok(EGRESS_ALLOW, match_rules, 9);
	uint8_t a[16];
	int family;

	for (size_t i = 0; i < sizeof(addr_cases) / sizeof(addr_cases[0]); i++) {
		pton(addr_cases[i].addr, &family, a);
		const struct egress_rule *r = egress_match_addr(p, family, a, addr_cases[i].port);
		const struct egress_rule *want =
			addr_cases[i].rule < 0 ? NULL : &p->rules[addr_cases[i].rule];
		if (r != want)
			fail_msg("%s:%u matched '%s', want '%s'", addr_cases[i].addr,
				 addr_cases[i].port, r ? r->text : "(none)", want ? want->text : "(none)");
	}
	assert_null(egress_match_addr(p, AF_UNIX, a, 443));
	assert_null(egress_match_addr(p, AF_INET, NULL, 443));
	egress_policy_free(p);
}

static void test_modes(void **state)
{
	struct egress_policy *deny = parse_ok(EGRESS_DENY, NULL, 0);
	struct egress_policy *pub = parse_ok(EGRESS_PUBLIC, NULL, 0);
	struct egress_policy *none = parse_ok(EGRESS_ALLOW, NULL, 0);
	uint8_t a[16];
	int family;

	pton("203.0.113.7", &family, a);
	assert_null(egress_match_addr(deny, family, a, 443));
	assert_null(egress_match_addr(none, family, a, 443));
	const struct egress_rule *r = egress_match_addr(pub, family, a, 22);
	assert_non_null(r);
	assert_string_equal(r->text, "public");
	assert_null(egress_match_addr(pub, family, a, 0));
	pton("2001:db8::5", &family, a);
	assert_non_null(egress_match_addr(pub, family, a, 1));

	static const char *const blocked[] = { "10.0.0.1", "169.254.169.254", "127.0.0.1",
					       "::1", "fd00:ec2::254", "::ffff:192.168.0.1",
					       "64:ff9b::a00:1", "2002:c0a8:101::1", "224.0.0.1" };
	for (size_t i = 0; i < sizeof(blocked) / sizeof(blocked[0]); i++) {
		pton(blocked[i], &family, a);
		if (egress_match_addr(pub, family, a, 443))
			fail_msg("public reaches %s", blocked[i]);
	}

	assert_null(egress_match_name(deny, "example.com", 443));
	assert_null(egress_match_dns(deny, "example.com"));
	assert_null(egress_match_name(none, "example.com", 443));
	r = egress_match_name(pub, "Example.com.", 8080);
	assert_non_null(r);
	assert_string_equal(r->text, "public");
	assert_non_null(egress_match_dns(pub, "example.com"));
	assert_null(egress_match_name(pub, "localhost", 80));
	assert_null(egress_match_name(pub, "metadata.google.internal", 80));
	assert_null(egress_match_name(pub, "127.0.0.1", 80));
	assert_null(egress_match_name(pub, "0x7f000001", 80));
	assert_null(egress_match_name(pub, "example.com", 0));
	assert_null(egress_match_dns(pub, "1.1.168.192.in-addr.arpa"));
	egress_policy_free(deny);
	egress_policy_free(pub);
	egress_policy_free(none);
}

/* ---- blocked ranges, edges ---- */

static const struct {
	const char *addr;
	bool blocked;
} edges[] = {
	{ "0.0.0.0", true },	      { "0.255.255.255", true },   { "1.0.0.0", false },
	{ "9.255.255.255", false },   { "10.0.0.0", true },	   { "10.255.255.255", true },
	{ "11.0.0.0", false },	      { "100.63.255.255", false }, { "100.64.0.0", true },
	{ "100.127.255.255", true },  { "100.128.0.0", false },	   { "126.255.255.255", false },
	{ "127.0.0.0", true },	      { "127.255.255.255", true }, { "128.0.0.0", false },
	{ "169.253.255.255", false }, { "169.254.0.0", true },	   { "169.254.169.254", true },
	{ "169.254.255.255", true },  { "169.255.0.0", false },	   { "172.15.255.255", false },
	{ "172.16.0.0", true },	      { "172.31.255.255", true },  { "172.32.0.0", false },
	{ "191.255.255.255", false }, { "192.0.0.0", true },	   { "192.0.0.255", true },
	{ "192.0.1.0", false },	      { "192.0.2.1", false },	   { "192.167.255.255", false },
	{ "192.168.0.0", true },      { "192.168.255.255", true }, { "192.169.0.0", false },
	{ "198.17.255.255", false },  { "198.18.0.0", true },	   { "198.19.255.255", true },
	{ "198.20.0.0", false },      { "198.51.100.1", false },   { "203.0.113.7", false },
	{ "223.255.255.255", false }, { "224.0.0.0", true },	   { "239.255.255.255", true },
	{ "240.0.0.0", true },	      { "255.255.255.255", true },
	/* IPv6 */
	{ "::", true },
	{ "::1", true },
	{ "::2", true }, /* IPv4-compatible 0.0.0.2 */
	{ "::8.8.8.8", false },
	{ "fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", false },
	{ "fe80::", true },
	{ "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true },
	{ "fec0::", true },
	{ "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true },
	{ "fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", false },
	{ "fc00::", true },
	{ "fd00:ec2::254", true },
	{ "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true },
	{ "fe00::", false },
	{ "fe7f::", false },
	{ "ff00::", true },
	{ "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true },
	{ "2001:db8::1", false },
	{ "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", false },
	{ "2606:4700::1111", false },
	{ "::ffff:10.0.0.1", true },
	{ "::ffff:169.254.169.254", true },
	{ "::ffff:127.0.0.1", true },
	{ "::ffff:8.8.8.8", false },
	{ "::ffff:203.0.113.7", false },
	{ "::fffe:a00:1", false },
	{ "::10.0.0.1", true },
	{ "64:ff9b::a9fe:a9fe", true },
	{ "64:ff9b::c0a8:1", true },
	{ "64:ff9b::cb00:7107", false },
	{ "64:ff9b:1::1", true },
	{ "64:ff9b:1:ffff:ffff:ffff:ffff:ffff", true },
	{ "64:ff9b:2::", false },
	{ "2002:a00:1::", true },
	{ "2002:a9fe:a9fe::1", true },
	{ "2002:cb00:7107::", false },
};

static void test_blocked_edges(void **state)
{
	uint8_t a[16];
	int family;

	for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++) {
		pton(edges[i].addr, &family, a);
		if (egress_addr_blocked(NULL, family, a) != edges[i].blocked)
			fail_msg("%s: want %s", edges[i].addr, edges[i].blocked ? "blocked" : "open");
	}
	assert_true(egress_addr_blocked(NULL, AF_UNIX, a));
	assert_true(egress_addr_blocked(NULL, 0, a));
}

static void test_extra_blocklist(void **state)
{
	struct egress_blocklist bl;
	uint8_t a[16];
	int family;
	struct cordon_err err = {};

	egress_blocklist_init(&bl);
	pton("192.0.2.77", &family, a); /* host bits are cleared */
	assert_int_equal(egress_blocklist_add(&bl, family, a, 24), 0);
	pton("2001:db8:ff::", &family, a);
	assert_int_equal(egress_blocklist_add(&bl, family, a, 48), 0);
	assert_int_equal(egress_blocklist_add(&bl, family, a, 129), -EINVAL);
	assert_int_equal(egress_blocklist_add(&bl, AF_UNIX, a, 8), -EINVAL);

	static const struct {
		const char *addr;
		bool blocked;
	} cases[] = {
		{ "192.0.2.0", true },	      { "192.0.2.255", true },	      { "192.0.3.0", false },
		{ "::ffff:192.0.2.9", true }, { "64:ff9b::c000:209", true },  { "2002:c000:201::", true },
		{ "2001:db8:ff::1", true },   { "2001:db8:fe::1", false },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		pton(cases[i].addr, &family, a);
		if (egress_addr_blocked(&bl, family, a) != cases[i].blocked)
			fail_msg("%s: want %s", cases[i].addr, cases[i].blocked ? "blocked" : "open");
		assert_false(egress_addr_blocked(NULL, family, a) && !cases[i].blocked);
	}

	static const char *const rules[] = { "192.0.2.128/25:443", "198.51.100.0/24" };
	struct egress_policy *p = parse_ok(EGRESS_ALLOW, rules, 2);
	pton("192.0.2.130", &family, a);
	assert_non_null(egress_match_addr(p, family, a, 443));
	assert_int_equal(egress_policy_check(p, &bl, &err), -EPERM);
	assert_non_null(strstr(err.msg, "'192.0.2.128/25:443'"));
	assert_non_null(strstr(err.msg, "192.0.2.0/24"));
	p->extra = &bl;
	assert_null(egress_match_addr(p, family, a, 443));
	pton("198.51.100.1", &family, a);
	assert_non_null(egress_match_addr(p, family, a, 443));
	egress_policy_free(p);

	p = parse_ok(EGRESS_ALLOW, rules + 1, 1);
	assert_int_equal(egress_policy_check(p, &bl, &err), 0);
	egress_policy_free(p);

	for (size_t i = bl.n; i < EGRESS_BLOCKLIST_MAX; i++)
		assert_int_equal(egress_blocklist_add(&bl, AF_INET, a, 32), 0);
	assert_int_equal(egress_blocklist_add(&bl, AF_INET, a, 32), -ENOSPC);
}

static void test_name_ports(void **state)
{
	static const char *const rules[] = { "a.example.com",	   "b.example.com:8443",
					     "*.x.org:8000-8100",  "c.example.com:8050-8200",
					     "d.example.com:81",   "203.0.113.0/24:22",
					     "e.example.com:8201", "f.example.com:443" };
	uint16_t v[8][2];
	struct egress_policy *p = parse_ok(EGRESS_ALLOW, rules, 8);

	assert_int_equal(egress_name_ports(p, v, 8), 4);
	static const uint16_t want[4][2] = { { 80, 81 }, { 443, 443 }, { 8000, 8201 }, { 8443, 8443 } };
	assert_memory_equal(v, want, sizeof(want));
	memset(v, 0, sizeof(v));
	assert_int_equal(egress_name_ports(p, v, 2), 4);
	assert_memory_equal(v, want, 2 * sizeof(want[0]));
	assert_int_equal(v[2][0], 0);
	egress_policy_free(p);

	assert_int_equal(egress_name_ports(NULL, v, 8), 2);
	assert_int_equal(v[0][0], 80);
	assert_int_equal(v[1][1], 443);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_accepted),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_refused_policy),
		cmocka_unit_test(test_match_name),
		cmocka_unit_test(test_match_addr),
		cmocka_unit_test(test_modes),
		cmocka_unit_test(test_blocked_edges),
		cmocka_unit_test(test_extra_blocklist),
		cmocka_unit_test(test_name_ports),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
