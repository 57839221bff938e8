/* DNS messages: queries built by hand (valid A/AAAA/SRV, EDNS, and every refused shape,
 * truncated at every length), error replies, and upstream answers (addresses of every
 * section, 0x20 case, id and question mismatches, pointer loops, forward pointers, hop
 * limit, bad lengths, truncated at every length). */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "net/dnsmsg.h"

struct msg {
	uint8_t b[2048];
	size_t n;
};

static void add(struct msg *m, const void *p, size_t n)
{
	if (n > 0)
		memcpy(m->b + m->n, p, n);
	m->n += n;
}

static void add16(struct msg *m, unsigned v)
{
	m->b[m->n++] = (uint8_t)(v >> 8);
	m->b[m->n++] = (uint8_t)v;
}

/* "a.b.c" in wire form; "" is the root. */
static void add_name(struct msg *m, const char *name)
{
	while (*name) {
		size_t l = strcspn(name, ".");
		m->b[m->n++] = (uint8_t)l;
		add(m, name, l);
		name += l + (name[l] == '.');
	}
	m->b[m->n++] = 0;
}

static void header(struct msg *m, unsigned id, unsigned flags, unsigned qd, unsigned an,
		   unsigned ns, unsigned ar)
{
	m->n = 0;
	add16(m, id);
	add16(m, flags);
	add16(m, qd);
	add16(m, an);
	add16(m, ns);
	add16(m, ar);
}

static void query(struct msg *m, const char *name, unsigned qtype)
{
	header(m, 0x1234, 0x0100, 1, 0, 0, 0);
	add_name(m, name);
	add16(m, qtype);
	add16(m, DNS_CLASS_IN);
}

static void add_opt(struct msg *m, const void *options, size_t olen)
{
	m->b[11] = 1;
	m->b[m->n++] = 0;
	add16(m, DNS_TYPE_OPT);
	add16(m, 1232);
	add16(m, 0);
	add16(m, 0);
	add16(m, (unsigned)olen);
	add(m, options, olen);
}

static const struct {
	const char *name;
	unsigned qtype;
	const char *want;
} good[] = {
	{ "example.com", DNS_TYPE_A, "example.com" },
	{ "api.Example.COM", DNS_TYPE_AAAA, "api.example.com" },
	{ "_https._tcp.example.com", 33, "_https._tcp.example.com" },
	{ "a-b.c9.example", 65, "a-b.c9.example" },
	{ "", 2, "" },
	{ "localhost", DNS_TYPE_A, "localhost" },
};

static void test_query_good(void **state)
{
	struct msg m;
	struct dns_question q;

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		query(&m, good[i].name, good[i].qtype);
		assert_int_equal(dns_parse_query(m.b, m.n, &q), 0);
		assert_string_equal(q.name, good[i].want);
		assert_int_equal(q.id, 0x1234);
		assert_int_equal(q.qtype, good[i].qtype);
		assert_int_equal(q.qclass, DNS_CLASS_IN);
		assert_int_equal(q.question_end, m.n);
		for (size_t k = 0; k < m.n; k++)
			if (dns_parse_query(m.b, k, &q) != -EBADMSG)
				fail_msg("'%s' cut at %zu", good[i].name, k);
	}

	/* EDNS: an OPT record, with and without options (a cookie) */
	query(&m, "example.com", DNS_TYPE_A);
	size_t qend = m.n;
	add_opt(&m, NULL, 0);
	assert_int_equal(dns_parse_query(m.b, m.n, &q), 0);
	assert_int_equal(q.question_end, qend);
	for (size_t k = qend; k < m.n; k++)
		assert_int_equal(dns_parse_query(m.b, k, &q), -EBADMSG);
	query(&m, "example.com", DNS_TYPE_A);
	add_opt(&m, "\x00\x0a\x00\x08\x01\x02\x03\x04\x05\x06\x07\x08", 12);
	assert_int_equal(dns_parse_query(m.b, m.n, &q), 0);
	for (size_t k = qend; k < m.n; k++)
		assert_int_equal(dns_parse_query(m.b, k, &q), -EBADMSG);
	/* options that overrun the OPT record */
	query(&m, "example.com", DNS_TYPE_A);
	add_opt(&m, "\x00\x0a\x00\x09\x01\x02\x03\x04\x05\x06\x07\x08", 12);
	assert_int_equal(dns_parse_query(m.b, m.n, &q), -EBADMSG);

	/* the longest names: 63-byte labels, 255 bytes of wire name */
	char big[300];
	memset(big, 'a', sizeof(big));
	big[63] = '.';
	big[127] = '.';
	big[191] = '.';
	big[253] = '\0'; /* 4 labels: 63+63+63+61 bytes, wire 1+63+1+63+1+63+1+61+1 = 255 */
	query(&m, big, DNS_TYPE_A);
	assert_int_equal(dns_parse_query(m.b, m.n, &q), 0);
	assert_int_equal(strlen(q.name), 253);
	big[253] = 'a';
	big[254] = '\0';
	query(&m, big, DNS_TYPE_A);
	assert_int_equal(dns_parse_query(m.b, m.n, &q), -EBADMSG);
}

