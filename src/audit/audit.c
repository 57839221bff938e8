/* The audit log writer, verifier and reader. Record format and reasoning: docs/audit.md. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "basic/cleanup.h"
#include "audit/audit.h"

#define DUMP_FLAGS (JSON_COMPACT | JSON_SORT_KEYS)
#define GENESIS	   "0000000000000000000000000000000000000000000000000000000000000000"

#define _cleanup_json_ _cleanup_(json_decrefp)

const struct audit_event_info audit_events[] = {
    {AUDIT_SANDBOX_CREATE, {"template", "runtime", NULL}},
    {AUDIT_SANDBOX_READY, {NULL}},
    {AUDIT_SANDBOX_DESTROY, {"reason", NULL}},
    {AUDIT_SANDBOX_TIMEOUT, {"timeout_s", NULL}},
    {AUDIT_SANDBOX_PAUSE, {NULL}},
    {AUDIT_SANDBOX_RESUME, {"paused_ms", NULL}},
    {AUDIT_SANDBOX_PAUSE_TIMEOUT, {"max_pause_s", NULL}},
    {AUDIT_SANDBOX_SNAPSHOT, {"snapshot", NULL}},
    {AUDIT_SANDBOX_FORK, {"snapshot", "count", NULL}},
    {AUDIT_PROCESS_START, {"argv", "cwd", "user", "env_names", NULL}},
    {AUDIT_CODE_RUN, {"context", "language", "bytes", "sha256", "code", NULL}},
    {AUDIT_PROCESS_EXIT, {"code", "signal", "oom", "timed_out", "duration_ms", "bytes_out", NULL}},
    {AUDIT_FILE_WRITE, {"path", "bytes", NULL}},
    {AUDIT_FILE_REMOVE, {"path", NULL}},
    {AUDIT_FILE_MKDIR, {"path", NULL}},
    {AUDIT_FILE_MOVE, {"from", "to", NULL}},
    {AUDIT_NET_DECISION, {"host", "port", "action", NULL}},
    {AUDIT_POLICY_CHANGE, {"kind", NULL}},
    {AUDIT_API_CALL, {"principal", "method", "path", NULL}},
    {AUDIT_SECRET_MISUSE, {"secret", "host", NULL}},
    {AUDIT_SECRET_USE, {"secret", "host", NULL}},
    {AUDIT_APPROVAL_REQUEST, {"id", "method", "host", "path", NULL}},
    {AUDIT_APPROVAL_DECISION, {"id", "decision", "decider", NULL}},
    {AUDIT_VOLUME_ATTACH, {"name", "path", "read_only", NULL}},
    {AUDIT_VOLUME_DETACH, {"name", "path", "read_only", NULL}},
    {AUDIT_PORT_OPEN, {"connection", "port", NULL}},
    {AUDIT_LOG_RECOVERED, {"reason", "offset", "bytes", "sha256", NULL}},
};
const size_t audit_events_count = ELEMENTSOF(audit_events);

/* Successive cuts tried until a record fits in AUDIT_RECORD_MAX: a huge argv is recorded cut
 * rather than refused, because a refused record means a refused exec. */
static const struct clip_level {
	size_t str, arr;
} clip_levels[] = {
    {AUDIT_STRING_MAX, AUDIT_ARRAY_MAX},
    {1024, 256},
    {256, 64},
    {64, 16},
};

struct audit_log {
	int fd;
	bool sync;
	bool need_repair; /* a write failed part way: the tail may be torn */
	uint64_t seq;
	off_t size; /* end of the last complete record */
	char prev[AUDIT_SHA256_HEX];
};

/* The record being written, one per thread rather than one per log: a record is built and
 * written by one call, and a buffer per log was 64 KiB of cordond's memory per sandbox (its
 * pages touched by calloc() whenever the heap reused them). */
static _Thread_local char record_buf[AUDIT_RECORD_MAX];

const struct audit_event_info *audit_event_lookup(const char *name)
{
	for (size_t i = 0; i < audit_events_count; i++)
		if (strcmp(audit_events[i].name, name) == 0)
			return &audit_events[i];
	return NULL;
}

