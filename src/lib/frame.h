/* The host<->agent channel codec (docs/agent-protocol.md is the contract).
 *
 * One byte stream carries frames: a 12-byte little-endian header (u32 payload length, u16 type,
 * u16 flags = 0, u32 channel) and a payload of at most FRAME_MAX_PAYLOAD bytes. Payloads are
 * TLV lists (u16 tag, u32 length, value), except the stream types (STDIN, STDOUT, STDERR,
 * FILE_DATA) whose payload is the raw bytes.
 *
 * Receiving: embed or allocate a struct frame_decoder (about 1 MiB), frame_decoder_init() it
 * with the direction you receive, give it bytes with frame_decoder_feed() (or read straight
 * into frame_decoder_space() and frame_decoder_commit()), and take frames with
 * frame_decoder_next() until it returns 0. Then frame_msg_parse() the payload into the struct
 * of its type (see frame_msg_size_of()). A negative return from either is a protocol error:
 * the peer is broken or hostile and the connection must be dropped.
 *
 * Sending: fill the struct of the type and frame_build() it into a buffer of at least
 * frame_build_size() bytes. Builders apply the same limits as parsers, so what one side builds
 * the other side accepts.
 *
 * Everything here is a pure function over caller memory: no allocation, no I/O, no logging.
 * Parsed structs point into the payload, which must outlive them.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define FRAME_PROTOCOL_VERSION 1

#define FRAME_HDR_SIZE      12u
#define FRAME_MAX_PAYLOAD   (1024u * 1024u)
#define FRAME_MAX_FRAME     (FRAME_HDR_SIZE + FRAME_MAX_PAYLOAD)
#define FRAME_TLV_HDR_SIZE  6u
#define FRAME_MAX_ARGV      4096u
#define FRAME_MAX_ENV       1024u
#define FRAME_MAX_STR       65536u /* bytes of a string on the wire, NUL included */
#define FRAME_MAX_PATH      4096u  /* bytes of a path on the wire, NUL included (PATH_MAX) */
#define FRAME_MAX_MESSAGE   1024u  /* bytes of an ERROR message, NUL included */
#define FRAME_MAX_LIST_DEPTH 32u
/* Processes the agent runs at once; the daemon applies the same limit first (429), so the
 * agent's EAGAIN is only ever a sandbox's own limit (pids, open files) running out. */
#define FRAME_MAX_PROCS     1024u
/* Largest data a single STDIN or FILE_WRITE frame can carry once its other fields are counted. */
#define FRAME_MAX_DATA      (FRAME_MAX_PAYLOAD - 2u * FRAME_MAX_PATH - 64u)

enum frame_dir {
	FRAME_TO_AGENT = 1, /* frames the host sends */
	FRAME_TO_HOST = 2,  /* frames the agent sends */
};

enum frame_type {
	/* host -> agent */
	FRAME_HELLO = 0x0001,
	FRAME_PING = 0x0002,
	FRAME_SPAWN = 0x0010,
	FRAME_STDIN = 0x0011,
	FRAME_STDIN_CLOSE = 0x0012,
	FRAME_SIGNAL = 0x0013,
	FRAME_PAUSE = 0x0014,  /* stop reading this process's output (a reader is behind) */
	FRAME_RESUME = 0x0015, /* read it again */
	FRAME_FILE_WRITE = 0x0020,
	FRAME_FILE_READ = 0x0021,
	FRAME_FILE_STAT = 0x0022,
	FRAME_FILE_LIST = 0x0023,
	FRAME_FILE_MKDIR = 0x0024,
	FRAME_FILE_MOVE = 0x0025,
	FRAME_FILE_REMOVE = 0x0026,
	FRAME_ARCHIVE_READ = 0x0027,  /* the tree at path as a tar stream: FILE_DATA..., OK */
	FRAME_ARCHIVE_WRITE = 0x0028, /* a chunk of a tar to unpack at path; each answered OK */
	FRAME_RESIZE = 0x0016,      /* a PTY process's window size (TIOCSWINSZ) */
	FRAME_WATCH_OPEN = 0x0030,  /* inotify on path (recursive): OK, then WATCH_EVENT... */
	FRAME_WATCH_CLOSE = 0x0031, /* the end of a watch; nothing more on its channel */
	FRAME_PORT_OPEN = 0x0040,   /* a TCP connection to 127.0.0.1:PORT inside: OK, or ERROR */
	FRAME_PORT_WRITE = 0x0041,  /* bytes for the connection; OK{SIZE = taken so far} acks */
	FRAME_PORT_CLOSE = 0x0042,  /* the host's end is gone: close it */
	FRAME_STATFS = 0x0050,      /* the file system of path: FS_USAGE */
	/* agent -> host */
	FRAME_HELLO_OK = 0x0101,
	FRAME_PONG = 0x0102,
	FRAME_SPAWNED = 0x0110,
	FRAME_STDOUT = 0x0111,
	FRAME_STDERR = 0x0112,
	FRAME_EXIT = 0x0113,
	FRAME_FILE_DATA = 0x0120,
	FRAME_FILE_INFO = 0x0121,
	FRAME_WATCH_EVENT = 0x0130, /* NAME (absolute path), TYPE (FRAME_WATCH_EV_* bits) */
	FRAME_PORT_DATA = 0x0141,   /* bytes from the connection */
	FRAME_PORT_EOF = 0x0142,    /* the sandbox's end closed (CODE: errno, 0 for EOF) */
	FRAME_FS_USAGE = 0x0150,    /* TOTAL and USED bytes of a file system */
	FRAME_OK = 0x01f0,
	FRAME_ERROR = 0x01f1,
};

