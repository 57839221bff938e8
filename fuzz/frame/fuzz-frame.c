/* libFuzzer target for the host<->agent codec: the host must survive anything an agent sends,
 * and the agent anything a (buggy) host sends.
 *
 * Input: byte 0 picks the mode. Even: the rest is a byte stream for a decoder of direction
 * (byte 0 & 2 ? to-host : to-agent), fed in pieces whose sizes come from byte 1; every frame
 * decoded is parsed and, when it parses, rebuilt and compared. Odd: bytes 1-2 are a frame type
 * and the rest its payload, straight into frame_msg_parse(). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct frame_decoder dec;
static struct frame_spawn msg; /* the largest payload struct */
static uint8_t rebuilt[FRAME_MAX_FRAME];

static void check_frame(const struct frame *f)
{
	if (frame_msg_parse(f->type, f->payload, f->len, &msg) < 0)
		return;
	/* what parses must rebuild to a frame that parses to the same length or less: the
	 * builder omits zero-valued optional fields */
	ssize_t n = frame_build(rebuilt, sizeof(rebuilt), f->type, f->channel, &msg);
	if (n < 0 || (size_t)n > FRAME_HDR_SIZE + f->len)
		abort();
	if (frame_msg_parse(f->type, rebuilt + FRAME_HDR_SIZE, (size_t)n - FRAME_HDR_SIZE, &msg) < 0)
		abort();
}

static void stream(const uint8_t *data, size_t size, int dir, uint8_t step)
{
	struct frame f;
	size_t piece = step ? step : 1;

	frame_decoder_init(&dec, dir);
	while (size > 0) {
		size_t n = frame_decoder_feed(&dec, data, size < piece ? size : piece);
		data += n;
		size -= n;
		int r;
		while ((r = frame_decoder_next(&dec, &f)) == 1)
			check_frame(&f);
		if (r < 0)
			return;
		if (n == 0)
			abort(); /* the decoder must always make progress */
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 3)
		return 0;
	if (data[0] & 1) {
		uint16_t type = (uint16_t)(data[1] | data[2] << 8);
		if (frame_msg_size_of(type) >= 0)
			(void)frame_msg_parse(type, data + 3, size - 3, &msg);
		return 0;
	}
	stream(data + 2, size - 2, (data[0] & 2) ? FRAME_TO_HOST : FRAME_TO_AGENT, data[1]);
	return 0;
}