/* The digest's implementation fetched once: EVP_sha256() makes EVP_Digest() look it up in the
 * provider on every call, and every record of every sandbox is hashed. */
static EVP_MD *sha256;

static void sha256_fetch(void)
{
	sha256 = EVP_MD_fetch(NULL, "SHA2-256", NULL);
}

void audit_sha256_hex(const void *data, size_t len, char ret[AUDIT_SHA256_HEX])
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	static const char hex[] = "0123456789abcdef";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	/* Cannot fail for SHA-256 short of OOM inside OpenSSL; an all-zero hash then makes the
	 * next verify fail loudly rather than pass quietly. */
	pthread_once(&once, sha256_fetch);
	if (!sha256 || !EVP_Digest(data, len, md, &mdlen, sha256, NULL))
		memset(md, 0, sizeof(md));
	for (unsigned int i = 0; i < 32; i++) {
		ret[2 * i] = hex[md[i] >> 4];
		ret[2 * i + 1] = hex[md[i] & 15];
	}
	ret[64] = '\0';
}

static bool is_sha256_hex(const char *s)
{
	size_t n = strspn(s, "0123456789abcdef");
	return n == 64 && s[n] == '\0';
}

static bool name_ok(const char *name)
{
	size_t n = strlen(name);
	return n > 0 && n <= 255 && name[0] != '.' && !strchr(name, '/');
}

static int format_time(char *buf, size_t size)
{
	struct timespec ts;
	struct tm tm;

	if (clock_gettime(CLOCK_REALTIME, &ts) < 0)
		return -errno;
	if (!gmtime_r(&ts.tv_sec, &tm))
		return -EOVERFLOW;
	size_t n = strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
	if (n == 0 ||
	    (size_t)snprintf(buf + n, size - n, ".%03ldZ", ts.tv_nsec / 1000000) >= size - n)
		return -ENOBUFS;
	return 0;
}

/* Cut point of @s at most @max bytes long that does not split a UTF-8 sequence. */
static size_t utf8_cut(const char *s, size_t len, size_t max)
{
	if (len <= max)
		return len;
	while (max > 0 && ((unsigned char)s[max] & 0xC0) == 0x80)
		max--;
	return max;
}

static json_t *clip(json_t *v, const struct clip_level *lv, int depth, bool *truncated);

static json_t *clip_array(json_t *v, const struct clip_level *lv, int depth, bool *truncated)
{
	_cleanup_json_ json_t *a = json_array();
	size_t i;
	json_t *e;

	if (!a)
		return NULL;
	json_array_foreach(v, i, e)
	{
		if (i >= lv->arr) {
			*truncated = true;
			break;
		}
		if (json_array_append_new(a, clip(e, lv, depth + 1, truncated)) < 0)
			return NULL;
	}
	return TAKE_PTR(a);
}

static json_t *clip_object(json_t *v, const struct clip_level *lv, int depth, bool *truncated)
{
	_cleanup_json_ json_t *o = json_object();
	const char *key;
	size_t i = 0;
	json_t *e;

	if (!o)
		return NULL;
	json_object_foreach(v, key, e)
	{
		if (i++ >= lv->arr) {
			*truncated = true;
			break;
		}
		size_t klen = strlen(key), cut = utf8_cut(key, klen, lv->str);
		_cleanup_free_ char *k = strndup(key, cut);
		if (!k)
			return NULL;
		*truncated |= cut < klen;
		if (json_object_set_new(o, k, clip(e, lv, depth + 1, truncated)) < 0)
			return NULL;
	}
	return TAKE_PTR(o);
}

