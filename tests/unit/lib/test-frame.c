/* Codec tests: round trips, incremental decoding, and every limit the parser enforces. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/frame.h"

static uint8_t *build(uint16_t type, uint32_t chan, const void *msg, size_t *ret_len)
{
	ssize_t n = frame_build_size(type, msg);
	assert_true(n >= (ssize_t)FRAME_HDR_SIZE);
	uint8_t *b = malloc((size_t)n);
	assert_non_null(b);
	assert_int_equal(frame_build(b, (size_t)n, type, chan, msg), n);
	*ret_len = (size_t)n;
	return b;
}

/* Decodes exactly one frame from @b and parses its payload into @msg. */
static void decode_one(int dir, const uint8_t *b, size_t n, struct frame *f, void *msg)
{
	static struct frame_decoder d;
	frame_decoder_init(&d, dir);
	assert_int_equal(frame_decoder_feed(&d, b, n), n);
	assert_int_equal(frame_decoder_next(&d, f), 1);
	assert_int_equal(frame_decoder_pending(&d), 0);
	assert_int_equal(frame_msg_parse(f->type, f->payload, f->len, msg), 0);
}

static void test_spawn_roundtrip(void **state)
{
	static struct frame_spawn in, out;
	struct frame f;
	size_t n;

	memset(&in, 0, sizeof(in));
	in.argv[0] = "sh";
	in.argv[1] = "-c";
	in.argv[2] = "";
	in.argc = 3;
	in.envp[0] = "PATH=/bin";
	in.envc = 1;
	in.cwd = "/tmp";
	in.user = FRAME_USER_ROOT;
	in.want_stdin = 1;
	in.timeout_ms = 1ull << 40;
	uint8_t *b = build(FRAME_SPAWN, 77, &in, &n);
	decode_one(FRAME_TO_AGENT, b, n, &f, &out);
	assert_int_equal(f.type, FRAME_SPAWN);
	assert_int_equal(f.channel, 77);
	assert_int_equal(out.argc, 3);
	assert_string_equal(out.argv[0], "sh");
	assert_string_equal(out.argv[2], "");
	assert_null(out.argv[3]);
	assert_int_equal(out.envc, 1);
	assert_string_equal(out.envp[0], "PATH=/bin");
	assert_null(out.envp[1]);
	assert_string_equal(out.cwd, "/tmp");
	assert_int_equal(out.user, FRAME_USER_ROOT);
	assert_int_equal(out.want_stdin, 1);
	assert_true(out.timeout_ms == 1ull << 40);
	free(b);
}

static void test_reply_roundtrips(void **state)
{
	struct frame f;
	size_t n;
	uint8_t *b;

	struct frame_exit e = {.code = 3, .signal = 0, .timed_out = 1}, e2;
	b = build(FRAME_EXIT, 5, &e, &n);
	decode_one(FRAME_TO_HOST, b, n, &f, &e2);
	assert_memory_equal(&e, &e2, sizeof(e));
	free(b);

	struct frame_file_info fi = {.name = "a/b", .target = "../x", .type = FRAME_FT_SYMLINK,
				     .mode = 0777, .size = 1ull << 33, .mtime_ns = 123456789012345ull,
				     .uid = 1000, .gid = 1000}, fo;
	b = build(FRAME_FILE_INFO, 6, &fi, &n);
	decode_one(FRAME_TO_HOST, b, n, &f, &fo);
	assert_string_equal(fo.name, "a/b");
	assert_string_equal(fo.target, "../x");
	assert_true(fo.size == 1ull << 33 && fo.mtime_ns == 123456789012345ull);
	assert_int_equal(fo.type, FRAME_FT_SYMLINK);
	assert_int_equal(fo.uid, 1000);
	free(b);

	struct frame_error er = {.errnum = ENOENT, .message = "nope"}, er2;
	b = build(FRAME_ERROR, 7, &er, &n);
	decode_one(FRAME_TO_HOST, b, n, &f, &er2);
	assert_int_equal(er2.errnum, ENOENT);
	assert_string_equal(er2.message, "nope");
	free(b);

	struct frame_data d = {.data = (const uint8_t *)"hello", .len = 5}, d2;
	b = build(FRAME_STDOUT, 8, &d, &n);
	assert_int_equal(n, FRAME_HDR_SIZE + 5);
	decode_one(FRAME_TO_HOST, b, n, &f, &d2);
	assert_int_equal(d2.len, 5);
	assert_memory_equal(d2.data, "hello", 5);
	free(b);

	b = build(FRAME_PONG, 9, NULL, &n);
	assert_int_equal(n, FRAME_HDR_SIZE);
	decode_one(FRAME_TO_HOST, b, n, &f, NULL);
	assert_int_equal(f.type, FRAME_PONG);
	free(b);

	struct frame_file w = {.path = "/x", .mode = 0600, .flags = FRAME_WRITE_CREATE,
			       .offset = 4096, .data = (const uint8_t *)"\0\1\2", .data_len = 3}, w2;
	b = build(FRAME_FILE_WRITE, 10, &w, &n);
	decode_one(FRAME_TO_AGENT, b, n, &f, &w2);
	assert_string_equal(w2.path, "/x");
	assert_int_equal(w2.mode, 0600);
	assert_int_equal(w2.offset, 4096);
	assert_int_equal(w2.data_len, 3);
	assert_memory_equal(w2.data, "\0\1\2", 3);
	free(b);
}

