/* File operations in a sandbox. The daemon never opens a path of a sandbox itself: cordon-init
 * does, inside the sandbox, as the sandbox's user, with openat2(RESOLVE_NO_MAGICLINKS) and
 * regular-file checks. No symlink, "..", hard link or race can then reach outside the
 * sandbox, because the one resolving the path cannot see outside. The daemon relays bytes,
 * bounds them, and checks that the agent's answers match the question.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "basic/fileio.h"
#include "basic/tar.h"
#include "basic/utf8.h"
#include "audit/audit.h"
#include "daemon/daemon.h"
#include "daemon/service.h"
#include "lib/frame.h"

#define FILEOP_TIMEOUT_MS 60000
#define MAX_LIST_ENTRIES  100000
/* Chunks of a spooled upload (svc_upload.fd) in flight to the agent at once: the host holds
 * that much of it in memory, whatever its size. */
#define PUT_WINDOW 4

enum fkind { F_GET, F_PUT, F_DELETE, F_LIST, F_STAT, F_MKDIR, F_MOVE, F_ARCHIVE_GET,
	     F_ARCHIVE_PUT };

struct fileop {
	struct chan ch; /* the agent channel of its requests and answers */
	struct sbx *s;
	enum fkind kind;
	struct svc_reply *rep;      /* NULL once answered or gone */
	unsigned expect;	    /* terminal replies (OK, ERROR, FILE_INFO of a stat) due */
	bool stat_stage, failed;
	struct evbuffer *data;
	json_t *entries;
	uint64_t list_offset; /* F_LIST: where this page starts in the walk (?cursor=) */
	uint64_t list_passed; /* F_LIST: how far the agent's walk got past it */
	bool list_truncated;
	bool list_omitted;    /* F_LIST: entries with paths too long to list were passed */
	char *path;
	struct tar_reader *tar; /* F_ARCHIVE_GET: the sandbox's tar, checked as it comes */
	int spool;		/* F_GET, F_ARCHIVE_GET: where it goes past ARCHIVE_MEM_BYTES, or -1 */
	uint64_t spooled;	/* bytes in the spool */
	uint64_t archive_bytes, archive_entries; /* F_ARCHIVE_PUT: what the answer says */
	const uint8_t *body;	/* F_ARCHIVE_PUT: the request's, sent a chunk per OK while the */
	size_t body_len, body_off; /* client waits (then it is there); END once it left */
	bool end_sent;
	int in_fd;		/* F_PUT, F_ARCHIVE_PUT: the spooled upload (a dup), or -1 */
	uint8_t *in_buf;	/* a chunk of it, read for the frame that sends it */
	uint64_t in_off;	/* F_PUT: how much of it went */
	uint64_t in_base;	/* where in in_fd the upload begins (a multipart part) */
	struct event *watchdog;
	struct fileop *next;
};

