/* The host<->agent channel codec: see frame.h and docs/agent-protocol.md.
 *
 * Every message type is described by a table of fields (tag, kind, limit, where it lives in
 * the type's struct); one parser and one builder walk those tables, so the limits a builder
 * enforces are the limits the other side's parser checks. */
#include "lib/frame.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

enum field_kind {
	K_U32,
	K_U64,
	K_STR,   /* NUL-terminated on the wire, no interior NUL, at most max bytes */
	K_STRV,  /* repeated K_STR into an array; max is the entry count, off2 the count */
	K_BYTES, /* pointer at off, uint32_t length at off2 */
};

struct field {
	uint16_t tag;
	uint8_t kind;
	uint8_t required;
	uint16_t off;
	uint16_t off2;
	uint32_t max;
};

enum payload_shape {
	SHAPE_EMPTY, /* no payload at all */
	SHAPE_RAW,   /* struct frame_data over the whole payload */
	SHAPE_TLV,
};

struct msg_desc {
	uint16_t type;
	uint8_t dir;
	uint8_t shape;
	const char *name;
	size_t size; /* of the struct */
	const struct field *fields;
	size_t n_fields;
};

#define U32(s, t, f, req)  {t, K_U32, req, offsetof(struct s, f), 0, 0}
#define U64(s, t, f, req)  {t, K_U64, req, offsetof(struct s, f), 0, 0}
#define STR(s, t, f, req, m) {t, K_STR, req, offsetof(struct s, f), 0, m}
#define STRV(s, t, f, n, req, m)                                                                   \
	{t, K_STRV, req, offsetof(struct s, f), offsetof(struct s, n), m}
#define BYTES(s, t, f, n)  {t, K_BYTES, 0, offsetof(struct s, f), offsetof(struct s, n), 0}

static const struct field hello_fields[] = {
	U32(frame_hello, FRAME_TAG_VERSION, version, 1),
	U32(frame_hello, FRAME_TAG_MAX_PAYLOAD, max_payload, 0),
};

static const struct field spawn_fields[] = {
	STRV(frame_spawn, FRAME_TAG_ARGV, argv, argc, 1, FRAME_MAX_ARGV),
	STRV(frame_spawn, FRAME_TAG_ENV, envp, envc, 0, FRAME_MAX_ENV),
	STR(frame_spawn, FRAME_TAG_CWD, cwd, 0, FRAME_MAX_PATH),
	U32(frame_spawn, FRAME_TAG_USER, user, 0),
	U32(frame_spawn, FRAME_TAG_WANT_STDIN, want_stdin, 0),
	U64(frame_spawn, FRAME_TAG_TIMEOUT_MS, timeout_ms, 0),
	U32(frame_spawn, FRAME_TAG_COLS, cols, 0),
	U32(frame_spawn, FRAME_TAG_ROWS, rows, 0),
};

static const struct field winsize_fields[] = {
	U32(frame_winsize, FRAME_TAG_COLS, cols, 1),
	U32(frame_winsize, FRAME_TAG_ROWS, rows, 1),
};

static const struct field port_fields[] = {
	U32(frame_port, FRAME_TAG_PORT, port, 1),
};

static const struct field fs_usage_fields[] = {
	U64(frame_fs_usage, FRAME_TAG_TOTAL, total, 0),
	U64(frame_fs_usage, FRAME_TAG_USED, used, 0),
};

static const struct field watch_event_fields[] = {
	STR(frame_watch_event, FRAME_TAG_NAME, name, 1, FRAME_MAX_PATH),
	U32(frame_watch_event, FRAME_TAG_TYPE, type, 1),
};

static const struct field spawned_fields[] = {
	U32(frame_spawned, FRAME_TAG_PID, pid, 1),
};

static const struct field signal_fields[] = {
	U32(frame_signal, FRAME_TAG_SIGNO, signo, 1),
};

static const struct field exit_fields[] = {
	U32(frame_exit, FRAME_TAG_CODE, code, 0),
	U32(frame_exit, FRAME_TAG_SIGNAL, signal, 0),
	U32(frame_exit, FRAME_TAG_TIMED_OUT, timed_out, 0),
};