/* Issue 16's frames: a PTY's SPAWN and RESIZE, a watch's events, a port's bytes, STATFS. */
static void test_pty_watch_port_frames(void **state)
{
	static struct frame_spawn sp, sp2;
	struct frame f;
	size_t n;
	uint8_t *b;

	memset(&sp, 0, sizeof(sp));
	sp.argv[0] = "bash";
	sp.argc = 1;
	sp.cols = 132;
	sp.rows = 43;
	b = build(FRAME_SPAWN, 1, &sp, &n);
	decode_one(FRAME_TO_AGENT, b, n, &f, &sp2);
	assert_int_equal(sp2.cols, 132);
	assert_int_equal(sp2.rows, 43);
	free(b);

	struct frame_winsize w = {.cols = 80, .rows = 24}, w2;
	b = build(FRAME_RESIZE, 2, &w, &n);
	decode_one(FRAME_TO_AGENT, b, n, &f, &w2);
	assert_memory_equal(&w, &w2, sizeof(w));
	free(b);

	struct frame_watch_event ev = {.name = "/home/user/a\nb", .type = FRAME_WATCH_EV_CREATE},
				 ev2;
	b = build(FRAME_WATCH_EVENT, 3, &ev, &n);
	decode_one(FRAME_TO_HOST, b, n, &f, &ev2);
	assert_string_equal(ev2.name, "/home/user/a\nb");
	assert_int_equal(ev2.type, FRAME_WATCH_EV_CREATE);
	free(b);
	/* NAME and TYPE are required: an event without a path is malformed */
	struct frame_watch_event noname = {.type = FRAME_WATCH_EV_WRITE};
	assert_true(frame_build_size(FRAME_WATCH_EVENT, &noname) < 0);

	struct frame_port p = {.port = 8080}, p2;
	b = build(FRAME_PORT_OPEN, 4, &p, &n);
	decode_one(FRAME_TO_AGENT, b, n, &f, &p2);
	assert_int_equal(p2.port, 8080);
	free(b);

	struct frame_data d = {.data = (const uint8_t *)"GET /", .len = 5}, d2;
	b = build(FRAME_PORT_WRITE, 5, &d, &n);
	decode_one(FRAME_TO_AGENT, b, n, &f, &d2);
	assert_memory_equal(d2.data, "GET /", 5);
	free(b);
	b = build(FRAME_PORT_DATA, 5, &d, &n);
	decode_one(FRAME_TO_HOST, b, n, &f, &d2);
	assert_int_equal(f.type, FRAME_PORT_DATA);
	free(b);

	struct frame_fs_usage u = {.total = 4ull << 30, .used = 1ull << 20}, u2;
	b = build(FRAME_FS_USAGE, 6, &u, &n);
	decode_one(FRAME_TO_HOST, b, n, &f, &u2);
	assert_true(u2.total == 4ull << 30 && u2.used == 1ull << 20);
	free(b);

	/* directions: the agent never sends PORT_WRITE, the host never PORT_DATA */
	assert_int_equal(frame_type_dir(FRAME_PORT_WRITE), FRAME_TO_AGENT);
	assert_int_equal(frame_type_dir(FRAME_PORT_DATA), FRAME_TO_HOST);
	assert_int_equal(frame_type_dir(FRAME_WATCH_EVENT), FRAME_TO_HOST);
	assert_int_equal(frame_type_dir(FRAME_RESIZE), FRAME_TO_AGENT);
}

