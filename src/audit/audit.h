/* The audit log: an append-only, hash-chained JSON Lines file per sandbox (docs/audit.md).
 *
 * cordond opens one log per sandbox under its audit directory, writes a record BEFORE each
 * action it describes (and refuses the action if the record cannot be written), and closes
 * the log after sandbox.destroy. Every record carries the SHA-256 of the previous record's
 * exact bytes, so `cordon audit verify` finds an edited, removed or reordered record.
 *
 *     struct cordon_err err = {};
 *     struct audit_log *log = audit_open(audit_dirfd, "sb-1234.jsonl", &err);
 *     if (!log) { ... err.msg ... }
 *     json_t *f = json_pack("{s:[s,s], s:s, s:s, s:[]}", "argv", "ls", "-l", "cwd", "/home/user",
 *                           "user", "user", "env_names");
 *     r = audit_append(log, "sb-1234", AUDIT_PROCESS_START, f);   // borrows f
 *     json_decref(f);
 *     if (r < 0) refuse the exec;
 *     log = audit_free(log);
 *
 * Exactly one writer per file: audit_open() takes flock(LOCK_EX|LOCK_NB) and fails with
 * -EBUSY if another open file description holds it. Readers (audit_verify, audit_read_from)
 * take no lock and never see a partial record as a record.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include <cordon/err.h>

#define AUDIT_SCHEMA_VERSION 1
#define AUDIT_RECORD_MAX     (64 * 1024) /* one record, newline included */
#define AUDIT_STRING_MAX     4096	 /* longer strings in fields are cut first... */
#define AUDIT_ARRAY_MAX	     1024	 /* ...and longer arrays/objects; then halved to fit */
#define AUDIT_DEPTH_MAX	     8		 /* deeper values in fields become null */
#define AUDIT_SHA256_HEX     65		 /* 64 hex digits and a NUL */

/* Event names (the "event" key). audit_append() refuses any other name. The fields each
 * event must carry are in audit_events[] and docs/audit.md. */
#define AUDIT_SANDBOX_CREATE  "sandbox.create"
#define AUDIT_SANDBOX_READY   "sandbox.ready"
#define AUDIT_SANDBOX_DESTROY "sandbox.destroy"
#define AUDIT_SANDBOX_TIMEOUT "sandbox.timeout"
#define AUDIT_SANDBOX_PAUSE   "sandbox.pause"
#define AUDIT_SANDBOX_RESUME  "sandbox.resume"
#define AUDIT_SANDBOX_PAUSE_TIMEOUT "sandbox.pause_timeout"
#define AUDIT_SANDBOX_SNAPSHOT "sandbox.snapshot"
#define AUDIT_SANDBOX_FORK    "sandbox.fork"
#define AUDIT_PROCESS_START   "process.start"
#define AUDIT_PROCESS_EXIT    "process.exit"
#define AUDIT_CODE_RUN	      "code.run" /* a cell sent to the sandbox's code interpreter */
#define AUDIT_FILE_WRITE      "file.write"
#define AUDIT_FILE_REMOVE     "file.remove"
#define AUDIT_FILE_MKDIR      "file.mkdir"
#define AUDIT_FILE_MOVE	      "file.move"
#define AUDIT_NET_DECISION    "net.decision"
#define AUDIT_POLICY_CHANGE   "policy.change"
#define AUDIT_API_CALL	      "api.call"
#define AUDIT_SECRET_MISUSE   "secret.misuse" /* a placeholder where its secret does not go */
#define AUDIT_SECRET_USE      "secret.use"    /* a value put in a request by the proxy */
#define AUDIT_APPROVAL_REQUEST "approval.request"  /* a request held for a person's decision */
#define AUDIT_APPROVAL_DECISION "approval.decision" /* its end: allow, deny (by whom), closed */
#define AUDIT_VOLUME_ATTACH   "volume.attach"
#define AUDIT_VOLUME_DETACH   "volume.detach"
#define AUDIT_PORT_OPEN       "port.open"     /* a connection from the host to a port inside */
#define AUDIT_LOG_RECOVERED   "log.recovered" /* written by audit itself, never by callers */

struct audit_event_info {
	const char *name;
	const char *const required[7]; /* keys @fields must have; NULL-terminated */
};

extern const struct audit_event_info audit_events[];
extern const size_t audit_events_count;

/* The SHA-256 of @data as 64 lowercase hex digits (what "prev" and "sha256" fields hold). */
void audit_sha256_hex(const void *data, size_t len, char ret[AUDIT_SHA256_HEX]);

/* Looks @name up in audit_events[]; NULL if unknown. */
const struct audit_event_info *audit_event_lookup(const char *name);

struct audit_log;

