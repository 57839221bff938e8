/* DNS messages for the sandbox's resolver, the DNS filter: read a query from a sandbox,
 * answer REFUSED/NXDOMAIN without asking anyone, and check an upstream answer before it is
 * relayed back (same id and question; the addresses in it, for the rebinding check).
 *
 *     struct dns_question q;
 *     if (dns_parse_query(pkt, n, &q) < 0)
 *             drop it;                                  // not one plain question
 *     if (q.qclass != DNS_CLASS_IN || !egress_match_dns(policy, q.name))
 *             send(dns_build_error(pkt, n, &q, DNS_RCODE_REFUSED, out, sizeof(out)));
 *     ... forward pkt[0..q.question_end) (plus its OPT record) upstream, then
 *     dns_check_answer(ans, alen, &q, fams, addrs, 32, &naddrs) and refuse any blocked one.
 *
 * Wire format of RFC 1035 4.1 (for TCP, the message after its 2-byte length). All input is
 * hostile; the functions are pure and never read past the length they are given.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define DNS_HEADER_SIZE 12
#define DNS_NAME_MAX 255    /* wire form, root label included */
#define DNS_PTR_HOPS_MAX 32 /* compression pointers followed for one name */

#define DNS_CLASS_IN 1
#define DNS_TYPE_A 1
#define DNS_TYPE_AAAA 28
#define DNS_TYPE_OPT 41
#define DNS_RCODE_SERVFAIL 2
#define DNS_RCODE_NXDOMAIN 3
#define DNS_RCODE_REFUSED 5

struct dns_question {
	uint16_t id;
	char name[256]; /* presentation form, lowercase, no trailing dot; "" for the root */
	uint16_t qtype, qclass;
	size_t question_end; /* offset just past the question */
};

/* Parses a query: QR=0, opcode QUERY, TC=0, exactly one question and no answer or authority
 * records, at most one additional record which must be an EDNS OPT, nothing after it. The
 * question name has no compression pointers, labels of 1-63 bytes, at most DNS_NAME_MAX
 * bytes, LDH with '_' allowed (SRV-style labels). Any type and class: the caller decides.
 * Returns 0 and fills @ret, or -EBADMSG. */
int dns_parse_query(const uint8_t *buf, size_t len, struct dns_question *ret);

/* Builds into @out the reply to @query (@qlen bytes, parsed into @q): its header and
 * question with QR=1, RA=1, RD as asked and @rcode, no records. @out may be @query. Returns
 * the length, -EINVAL for a bad @rcode or a @q that does not belong to @qlen, or -ENOBUFS. */
ssize_t dns_build_error(const uint8_t *query, size_t qlen, const struct dns_question *q,
			int rcode, uint8_t *out, size_t cap);

/* Checks an upstream answer to @q: QR=1, opcode QUERY, the same id and question (name
 * compared case-insensitively), every record in bounds, compression pointers only backward
 * (so no loops) and at most DNS_PTR_HOPS_MAX per name, nothing after the last record.
 * Extracts the A and AAAA (class IN) addresses of all three sections, in order, into
 * @ret_families (AF_INET/AF_INET6) and @ret_addrs (4 or 16 bytes used), @ret_n of them.
 * Returns 0, or -EBADMSG when malformed or when there are more than @max addresses (the
 * caller could not check them all: refuse). */
int dns_check_answer(const uint8_t *ans, size_t alen, const struct dns_question *q,
		     int *ret_families, uint8_t (*ret_addrs)[16], size_t max, size_t *ret_n);