static void test_query_bad(void **state)
{
	struct msg m;
	struct dns_question q;

	static const char *const names[] = {
		"a..b", "-a.example", "a-.example", "a b.example", "a*.example", "a\x01.example",
		"\xc3\xa4.example",
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.example", /* 64 */
	};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		query(&m, names[i], DNS_TYPE_A);
		if (dns_parse_query(m.b, m.n, &q) != -EBADMSG)
			fail_msg("'%s'", names[i]);
	}
	/* a '.' or a NUL inside a label */
	query(&m, "abc.example", DNS_TYPE_A);
	m.b[13] = '.';
	assert_int_equal(dns_parse_query(m.b, m.n, &q), -EBADMSG);
	m.b[13] = '\0';
	assert_int_equal(dns_parse_query(m.b, m.n, &q), -EBADMSG);

	/* a compression pointer in the question, to the header or anywhere */
	header(&m, 1, 0x0100, 1, 0, 0, 0);
	add(&m, "\x03" "www" "\xc0\x0c", 6);
	add16(&m, 1);
	add16(&m, 1);
	assert_int_equal(dns_parse_query(m.b, m.n, &q), -EBADMSG);
	m.b[16] = 0x40; /* the extended label types */
	assert_int_equal(dns_parse_query(m.b, m.n, &q), -EBADMSG);
	m.b[16] = 0x80;
	assert_int_equal(dns_parse_query(m.b, m.n, &q), -EBADMSG);

	/* header shapes */
	static const struct {
		unsigned flags, qd, an, ns, ar;
	} hdr[] = {
		{ 0x8100, 1, 0, 0, 0 }, /* QR: a response */
		{ 0x1100, 1, 0, 0, 0 }, /* opcode 2, STATUS */
		{ 0x2100, 1, 0, 0, 0 }, /* opcode 4, NOTIFY */
		{ 0x2900, 1, 0, 0, 0 }, /* opcode 5, UPDATE */
		{ 0x0300, 1, 0, 0, 0 }, /* TC */
		{ 0x0100, 0, 0, 0, 0 },
		{ 0x0100, 2, 0, 0, 0 },
		{ 0x0100, 1, 1, 0, 0 },
		{ 0x0100, 1, 0, 1, 0 },
		{ 0x0100, 1, 0, 0, 2 },
		{ 0x0100, 1, 0, 0, 1 }, /* an additional record that is not there */
	};
	for (size_t i = 0; i < sizeof(hdr) / sizeof(hdr[0]); i++) {
		header(&m, 7, hdr[i].flags, hdr[i].qd, hdr[i].an, hdr[i].ns, hdr[i].ar);
		add_name(&m, "example.com");
		add16(&m, 1);
		add16(&m, 1);
		if (dns_parse_query(m.b, m.n, &q) != -EBADMSG)
			fail_msg("header case %zu", i);
	}

	/* two questions, really there */
	header(&m, 7, 0x0100, 2, 0, 0, 0);
	add_name(&m, "example.com");
	add16(&m, 1);
	add16(&m, 1);
	add_name(&m, "evil.com");
	add16(&m, 1);
	add16(&m, 1);
	assert_int_equal(dns_parse_query(m.b, m.n, &q), -EBADMSG);

	/* bytes after the question; an additional record that is not OPT */
	query(&m, "example.com", 1);
	add(&m, "x", 1);
	assert_int_equal(dns_parse_query(m.b, m.n, &q), -EBADMSG);
	query(&m, "example.com", 1);
	m.b[11] = 1;
	add_name(&m, "example.com");
	add16(&m, DNS_TYPE_A);
	add16(&m, 1);
	add16(&m, 0);
	add16(&m, 0);
	add16(&m, 4);
	add(&m, "\x01\x02\x03\x04", 4);
	assert_int_equal(dns_parse_query(m.b, m.n, &q), -EBADMSG);
	assert_int_equal(dns_parse_query(m.b, 0, &q), -EBADMSG);
	assert_int_equal(dns_parse_query(NULL, 0, &q), -EBADMSG);
}