static void test_header_layout(void **state)
{
	struct frame_signal s = {.signo = 9};
	size_t n;
	uint8_t *b = build(FRAME_SIGNAL, 0x01020304, &s, &n);
	/* u32 len, u16 type, u16 flags, u32 channel, then TLV (u16 tag, u32 len, value) */
	static const uint8_t want[] = {10, 0, 0, 0, 0x13, 0, 0, 0, 4, 3, 2, 1,
				       FRAME_TAG_SIGNO, 0, 4, 0, 0, 0, 9, 0, 0, 0};
	assert_int_equal(n, sizeof(want));
	assert_memory_equal(b, want, sizeof(want));
	free(b);
}

static void test_decoder_byte_at_a_time(void **state)
{
	static struct frame_decoder d;
	struct frame_signal s = {.signo = 15}, s2;
	struct frame_data data = {.data = (const uint8_t *)"abc", .len = 3};
	size_t n1, n2, n3;
	uint8_t *b1 = build(FRAME_SIGNAL, 1, &s, &n1);
	uint8_t *b2 = build(FRAME_PING, 2, NULL, &n2);
	uint8_t *b3 = build(FRAME_STDIN, 3, &data, &n3);
	uint8_t all[256];
	size_t total = n1 + n2 + n3, got = 0;
	struct frame f;

	memcpy(all, b1, n1);
	memcpy(all + n1, b2, n2);
	memcpy(all + n1 + n2, b3, n3);
	frame_decoder_init(&d, FRAME_TO_AGENT);
	for (size_t i = 0; i < total; i++) {
		assert_int_equal(frame_decoder_feed(&d, all + i, 1), 1);
		int r;
		while ((r = frame_decoder_next(&d, &f)) == 1) {
			got++;
			assert_int_equal(f.channel, got);
			if (got == 1) {
				assert_int_equal(i, n1 - 1);
				assert_int_equal(frame_msg_parse(f.type, f.payload, f.len, &s2), 0);
				assert_int_equal(s2.signo, 15);
			} else if (got == 3) {
				assert_int_equal(f.len, 3);
				assert_memory_equal(f.payload, "abc", 3);
			}
		}
		assert_int_equal(r, 0);
	}
	assert_int_equal(got, 3);
	free(b1);
	free(b2);
	free(b3);
}

static void test_decoder_max_frame(void **state)
{
	static struct frame_decoder d;
	uint8_t *big = calloc(1, FRAME_MAX_PAYLOAD);
	struct frame_data data = {.data = big, .len = FRAME_MAX_PAYLOAD};
	struct frame f;
	size_t n;
	uint8_t *b = build(FRAME_STDOUT, 1, &data, &n);
	uint8_t *b2;
	size_t n2;

	b2 = build(FRAME_PONG, 2, NULL, &n2);
	frame_decoder_init(&d, FRAME_TO_HOST);
	/* a second frame behind a maximal one waits until the first is taken */
	assert_int_equal(frame_decoder_feed(&d, b, n), n);
	assert_int_equal(frame_decoder_feed(&d, b2, n2), 0);
	assert_int_equal(frame_decoder_next(&d, &f), 1);
	assert_int_equal(f.len, FRAME_MAX_PAYLOAD);
	assert_int_equal(frame_decoder_feed(&d, b2, n2), n2);
	assert_int_equal(frame_decoder_next(&d, &f), 1);
	assert_int_equal(f.type, FRAME_PONG);
	assert_int_equal(frame_decoder_next(&d, &f), 0);

	/* one byte more is not even built */
	data.len = FRAME_MAX_PAYLOAD + 1;
	assert_int_equal(frame_build_size(FRAME_STDOUT, &data), -E2BIG);
	free(b);
	free(b2);
	free(big);
}

static int decode_raw(int dir, const uint8_t *b, size_t n)
{
	static struct frame_decoder d;
	struct frame f;
	frame_decoder_init(&d, dir);
	frame_decoder_feed(&d, b, n);
	return frame_decoder_next(&d, &f);
}