/* A copy of @v within @lv's limits (sets *@truncated if anything was cut); NULL on ENOMEM. */
static json_t *clip(json_t *v, const struct clip_level *lv, int depth, bool *truncated)
{
	if (depth > AUDIT_DEPTH_MAX) {
		*truncated = true;
		return json_null();
	}
	switch (json_typeof(v)) {
	case JSON_STRING: {
		size_t len = json_string_length(v),
		       cut = utf8_cut(json_string_value(v), len, lv->str);
		*truncated |= cut < len;
		return json_stringn_nocheck(json_string_value(v), cut);
	}
	case JSON_ARRAY:
		return clip_array(v, lv, depth, truncated);
	case JSON_OBJECT:
		return clip_object(v, lv, depth, truncated);
	default:
		return json_incref(v); /* numbers, true, false, null: shared, never mutated */
	}
}

/* Serialises one record into record_buf with its newline; returns its length or -errno. */
static ssize_t build_record(struct audit_log *log, const char *sandbox_id, const char *event,
			    json_t *fields)
{
	char t[40];
	int r = format_time(t, sizeof(t));
	if (r < 0)
		return r;

	for (size_t l = 0; l < ELEMENTSOF(clip_levels); l++) {
		bool truncated = false;
		json_t *f = clip(fields, &clip_levels[l], 0, &truncated);
		if (!f)
			return -ENOMEM;
		if (truncated && json_object_set_new(f, "truncated", json_true()) < 0) {
			json_decref(f);
			return -ENOMEM;
		}
		/* "s?" packs NULL as null; "o" steals f even on failure. */
		_cleanup_json_ json_t *rec =
		    json_pack("{s:s, s:o, s:s, s:s?, s:I, s:s, s:i}", "event", event, "fields", f,
			      "prev", log->prev, "sandbox", sandbox_id, "seq",
			      (json_int_t)(log->seq + 1), "t", t, "v", AUDIT_SCHEMA_VERSION);
		if (!rec)
			return -EINVAL; /* sandbox_id not UTF-8, or OOM */
		size_t n = json_dumpb(rec, record_buf, sizeof(record_buf), DUMP_FLAGS);
		if (n == 0)
			return -ENOMEM;
		if (n < sizeof(record_buf)) { /* room for the newline */
			record_buf[n] = '\n';
			return (ssize_t)n + 1;
		}
	}
	return -E2BIG;
}

/* Writes record_buf[0..len) in one write(2) (more only after a short one): appended, or with @over at log->size (over a torn
 * tail; the caller has lifted O_APPEND, which would make pwrite() append). */
static int write_record(struct audit_log *log, size_t len, bool over)
{
	/* A short write (the disk filled up mid-record) is followed by one for the rest, which
	 * either completes the record or says why not (ENOSPC). */
	for (size_t done = 0; done < len;) {
		ssize_t n = over ? pwrite(log->fd, record_buf + done, len - done, log->size + (off_t)done)
				 : write(log->fd, record_buf + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			/* A torn line if anything was written: repaired before the next record. */
			log->need_repair = true;
			return n < 0 ? -errno : -EIO;
		}
		done += (size_t)n;
	}
	log->seq++;
	audit_sha256_hex(record_buf, len, log->prev);
	log->size += (off_t)len;
	return 0;
}

/* Replaces the torn tail @torn (@len bytes from log->size) with a log.recovered record. The
 * record is written over the torn bytes (O_APPEND is lifted for the pwrite), then the file is
 * cut after it: at every crash point the file is complete lines plus at most one partial line
 * without a newline, which the next open repairs in turn. */
static int repair_tail(struct audit_log *log, const char *torn, size_t len)
{
	off_t off = log->size, end = log->size + (off_t)len;
	char sha[AUDIT_SHA256_HEX];
	audit_sha256_hex(torn, len, sha);

	_cleanup_json_ json_t *f =
	    json_pack("{s:s, s:I, s:I, s:s}", "reason", "torn_tail", "offset", (json_int_t)off,
		      "bytes", (json_int_t)len, "sha256", sha);
	if (!f)
		return -ENOMEM;
	ssize_t n = build_record(log, NULL, AUDIT_LOG_RECOVERED, f);
	if (n < 0)
		return (int)n;

	int fl = fcntl(log->fd, F_GETFL);
	if (fl < 0 || fcntl(log->fd, F_SETFL, fl & ~O_APPEND) < 0)
		return -errno;
	int r = write_record(log, (size_t)n, true);
	if (r == 0 && end > log->size && ftruncate(log->fd, log->size) < 0)
		r = -errno;
	if (r == 0 && fdatasync(log->fd) < 0)
		r = -errno;
	if (fcntl(log->fd, F_SETFL, fl) < 0 && r == 0)
		r = -errno;
	if (r == 0)
		log->need_repair = false;
	return r;
}