/* TLV tags; each message type accepts a fixed subset (frame.c's table). */
enum frame_tag {
	FRAME_TAG_VERSION = 1,
	FRAME_TAG_MAX_PAYLOAD = 2,
	FRAME_TAG_ARGV = 3, /* repeated, in order */
	FRAME_TAG_ENV = 4,  /* repeated, in order, "NAME=value" */
	FRAME_TAG_CWD = 5,
	FRAME_TAG_USER = 6,
	FRAME_TAG_WANT_STDIN = 7,
	FRAME_TAG_TIMEOUT_MS = 8,
	FRAME_TAG_PID = 9,
	FRAME_TAG_SIGNO = 10,
	FRAME_TAG_CODE = 11,
	FRAME_TAG_SIGNAL = 12,
	FRAME_TAG_TIMED_OUT = 13,
	FRAME_TAG_PATH = 14,
	FRAME_TAG_DST = 15,
	FRAME_TAG_MODE = 16,
	FRAME_TAG_FLAGS = 17,
	FRAME_TAG_OFFSET = 18,
	FRAME_TAG_LENGTH = 19,
	FRAME_TAG_DEPTH = 20,
	FRAME_TAG_DATA = 21,
	FRAME_TAG_NAME = 22,
	FRAME_TAG_TYPE = 23,
	FRAME_TAG_SIZE = 24,
	FRAME_TAG_MTIME_NS = 25,
	FRAME_TAG_UID = 26,
	FRAME_TAG_GID = 27,
	FRAME_TAG_ERRNO = 28,
	FRAME_TAG_MESSAGE = 29,
	FRAME_TAG_TARGET = 30,
	FRAME_TAG_COLS = 31,
	FRAME_TAG_ROWS = 32,
	FRAME_TAG_PORT = 33,
	FRAME_TAG_TOTAL = 34,
	FRAME_TAG_USED = 35,
};

/* Who a process runs as and whose permissions a file operation is checked against. */
enum frame_user {
	FRAME_USER_USER = 0, /* uid/gid 1000 (the default) */
	FRAME_USER_ROOT = 1, /* uid/gid 0 of the sandbox, no capabilities */
};
#define FRAME_USER_UID 1000u
#define FRAME_USER_GID 1000u

