/* DNS message parsing for the DNS filter. See dnsmsg.h; RFC 1035 4.1, RFC 6891 6 (OPT). */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>

#include "net/dnsmsg.h"
#include "policy/egress.h"

#define FLAG_QR 0x80 /* in byte 2 */
#define FLAG_TC 0x02
#define FLAG_RD 0x01
#define FLAG_RA 0x80 /* in byte 3 */

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static unsigned opcode(const uint8_t *m)
{
	return (m[2] >> 3) & 0xf;
}

static bool qname_char(uint8_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '_';
}

/* Reads the uncompressed name at *@off into @out (lowercase, no trailing dot) and moves
 * *@off past it. */
static int read_qname(const uint8_t *m, size_t len, size_t *off, char out[static 256])
{
	size_t o = *off, n = 0, wire = 0;

	for (;;) {
		if (o >= len)
			return -EBADMSG;
		uint8_t l = m[o++];
		wire += 1u + l;
		if ((l & 0xc0) || wire > DNS_NAME_MAX || len - o < l)
			return -EBADMSG; /* a pointer, an extended label type, too long, cut */
		if (l == 0)
			break;
		if (n > 0)
			out[n++] = '.';
		for (size_t i = 0; i < l; i++) {
			uint8_t c = m[o + i];
			if (!qname_char(c))
				return -EBADMSG;
			out[n++] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
		}
		o += l;
	}
	out[n] = '\0';
	if (n > 0 && !egress_name_valid(out, n, true))
		return -EBADMSG;
	*off = o;
	return 0;
}

/* Checks the possibly compressed name at *@off and moves *@off past it. Pointers must point
 * backward, past the header, which rules out loops; the hop limit bounds the work anyway. */
static int skip_name(const uint8_t *m, size_t len, size_t *off)
{
	size_t o = *off, wire = 0, end = 0;
	unsigned hops = 0;

	for (;;) {
		if (o >= len)
			return -EBADMSG;
		uint8_t l = m[o];
		if ((l & 0xc0) == 0xc0) {
			if (len - o < 2)
				return -EBADMSG;
			size_t target = (size_t)(l & 0x3f) << 8 | m[o + 1];
			if (target >= o || target < DNS_HEADER_SIZE || ++hops > DNS_PTR_HOPS_MAX)
				return -EBADMSG;
			if (!end)
				end = o + 2;
			o = target;
			continue;
		}
		wire += 1u + l;
		if ((l & 0xc0) || wire > DNS_NAME_MAX || len - o - 1 < l)
			return -EBADMSG;
		o += 1u + l;
		if (l == 0)
			break;
	}
	*off = end ? end : o;
	return 0;
}

/* The EDNS OPT record of a query: root name, type OPT, options in bounds, and the end. */
static int check_opt(const uint8_t *m, size_t len, size_t off)
{
	if (len - off < 11 || m[off] != 0 || get16(m + off + 1) != DNS_TYPE_OPT)
		return -EBADMSG;
	size_t rdlen = get16(m + off + 9);
	off += 11;
	if (len - off != rdlen)
		return -EBADMSG;
	while (off < len) {
		if (len - off < 4 || len - off - 4 < get16(m + off + 2))
			return -EBADMSG;
		off += 4u + get16(m + off + 2);
	}
	return 0;
}

int dns_parse_query(const uint8_t *buf, size_t len, struct dns_question *ret)
{
	size_t off = DNS_HEADER_SIZE;
	struct dns_question q = {};

	if (len < DNS_HEADER_SIZE || (buf[2] & (FLAG_QR | FLAG_TC)) || opcode(buf) != 0 ||
	    get16(buf + 4) != 1 || get16(buf + 6) != 0 || get16(buf + 8) != 0 ||
	    get16(buf + 10) > 1)
		return -EBADMSG;
	if (read_qname(buf, len, &off, q.name) < 0 || len - off < 4)
		return -EBADMSG;
	q.id = get16(buf);
	q.qtype = get16(buf + off);
	q.qclass = get16(buf + off + 2);
	q.question_end = off + 4;
	if (get16(buf + 10) == 0 ? len != q.question_end : check_opt(buf, len, q.question_end) < 0)
		return -EBADMSG;
	*ret = q;
	return 0;
}

ssize_t dns_build_error(const uint8_t *query, size_t qlen, const struct dns_question *q,
			int rcode, uint8_t *out, size_t cap)
{
	size_t n = q->question_end;
	uint8_t rd;

	if (rcode < 0 || rcode > 15 || n < DNS_HEADER_SIZE + 5 || n > qlen)
		return -EINVAL;
	if (cap < n)
		return -ENOBUFS;
	rd = query[2] & FLAG_RD;
	/* the question as the client sent it: a stub that randomises case (0x20) checks it */
	memmove(out, query, n);
	put16(out, q->id);
	out[2] = (uint8_t)(FLAG_QR | rd);
	out[3] = (uint8_t)(FLAG_RA | rcode);
	put16(out + 4, 1);
	put16(out + 6, 0);
	put16(out + 8, 0);
	put16(out + 10, 0);
	return (ssize_t)n;
}

struct addrs {
	int *families;
	uint8_t (*addrs)[16];
	size_t max, n;
};

/* One resource record at *@off: bounds, and its address if it is IN A or IN AAAA. */
static int check_rr(const uint8_t *m, size_t len, size_t *off, struct addrs *a)
{
	if (skip_name(m, len, off) < 0 || len - *off < 10)
		return -EBADMSG;
	const uint8_t *rr = m + *off;
	uint16_t type = get16(rr), class = get16(rr + 2), rdlen = get16(rr + 8);
	*off += 10;
	if (len - *off < rdlen)
		return -EBADMSG;
	*off += rdlen;
	if (class != DNS_CLASS_IN || (type != DNS_TYPE_A && type != DNS_TYPE_AAAA))
		return 0;
	if (rdlen != (type == DNS_TYPE_A ? 4 : 16) || a->n >= a->max)
		return -EBADMSG;
	a->families[a->n] = type == DNS_TYPE_A ? AF_INET : AF_INET6;
	memset(a->addrs[a->n], 0, 16);
	memcpy(a->addrs[a->n], rr + 10, rdlen);
	a->n++;
	return 0;
}

int dns_check_answer(const uint8_t *ans, size_t alen, const struct dns_question *q,
		     int *ret_families, uint8_t (*ret_addrs)[16], size_t max, size_t *ret_n)
{
	struct addrs a = { ret_families, ret_addrs, max, 0 };
	char name[256];
	size_t off = DNS_HEADER_SIZE;

	if (alen < DNS_HEADER_SIZE || get16(ans) != q->id || !(ans[2] & FLAG_QR) ||
	    opcode(ans) != 0 || get16(ans + 4) != 1)
		return -EBADMSG;
	if (read_qname(ans, alen, &off, name) < 0 || alen - off < 4 ||
	    strcmp(name, q->name) != 0 || get16(ans + off) != q->qtype ||
	    get16(ans + off + 2) != q->qclass)
		return -EBADMSG;
	off += 4;
	size_t records = (size_t)get16(ans + 6) + get16(ans + 8) + get16(ans + 10);
	for (size_t i = 0; i < records; i++)
		if (check_rr(ans, alen, &off, &a) < 0)
			return -EBADMSG;
	if (off != alen)
		return -EBADMSG;
	*ret_n = a.n;
	return 0;
}