#define FILE_PATH  STR(frame_file, FRAME_TAG_PATH, path, 1, FRAME_MAX_PATH)
#define FILE_USER  U32(frame_file, FRAME_TAG_USER, user, 0)
#define FILE_MODE  U32(frame_file, FRAME_TAG_MODE, mode, 0)
#define FILE_FLAGS U32(frame_file, FRAME_TAG_FLAGS, flags, 0)

static const struct field file_write_fields[] = {
	FILE_PATH, FILE_USER, FILE_MODE, FILE_FLAGS,
	U64(frame_file, FRAME_TAG_OFFSET, offset, 0),
	BYTES(frame_file, FRAME_TAG_DATA, data, data_len),
};

static const struct field file_read_fields[] = {
	FILE_PATH, FILE_USER,
	U64(frame_file, FRAME_TAG_OFFSET, offset, 0),
	U64(frame_file, FRAME_TAG_LENGTH, length, 0),
};

static const struct field file_stat_fields[] = {FILE_PATH, FILE_USER};

static const struct field file_list_fields[] = {
	FILE_PATH, FILE_USER,
	U32(frame_file, FRAME_TAG_DEPTH, depth, 0),
	U64(frame_file, FRAME_TAG_OFFSET, offset, 0),
};

static const struct field file_mkdir_fields[] = {FILE_PATH, FILE_USER, FILE_MODE, FILE_FLAGS};

static const struct field file_move_fields[] = {
	FILE_PATH, FILE_USER, FILE_FLAGS,
	STR(frame_file, FRAME_TAG_DST, dst, 1, FRAME_MAX_PATH),
};

static const struct field file_remove_fields[] = {FILE_PATH, FILE_USER, FILE_FLAGS};

static const struct field archive_read_fields[] = {FILE_PATH, FILE_USER};

static const struct field watch_open_fields[] = {FILE_PATH, FILE_USER, FILE_FLAGS};

static const struct field archive_write_fields[] = {
	FILE_PATH, FILE_USER, FILE_FLAGS,
	BYTES(frame_file, FRAME_TAG_DATA, data, data_len),
};

static const struct field file_info_fields[] = {
	STR(frame_file_info, FRAME_TAG_NAME, name, 1, FRAME_MAX_PATH),
	STR(frame_file_info, FRAME_TAG_TARGET, target, 0, FRAME_MAX_PATH),
	U32(frame_file_info, FRAME_TAG_TYPE, type, 0),
	U32(frame_file_info, FRAME_TAG_MODE, mode, 0),
	U64(frame_file_info, FRAME_TAG_SIZE, size, 0),
	U64(frame_file_info, FRAME_TAG_MTIME_NS, mtime_ns, 0),
	U32(frame_file_info, FRAME_TAG_UID, uid, 0),
	U32(frame_file_info, FRAME_TAG_GID, gid, 0),
};

/* PORT_EOF: CODE only (struct frame_exit's code: the errno that ended it, 0 for EOF) */
static const struct field port_eof_fields[] = {
	U32(frame_exit, FRAME_TAG_CODE, code, 0),
};

static const struct field ok_fields[] = {
	U64(frame_ok, FRAME_TAG_SIZE, size, 0),
	U32(frame_ok, FRAME_TAG_FLAGS, flags, 0),
};

static const struct field error_fields[] = {
	U32(frame_error, FRAME_TAG_ERRNO, errnum, 1),
	STR(frame_error, FRAME_TAG_MESSAGE, message, 0, FRAME_MAX_MESSAGE),
};

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define TLV(t, d, n, s, f) {t, d, SHAPE_TLV, n, sizeof(struct s), f, N(f)}
#define RAW(t, d, n)       {t, d, SHAPE_RAW, n, sizeof(struct frame_data), NULL, 0}
#define EMPTY(t, d, n)     {t, d, SHAPE_EMPTY, n, 0, NULL, 0}

