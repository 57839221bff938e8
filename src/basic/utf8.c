#include <string.h>

#include "basic/cleanup.h"
#include "basic/utf8.h"

int utf8_seq(const uint8_t *p, size_t left)
{
	/* Lead byte ranges, the sequence's length and the range of its second byte (RFC 3629
	 * table 3-7): the second byte's range is what excludes overlongs and surrogates. */
	static const struct {
		uint8_t lo, hi, len, lo2, hi2;
	} leads[] = {
		{0x00, 0x7f, 1, 0, 0},	     {0xc2, 0xdf, 2, 0x80, 0xbf}, {0xe0, 0xe0, 3, 0xa0, 0xbf},
		{0xe1, 0xec, 3, 0x80, 0xbf}, {0xed, 0xed, 3, 0x80, 0x9f}, {0xee, 0xef, 3, 0x80, 0xbf},
		{0xf0, 0xf0, 4, 0x90, 0xbf}, {0xf1, 0xf3, 4, 0x80, 0xbf}, {0xf4, 0xf4, 4, 0x80, 0x8f},
	};
	for (size_t i = 0; i < ELEMENTSOF(leads); i++) {
		if (p[0] < leads[i].lo || p[0] > leads[i].hi)
			continue;
		for (int k = 1; k < leads[i].len; k++) {
			if ((size_t)k >= left)
				return 0;
			uint8_t lo = k == 1 ? leads[i].lo2 : 0x80, hi = k == 1 ? leads[i].hi2 : 0xbf;
			if (p[k] < lo || p[k] > hi)
				return -1;
		}
		return leads[i].len;
	}
	return -1;
}

size_t utf8_clean(const uint8_t *in, size_t n, char *out, bool nul_ok, size_t *ret_cut)
{
	size_t k = 0;
	if (ret_cut)
		*ret_cut = 0;
	for (size_t i = 0; i < n;) {
		int len = in[i] || nul_ok ? utf8_seq(in + i, n - i) : -1;
		if (len == 0 && ret_cut) {
			*ret_cut = n - i;
			break;
		}
		if (len <= 0) {
			memcpy(out + k, "\xef\xbf\xbd", 3);
			k += 3;
			i++;
			continue;
		}
		memcpy(out + k, in + i, len);
		k += len;
		i += len;
	}
	return k;
}