static void test_decoder_rejects(void **state)
{
	uint8_t h[FRAME_HDR_SIZE];

	/* oversized length: refused from the header alone */
	frame_hdr_write(h, FRAME_STDOUT, 1, FRAME_MAX_PAYLOAD + 1);
	assert_int_equal(decode_raw(FRAME_TO_HOST, h, sizeof(h)), -EMSGSIZE);
	frame_hdr_write(h, FRAME_STDOUT, 1, UINT32_MAX);
	assert_int_equal(decode_raw(FRAME_TO_HOST, h, sizeof(h)), -EMSGSIZE);
	/* unknown type */
	frame_hdr_write(h, 0x7777, 1, 0);
	assert_int_equal(decode_raw(FRAME_TO_HOST, h, sizeof(h)), -EPROTO);
	assert_int_equal(decode_raw(FRAME_TO_AGENT, h, sizeof(h)), -EPROTO);
	/* a known type in the wrong direction */
	frame_hdr_write(h, FRAME_SPAWN, 1, 0);
	assert_int_equal(decode_raw(FRAME_TO_HOST, h, sizeof(h)), -EPROTO);
	frame_hdr_write(h, FRAME_EXIT, 1, 0);
	assert_int_equal(decode_raw(FRAME_TO_AGENT, h, sizeof(h)), -EPROTO);
	/* flags must be zero */
	frame_hdr_write(h, FRAME_PING, 1, 0);
	h[6] = 1;
	assert_int_equal(decode_raw(FRAME_TO_AGENT, h, sizeof(h)), -EPROTO);
	/* an error is sticky */
	static struct frame_decoder d;
	struct frame f;
	frame_decoder_init(&d, FRAME_TO_AGENT);
	frame_hdr_write(h, 0x7777, 1, 0);
	frame_decoder_feed(&d, h, sizeof(h));
	assert_int_equal(frame_decoder_next(&d, &f), -EPROTO);
	assert_int_equal(frame_decoder_next(&d, &f), -EPROTO);
	/* short input is not an error */
	assert_int_equal(decode_raw(FRAME_TO_AGENT, h, 5), 0);
}

static size_t tlv(uint8_t *p, uint16_t tag, uint32_t len, const void *v, size_t vlen)
{
	p[0] = (uint8_t)tag;
	p[1] = (uint8_t)(tag >> 8);
	for (int i = 0; i < 4; i++)
		p[2 + i] = (uint8_t)(len >> (8 * i));
	memcpy(p + 6, v, vlen);
	return 6 + vlen;
}

static void test_payload_rejects(void **state)
{
	static struct frame_file ff;
	static struct frame_spawn sp;
	struct frame_signal sig;
	uint8_t p[64];
	size_t n;

	/* truncated TLV header */
	n = tlv(p, FRAME_TAG_SIGNO, 4, "\x09\0\0\0", 4);
	assert_int_equal(frame_msg_parse(FRAME_SIGNAL, p, n, &sig), 0);
	assert_int_equal(frame_msg_parse(FRAME_SIGNAL, p, 3, &sig), -EBADMSG);
	/* truncated value */
	assert_int_equal(frame_msg_parse(FRAME_SIGNAL, p, n - 1, &sig), -EBADMSG);
	/* length overflow: a length that would wrap a 32-bit pos + len */
	n = tlv(p, FRAME_TAG_SIGNO, UINT32_MAX, "\x09\0\0\0", 4);
	assert_int_equal(frame_msg_parse(FRAME_SIGNAL, p, n, &sig), -EBADMSG);
	n = tlv(p, FRAME_TAG_SIGNO, UINT32_MAX - 5, "\x09\0\0\0", 4);
	assert_int_equal(frame_msg_parse(FRAME_SIGNAL, p, n, &sig), -EBADMSG);
	/* wrong integer width */
	n = tlv(p, FRAME_TAG_SIGNO, 2, "\x09\0", 2);
	assert_int_equal(frame_msg_parse(FRAME_SIGNAL, p, n, &sig), -EBADMSG);
	/* unknown tag, missing required field, duplicate field */
	n = tlv(p, 999, 0, "", 0);
	assert_int_equal(frame_msg_parse(FRAME_SIGNAL, p, n, &sig), -EBADMSG);
	assert_int_equal(frame_msg_parse(FRAME_SIGNAL, p, 0, &sig), -EBADMSG);
	n = tlv(p, FRAME_TAG_SIGNO, 4, "\x09\0\0\0", 4);
	n += tlv(p + n, FRAME_TAG_SIGNO, 4, "\x0f\0\0\0", 4);
	assert_int_equal(frame_msg_parse(FRAME_SIGNAL, p, n, &sig), -EBADMSG);
	/* strings: NUL-terminated, no interior NUL */
	n = tlv(p, FRAME_TAG_PATH, 2, "/x", 2);
	assert_int_equal(frame_msg_parse(FRAME_FILE_STAT, p, n, &ff), -EBADMSG);
	n = tlv(p, FRAME_TAG_PATH, 4, "/\0x", 4);
	assert_int_equal(frame_msg_parse(FRAME_FILE_STAT, p, n, &ff), -EBADMSG);
	n = tlv(p, FRAME_TAG_PATH, 0, "", 0);
	assert_int_equal(frame_msg_parse(FRAME_FILE_STAT, p, n, &ff), -EBADMSG);
	n = tlv(p, FRAME_TAG_PATH, 3, "/x", 3);
	assert_int_equal(frame_msg_parse(FRAME_FILE_STAT, p, n, &ff), 0);
	assert_string_equal(ff.path, "/x");
	/* empty types take no payload */
	assert_int_equal(frame_msg_parse(FRAME_PING, p, 1, NULL), -EBADMSG);
	assert_int_equal(frame_msg_parse(0x7777, p, 0, NULL), -EPROTO);
	/* SPAWN needs argv */
	n = tlv(p, FRAME_TAG_CWD, 2, "/", 2);
	assert_int_equal(frame_msg_parse(FRAME_SPAWN, p, n, &sp), -EBADMSG);
}

