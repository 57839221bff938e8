/* libFuzzer target for the chunked body decoder: an upload's body from any client of the
 * files API.
 *
 * The input's first byte picks where the rest is cut in two; both halves are fed in turn.
 * Checks beyond "no crash": the decoded bytes and where the body ends are the same as when
 * the whole is fed at once, no more bytes are taken than given, and the data comes from the
 * input only. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/chunked.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct out {
	const char *in;
	size_t in_len;
	char buf[1 << 16];
	size_t len;
};

static int collect(void *arg, const char *p, size_t n)
{
	struct out *o = arg;
	if (p < o->in || p + n > o->in + o->in_len)
		abort();
	size_t k = n < sizeof(o->buf) - o->len ? n : sizeof(o->buf) - o->len;
	memcpy(o->buf + o->len, p, k);
	o->len += k;
	return 0;
}

/* The input fed in two parts cut at @cut: what was taken in all, or -1 on an error. */
static ssize_t decode(const char *in, size_t n, size_t cut, struct out *o, struct chunked *c)
{
	chunked_init(c);
	o->in = in;
	o->in_len = n;
	o->len = 0;
	ssize_t a = chunked_feed(c, in, cut, collect, o);
	if (a < 0)
		return -1;
	if ((size_t)a > cut)
		abort();
	if (chunked_done(c))
		return a;
	ssize_t b = chunked_feed(c, in + cut, n - cut, collect, o);
	if (b > (ssize_t)(n - cut))
		abort();
	return b < 0 ? -1 : a + b;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct out whole, split;
	struct chunked c1, c2;
	if (size < 1)
		return 0;
	const char *in = (const char *)data + 1;
	size_t n = size - 1, cut = n ? data[0] % (n + 1) : 0;
	ssize_t t1 = decode(in, n, n, &whole, &c1);
	ssize_t t2 = decode(in, n, cut, &split, &c2);
	/* A line over CHUNKED_LINE_MAX may fail at a cut that the whole would reach too. */
	if (t1 >= 0 && t2 >= 0 &&
	    (t1 != t2 || whole.len != split.len || memcmp(whole.buf, split.buf, whole.len) ||
	     chunked_done(&c1) != chunked_done(&c2)))
		abort();
	if ((t1 < 0) != (t2 < 0))
		abort();
	return 0;
}