/* Opens @name (one path component, relative to @dirfd) for appending, creating it with mode
 * 0600. Continues the chain from the last complete record; a torn partial last line (a crash
 * mid-write) is replaced by a log.recovered record that gives its offset, length and SHA-256.
 * NULL on failure with @err filled (-EBUSY: another writer holds the file; -EBADMSG: the
 * last complete record is unreadable, run audit_verify). The log owns its fd. */
struct audit_log *audit_open(int dirfd, const char *name, struct cordon_err *err);

/* fdatasync() after every record when @every_record (default off: call audit_sync() at the
 * points that matter, e.g. sandbox.destroy). */
void audit_set_sync(struct audit_log *log, bool every_record);

/* Appends one record in one write(2) (and one more for the rest after a short write). Borrows @fields (a JSON object, or NULL for {}): the
 * caller keeps its reference; overlong strings/arrays are cut in a copy, which then carries
 * "truncated": true. @sandbox_id may be NULL (daemon-wide events). Returns 0, -EINVAL (unknown
 * event, missing required field, bad UTF-8), -E2BIG (still over AUDIT_RECORD_MAX after
 * cutting), or -errno of write/fdatasync. On a failed or short write the next append first
 * repairs the tail with a log.recovered record. */
int audit_append(struct audit_log *log, const char *sandbox_id, const char *event, json_t *fields);

/* fdatasync() the log. */
int audit_sync(struct audit_log *log);

/* Sequence number (0 before the first record) and hex SHA-256 of the last record written,
 * for anchoring the head outside the file. */
uint64_t audit_seq(const struct audit_log *log);
const char *audit_head(const struct audit_log *log);

/* Byte size of the file (the offset the next record will start at). */
off_t audit_size(const struct audit_log *log);

/* True if the file holds no byte at all (not even a torn record). */
bool audit_empty(const struct audit_log *log);

/* Marks the log finished: its mode becomes 0400. A sealed log is never opened for writing
 * again (audit_open fails with -EROFS), and the daemon's restart sweep skips it without
 * reading it. Call after the last record (sandbox.destroy). */
int audit_seal(struct audit_log *log);

/* Closes and frees @log; accepts NULL; returns NULL. audit_close is the same function. */
struct audit_log *audit_free(struct audit_log *log);
#define audit_close audit_free

/* The end of a log, read without opening it for writing: whether it is sealed, empty, ends
 * in a torn record, and the event of its last complete record ("" if none). */
struct audit_tail {
	bool sealed, empty, torn;
	char event[32];
};
int audit_tail(int dirfd, const char *name, struct audit_tail *ret);

enum audit_verify_status {
	AUDIT_VERIFY_OK = 0,
	AUDIT_VERIFY_BAD_JSON,	/* a line is not JSON, or not a v1 record */
	AUDIT_VERIFY_EDITED,	/* a record's bytes changed after it was written */
	AUDIT_VERIFY_REMOVED,	/* a seq gap: records missing */
	AUDIT_VERIFY_REORDERED, /* seq goes backwards or a missing seq appears later */
	AUDIT_VERIFY_TRUNCATED, /* the last line has no newline */
	AUDIT_VERIFY_TOO_LONG,	/* a line over AUDIT_RECORD_MAX */
};

struct audit_verify_result {
	enum audit_verify_status status;
	uint64_t bad_line;   /* 1-based line of the first problem; 0 when OK */
	uint64_t records;    /* records that chained correctly before the problem (or all) */
	uint64_t recoveries; /* log.recovered records seen */
	uint64_t head_seq;   /* seq and hash of the last good record */
	char head_sha256[AUDIT_SHA256_HEX];
	char msg[512]; /* one human-readable line, for `cordon audit verify` */
};

/* Checks that every line of @name parses as a v1 record, seq runs 1, 2, 3... and each prev is
 * the SHA-256 of the line before (the first: 64 zeros). Takes no lock. Returns 0 when intact,
 * -EBADMSG when not (@ret says where and why), other -errno when the file cannot be read
 * (@ret->msg says so). */
int audit_verify(int dirfd, const char *name, struct audit_verify_result *ret);

/* Called with one complete record (@line, @len bytes including its '\n'; not NUL-terminated)
 * that starts at @offset. Return 0 to go on, > 0 to stop after this record, < 0 to stop with
 * that error. */
typedef int (*audit_record_cb)(const char *line, size_t len, off_t offset, void *userdata);

/* Calls @cb for each complete record of @name from byte @offset (0, or a value from
 * @ret_next / audit_size(); it must be a line start, else -EINVAL). A partial last line is not
 * delivered. Sets @ret_next (may be NULL) to the offset to resume from, for following a live
 * log. Returns the number of records delivered, -errno, or @cb's negative return. */
int audit_read_from(int dirfd, const char *name, off_t offset, audit_record_cb cb, void *userdata,
		    off_t *ret_next);
