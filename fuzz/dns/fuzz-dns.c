/* libFuzzer target for the DNS filter's message code: a query from inside a sandbox, and an
 * answer from upstream (which a sandbox can shape by querying a name it controls).
 *
 * Input: bytes 0-1 are the query's length L (big endian), then L bytes of query, then the
 * answer. When the query parses, an error reply is built for it (which must be a valid
 * answer to it, with no addresses, and not a query) and the answer is checked against it;
 * when it does not, the answer is checked against a fixed question. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "net/dnsmsg.h"
#include "policy/egress.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t reply[65536];

static void check_query(const uint8_t *q, size_t qlen, const struct dns_question *dq)
{
	struct dns_question again;
	int fam[1];
	uint8_t addrs[1][16];
	size_t n = 1;

	if (dq->question_end > qlen || dq->question_end < DNS_HEADER_SIZE + 5 ||
	    strlen(dq->name) > EGRESS_NAME_MAX)
		abort();
	(void)egress_match_dns(NULL, dq->name);
	ssize_t len = dns_build_error(q, qlen, dq, DNS_RCODE_REFUSED, reply, sizeof(reply));
	if (len != (ssize_t)dq->question_end)
		abort();
	if (dns_check_answer(reply, (size_t)len, dq, fam, addrs, 1, &n) != 0 || n != 0)
		abort();
	if (dns_parse_query(reply, (size_t)len, &again) != -EBADMSG)
		abort();
	if (dns_build_error(q, qlen, dq, DNS_RCODE_REFUSED, reply, (size_t)len - 1) != -ENOBUFS)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct dns_question fixed = {
		.id = 0x1234, .name = "example.com", .qtype = DNS_TYPE_A, .qclass = DNS_CLASS_IN,
		.question_end = 29,
	};
	struct dns_question q;
	int fam[8];
	uint8_t addrs[8][16];
	size_t n = 99;

	if (size < 2)
		return 0;
	size_t qlen = (size_t)data[0] << 8 | data[1];
	if (qlen > size - 2)
		qlen = size - 2;
	const uint8_t *query = data + 2, *ans = query + qlen;
	size_t alen = size - 2 - qlen;

	const struct dns_question *dq = &fixed;
	if (dns_parse_query(query, qlen, &q) == 0) {
		check_query(query, qlen, &q);
		dq = &q;
	}
	int r = dns_check_answer(ans, alen, dq, fam, addrs, 8, &n);
	if (r != 0 && r != -EBADMSG)
		abort();
	if (r == 0) {
		if (n > 8)
			abort();
		for (size_t i = 0; i < n; i++)
			if (fam[i] != AF_INET && fam[i] != AF_INET6)
				abort();
	}
	return 0;
}