/* Answers @op's client with an error, if it still waits. */
static void op_fail(struct fileop *op, enum api_error code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void op_fail(struct fileop *op, enum api_error code, const char *fmt, ...)
{
	struct svc_err err = {.code = code};
	va_list ap;
	if (!op->rep)
		return;
	va_start(ap, fmt);
	vsnprintf(err.msg, sizeof(err.msg), fmt, ap);
	va_end(ap);
	op->rep->error(op->rep, &err);
	op->rep = NULL;
}

static void fileop_free(struct fileop *op)
{
	for (struct fileop **q = &op->s->ops; *q; q = &(*q)->next)
		if (*q == op) {
			*q = op->next;
			break;
		}
	sbx_chan_del(op->s, &op->ch);
	op_fail(op, API_ERR_CONFLICT, "the sandbox was destroyed");
	if (op->watchdog)
		event_free(op->watchdog);
	if (op->data)
		evbuffer_free(op->data);
	if (op->spool >= 0)
		close(op->spool);
	if (op->in_fd >= 0)
		close(op->in_fd);
	free(op->in_buf);
	json_decref(op->entries);
	free(op->tar);
	free(op->path);
	free(op);
}

static void fileop_close(struct chan *ch)
{
	fileop_free(OWNER_OF(ch, struct fileop, ch)); /* answers 409: the sandbox was destroyed */
}

static void on_gone(void *arg)
{
	struct fileop *op = arg;
	op->rep = NULL; /* the client left; the agent's answer is taken and dropped */
}

static void on_watchdog(evutil_socket_t fd, short what, void *arg)
{
	struct fileop *op = arg;
	if (!sbx_watchdog_defer(op->s, op->watchdog))
		sbx_agent_failed(op->s, "a file operation got no answer");
}

static const char *type_name(uint32_t t)
{
	static const char *const names[] = {[FRAME_FT_FILE] = "file", [FRAME_FT_DIR] = "dir",
					    [FRAME_FT_SYMLINK] = "symlink"};
	return t < ELEMENTSOF(names) && names[t] ? names[t] : "other";
}

/* Sets @key of @o to @s. A name in a sandbox is any bytes but NUL and '/', which a JSON string
 * cannot carry when they are not UTF-8: then @key holds it with U+FFFD for each invalid byte
 * (for people) and @key + "_b64" the exact bytes, base64 (for programs: percent-encode them in
 * ?path= to reach the file). */
void json_set_name(json_t *o, const char *key, const char *s)
{
	json_t *v = json_string(s);
	if (v) {
		json_object_set_new(o, key, v);
		return;
	}
	size_t n;
	char b64key[40];
	_cleanup_free_ char *b64 = base64_encode(s, strlen(s), &n);
	snprintf(b64key, sizeof(b64key), "%s_b64", key);
	json_object_set_new(o, key, json_from_bytes_utf8(s, strlen(s)));
	if (b64)
		json_object_set_new(o, b64key, json_stringn(b64, n));
}

/* The audit fields of a file operation on @path (and @to): a path that is not UTF-8 is
 * recorded too, exactly (json_set_name()), never refused for want of a record. */
static json_t *audit_paths(const char *key, const char *path, const char *key2, const char *to)
{
	json_t *o = json_object();
	if (o) {
		json_set_name(o, key, path);
		if (key2)
			json_set_name(o, key2, to);
	}
	return o;
}

static json_t *entry_json(const struct fileop *op, const struct frame_file_info *fi)
{
	char t[40], path[API_MAX_PATH + FRAME_MAX_PATH + 8];
	const char *name = strrchr(fi->name, '/') ? strrchr(fi->name, '/') + 1 : fi->name;
	if (op->kind == F_LIST)
		snprintf(path, sizeof(path), "%s%s%s", op->path,
			 op->path[strlen(op->path) - 1] == '/' ? "" : "/", fi->name);
	else
		snprintf(path, sizeof(path), "%s", op->path);
	json_t *o = json_pack("{s:s, s:I, s:i, s:s}", "type", type_name(fi->type), "size",
			      (json_int_t)fi->size, "mode", (int)(fi->mode & 07777), "mtime",
			      iso_time(fi->mtime_ns / 1000000, t));
	if (!o)
		return NULL;
	json_set_name(o, "name", name);
	json_set_name(o, "path", path);
	if (fi->target)
		json_set_name(o, "symlink_target", fi->target);
	return o;
}

/* ---- a file or an archive out of a sandbox, spooled ----
 *
 * The first ARCHIVE_MEM_BYTES of a sandbox's file or tar stay in memory; past them all of it
 * goes to an unlinked file in the state directory (the sandboxes' disks are on its filesystem
 * too), which the reply sends as a file segment (sendfile): a 4 GiB file or directory costs
 * cordond no more memory than an 8 MiB one. The writes are to the page cache, on the loop. */
static int spool_write(struct fileop *op, const void *p, size_t n)
{
	int r = write_all(op->spool, p, n);
	if (r == 0)
		op->spooled += n;
	return r;
}

static int spool_add(struct fileop *op, const void *p, size_t n)
{
	if (op->spool < 0 && evbuffer_get_length(op->data) + n <= ARCHIVE_MEM_BYTES)
		return evbuffer_add(op->data, p, n) < 0 ? -ENOMEM : 0;
	if (op->spool < 0) {
		op->spool = open(D.cfg.state_dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
		if (op->spool < 0)
			return -errno;
		while (evbuffer_get_length(op->data) > 0) { /* what memory held, in its chunks */
			int w = evbuffer_write(op->data, op->spool);
			if (w <= 0)
				return w < 0 ? -errno : -EIO;
			op->spooled += (uint64_t)w;
		}
	}
	return spool_write(op, p, n);
}

/* The spool, if any, as the reply buffer's one segment (the buffer closes it). Marked as
 * draining to an fd, the buffer keeps it a sendfile segment, which moves into the socket's
 * output as it is; otherwise libevent would map or read the whole file into memory. */
static int spool_done(struct fileop *op)
{
	if (op->spool < 0)
		return 0;
	evbuffer_set_flags(op->data, EVBUFFER_FLAG_DRAINS_TO_FD);
	if (evbuffer_add_file(op->data, op->spool, 0, (ev_off_t)op->spooled) < 0)
		return errno = EIO, -1;
	op->spool = -1;
	return 0;
}

static void answer(struct fileop *op, int status, json_t *body)
{
	if (!op->rep) {
		json_decref(body);
		return;
	}
	if ((op->kind == F_GET || op->kind == F_ARCHIVE_GET) && spool_done(op) < 0)
		op_fail(op, API_ERR_INTERNAL, "%s: the spool: %s", op->path, strerror(errno));
	else if (op->kind == F_GET)
		op->rep->bytes(op->rep, "application/octet-stream", op->data);
	else if (op->kind == F_ARCHIVE_GET)
		op->rep->bytes(op->rep, "application/x-tar", op->data);
	else
		op->rep->json(op->rep, status, body);
	op->rep = NULL;
}

static int send_stat(struct fileop *op)
{
	struct frame_file st = {.path = op->path, .user = FRAME_USER_USER};
	op->stat_stage = true;
	op->expect = 1;
	return sbx_send(op->s, FRAME_FILE_STAT, op->ch.id, &st);
}

/* A page of a listing: {entries, truncated, next_cursor when truncated, omitted when some
 * entries could not be listed}. The cursor is opaque
 * to clients; today it is the number of entries of the walk before the next page. */
static json_t *list_json(const struct fileop *op)
{
	json_t *o = json_pack("{s:O, s:b}", "entries", op->entries, "truncated", op->list_truncated);
	if (o && op->list_omitted)
		json_object_set_new(o, "omitted", json_true());
	if (o && op->list_truncated) {
		char cur[32];
		snprintf(cur, sizeof(cur), "%llu", (unsigned long long)(op->list_offset + op->list_passed));
		json_object_set_new(o, "next_cursor", json_string(cur));
	}
	return o;
}

/* The archive is whole: it must have ended as a tar does. */
static void archive_done(struct fileop *op)
{
	if (tar_reader_finish(op->tar) < 0)
		op_fail(op, API_ERR_UNSAFE_ARCHIVE, "%s: the sandbox's archive is malformed: %s",
			op->path, op->tar->why);
	else
		answer(op, 200, NULL);
}

/* Every expected reply is in: answer, or go on to the stat that some operations end with. */
static void settle(struct fileop *op)
{
	if (op->expect > 0)
		return;
	if (!op->failed && !op->stat_stage && (op->kind == F_PUT || op->kind == F_MKDIR)) {
		if (send_stat(op) == 0)
			return;
		op->failed = true;
	}
	if (!op->failed) {
		if (op->kind == F_LIST)
			answer(op, 200, list_json(op));
		else if (op->kind == F_GET)
			answer(op, 200, NULL);
		else if (op->kind == F_ARCHIVE_GET)
			archive_done(op);
		else if (op->kind == F_ARCHIVE_PUT)
			answer(op, 200, json_pack("{s:I, s:I}", "entries", (json_int_t)op->archive_entries,
						  "bytes", (json_int_t)op->archive_bytes));
		else if (op->kind == F_DELETE || op->kind == F_MOVE)
			answer(op, 204, NULL);
	} else {
		op_fail(op, API_ERR_INTERNAL, "the file operation failed");
	}
	fileop_free(op);
}

/* What the agent ran into, for the errnos whose meaning inside a sandbox differs from the
 * host's; every other errno goes through the one table, api_error_from_errno(). A full disk
 * in a sandbox is the user's to clear (no_space), not the host's capacity (503); EINVAL from
 * the agent means a path it will not use (not a regular file, ".", ".."). */
static const struct {
	int errnum;
	enum api_error e;
} sandbox_errors[] = {
	{ENOSPC, API_ERR_NO_SPACE},
	{EDQUOT, API_ERR_NO_SPACE},
	{EINVAL, API_ERR_INVALID_PATH},
	{EAGAIN, API_ERR_CONFLICT},
};

enum api_error file_error(uint32_t errnum)
{
	for (size_t i = 0; i < ELEMENTSOF(sandbox_errors); i++)
		if ((uint32_t)sandbox_errors[i].errnum == errnum)
			return sandbox_errors[i].e;
	return errnum > 0 && errnum < 4096 ? api_error_from_errno(-(int)errnum) : API_ERR_INTERNAL;
}

/* The agent's ERROR, told to @op's client if it still waits. */
static int error_answer(struct fileop *op, const struct frame *f)
{
	struct frame_error e;
	if (frame_msg_parse(f->type, f->payload, f->len, &e) < 0)
		return -EPROTO;
	if (op->rep) {
		/* The path as the client gave it, made printable; the errno's own text (the
		 * agent's message names only its frame type). */
		size_t n = strlen(op->path);
		_cleanup_free_ char *p = malloc(3 * n + 1);
		if (p)
			p[utf8_clean((const uint8_t *)op->path, n, p, false, NULL)] = '\0';
		op_fail(op, file_error(e.errnum), "%s: %s", p ? p : "path",
			e.errnum > 0 && e.errnum < 4096 ? strerror((int)e.errnum) : "error");
	}
	op->failed = true;
	return 0;
}

static int on_error(struct fileop *op, const struct frame *f)
{
	if (error_answer(op, f) < 0)
		return -EPROTO;
	op->expect--;
	settle(op);
	return 0;
}

static int on_info(struct fileop *op, const struct frame *f)
{
	struct frame_file_info fi;
	if (frame_msg_parse(f->type, f->payload, f->len, &fi) < 0)
		return -EPROTO;
	if (op->kind == F_LIST && !op->stat_stage) {
		if (json_array_size(op->entries) >= MAX_LIST_ENTRIES)
			return -EPROTO;
		json_array_append_new(op->entries, entry_json(op, &fi));
		return 0;
	}
	if (!op->stat_stage && op->kind != F_STAT)
		return -EPROTO;
	if (!op->failed)
		answer(op, 200, entry_json(op, &fi));
	op->expect--;
	settle(op);
	return 0;
}

/* A chunk of the sandbox's tar: checked before it is kept, so that what the client gets is
 * an archive safe to unpack (tar.h), or a 4xx naming what was wrong. */
static int on_archive_data(struct fileop *op, const struct frame_data *d)
{
	if (op->failed)
		return 0;
	int r = tar_reader_feed(op->tar, d->data, d->len, NULL, NULL), w = 0;
	if (r == -EFBIG)
		op_fail(op, API_ERR_PAYLOAD_TOO_LARGE, "%s: more than %llu bytes or %u entries",
			op->path, MAX_ARCHIVE_BYTES, MAX_ARCHIVE_ENTRIES);
	else if (r < 0)
		op_fail(op, API_ERR_UNSAFE_ARCHIVE, "%s: refused: %s", op->path, op->tar->why);
	else if ((w = spool_add(op, d->data, d->len)) < 0)
		op_fail(op, w == -ENOSPC ? API_ERR_INSUFFICIENT_STORAGE : API_ERR_INTERNAL,
			"%s: the archive's spool: %s", op->path, strerror(-w));
	op->failed = op->failed || r < 0 || w < 0 || !op->rep;
	return 0;
}

/* A chunk of a file: kept (spooled past ARCHIVE_MEM_BYTES) up to --max-download bytes; the
 * agent reads one byte more than that, so a larger file is told from one of exactly the
 * maximum, and refused with 413 naming the limit. */
static int on_file_data(struct fileop *op, const struct frame_data *d)
{
	bool over = evbuffer_get_length(op->data) + op->spooled + d->len > D.cfg.max_download;
	int w = 0;
	if (op->failed)
		return 0;
	if (over)
		op_fail(op, API_ERR_PAYLOAD_TOO_LARGE, "%s: larger than --max-download (%llu bytes)",
			op->path, (unsigned long long)D.cfg.max_download);
	else if ((w = spool_add(op, d->data, d->len)) < 0)
		op_fail(op, w == -ENOSPC ? API_ERR_INSUFFICIENT_STORAGE : API_ERR_INTERNAL,
			"%s: the spool: %s", op->path, strerror(-w));
	op->failed = over || w < 0 || !op->rep;
	return 0;
}

static int on_data(struct fileop *op, const struct frame *f)
{
	struct frame_data d;
	if (frame_msg_parse(f->type, f->payload, f->len, &d) < 0)
		return -EPROTO;
	if (op->kind == F_ARCHIVE_GET)
		return on_archive_data(op, &d);
	return op->kind == F_GET ? on_file_data(op, &d) : -EPROTO;
}

/* The next chunk of an archive upload, on the last one's answer; an empty END when the
 * client left or the agent refused a chunk, so that the agent ends the job. */
static int archive_next(struct fileop *op)
{
	size_t left = op->rep && !op->failed ? op->body_len - op->body_off : 0;
	size_t n = left < FRAME_MAX_DATA ? left : FRAME_MAX_DATA;
	const uint8_t *data = op->in_fd >= 0 ? op->in_buf : op->body + op->body_off;
	if (n && op->in_fd >= 0 && pread(op->in_fd, op->in_buf, n, (off_t)(op->in_base + op->body_off)) != (ssize_t)n)
		return -EIO;
	struct frame_file m = {.path = op->path, .user = FRAME_USER_USER,
			       .data = data, .data_len = (uint32_t)n,
			       .flags = n == left ? FRAME_ARCHIVE_END : 0};
	op->end_sent = n == left;
	op->body_off += n;
	int r = sbx_send(op->s, FRAME_ARCHIVE_WRITE, op->ch.id, &m);
	if (r == 0)
		op->expect++;
	return r;
}

/* The next chunk of a spooled upload, read from its file into the one buffer (sbx_send
 * copies it out). */
static int put_next(struct fileop *op, uint64_t len)
{
	uint64_t left = len - op->in_off;
	size_t n = left < FRAME_MAX_DATA ? (size_t)left : FRAME_MAX_DATA;
	if (pread(op->in_fd, op->in_buf, n, (off_t)(op->in_base + op->in_off)) != (ssize_t)n)
		return -EIO;
	struct frame_file m = {.path = op->path, .user = FRAME_USER_USER, .mode = 0644,
			       .offset = op->in_off, .data = op->in_buf, .data_len = (uint32_t)n,
			       .flags = op->in_off == 0 ? FRAME_WRITE_CREATE | FRAME_WRITE_TRUNC : 0};
	int r = sbx_send(op->s, FRAME_FILE_WRITE, op->ch.id, &m);
	if (r == 0) {
		op->expect++;
		op->in_off += n;
	}
	return r;
}

static int fileop_frame(struct chan *ch, const struct frame *f)
{
	struct fileop *op = OWNER_OF(ch, struct fileop, ch);
	if (op->expect == 0)
		return -EPROTO; /* an answer nobody asked for */
	if (op->kind == F_PUT && op->in_fd >= 0 && f->type == FRAME_OK && !op->failed &&
	    op->in_off < op->body_len) {
		/* a chunk's answer: the window moves on */
		op->expect--;
		if (put_next(op, op->body_len) < 0) {
			op->failed = true;
			settle(op);
		}
		return 0;
	}
	if (op->kind == F_ARCHIVE_PUT && !op->end_sent &&
	    (f->type == FRAME_OK || f->type == FRAME_ERROR)) {
		/* a chunk's answer: the next one goes, or the END that ends the agent's job */
		if (f->type == FRAME_ERROR && error_answer(op, f) < 0)
			return -EPROTO;
		op->expect--;
		if (archive_next(op) < 0) {
			op->failed = true;
			settle(op);
		}
		return 0;
	}
	switch (f->type) {
	case FRAME_FILE_DATA:
		return on_data(op, f);
	case FRAME_FILE_INFO:
		return on_info(op, f);
	case FRAME_ERROR:
		return on_error(op, f);
	case FRAME_OK:
		if (op->stat_stage)
			return -EPROTO;
		if (op->kind == F_LIST) {
			struct frame_ok ok;
			if (frame_msg_parse(f->type, f->payload, f->len, &ok) < 0)
				return -EPROTO;
			op->list_truncated = ok.flags & FRAME_OK_TRUNCATED;
			op->list_omitted = ok.flags & FRAME_OK_OMITTED;
			op->list_passed = ok.size;
		}
		op->expect--;
		settle(op);
		return 0;
	default:
		return -EPROTO;
	}
}

static const struct chan_ops fileop_chan = {.frame = fileop_frame, .close = fileop_close};

/* ---- the file service (service.h) ---- */

static struct fileop *op_new(struct sbx *s, enum fkind kind, const char *path,
			     struct svc_reply *rp, struct svc_err *err)
{
	struct fileop *op = calloc(1, sizeof(*op));
	if (!op) {
		svc_fail(err, API_ERR_INTERNAL, "out of memory");
		return NULL;
	}
	*op = (struct fileop){.s = s, .kind = kind, .expect = 1, .spool = -1, .in_fd = -1,
			      .next = s->ops};
	s->ops = op;
	sbx_chan_add(s, &op->ch, &fileop_chan);
	op->path = strdup(path);
	op->watchdog = evtimer_new(D.base, on_watchdog, op);
	op->data = kind == F_GET || kind == F_ARCHIVE_GET ? evbuffer_new() : NULL;
	op->tar = kind == F_ARCHIVE_GET ? malloc(sizeof(*op->tar)) : NULL;
	if (op->tar) {
		tar_reader_init(op->tar, MAX_ARCHIVE_BYTES, MAX_ARCHIVE_ENTRIES);
		op->tar->abs_links = true; /* the sandbox's own paths (tar.h) */
	}
	op->entries = kind == F_LIST ? json_array() : NULL;
	if (!op->path || !op->watchdog || (kind == F_GET && !op->data) ||
	    (kind == F_ARCHIVE_GET && (!op->data || !op->tar)) ||
	    (kind == F_LIST && !op->entries)) {
		fileop_free(op);
		svc_fail(err, API_ERR_INTERNAL, "out of memory");
		return NULL;
	}
	struct timeval tv = {FILEOP_TIMEOUT_MS / 1000, 0};
	evtimer_add(op->watchdog, &tv);
	op->rep = rp; /* ours from now on */
	rp->gone = on_gone;
	rp->gone_arg = op;
	return op;
}

/* The record (if any) first, then @type with @msg on a new operation's channel. */
static struct fileop *run_op(struct sbx *s, enum fkind kind, uint16_t type,
			     struct frame_file *msg, const char *audit_event, json_t *audit_fields,
			     struct svc_reply *rp, struct svc_err *err)
{
	if (audit_event && sbx_audit_rc(s, audit_event, audit_fields) < 0) {
		svc_fail(err, API_ERR_AUDIT_UNAVAILABLE, "the audit log cannot be written: nothing was done");
		return NULL;
	}
	struct fileop *op = op_new(s, kind, msg->path, rp, err);
	if (!op)
		return NULL;
	msg->user = FRAME_USER_USER;
	int r = sbx_send(s, type, op->ch.id, msg);
	if (r < 0) {
		op->rep = NULL; /* the caller's again, to render @err */
		svc_fail(err, api_error_from_errno(r), "cannot reach the sandbox's agent");
		fileop_free(op);
		return NULL;
	}
	return op;
}

int svc_file_get(struct sbx *s, const char *path, struct svc_reply *rp, struct svc_err *err)
{
	struct frame_file m = {.path = path, .length = D.cfg.max_download + 1};
	return run_op(s, F_GET, FRAME_FILE_READ, &m, NULL, NULL, rp, err) ? 0 : -1;
}

int svc_file_stat(struct sbx *s, const char *path, struct svc_reply *rp, struct svc_err *err)
{
	struct frame_file m = {.path = path};
	return run_op(s, F_STAT, FRAME_FILE_STAT, &m, NULL, NULL, rp, err) ? 0 : -1;
}

int svc_file_list(struct sbx *s, const char *path, unsigned depth, uint64_t cursor,
		  struct svc_reply *rp, struct svc_err *err)
{
	struct frame_file m = {.path = path, .depth = depth, .offset = cursor};
	struct fileop *op = run_op(s, F_LIST, FRAME_FILE_LIST, &m, NULL, NULL, rp, err);
	if (op)
		op->list_offset = cursor;
	return op ? 0 : -1;
}

int svc_file_delete(struct sbx *s, const char *path, struct svc_reply *rp, struct svc_err *err)
{
	struct frame_file m = {.path = path, .flags = FRAME_REMOVE_RECURSIVE};
	return run_op(s, F_DELETE, FRAME_FILE_REMOVE, &m, AUDIT_FILE_REMOVE,
		      audit_paths("path", path, NULL, NULL), rp, err) ? 0 : -1;
}

int svc_file_mkdir(struct sbx *s, const struct api_mkdir *m, struct svc_reply *rp,
		   struct svc_err *err)
{
	struct frame_file f = {.path = m->path, .flags = m->parents ? FRAME_MKDIR_PARENTS : 0};
	return run_op(s, F_MKDIR, FRAME_FILE_MKDIR, &f, AUDIT_FILE_MKDIR,
		      audit_paths("path", m->path, NULL, NULL), rp, err) ? 0 : -1;
}

int svc_file_move(struct sbx *s, const struct api_move *m, struct svc_reply *rp,
		  struct svc_err *err)
{
	struct frame_file f = {.path = m->from, .dst = m->to};
	return run_op(s, F_MOVE, FRAME_FILE_MOVE, &f, AUDIT_FILE_MOVE,
		      audit_paths("from", m->from, "to", m->to), rp, err) ? 0 : -1;
}

/* @data in frames of @type of FRAME_MAX_DATA bytes, @m's fields in each (offsets set), each
 * answered by OK; the first chunk gets @first flags, the last @last. A send that fails after
 * the first leaves @op to end as failed when the sent ones are answered. */
static int send_chunks(struct fileop *op, uint16_t type, struct frame_file *m, const void *data,
		       size_t len, uint32_t first, uint32_t last, struct svc_err *err)
{
	size_t off = 0;
	op->expect = 0;
	do {
		size_t n = len - off < FRAME_MAX_DATA ? len - off : FRAME_MAX_DATA;
		m->offset = off;
		m->flags = (off == 0 ? first : 0) | (off + n == len ? last : 0);
		m->data = (const uint8_t *)data + off;
		m->data_len = (uint32_t)n;
		int r = sbx_send(op->s, type, op->ch.id, m);
		if (r < 0) {
			op->failed = true;
			if (op->expect > 0)
				return 0;
			op->rep = NULL;
			svc_fail(err, api_error_from_errno(r), "cannot reach the sandbox's agent");
			fileop_free(op);
			return -1;
		}
		op->expect++;
		off += n;
	} while (off < len);
	return 0;
}

/* Takes a dup of @u's spool for @op, and a buffer for its chunks. */
static int op_spool(struct fileop *op, const struct svc_upload *u, struct svc_err *err)
{
	op->in_fd = fcntl(u->fd, F_DUPFD_CLOEXEC, 3);
	op->in_buf = op->in_fd >= 0 ? malloc(FRAME_MAX_DATA) : NULL;
	op->body_len = (size_t)u->len;
	op->in_base = u->off;
	if (op->in_buf)
		return 0;
	op->rep = NULL; /* the caller's again, to render @err */
	fileop_free(op);
	return svc_fail(err, API_ERR_INTERNAL, "the upload's spool: %s", strerror(errno));
}

/* The bytes go in frames of FRAME_MAX_DATA, each answered by OK; the stat at the end. From a
 * spool, PUT_WINDOW frames at a time, the next on each answer. */
int svc_file_put(struct sbx *s, const char *path, const struct svc_upload *u,
		 struct svc_reply *rp, struct svc_err *err)
{
	if (u->len > D.cfg.max_upload)
		return svc_fail(err, API_ERR_PAYLOAD_TOO_LARGE, "uploads are limited to %llu bytes",
				(unsigned long long)D.cfg.max_upload);
	json_t *fields = audit_paths("path", path, NULL, NULL);
	if (fields)
		json_object_set_new(fields, "bytes", json_integer((json_int_t)u->len));
	if (sbx_audit_rc(s, AUDIT_FILE_WRITE, fields) < 0)
		return svc_fail(err, API_ERR_AUDIT_UNAVAILABLE, "the audit log cannot be written: nothing was done");
	struct fileop *op = op_new(s, F_PUT, path, rp, err);
	if (!op)
		return -1;
	struct frame_file m = {.path = path, .user = FRAME_USER_USER, .mode = 0644};
	if (u->fd < 0 || u->len == 0)
		return send_chunks(op, FRAME_FILE_WRITE, &m, u->data, (size_t)u->len,
				   FRAME_WRITE_CREATE | FRAME_WRITE_TRUNC, 0, err);
	if (op_spool(op, u, err) < 0)
		return -1;
	op->expect = 0;
	int r = 0;
	while (r == 0 && op->expect < PUT_WINDOW && op->in_off < u->len)
		r = put_next(op, u->len);
	if (r < 0 && op->expect == 0) {
		op->rep = NULL;
		svc_fail(err, api_error_from_errno(r), "cannot reach the sandbox's agent");
		fileop_free(op);
		return -1;
	}
	op->failed = r < 0;
	return 0;
}

/* ---- directories as tar streams (the agent's child makes and unpacks them) ---- */

int svc_file_archive_get(struct sbx *s, const char *path, struct svc_reply *rp,
			 struct svc_err *err)
{
	struct frame_file m = {.path = path};
	return run_op(s, F_ARCHIVE_GET, FRAME_ARCHIVE_READ, &m, NULL, NULL, rp, err) ? 0 : -1;
}

/* The client's tar is checked whole before any of it is sent (tar.h's rules), so a refused
 * archive changes nothing in the sandbox. */
static int archive_check(const struct svc_upload *u, uint64_t *ret_entries, uint64_t *ret_bytes,
			 struct svc_err *err)
{
	_cleanup_free_ struct tar_reader *t = malloc(sizeof(*t));
	if (!t)
		return svc_fail(err, API_ERR_INTERNAL, "out of memory");
	tar_reader_init(t, UINT64_MAX, MAX_ARCHIVE_ENTRIES);
	int r = 0;
	if (u->fd < 0) {
		r = tar_reader_feed(t, u->data, (size_t)u->len, NULL, NULL);
	} else {
		uint8_t buf[65536];
		for (uint64_t off = 0; r == 0 && off < u->len;) {
			ssize_t n = pread(u->fd, buf, sizeof(buf), (off_t)off);
			if (n <= 0)
				return svc_fail(err, API_ERR_INTERNAL, "the upload's spool: %s",
						n < 0 ? strerror(errno) : "short");
			r = tar_reader_feed(t, buf, (size_t)n, NULL, NULL);
			off += (uint64_t)n;
		}
	}
	if (r == 0)
		r = tar_reader_finish(t);
	if (r == -EFBIG)
		return svc_fail(err, API_ERR_PAYLOAD_TOO_LARGE, "the archive has more than %u entries",
				MAX_ARCHIVE_ENTRIES);
	if (r < 0)
		return svc_fail(err, API_ERR_UNSAFE_ARCHIVE, "archive refused: %s", t->why);
	*ret_entries = t->entries;
	*ret_bytes = t->bytes;
	return 0;
}

int svc_file_archive_put(struct sbx *s, const char *path, const struct svc_upload *u,
			 struct svc_reply *rp, struct svc_err *err)
{
	uint64_t entries = 0, bytes = 0;
	if (u->len > D.cfg.max_upload)
		return svc_fail(err, API_ERR_PAYLOAD_TOO_LARGE, "uploads are limited to %llu bytes",
				(unsigned long long)D.cfg.max_upload);
	if (archive_check(u, &entries, &bytes, err) < 0)
		return -1;
	json_t *fields = audit_paths("path", path, NULL, NULL);
	if (fields) {
		json_object_set_new(fields, "bytes", json_integer((json_int_t)u->len));
		json_object_set_new(fields, "archive", json_true());
	}
	if (sbx_audit_rc(s, AUDIT_FILE_WRITE, fields) < 0)
		return svc_fail(err, API_ERR_AUDIT_UNAVAILABLE, "the audit log cannot be written: nothing was done");
	struct fileop *op = op_new(s, F_ARCHIVE_PUT, path, rp, err);
	if (!op)
		return -1;
	op->archive_entries = entries;
	op->archive_bytes = bytes;
	if (u->fd >= 0 && op_spool(op, u, err) < 0)
		return -1;
	op->body = u->data;
	op->body_len = (size_t)u->len;
	op->expect = 0;
	int r = archive_next(op);
	if (r < 0) {
		op->rep = NULL; /* the caller's again, to render @err */
		svc_fail(err, api_error_from_errno(r), "cannot reach the sandbox's agent");
		fileop_free(op);
		return -1;
	}
	return 0;
}