static const struct msg_desc msgs[] = {
	TLV(FRAME_HELLO, FRAME_TO_AGENT, "HELLO", frame_hello, hello_fields),
	EMPTY(FRAME_PING, FRAME_TO_AGENT, "PING"),
	TLV(FRAME_SPAWN, FRAME_TO_AGENT, "SPAWN", frame_spawn, spawn_fields),
	RAW(FRAME_STDIN, FRAME_TO_AGENT, "STDIN"),
	EMPTY(FRAME_STDIN_CLOSE, FRAME_TO_AGENT, "STDIN_CLOSE"),
	EMPTY(FRAME_PAUSE, FRAME_TO_AGENT, "PAUSE"),
	EMPTY(FRAME_RESUME, FRAME_TO_AGENT, "RESUME"),
	TLV(FRAME_SIGNAL, FRAME_TO_AGENT, "SIGNAL", frame_signal, signal_fields),
	TLV(FRAME_FILE_WRITE, FRAME_TO_AGENT, "FILE_WRITE", frame_file, file_write_fields),
	TLV(FRAME_FILE_READ, FRAME_TO_AGENT, "FILE_READ", frame_file, file_read_fields),
	TLV(FRAME_FILE_STAT, FRAME_TO_AGENT, "FILE_STAT", frame_file, file_stat_fields),
	TLV(FRAME_FILE_LIST, FRAME_TO_AGENT, "FILE_LIST", frame_file, file_list_fields),
	TLV(FRAME_FILE_MKDIR, FRAME_TO_AGENT, "FILE_MKDIR", frame_file, file_mkdir_fields),
	TLV(FRAME_FILE_MOVE, FRAME_TO_AGENT, "FILE_MOVE", frame_file, file_move_fields),
	TLV(FRAME_FILE_REMOVE, FRAME_TO_AGENT, "FILE_REMOVE", frame_file, file_remove_fields),
	TLV(FRAME_ARCHIVE_READ, FRAME_TO_AGENT, "ARCHIVE_READ", frame_file, archive_read_fields),
	TLV(FRAME_ARCHIVE_WRITE, FRAME_TO_AGENT, "ARCHIVE_WRITE", frame_file, archive_write_fields),
	TLV(FRAME_RESIZE, FRAME_TO_AGENT, "RESIZE", frame_winsize, winsize_fields),
	TLV(FRAME_WATCH_OPEN, FRAME_TO_AGENT, "WATCH_OPEN", frame_file, watch_open_fields),
	EMPTY(FRAME_WATCH_CLOSE, FRAME_TO_AGENT, "WATCH_CLOSE"),
	TLV(FRAME_PORT_OPEN, FRAME_TO_AGENT, "PORT_OPEN", frame_port, port_fields),
	RAW(FRAME_PORT_WRITE, FRAME_TO_AGENT, "PORT_WRITE"),
	EMPTY(FRAME_PORT_CLOSE, FRAME_TO_AGENT, "PORT_CLOSE"),
	TLV(FRAME_STATFS, FRAME_TO_AGENT, "STATFS", frame_file, file_stat_fields),
	TLV(FRAME_HELLO_OK, FRAME_TO_HOST, "HELLO_OK", frame_hello, hello_fields),
	EMPTY(FRAME_PONG, FRAME_TO_HOST, "PONG"),
	TLV(FRAME_SPAWNED, FRAME_TO_HOST, "SPAWNED", frame_spawned, spawned_fields),
	RAW(FRAME_STDOUT, FRAME_TO_HOST, "STDOUT"),
	RAW(FRAME_STDERR, FRAME_TO_HOST, "STDERR"),
	TLV(FRAME_EXIT, FRAME_TO_HOST, "EXIT", frame_exit, exit_fields),
	RAW(FRAME_FILE_DATA, FRAME_TO_HOST, "FILE_DATA"),
	TLV(FRAME_FILE_INFO, FRAME_TO_HOST, "FILE_INFO", frame_file_info, file_info_fields),
	TLV(FRAME_WATCH_EVENT, FRAME_TO_HOST, "WATCH_EVENT", frame_watch_event, watch_event_fields),
	RAW(FRAME_PORT_DATA, FRAME_TO_HOST, "PORT_DATA"),
	TLV(FRAME_FS_USAGE, FRAME_TO_HOST, "FS_USAGE", frame_fs_usage, fs_usage_fields),
	TLV(FRAME_PORT_EOF, FRAME_TO_HOST, "PORT_EOF", frame_exit, port_eof_fields),
	TLV(FRAME_OK, FRAME_TO_HOST, "OK", frame_ok, ok_fields),
	TLV(FRAME_ERROR, FRAME_TO_HOST, "ERROR", frame_error, error_fields),
};