/* Takes seq and hash from @line (a complete record, newline included). */
static int adopt_record(struct audit_log *log, const char *line, size_t len)
{
	_cleanup_json_ json_t *rec = json_loadb(line, len - 1, 0, NULL);
	json_int_t seq;
	int v;

	if (!rec || json_unpack(rec, "{s:I, s:i}", "seq", &seq, "v", &v) < 0 || seq < 1 ||
	    v != AUDIT_SCHEMA_VERSION)
		return -EBADMSG;
	log->seq = (uint64_t)seq;
	audit_sha256_hex(line, len, log->prev);
	return 0;
}

/* Reads the end of the file: adopts the last complete record, repairs a torn tail. A partial
 * record is shorter than AUDIT_RECORD_MAX, so two records' worth of bytes hold both. */
static int load_tail(struct audit_log *log, struct cordon_err *err)
{
	struct stat st;
	if (fstat(log->fd, &st) < 0)
		return cordon_err_set(err, -errno, "fstat audit log");
	if (!S_ISREG(st.st_mode))
		return cordon_err_setf(err, -EINVAL, "audit log is not a regular file");
	if (!(st.st_mode & S_IWUSR))
		return cordon_err_setf(err, -EROFS, "audit log is sealed (its sandbox ended)");
	if (st.st_size == 0)
		return 0;

	size_t want = st.st_size < 2 * AUDIT_RECORD_MAX ? (size_t)st.st_size : 2 * AUDIT_RECORD_MAX;
	off_t start = st.st_size - (off_t)want;
	_cleanup_free_ char *w = malloc(want);
	if (!w)
		return cordon_err_set(err, -ENOMEM, "audit log tail");
	ssize_t n = pread(log->fd, w, want, start);
	if (n < 0)
		return cordon_err_set(err, -errno, "read audit log tail");
	if ((size_t)n != want)
		return cordon_err_setf(err, -EIO, "audit log shrank while opening");

	char *nl = memrchr(w, '\n', want);
	size_t torn = nl ? want - (size_t)(nl - w) - 1 : want;
	if (torn >= AUDIT_RECORD_MAX || (!nl && start > 0))
		return cordon_err_setf(err, -EBADMSG,
				       "audit log ends in %zu bytes without a newline; run verify",
				       torn);
	if (nl) {
		char *b = memrchr(w, '\n', (size_t)(nl - w));
		b = b ? b + 1 : w;
		if (b == w && start > 0)
			return cordon_err_setf(err, -EBADMSG, "last audit record is too long");
		if (adopt_record(log, b, (size_t)(nl - b) + 1) < 0)
			return cordon_err_setf(err, -EBADMSG,
					       "last audit record is not a v1 record; run verify");
	}
	log->size = st.st_size - (off_t)torn;
	if (torn == 0)
		return 0;
	int r = repair_tail(log, w + want - torn, torn);
	if (r < 0)
		return cordon_err_set(err, r, "repair torn audit log tail");
	return 0;
}

static int open_file(int dirfd, const char *name, struct cordon_err *err)
{
	const int flags = O_RDWR | O_APPEND | O_CLOEXEC | O_NOFOLLOW;
	int fd = openat(dirfd, name, flags | O_CREAT | O_EXCL, 0600);
	if (fd >= 0) {
		/* A new file: make its directory entry durable too. */
		_cleanup_close_ int d = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (d >= 0)
			(void)fsync(d);
		return fd;
	}
	if (errno != EEXIST)
		return cordon_err_set(err, -errno, "create audit log '%s'", name);
	fd = openat(dirfd, name, flags);
	if (fd < 0)
		return cordon_err_set(err, -errno, "open audit log '%s'", name);
	return fd;
}