/* FILE_WRITE flags */
#define FRAME_WRITE_CREATE 0x1u /* create if missing */
#define FRAME_WRITE_TRUNC  0x2u /* truncate first (first chunk of an upload) */
#define FRAME_WRITE_APPEND 0x4u /* append, ignore offset */
#define FRAME_WRITE_EXCL   0x8u /* fail if it exists */
#define FRAME_WRITE_ALL    0xfu
/* FILE_MKDIR flags */
#define FRAME_MKDIR_PARENTS 0x1u
/* FILE_MOVE flags */
#define FRAME_MOVE_NOREPLACE 0x1u
/* ARCHIVE_WRITE flags */
#define FRAME_ARCHIVE_END 0x1u /* the last chunk: OK once the whole archive is unpacked */
/* FILE_REMOVE flags */
#define FRAME_REMOVE_RECURSIVE 0x1u
/* WATCH_OPEN flags */
#define FRAME_WATCH_RECURSIVE 0x1u
/* WATCH_EVENT types (bits; an event may carry several) */
#define FRAME_WATCH_EV_CREATE   0x01u
#define FRAME_WATCH_EV_WRITE    0x02u
#define FRAME_WATCH_EV_REMOVE   0x04u
#define FRAME_WATCH_EV_RENAME   0x08u
#define FRAME_WATCH_EV_CHMOD    0x10u
#define FRAME_WATCH_EV_OVERFLOW 0x20u /* events were lost (the queue was full); NAME is the root */
#define FRAME_WATCH_EV_ALL      0x3fu
/* Largest PTY window either side accepts. */
#define FRAME_MAX_PTY_DIM 1000u
/* OK flags */
#define FRAME_OK_TRUNCATED 0x1u /* a FILE_LIST hit its entry or byte limit */
#define FRAME_OK_OMITTED   0x2u /* a FILE_LIST passed entries whose path NAME cannot carry */

enum frame_file_type {
	FRAME_FT_OTHER = 0,
	FRAME_FT_FILE = 1,
	FRAME_FT_DIR = 2,
	FRAME_FT_SYMLINK = 3,
	FRAME_FT_FIFO = 4,
	FRAME_FT_SOCKET = 5,
	FRAME_FT_CHAR = 6,
	FRAME_FT_BLOCK = 7,
};

struct frame {
	uint16_t type;
	uint16_t flags;
	uint32_t channel;
	uint32_t len;
	const uint8_t *payload; /* points into the decoder's buffer */
};

/* ---- payload structs; strings are NUL-terminated, pointers borrow from the payload ---- */

/* HELLO (version), HELLO_OK (version, max_payload) */
struct frame_hello {
	uint32_t version;
	uint32_t max_payload;
};

/* STDIN, STDOUT, STDERR, FILE_DATA: the payload itself */
struct frame_data {
	const uint8_t *data;
	uint32_t len;
};

/* SPAWN; about 41 KiB, so heap- or static-allocate it. */
struct frame_spawn {
	const char *argv[FRAME_MAX_ARGV + 1]; /* NULL-terminated */
	uint32_t argc;                        /* >= 1 */
	const char *envp[FRAME_MAX_ENV + 1];  /* NULL-terminated */
	uint32_t envc;
	const char *cwd; /* NULL: "/" */
	uint32_t user;   /* enum frame_user */
	uint32_t want_stdin;
	uint64_t timeout_ms; /* 0: none */
	uint32_t cols, rows; /* both nonzero: run on a PTY of this size (stdout carries it) */
};

/* RESIZE */
struct frame_winsize {
	uint32_t cols, rows;
};

/* PORT_OPEN */
struct frame_port {
	uint32_t port;
};

/* FS_USAGE */
struct frame_fs_usage {
	uint64_t total, used; /* bytes */
};

/* WATCH_EVENT */
struct frame_watch_event {
	const char *name; /* absolute path inside the sandbox */
	uint32_t type;    /* FRAME_WATCH_EV_* */
};

struct frame_spawned {
	uint32_t pid;
};

struct frame_signal {
	uint32_t signo;
};

/* EXIT: code is meaningful when signal == 0 */
struct frame_exit {
	uint32_t code;
	uint32_t signal;
	uint32_t timed_out;
};

/* Every FILE_* request; each type uses the fields documented in agent-protocol.md. */
struct frame_file {
	const char *path; /* absolute */
	const char *dst;  /* FILE_MOVE */
	uint32_t user;    /* enum frame_user */
	uint32_t mode;    /* FILE_WRITE, FILE_MKDIR: permission bits, 0 = default */
	uint32_t flags;   /* FRAME_WRITE_*, FRAME_MKDIR_*, FRAME_MOVE_*, FRAME_REMOVE_* */
	uint64_t offset;  /* FILE_WRITE, FILE_READ */
	uint64_t length;  /* FILE_READ: at most this many bytes, 0 = to the end */
	uint32_t depth;   /* FILE_LIST: 0 or 1 = entries of path only */
	/* FILE_LIST uses offset too: entries of the walk to skip (the next page starts there) */
	const uint8_t *data; /* FILE_WRITE */
	uint32_t data_len;
};

