/* libFuzzer target for the Connect envelope reader: the body of every streaming envd call,
 * from any client of --e2b-listen, read before the sandbox's token is checked.
 *
 * Checks beyond "no crash": each envelope lies inside the input, past its 5-byte head, within
 * the limit; a body taken as one message is exactly one envelope, never compressed or END. */
#include <stdint.h>
#include <stdlib.h>

#include "daemon/connect.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct connect_frame f;
	size_t off = 0;
	int n;
	while ((n = connect_envelope_next(data + off, size - off, 4096, &f)) > 0) {
		if (f.data != data + off + CONNECT_ENVELOPE_HEAD || f.len > 4096 ||
		    off + (size_t)n > size || (size_t)n != CONNECT_ENVELOPE_HEAD + f.len)
			abort();
		off += (size_t)n;
	}
	if (connect_envelope_single(data, size, CONNECT_MAX_MESSAGE, &f) == 0 &&
	    (CONNECT_ENVELOPE_HEAD + (size_t)f.len != size || f.flags != 0))
		abort();
	uint8_t head[CONNECT_ENVELOPE_HEAD];
	connect_envelope_head(head, 0, (uint32_t)size);
	return 0;
}