static const struct msg_desc *msg_find(uint16_t type)
{
	for (size_t i = 0; i < N(msgs); i++)
		if (msgs[i].type == type)
			return &msgs[i];
	return NULL;
}

const char *frame_type_name(uint16_t type)
{
	const struct msg_desc *m = msg_find(type);
	return m ? m->name : NULL;
}

int frame_type_dir(uint16_t type)
{
	const struct msg_desc *m = msg_find(type);
	return m ? m->dir : 0;
}

ssize_t frame_msg_size_of(uint16_t type)
{
	const struct msg_desc *m = msg_find(type);
	return m ? (ssize_t)m->size : -EPROTO;
}

/* ---- little-endian access; memcpy keeps unaligned access defined ---- */

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

void frame_hdr_write(uint8_t buf[FRAME_HDR_SIZE], uint16_t type, uint32_t channel, uint32_t len)
{
	put32(buf, len);
	put16(buf + 4, type);
	put16(buf + 6, 0);
	put32(buf + 8, channel);
}

#define AT(base, off, T) ((T *)(void *)((char *)(base) + (off)))
#define CAT(base, off, T) ((const T *)(const void *)((const char *)(base) + (off)))

/* ---- parsing ---- */

static int str_check(const uint8_t *v, uint32_t len, uint32_t max)
{
	if (len > max)
		return -E2BIG;
	/* exactly one NUL, the last byte: the agent hands these to execve() and open() */
	if (len == 0 || v[len - 1] != 0 || memchr(v, 0, len - 1))
		return -EBADMSG;
	return 0;
}

static int field_parse(const struct field *f, const uint8_t *v, uint32_t len, void *msg)
{
	int r;

	switch (f->kind) {
	case K_U32:
		if (len != 4)
			return -EBADMSG;
		*AT(msg, f->off, uint32_t) = get32(v);
		return 0;
	case K_U64:
		if (len != 8)
			return -EBADMSG;
		*AT(msg, f->off, uint64_t) = get64(v);
		return 0;
	case K_STR:
		r = str_check(v, len, f->max);
		if (r < 0)
			return r;
		*AT(msg, f->off, const char *) = (const char *)v;
		return 0;
	case K_STRV: {
		uint32_t *n = AT(msg, f->off2, uint32_t);
		if (*n >= f->max)
			return -E2BIG;
		r = str_check(v, len, FRAME_MAX_STR);
		if (r < 0)
			return r;
		AT(msg, f->off, const char *)[(*n)++] = (const char *)v;
		return 0;
	}
	case K_BYTES:
		*AT(msg, f->off, const uint8_t *) = v;
		*AT(msg, f->off2, uint32_t) = len;
		return 0;
	default:
		return -EBADMSG;
	}
}

static int tlv_parse(const struct msg_desc *m, const uint8_t *p, size_t len, void *msg)
{
	uint32_t seen = 0;
	size_t pos = 0;

	while (pos < len) {
		if (len - pos < FRAME_TLV_HDR_SIZE)
			return -EBADMSG;
		uint16_t tag = get16(p + pos);
		uint32_t vlen = get32(p + pos + 2);
		pos += FRAME_TLV_HDR_SIZE;
		/* compare against what is left, never compute pos + vlen: it could wrap */
		if (vlen > len - pos)
			return -EBADMSG;

		size_t i;
		for (i = 0; i < m->n_fields; i++)
			if (m->fields[i].tag == tag)
				break;
		if (i == m->n_fields)
			return -EBADMSG;
		const struct field *f = &m->fields[i];
		if (f->kind != K_STRV && (seen & (1u << i)))
			return -EBADMSG; /* a duplicate would let two readers see different values */
		seen |= 1u << i;
		int r = field_parse(f, p + pos, vlen, msg);
		if (r < 0)
			return r;
		pos += vlen;
	}

	for (size_t i = 0; i < m->n_fields; i++)
		if (m->fields[i].required && !(seen & (1u << i)))
			return -EBADMSG;
	return 0;
}