static void test_limits(void **state)
{
	static struct frame_spawn sp;
	static char path[FRAME_MAX_PATH + 1];
	size_t cap = (FRAME_MAX_ARGV + 2) * 8;
	uint8_t *p = malloc(cap);
	size_t n = 0;

	/* too many argv entries */
	for (unsigned i = 0; i < FRAME_MAX_ARGV + 1; i++)
		n += tlv(p + n, FRAME_TAG_ARGV, 2, "a", 2);
	assert_int_equal(frame_msg_parse(FRAME_SPAWN, p, n, &sp), -E2BIG);
	assert_int_equal(frame_msg_parse(FRAME_SPAWN, p, n - 8, &sp), 0);
	assert_int_equal(sp.argc, FRAME_MAX_ARGV);
	/* ... and the builder refuses them too */
	sp.argc = FRAME_MAX_ARGV + 1;
	assert_int_equal(frame_build_size(FRAME_SPAWN, &sp), -E2BIG);

	/* too many env entries */
	n = tlv(p, FRAME_TAG_ARGV, 2, "a", 2);
	for (unsigned i = 0; i < FRAME_MAX_ENV + 1; i++)
		n += tlv(p + n, FRAME_TAG_ENV, 2, "a", 2);
	assert_int_equal(frame_msg_parse(FRAME_SPAWN, p, n, &sp), -E2BIG);
	free(p);

	/* a string over 64 KiB in argv */
	size_t big = FRAME_MAX_STR + 1;
	p = calloc(1, big + 6);
	tlv(p, FRAME_TAG_ARGV, (uint32_t)big, "", 0);
	memset(p + 6, 'x', big - 1);
	assert_int_equal(frame_msg_parse(FRAME_SPAWN, p, big + 6, &sp), -E2BIG);
	free(p);

	/* a path over 4096 bytes */
	struct frame_file ff = {.path = path};
	memset(path, 'a', FRAME_MAX_PATH);
	path[0] = '/';
	assert_int_equal(frame_build_size(FRAME_FILE_STAT, &ff), -E2BIG);
	path[FRAME_MAX_PATH - 1] = '\0';
	assert_true(frame_build_size(FRAME_FILE_STAT, &ff) > 0);

	/* a buffer too small */
	uint8_t small[8];
	assert_int_equal(frame_build(small, sizeof(small), FRAME_FILE_STAT, 1, &ff), -ENOBUFS);
	/* NULL required fields */
	ff.path = NULL;
	assert_int_equal(frame_build_size(FRAME_FILE_STAT, &ff), -EINVAL);
	assert_int_equal(frame_build_size(0x7777, &ff), -EPROTO);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_spawn_roundtrip),
		cmocka_unit_test(test_reply_roundtrips),
		cmocka_unit_test(test_pty_watch_port_frames),
		cmocka_unit_test(test_header_layout),
		cmocka_unit_test(test_decoder_byte_at_a_time),
		cmocka_unit_test(test_decoder_max_frame),
		cmocka_unit_test(test_decoder_rejects),
		cmocka_unit_test(test_payload_rejects),
		cmocka_unit_test(test_limits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