struct audit_log *audit_open(int dirfd, const char *name, struct cordon_err *err)
{
	if (!name_ok(name)) {
		cordon_err_setf(err, -EINVAL, "bad audit log name '%s'", name);
		return NULL;
	}
	_cleanup_close_ int fd = open_file(dirfd, name, err);
	if (fd < 0)
		return NULL;
	/* One writer per file, or two chains would interleave. flock() belongs to the open file
	 * description, so this also refuses a second open within the same process. */
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		cordon_err_set(err, errno == EWOULDBLOCK ? -EBUSY : -errno,
			       "audit log '%s' is held by another writer", name);
		return NULL;
	}

	struct audit_log *log = calloc(1, sizeof(*log));
	if (!log) {
		cordon_err_set(err, -ENOMEM, "audit log");
		return NULL;
	}
	log->fd = TAKE_FD(fd);
	memcpy(log->prev, GENESIS, sizeof(log->prev));
	if (load_tail(log, err) < 0)
		return audit_free(log);
	return log;
}

void audit_set_sync(struct audit_log *log, bool every_record) { log->sync = every_record; }

/* Repairs the tail after a failed write of our own. */
static int repair_own_tail(struct audit_log *log)
{
	struct stat st;
	if (fstat(log->fd, &st) < 0)
		return -errno;
	if (st.st_size == log->size) { /* nothing reached the file */
		log->need_repair = false;
		return 0;
	}
	size_t torn = (size_t)(st.st_size - log->size);
	if (st.st_size < log->size || torn >= AUDIT_RECORD_MAX)
		return -EBADMSG; /* not ours: someone else touched the file */
	_cleanup_free_ char *b = malloc(torn);
	if (!b)
		return -ENOMEM;
	if (pread(log->fd, b, torn, log->size) != (ssize_t)torn)
		return -EIO;
	return repair_tail(log, b, torn);
}

static int check_fields(const struct audit_event_info *ev, json_t *fields)
{
	if (fields && !json_is_object(fields))
		return -EINVAL;
	for (const char *const *k = ev->required; *k; k++)
		if (!fields || !json_object_get(fields, *k))
			return -EINVAL;
	return 0;
}

int audit_append(struct audit_log *log, const char *sandbox_id, const char *event, json_t *fields)
{
	const struct audit_event_info *ev = event ? audit_event_lookup(event) : NULL;
	if (!ev || check_fields(ev, fields) < 0)
		return -EINVAL;

	int r = log->need_repair ? repair_own_tail(log) : 0;
	if (r < 0)
		return r;

	_cleanup_json_ json_t *empty = fields ? NULL : json_object();
	ssize_t n = build_record(log, sandbox_id, event, fields ? fields : empty);
	if (n < 0)
		return (int)n;
	r = write_record(log, (size_t)n, false);
	if (r < 0)
		return r;
	return log->sync ? audit_sync(log) : 0;
}

int audit_sync(struct audit_log *log) { return fdatasync(log->fd) < 0 ? -errno : 0; }

uint64_t audit_seq(const struct audit_log *log) { return log->seq; }

const char *audit_head(const struct audit_log *log) { return log->prev; }

off_t audit_size(const struct audit_log *log) { return log->size; }

bool audit_empty(const struct audit_log *log)
{
	struct stat st;
	return fstat(log->fd, &st) == 0 && st.st_size == 0;
}

int audit_seal(struct audit_log *log)
{
	return fchmod(log->fd, 0400) < 0 ? -errno : 0;
}

/* The event of the last complete line in @w[0..n), which starts at the file's start if
 * @at_start; -EAGAIN if that line does not fit in @w. */
static int last_event(const char *w, size_t n, bool at_start, char *ret, size_t size)
{
	const char *nl = memrchr(w, '\n', n);
	if (!nl)
		return at_start ? 0 : -EAGAIN;
	const char *b = memrchr(w, '\n', (size_t)(nl - w));
	if (!b && !at_start)
		return -EAGAIN;
	b = b ? b + 1 : w;
	_cleanup_json_ json_t *rec = json_loadb(b, (size_t)(nl - b), 0, NULL);
	const char *ev = json_string_value(json_object_get(rec, "event"));
	snprintf(ret, size, "%s", ev ? ev : "");
	return 0;
}