int frame_msg_parse(uint16_t type, const uint8_t *payload, size_t len, void *ret_msg)
{
	const struct msg_desc *m = msg_find(type);

	if (!m)
		return -EPROTO;
	if (len > FRAME_MAX_PAYLOAD)
		return -E2BIG;
	if (len > 0 && !payload)
		return -EBADMSG;
	if (m->size > 0) {
		if (!ret_msg)
			return -EINVAL;
		memset(ret_msg, 0, m->size);
	}

	switch (m->shape) {
	case SHAPE_EMPTY:
		return len == 0 ? 0 : -EBADMSG;
	case SHAPE_RAW: {
		struct frame_data *d = ret_msg;
		d->data = payload;
		d->len = (uint32_t)len;
		return 0;
	}
	default:
		return tlv_parse(m, payload, len, ret_msg);
	}
}

/* ---- building ---- */

/* Counts every byte it is asked to write, and writes only while they fit. */
struct writer {
	uint8_t *buf;
	size_t cap;
	size_t len;
};

static void w_put(struct writer *w, const void *p, size_t n)
{
	if (w->buf && w->len <= w->cap && n <= w->cap - w->len && n > 0)
		memcpy(w->buf + w->len, p, n);
	w->len += n;
}

static void w_tlv(struct writer *w, uint16_t tag, const void *v, uint32_t n)
{
	uint8_t h[FRAME_TLV_HDR_SIZE];

	put16(h, tag);
	put32(h + 2, n);
	w_put(w, h, sizeof(h));
	w_put(w, v, n);
}

static int w_str(struct writer *w, uint16_t tag, const char *s, uint32_t max)
{
	size_t n = strlen(s) + 1;

	if (n > max)
		return -E2BIG;
	w_tlv(w, tag, s, (uint32_t)n);
	return 0;
}

static int field_build(struct writer *w, const struct field *f, const void *msg)
{
	uint8_t b[8];

	switch (f->kind) {
	case K_U32: {
		uint32_t v = *CAT(msg, f->off, uint32_t);
		if (v == 0 && !f->required)
			return 0; /* absent means 0 */
		put32(b, v);
		w_tlv(w, f->tag, b, 4);
		return 0;
	}
	case K_U64: {
		uint64_t v = *CAT(msg, f->off, uint64_t);
		if (v == 0 && !f->required)
			return 0;
		put64(b, v);
		w_tlv(w, f->tag, b, 8);
		return 0;
	}
	case K_STR: {
		const char *s = *CAT(msg, f->off, char *);
		if (!s)
			return f->required ? -EINVAL : 0;
		return w_str(w, f->tag, s, f->max);
	}
	case K_STRV: {
		const char *const *v = CAT(msg, f->off, char *);
		uint32_t n = *CAT(msg, f->off2, uint32_t);
		if (n > f->max)
			return -E2BIG;
		if (n == 0 && f->required)
			return -EINVAL;
		for (uint32_t i = 0; i < n; i++) {
			if (!v[i])
				return -EINVAL;
			int r = w_str(w, f->tag, v[i], FRAME_MAX_STR);
			if (r < 0)
				return r;
		}
		return 0;
	}
	case K_BYTES: {
		const uint8_t *p = *CAT(msg, f->off, uint8_t *);
		uint32_t n = *CAT(msg, f->off2, uint32_t);
		if (n > 0 && !p)
			return -EINVAL;
		if (n > 0)
			w_tlv(w, f->tag, p, n);
		return 0;
	}
	default:
		return -EINVAL;
	}
}