static void test_build_error(void **state)
{
	struct msg m;
	struct dns_question q;
	uint8_t out[512];
	int fam[4];
	uint8_t addrs[4][16];
	size_t n = 99;

	query(&m, "Blocked.Example", DNS_TYPE_A);
	size_t qend = m.n;
	add_opt(&m, NULL, 0);
	assert_int_equal(dns_parse_query(m.b, m.n, &q), 0);
	ssize_t len = dns_build_error(m.b, m.n, &q, DNS_RCODE_REFUSED, out, sizeof(out));
	assert_int_equal(len, qend);
	assert_int_equal(out[0], 0x12);
	assert_int_equal(out[1], 0x34);
	assert_int_equal(out[2], 0x81); /* QR, RD as asked */
	assert_int_equal(out[3], 0x85); /* RA, REFUSED */
	assert_memory_equal(out + 4, "\x00\x01\x00\x00\x00\x00\x00\x00", 8);
	assert_memory_equal(out + 12, m.b + 12, qend - 12); /* the case as sent */
	/* the reply is a valid answer to the query, with no addresses */
	assert_int_equal(dns_check_answer(out, (size_t)len, &q, fam, addrs, 4, &n), 0);
	assert_int_equal(n, 0);

	/* NXDOMAIN, RD not asked, built in place */
	m.b[2] = 0;
	assert_int_equal(dns_build_error(m.b, m.n, &q, DNS_RCODE_NXDOMAIN, m.b, m.n), qend);
	assert_int_equal(m.b[2], 0x80);
	assert_int_equal(m.b[3], 0x83);
	assert_int_equal(m.b[11], 0);

	query(&m, "example.com", DNS_TYPE_A);
	assert_int_equal(dns_parse_query(m.b, m.n, &q), 0);
	assert_int_equal(dns_build_error(m.b, m.n, &q, 5, out, m.n - 1), -ENOBUFS);
	assert_int_equal(dns_build_error(m.b, m.n, &q, 16, out, sizeof(out)), -EINVAL);
	assert_int_equal(dns_build_error(m.b, m.n, &q, -1, out, sizeof(out)), -EINVAL);
	assert_int_equal(dns_build_error(m.b, m.n - 1, &q, 5, out, sizeof(out)), -EINVAL);
}

/* ---- answers ---- */

static void rr(struct msg *m, unsigned type, unsigned class, const void *rdata, size_t rdlen)
{
	add16(m, 0xc00c); /* the question's name */
	add16(m, type);
	add16(m, class);
	add16(m, 0);
	add16(m, 300);
	add16(m, (unsigned)rdlen);
	add(m, rdata, rdlen);
}

static void answer_start(struct msg *m, const struct dns_question *q, const char *name,
			 unsigned an, unsigned ns, unsigned ar)
{
	header(m, q->id, 0x8180, 1, an, ns, ar);
	add_name(m, name);
	add16(m, q->qtype);
	add16(m, q->qclass);
}

static void v4(uint8_t *a, const char *s)
{
	assert_int_equal(inet_pton(AF_INET, s, a), 1);
}

static void v6(uint8_t *a, const char *s)
{
	assert_int_equal(inet_pton(AF_INET6, s, a), 1);
}