int audit_tail(int dirfd, const char *name, struct audit_tail *ret)
{
	*ret = (struct audit_tail){};
	if (!name_ok(name))
		return -EINVAL;
	_cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	ret->sealed = !(st.st_mode & S_IWUSR);
	ret->empty = st.st_size == 0;
	if (ret->empty)
		return 0;
	/* Most last records (sandbox.destroy) are short: one small read, and a big one only
	 * when the last line is longer. */
	for (size_t want = 4096;; want = 2 * AUDIT_RECORD_MAX) {
		size_t n = (size_t)st.st_size < want ? (size_t)st.st_size : want;
		_cleanup_free_ char *w = malloc(n);
		if (!w)
			return -ENOMEM;
		if (pread(fd, w, n, st.st_size - (off_t)n) != (ssize_t)n)
			return -EIO;
		ret->torn = w[n - 1] != '\n';
		int r = last_event(w, n, n == (size_t)st.st_size, ret->event, sizeof(ret->event));
		if (r != -EAGAIN || want > 4096)
			return r == -EAGAIN ? -EBADMSG : r;
	}
}

struct audit_log *audit_free(struct audit_log *log)
{
	if (!log)
		return NULL;
	closep(&log->fd);
	free(log);
	return NULL;
}

/* Bounded line reader over pread(): never holds more than two records, whatever the file. */
struct line_reader {
	int fd;
	off_t pos; /* file offset of buf[start] */
	size_t start, end;
	bool eof;
	char buf[2 * AUDIT_RECORD_MAX];
};

enum { LINE_EOF = 0, LINE_OK = 1, LINE_TORN = 2, LINE_TOO_LONG = 3 };

/* Next line into @ret_line and @ret_len (newline included; for LINE_TORN the partial bytes) at
 * file offset *@ret_off. Returns a LINE_* value or -errno. */
static int line_next(struct line_reader *lr, const char **ret_line, size_t *ret_len, off_t *ret_off)
{
	for (;;) {
		char *s = lr->buf + lr->start;
		size_t have = lr->end - lr->start;
		char *nl = memchr(s, '\n', have);
		if (nl || (lr->eof && have > 0)) {
			size_t len = nl ? (size_t)(nl - s) + 1 : have;
			*ret_line = s;
			*ret_len = len;
			*ret_off = lr->pos;
			lr->start += len;
			lr->pos += (off_t)len;
			return nl ? LINE_OK : LINE_TORN;
		}
		if (lr->eof)
			return LINE_EOF;
		if (have >= AUDIT_RECORD_MAX)
			return LINE_TOO_LONG;
		memmove(lr->buf, s, have);
		lr->start = 0;
		lr->end = have;
		ssize_t n =
		    pread(lr->fd, lr->buf + have, sizeof(lr->buf) - have, lr->pos + (off_t)have);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		lr->end += (size_t)n;
		lr->eof = n == 0;
	}
}

static struct line_reader *line_reader_new(int fd, off_t pos)
{
	struct line_reader *lr = calloc(1, sizeof(*lr));
	if (lr) {
		lr->fd = fd;
		lr->pos = pos;
	}
	return lr;
}

/* The verifier's state between lines. */
struct verify {
	struct audit_verify_result *res;
	struct line_reader *lr;
	uint64_t line;
	char prev[AUDIT_SHA256_HEX];
};

_printf_(4, 5) static int verify_fail(struct verify *vf, enum audit_verify_status status,
				      uint64_t line, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(vf->res->msg, sizeof(vf->res->msg), "line %" PRIu64 ": ", line);
	va_start(ap, fmt);
	vsnprintf(vf->res->msg + n, sizeof(vf->res->msg) - (size_t)n, fmt, ap);
	va_end(ap);
	vf->res->status = status;
	vf->res->bad_line = line;
	return -EBADMSG;
}