static int payload_build(struct writer *w, const struct msg_desc *m, const void *msg)
{
	if (m->shape == SHAPE_EMPTY)
		return 0;
	if (!msg)
		return -EINVAL;
	if (m->shape == SHAPE_RAW) {
		const struct frame_data *d = msg;
		if (d->len > 0 && !d->data)
			return -EINVAL;
		w_put(w, d->data, d->len);
		return 0;
	}
	for (size_t i = 0; i < m->n_fields; i++) {
		int r = field_build(w, &m->fields[i], msg);
		if (r < 0)
			return r;
	}
	return 0;
}

static ssize_t build(struct writer *w, uint16_t type, uint32_t channel, const void *msg)
{
	const struct msg_desc *m = msg_find(type);
	int r;

	if (!m)
		return -EPROTO;
	w->len = FRAME_HDR_SIZE;
	r = payload_build(w, m, msg);
	if (r < 0)
		return r;
	if (w->len - FRAME_HDR_SIZE > FRAME_MAX_PAYLOAD)
		return -E2BIG;
	if (w->buf && w->len <= w->cap)
		frame_hdr_write(w->buf, type, channel, (uint32_t)(w->len - FRAME_HDR_SIZE));
	return (ssize_t)w->len;
}

ssize_t frame_build_size(uint16_t type, const void *msg)
{
	struct writer w = {0};
	return build(&w, type, 0, msg);
}

ssize_t frame_build(void *buf, size_t cap, uint16_t type, uint32_t channel, const void *msg)
{
	struct writer w = {.buf = buf, .cap = buf ? cap : 0};
	ssize_t r = build(&w, type, channel, msg);

	if (r >= 0 && (size_t)r > w.cap)
		return -ENOBUFS;
	return r;
}

/* ---- decoder ---- */

void frame_decoder_init(struct frame_decoder *d, int dir)
{
	d->dir = dir;
	d->error = 0;
	d->start = d->end = 0;
}

static void decoder_compact(struct frame_decoder *d)
{
	if (d->start == 0)
		return;
	memmove(d->buf, d->buf + d->start, d->end - d->start);
	d->end -= d->start;
	d->start = 0;
}

size_t frame_decoder_space(struct frame_decoder *d, uint8_t **ret_ptr)
{
	decoder_compact(d);
	*ret_ptr = d->buf + d->end;
	return sizeof(d->buf) - d->end;
}

void frame_decoder_commit(struct frame_decoder *d, size_t n)
{
	if (n > sizeof(d->buf) - d->end)
		n = sizeof(d->buf) - d->end;
	d->end += n;
}

size_t frame_decoder_feed(struct frame_decoder *d, const void *data, size_t n)
{
	uint8_t *p;
	size_t space = frame_decoder_space(d, &p);

	if (n > space)
		n = space;
	if (n > 0)
		memcpy(p, data, n);
	d->end += n;
	return n;
}

int frame_decoder_next(struct frame_decoder *d, struct frame *ret)
{
	size_t avail = d->end - d->start;
	const uint8_t *h = d->buf + d->start;

	if (d->error)
		return d->error;
	if (avail < FRAME_HDR_SIZE)
		return 0;

	uint32_t len = get32(h);
	uint16_t type = get16(h + 4);
	uint16_t flags = get16(h + 6);
	/* judge the header before waiting for the payload: a hostile length is refused at once */
	if (len > FRAME_MAX_PAYLOAD)
		return d->error = -EMSGSIZE;
	if (flags != 0 || frame_type_dir(type) != d->dir)
		return d->error = -EPROTO;
	if (avail - FRAME_HDR_SIZE < len)
		return 0;

	ret->type = type;
	ret->flags = flags;
	ret->channel = get32(h + 8);
	ret->len = len;
	ret->payload = h + FRAME_HDR_SIZE;
	d->start += FRAME_HDR_SIZE + len;
	return 1;
}

size_t frame_decoder_pending(const struct frame_decoder *d)
{
	return d->end - d->start;
}