struct frame_file_info {
	const char *name;   /* FILE_STAT: last component; FILE_LIST: path relative to the listed dir */
	const char *target; /* symlinks in FILE_LIST, else NULL */
	uint32_t type;      /* enum frame_file_type */
	uint32_t mode;      /* permission bits (07777) */
	uint64_t size;
	uint64_t mtime_ns;
	uint32_t uid;
	uint32_t gid;
};

/* OK: size is bytes written (FILE_WRITE), bytes sent (FILE_READ), entries (FILE_LIST: those
 * the walk passed after OFFSET, listed or not, so that OFFSET + size is where it stopped). */
struct frame_ok {
	uint64_t size;
	uint32_t flags;
};

/* ERROR: errnum is a positive errno value. */
struct frame_error {
	uint32_t errnum;
	const char *message; /* may be NULL */
};

/* ---- headers and types ---- */

/* Name of @type ("SPAWN"), or NULL if unknown. */
const char *frame_type_name(uint16_t type);
/* Direction of @type, or 0 if unknown. */
int frame_type_dir(uint16_t type);
/* Size of the struct frame_msg_parse()/frame_build() use for @type; 0 for empty payloads,
 * -EPROTO if unknown. */
ssize_t frame_msg_size_of(uint16_t type);

/* Writes the 12-byte header of a frame into @buf. */
void frame_hdr_write(uint8_t buf[FRAME_HDR_SIZE], uint16_t type, uint32_t channel, uint32_t len);

/* ---- payloads ---- */

/* Parses @len bytes of @payload of frame @type into @ret_msg, a struct of that type
 * (frame_msg_size_of() bytes, zeroed first; may be NULL for empty types). Returns 0, or
 * -EBADMSG (malformed), -E2BIG (a limit), -EPROTO (unknown type). */
int frame_msg_parse(uint16_t type, const uint8_t *payload, size_t len, void *ret_msg);

/* Bytes frame_build() needs for @msg (header included), or a negative errno if @msg breaks a
 * limit (-E2BIG, -EINVAL) or @type is unknown (-EPROTO). */
ssize_t frame_build_size(uint16_t type, const void *msg);

/* Builds a whole frame (header + payload) of @type on @channel from @msg into @buf.
 * Returns the frame's length, or -ENOBUFS if @cap is too small, or frame_build_size()'s error. */
ssize_t frame_build(void *buf, size_t cap, uint16_t type, uint32_t channel, const void *msg);

/* ---- incremental decoder ---- */

struct frame_decoder {
	int dir;   /* the direction of accepted frames */
	int error; /* sticky negative errno once a protocol error was seen */
	size_t start, end;
	uint8_t buf[FRAME_MAX_FRAME];
};

/* Resets @d to accept frames of direction @dir (FRAME_TO_AGENT on the agent). */
void frame_decoder_init(struct frame_decoder *d, int dir);

/* Copies as much of @data as fits (never more than one maximal frame is buffered) and
 * returns how many bytes were taken; call frame_decoder_next() until it returns 0 before
 * feeding the rest. Invalidates frames returned before. */
size_t frame_decoder_feed(struct frame_decoder *d, const void *data, size_t n);

/* Zero-copy feeding: the free space to read into (returns its size, > 0 unless frames are
 * pending), then frame_decoder_commit() the bytes written there. Invalidates frames returned
 * before. */
size_t frame_decoder_space(struct frame_decoder *d, uint8_t **ret_ptr);
void frame_decoder_commit(struct frame_decoder *d, size_t n);

/* Returns 1 and the next complete frame in @ret (valid until the next call on @d), 0 if more
 * bytes are needed, or a negative errno on a protocol error (-EMSGSIZE: length over
 * FRAME_MAX_PAYLOAD; -EPROTO: unknown or wrong-direction type, or nonzero flags). */
int frame_decoder_next(struct frame_decoder *d, struct frame *ret);

/* Bytes held that are not yet returned as frames. */
size_t frame_decoder_pending(const struct frame_decoder *d);
