/* cordon-egress's start-up inputs (src/net/egress/host.c): $CORDON_EGRESS_LIMITS, accepted
 * and refused forms, and the upstream resolver read from a resolv.conf ($CORDON_RESOLV_CONF):
 * the first nameserver line that holds an address, IPv4 or IPv6, port 53. */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "net/egress/egress.h"

static const struct egress_limits defaults = {256, 200, 16u << 20};

static void test_limits(void **state)
{
	static const struct {
		const char *env; /* NULL: unset */
		int r;
		struct egress_limits want;
	} cases[] = {
		{NULL, 0, {256, 200, 16u << 20}},
		{"", 0, {256, 200, 16u << 20}},
		{"10,5,4096", 0, {10, 5, 4096}},
		{"1,1,1024", 0, {1, 1, 1024}},
		{"0,5,4096", -EINVAL, {256, 200, 16u << 20}},  /* no connections at all */
		{"10,0,4096", -EINVAL, {256, 200, 16u << 20}}, /* none per second */
		{"10,5,1023", -EINVAL, {256, 200, 16u << 20}}, /* under a KiB per second */
		{"10,5", -EINVAL, {256, 200, 16u << 20}},
		{"10,5,4096,1", -EINVAL, {256, 200, 16u << 20}},
		{"10,5,4096x", -EINVAL, {256, 200, 16u << 20}},
		{"a,b,c", -EINVAL, {256, 200, 16u << 20}},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct egress_limits l = defaults;
		if (cases[i].env)
			setenv("CORDON_EGRESS_LIMITS", cases[i].env, 1);
		else
			unsetenv("CORDON_EGRESS_LIMITS");
		int r = host_read_limits(&l);
		if (r != cases[i].r || memcmp(&l, &cases[i].want, sizeof(l)) != 0)
			fail_msg("'%s': r=%d limits %u,%u,%u", cases[i].env ? cases[i].env : "(unset)", r,
				 l.max_conns, l.conns_per_sec, l.bytes_per_sec);
	}
	unsetenv("CORDON_EGRESS_LIMITS");
}

/* Reads @text as resolv.conf; the address found, "" for -ENOENT. */
static void upstream_of(const char *text, char *ret, size_t size)
{
	char path[] = "/tmp/cordon-test-resolv-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	setenv("CORDON_RESOLV_CONF", path, 1);
	struct sockaddr_storage ss = {};
	socklen_t len = 0;
	int r = host_read_upstream(&ss, &len);
	unlink(path);
	unsetenv("CORDON_RESOLV_CONF");
	ret[0] = '\0';
	if (r == -ENOENT)
		return;
	assert_int_equal(r, 0);
	if (ss.ss_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)&ss;
		assert_int_equal(len, sizeof(*sin));
		assert_int_equal(ntohs(sin->sin_port), 53);
		inet_ntop(AF_INET, &sin->sin_addr, ret, size);
	} else {
		const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)&ss;
		assert_int_equal(ss.ss_family, AF_INET6);
		assert_int_equal(len, sizeof(*sin6));
		assert_int_equal(ntohs(sin6->sin6_port), 53);
		inet_ntop(AF_INET6, &sin6->sin6_addr, ret, size);
	}
}

static void test_upstream(void **state)
{
	static const struct {
		const char *conf, *want;
	} cases[] = {
		{"nameserver 192.0.2.53\n", "192.0.2.53"},
		{"# comment\nsearch example.test\nnameserver 192.0.2.1\nnameserver 192.0.2.2\n", "192.0.2.1"},
		{"nameserver 2001:db8::53\n", "2001:db8::53"},
		{"nameserver not-an-address\nnameserver 192.0.2.9\n", "192.0.2.9"},
		{"nameserver 192.0.2.7", "192.0.2.7"}, /* no final newline */
		{"search example.test\n", ""},
		{"", ""},
		{"#nameserver 192.0.2.1\n", ""},
	};
	char got[INET6_ADDRSTRLEN];
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		upstream_of(cases[i].conf, got, sizeof(got));
		if (strcmp(got, cases[i].want) != 0)
			fail_msg("case %zu: got '%s', expected '%s'", i, got, cases[i].want);
	}
}

static void test_blocklist_has_loopback(void **state)
{
	struct egress_blocklist bl;
	assert_int_equal(host_blocklist(&bl), 0);
	uint8_t lo[4] = {127, 0, 0, 1};
	assert_true(egress_addr_blocked(&bl, AF_INET, lo));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_upstream),
		cmocka_unit_test(test_blocklist_has_loopback),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