static void test_answer(void **state)
{
	struct msg q_m, m;
	struct dns_question q;
	int fam[8];
	uint8_t addrs[8][16], a[16];
	size_t n = 0;

	query(&q_m, "api.example.com", DNS_TYPE_A);
	assert_int_equal(dns_parse_query(q_m.b, q_m.n, &q), 0);

	/* CNAME, two A, a CH-class A (ignored), an AAAA in authority, an A in additional */
	answer_start(&m, &q, "API.example.COM", 4, 1, 2);
	rr(&m, 5, 1, "\x03" "cdn" "\xc0\x10", 6);
	v4(a, "203.0.113.7");
	rr(&m, DNS_TYPE_A, 1, a, 4);
	v4(a, "203.0.113.8");
	rr(&m, DNS_TYPE_A, 1, a, 4);
	rr(&m, DNS_TYPE_A, 3, "\x0a\x00\x00\x01", 4);
	v6(a, "2001:db8::1");
	rr(&m, DNS_TYPE_AAAA, 1, a, 16);
	v4(a, "169.254.169.254");
	rr(&m, DNS_TYPE_A, 1, a, 4);
	m.b[m.n++] = 0; /* OPT */
	add16(&m, DNS_TYPE_OPT);
	add16(&m, 1232);
	add16(&m, 0);
	add16(&m, 0);
	add16(&m, 0);
	assert_int_equal(dns_check_answer(m.b, m.n, &q, fam, addrs, 8, &n), 0);
	assert_int_equal(n, 4);
	char s[64];
	static const char *const want[] = { "203.0.113.7", "203.0.113.8", "2001:db8::1",
					    "169.254.169.254" };
	for (size_t i = 0; i < 4; i++) {
		assert_non_null(inet_ntop(fam[i], addrs[i], s, sizeof(s)));
		assert_string_equal(s, want[i]);
	}
	assert_int_equal(fam[2], AF_INET6);

	/* every cut is refused */
	for (size_t k = 0; k < m.n; k++)
		if (dns_check_answer(m.b, k, &q, fam, addrs, 8, &n) != -EBADMSG)
			fail_msg("cut at %zu", k);
	/* more addresses than the caller can check */
	assert_int_equal(dns_check_answer(m.b, m.n, &q, fam, addrs, 3, &n), -EBADMSG);
	assert_int_equal(dns_check_answer(m.b, m.n, &q, fam, addrs, 0, &n), -EBADMSG);
	/* one byte more */
	m.b[m.n] = 0;
	assert_int_equal(dns_check_answer(m.b, m.n + 1, &q, fam, addrs, 8, &n), -EBADMSG);

	/* not the answer to this query */
	struct msg bad = m;
	bad.b[1] ^= 1;
	assert_int_equal(dns_check_answer(bad.b, bad.n, &q, fam, addrs, 8, &n), -EBADMSG);
	bad = m;
	bad.b[2] &= 0x7f; /* QR=0 */
	assert_int_equal(dns_check_answer(bad.b, bad.n, &q, fam, addrs, 8, &n), -EBADMSG);
	bad = m;
	bad.b[2] |= 0x10; /* opcode 2 */
	assert_int_equal(dns_check_answer(bad.b, bad.n, &q, fam, addrs, 8, &n), -EBADMSG);
	bad = m;
	bad.b[14] = 'b'; /* "bpi.example.com" */
	assert_int_equal(dns_check_answer(bad.b, bad.n, &q, fam, addrs, 8, &n), -EBADMSG);
	bad = m;
	bad.b[12 + 17 + 1] = DNS_TYPE_AAAA;
	assert_int_equal(dns_check_answer(bad.b, bad.n, &q, fam, addrs, 8, &n), -EBADMSG);
	bad = m;
	bad.b[12 + 17 + 3] = 3;
	assert_int_equal(dns_check_answer(bad.b, bad.n, &q, fam, addrs, 8, &n), -EBADMSG);
	bad = m;
	bad.b[5] = 2;
	assert_int_equal(dns_check_answer(bad.b, bad.n, &q, fam, addrs, 8, &n), -EBADMSG);
}