/* seq of a line, or -1 if it has none. */
static json_int_t line_seq(const char *line, size_t len)
{
	_cleanup_json_ json_t *rec = json_loadb(line, len, 0, NULL);
	json_int_t seq;
	return rec && json_unpack(rec, "{s:I}", "seq", &seq) == 0 ? seq : -1;
}

/* The line of the rest of the file holding @seq, or 0. Runs only after a failure. */
static uint64_t find_seq_ahead(struct verify *vf, uint64_t seq)
{
	const char *l;
	size_t len;
	off_t off;

	for (uint64_t line = vf->line + 1; line_next(vf->lr, &l, &len, &off) == LINE_OK; line++)
		if (line_seq(l, len - 1) == (json_int_t)seq)
			return line;
	return 0;
}

/* Checks seq and prev of a parsed record against the line before it. */
static int verify_chain(struct verify *vf, uint64_t seq, const char *prev)
{
	uint64_t want = vf->res->head_seq + 1;
	bool chained = strcmp(prev, vf->prev) == 0;

	if (seq == want && chained)
		return 0;
	if (seq == want && vf->line == 1)
		return verify_fail(
		    vf, AUDIT_VERIFY_EDITED, 1,
		    "record edited: prev of the first record is not the genesis value");
	if (seq == want)
		return verify_fail(vf, AUDIT_VERIFY_EDITED, vf->line - 1,
				   "record edited: its SHA-256 %s is not the prev of line %" PRIu64
				   " (%.16s...), or that prev was edited",
				   vf->prev, vf->line, prev);
	if (chained)
		return verify_fail(vf, AUDIT_VERIFY_EDITED, vf->line,
				   "record edited: seq is %" PRIu64 ", expected %" PRIu64, seq,
				   want);
	if (seq < want)
		return verify_fail(vf, AUDIT_VERIFY_REORDERED, vf->line,
				   "records reordered or replayed: seq %" PRIu64
				   " after seq %" PRIu64,
				   seq, want - 1);
	uint64_t at = find_seq_ahead(vf, want);
	if (at)
		return verify_fail(vf, AUDIT_VERIFY_REORDERED, vf->line,
				   "records reordered: seq %" PRIu64 " where %" PRIu64
				   " was expected; seq %" PRIu64 " is at line %" PRIu64,
				   seq, want, want, at);
	return verify_fail(vf, AUDIT_VERIFY_REMOVED, vf->line,
			   "record(s) removed: seq gap, %" PRIu64 " follows %" PRIu64 " (%" PRIu64
			   " missing)",
			   seq, want - 1, seq - want);
}

static int verify_line(struct verify *vf, const char *l, size_t len)
{
	json_error_t jerr;
	_cleanup_json_ json_t *rec = json_loadb(l, len - 1, JSON_REJECT_DUPLICATES, &jerr);
	if (!rec)
		return verify_fail(vf, AUDIT_VERIFY_BAD_JSON, vf->line, "bad JSON: %s at column %d",
				   jerr.text, jerr.column);

	json_int_t seq, v;
	const char *prev, *event, *t;
	json_t *fields, *sandbox;
	if (json_unpack_ex(rec, &jerr, JSON_STRICT, "{s:s, s:o, s:s, s:o, s:I, s:s, s:I}", "event",
			   &event, "fields", &fields, "prev", &prev, "sandbox", &sandbox, "seq",
			   &seq, "t", &t, "v", &v) < 0)
		return verify_fail(vf, AUDIT_VERIFY_BAD_JSON, vf->line,
				   "bad JSON: not a record: %s", jerr.text);
	if (v != AUDIT_SCHEMA_VERSION)
		return verify_fail(vf, AUDIT_VERIFY_BAD_JSON, vf->line,
				   "bad JSON: schema version %" JSON_INTEGER_FORMAT " unknown", v);
	if (seq < 1 || !is_sha256_hex(prev) || !json_is_object(fields) ||
	    !(json_is_string(sandbox) || json_is_null(sandbox)))
		return verify_fail(vf, AUDIT_VERIFY_BAD_JSON, vf->line,
				   "bad JSON: malformed seq, prev, fields or sandbox");

	int r = verify_chain(vf, (uint64_t)seq, prev);
	if (r < 0)
		return r;
	audit_sha256_hex(l, len, vf->prev);
	vf->res->records++;
	vf->res->head_seq = (uint64_t)seq;
	vf->res->recoveries += strcmp(event, AUDIT_LOG_RECOVERED) == 0;
	return 0;
}

static int verify_stream(struct verify *vf)
{
	for (;;) {
		const char *l;
		size_t len;
		off_t off;
		int r = line_next(vf->lr, &l, &len, &off);
		if (r < 0) {
			snprintf(vf->res->msg, sizeof(vf->res->msg), "read: %s", strerror(-r));
			return r;
		}
		if (r == LINE_EOF)
			return 0;
		vf->line++;
		if (r == LINE_TOO_LONG)
			return verify_fail(vf, AUDIT_VERIFY_TOO_LONG, vf->line,
					   "record longer than %d bytes", AUDIT_RECORD_MAX);
		if (r == LINE_TORN)
			return verify_fail(
			    vf, AUDIT_VERIFY_TRUNCATED, vf->line,
			    "truncated tail: %zu bytes at offset %jd without a newline "
			    "(crash mid-write or cut file)",
			    len, (intmax_t)off);
		r = verify_line(vf, l, len);
		if (r < 0)
			return r;
	}
}

int audit_verify(int dirfd, const char *name, struct audit_verify_result *ret)
{
	*ret = (struct audit_verify_result){};
	memcpy(ret->head_sha256, GENESIS, sizeof(ret->head_sha256));

	/* No O_NOFOLLOW: an operator's tool, given any path. */
	_cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int r = -errno;
		snprintf(ret->msg, sizeof(ret->msg), "open '%s': %s", name, strerror(-r));
		return r;
	}
	_cleanup_free_ struct line_reader *lr = line_reader_new(fd, 0);
	if (!lr)
		return -ENOMEM;
	struct verify vf = {.res = ret, .lr = lr};
	memcpy(vf.prev, GENESIS, sizeof(vf.prev));

	int r = verify_stream(&vf);
	memcpy(ret->head_sha256, vf.prev, sizeof(ret->head_sha256));
	if (r < 0)
		return r;
	snprintf(ret->msg, sizeof(ret->msg),
		 "OK: %" PRIu64 " records, head seq %" PRIu64 " sha256 %s; %" PRIu64
		 " log.recovered",
		 ret->records, ret->head_seq, ret->head_sha256, ret->recoveries);
	return 0;
}

/* True if @offset is 0 or just after a newline. */
static int at_line_start(int fd, off_t offset)
{
	char c;
	if (offset == 0)
		return 0;
	ssize_t n = pread(fd, &c, 1, offset - 1);
	if (n < 0)
		return -errno;
	return n == 1 && c == '\n' ? 0 : -EINVAL;
}

int audit_read_from(int dirfd, const char *name, off_t offset, audit_record_cb cb, void *userdata,
		    off_t *ret_next)
{
	if (offset < 0 || !name_ok(name))
		return -EINVAL;
	_cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	int r = at_line_start(fd, offset);
	if (r < 0)
		return r;
	_cleanup_free_ struct line_reader *lr = line_reader_new(fd, offset);
	if (!lr)
		return -ENOMEM;

	int count = 0;
	off_t next = offset;
	for (;;) {
		const char *l;
		size_t len;
		off_t off;
		r = line_next(lr, &l, &len, &off);
		if (r == LINE_TOO_LONG)
			r = -EBADMSG;
		if (r < 0 || r == LINE_EOF || r == LINE_TORN)
			break;
		int c = cb(l, len, off, userdata);
		if (c < 0) {
			r = c;
			break;
		}
		next = off + (off_t)len;
		count++;
		if (c > 0 || count == INT32_MAX)
			break;
	}
	if (ret_next)
		*ret_next = next;
	return r < 0 ? r : count;
}