static void test_answer_bad_records(void **state)
{
	struct msg q_m, m;
	struct dns_question q;
	int fam[8];
	uint8_t addrs[8][16];
	size_t n = 0;

	query(&q_m, "example.com", DNS_TYPE_A);
	assert_int_equal(dns_parse_query(q_m.b, q_m.n, &q), 0);

	/* an A record of 5 bytes, an AAAA of 4 */
	answer_start(&m, &q, "example.com", 1, 0, 0);
	rr(&m, DNS_TYPE_A, 1, "\x01\x02\x03\x04\x05", 5);
	assert_int_equal(dns_check_answer(m.b, m.n, &q, fam, addrs, 8, &n), -EBADMSG);
	answer_start(&m, &q, "example.com", 1, 0, 0);
	rr(&m, DNS_TYPE_AAAA, 1, "\x01\x02\x03\x04", 4);
	assert_int_equal(dns_check_answer(m.b, m.n, &q, fam, addrs, 8, &n), -EBADMSG);
	/* rdlength past the end */
	answer_start(&m, &q, "example.com", 1, 0, 0);
	rr(&m, DNS_TYPE_A, 1, "\x01\x02\x03\x04", 4);
	m.b[m.n - 5] = 5;
	assert_int_equal(dns_check_answer(m.b, m.n, &q, fam, addrs, 8, &n), -EBADMSG);
	/* a compressed question */
	header(&m, q.id, 0x8180, 1, 0, 0, 0);
	add16(&m, 0xc00c);
	add16(&m, 1);
	add16(&m, 1);
	assert_int_equal(dns_check_answer(m.b, m.n, &q, fam, addrs, 8, &n), -EBADMSG);

	/* pointers: to itself, forward, into the header, a loop of two */
	answer_start(&m, &q, "example.com", 1, 0, 0);
	add16(&m, 0xc000 | (unsigned)m.n);
	add16(&m, 1);
	add16(&m, 1);
	add16(&m, 0);
	add16(&m, 0);
	add16(&m, 4);
	add(&m, "\x01\x02\x03\x04", 4);
	assert_int_equal(dns_check_answer(m.b, m.n, &q, fam, addrs, 8, &n), -EBADMSG);

	answer_start(&m, &q, "example.com", 1, 0, 0);
	add16(&m, 0xc000 | (unsigned)(m.n + 12)); /* the rdata below */
	add16(&m, 16);
	add16(&m, 1);
	add16(&m, 0);
	add16(&m, 0);
	add16(&m, 2);
	add16(&m, 0xc00c);
	assert_int_equal(dns_check_answer(m.b, m.n, &q, fam, addrs, 8, &n), -EBADMSG);

	answer_start(&m, &q, "example.com", 1, 0, 0);
	add16(&m, 0xc002);
	add16(&m, 1);
	add16(&m, 1);
	add16(&m, 0);
	add16(&m, 0);
	add16(&m, 0);
	assert_int_equal(dns_check_answer(m.b, m.n, &q, fam, addrs, 8, &n), -EBADMSG);

	/* a TXT whose rdata holds two names pointing at each other, then a record named by
	 * the second: the chain goes forward once, which is refused */
	answer_start(&m, &q, "example.com", 2, 0, 0);
	size_t a_off = m.n + 12, b_off = a_off + 4;
	add16(&m, 0xc00c);
	add16(&m, 16);
	add16(&m, 1);
	add16(&m, 0);
	add16(&m, 0);
	add16(&m, 8);
	add(&m, "\x01x", 2);
	add16(&m, 0xc000 | (unsigned)b_off);
	add(&m, "\x01y", 2);
	add16(&m, 0xc000 | (unsigned)a_off);
	add16(&m, 0xc000 | (unsigned)b_off);
	add16(&m, 1);
	add16(&m, 1);
	add16(&m, 0);
	add16(&m, 0);
	add16(&m, 0);
	assert_int_equal(dns_check_answer(m.b, m.n, &q, fam, addrs, 8, &n), -EBADMSG);
}

/* A chain of @units backward pointers: "\x01a" + pointer to the previous unit, in a TXT's
 * rdata, and a last record whose name points at the last unit. */
static int chain(const struct dns_question *q, size_t units, size_t label)
{
	static struct msg m;
	int fam[1];
	uint8_t addrs[1][16];
	size_t n, prev = 12;
	uint8_t l[64];

	memset(l, 'a', sizeof(l));
	answer_start(&m, q, "example.com", 2, 0, 0);
	add16(&m, 0xc00c);
	add16(&m, 16);
	add16(&m, 1);
	add16(&m, 0);
	add16(&m, 0);
	add16(&m, (unsigned)(units * (3 + label)));
	for (size_t i = 0; i < units; i++) {
		size_t here = m.n;
		m.b[m.n++] = (uint8_t)label;
		add(&m, l, label);
		add16(&m, 0xc000 | (unsigned)prev);
		prev = here;
	}
	add16(&m, 0xc000 | (unsigned)prev);
	add16(&m, 1);
	add16(&m, 1);
	add16(&m, 0);
	add16(&m, 0);
	add16(&m, 4);
	add(&m, "\xcb\x00\x71\x07", 4);
	return dns_check_answer(m.b, m.n, q, fam, addrs, 1, &n);
}

static void test_answer_hops(void **state)
{
	struct msg q_m;
	struct dns_question q;

	query(&q_m, "example.com", DNS_TYPE_A);
	assert_int_equal(dns_parse_query(q_m.b, q_m.n, &q), 0);
	/* hops: the record's own pointer, one per unit */
	assert_int_equal(chain(&q, DNS_PTR_HOPS_MAX - 1, 1), 0);
	assert_int_equal(chain(&q, DNS_PTR_HOPS_MAX, 1), -EBADMSG);
	/* expanded length: 13 (example.com) + 4 units of 1+60 = 257 > 255 */
	assert_int_equal(chain(&q, 3, 60), 0);
	assert_int_equal(chain(&q, 4, 60), -EBADMSG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_query_good),
		cmocka_unit_test(test_query_bad),
		cmocka_unit_test(test_build_error),
		cmocka_unit_test(test_answer),
		cmocka_unit_test(test_answer_bad_records),
		cmocka_unit_test(test_answer_hops),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
