/* E2B's envd files (e2b.h): filesystem.Filesystem over Connect (unary) and the /files REST
 * download and upload, over the files service (files.c). An operation envd does in one step
 * and Cordon's service in two (a write into a directory that is not there yet, a move that
 * answers the moved entry, a mkdir that must say "already exists") is two service calls in
 * a row, the sandbox looked up again between them. Signed URLs (E2B's v1 signature: sha256
 * of "path:operation:user:token[:expiry]") stand for the access token on /files. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <zlib.h>

#include "basic/base64.h"
#include "daemon/daemon.h"
#include "daemon/e2b.h"
#include "daemon/e2b_envd.h"
#include "daemon/multipart.h"
#include "daemon/service.h"

enum stage { ST_FIRST, ST_SECOND, ST_PARENT, ST_PUT };

struct fsop {
	char id[SBX_ID_LEN + 1];
	char path[API_MAX_PATH + 1], dst[API_MAX_PATH + 1];
	const char *user;  /* "user", "root" or NULL: static strings */
	enum stage stage;
	bool gzip;         /* GET: the client takes gzip */
	/* POST /files: the files to write, one at a time */
	bool multipart, single_done;
	bool retried;      /* the file's parent was made after a first write found none */
	struct multipart_reader mr;
	char qpath[API_MAX_PATH + 1]; /* ?path=, "" if none */
	const uint8_t *data;
	size_t len;
	uint8_t *inflated; /* a gzip body, decoded */
	json_t *written;
};

static void fsop_free(void *arg)
{
	struct fsop *op = arg;
	free(op->inflated);
	json_decref(op->written);
	free(op);
}

/* The sandbox again, between two service calls; NULL with the call answered. */
static struct sbx *again(struct connect_call *cc)
{
	struct fsop *op = cc->arg;
	struct sbx *s = sbx_find(NULL, op->id);
	if (!s || s->state != SBX_RUNNING || s->paused) {
		connect_answer_error(cc, CONNECT_UNAVAILABLE, "the sandbox was killed");
		return NULL;
	}
	return s;
}

static void go_on(struct connect_call *cc, int r, const struct svc_err *err)
{
	if (r < 0)
		connect_answer_svc_err(cc, err);
}

/* ---- envd's EntryInfo ---- */

static json_t *entry_info(const json_t *e)
{
	static const struct {
		const char *cordon, *e2b;
		char c;
	} types[] = {{"file", "FILE_TYPE_FILE", '-'}, {"dir", "FILE_TYPE_DIRECTORY", 'd'},
		     {"symlink", "FILE_TYPE_SYMLINK", 'l'}};
	const char *t = json_string_value(json_object_get(e, "type")) ?: "";
	const char *e2b = "FILE_TYPE_UNSPECIFIED";
	char perm[11] = "?";
	int mode = (int)json_integer_value(json_object_get(e, "mode"));
	for (size_t i = 0; i < ELEMENTSOF(types); i++)
		if (strcmp(t, types[i].cordon) == 0)
			e2b = types[i].e2b, perm[0] = types[i].c;
	for (int i = 0; i < 9; i++)
		perm[1 + i] = mode & (0400 >> i) ? "rwxrwxrwx"[i] : '-';
	perm[10] = '\0';
	json_t *o = json_pack("{s:O, s:s, s:O, s:O, s:i, s:s, s:s, s:s, s:O}", "name",
			      json_object_get(e, "name"), "type", e2b, "path", json_object_get(e, "path"),
			      "size", json_object_get(e, "size"), "mode", mode, "permissions", perm,
			      "owner", "", "group", "", "modifiedTime", json_object_get(e, "mtime"));
	if (o && json_object_get(e, "symlink_target"))
		json_object_set(o, "symlinkTarget", json_object_get(e, "symlink_target"));
	return o;
}

static void answer_entry(struct connect_call *cc, json_t *body)
{
	_cleanup_(json_decrefp) json_t *b = body;
	connect_answer(cc, 200, json_pack("{s:o}", "entry", entry_info(b)));
}

/* ---- the calls ---- */

/* A filesystem call's sandbox, message and op, the path of @field (and @field2) resolved;
 * NULL with the error answered. */
static struct connect_call *fs_begin(struct ctx *c, const struct connect_ops *ops,
				     const char *field, const char *field2, struct sbx **ret_s,
				     json_t **ret_m)
{
	struct cordon_err perr = {};
	const char *user;
	struct sbx *s = envd_sbx(c, CONNECT_MODE_UNARY, NULL);
	json_t *m = s ? envd_message(c, CONNECT_MODE_UNARY) : NULL;
	struct fsop *op = m ? calloc(1, sizeof(*op)) : NULL;
	if (m && !op)
		connect_refuse(c->req, CONNECT_MODE_UNARY, CONNECT_INTERNAL, 500, "out of memory");
	int r = op ? envd_user(c, &user) : -1;
	if (op && r == 0)
		r = envd_path(json_string_value(json_object_get(m, field)), user, op->path,
			      sizeof(op->path), &perr);
	if (op && r == 0 && field2)
		r = envd_path(json_string_value(json_object_get(m, field2)), user, op->dst,
			      sizeof(op->dst), &perr);
	if (op && r < 0)
		connect_refuse(c->req, CONNECT_MODE_UNARY, CONNECT_INVALID_ARGUMENT, 400,
			       perr.msg[0] ? perr.msg : "Authorization: expected Basic of \"user:\" or \"root:\"");
	struct connect_call *cc = op && r == 0 ? connect_call_new(c->req, CONNECT_MODE_UNARY, ops, op) : NULL;
	if (!cc) {
		free(op);
		json_decref(m);
		return NULL;
	}
	snprintf(op->id, sizeof(op->id), "%s", s->id);
	op->user = user;
	*ret_s = s;
	*ret_m = m;
	return cc;
}

static void stat_json(struct connect_call *cc, int status, json_t *body)
{
	answer_entry(cc, body);
}

static const struct connect_ops stat_ops = {.json = stat_json, .free = fsop_free};

/* A call on the message's "path" whose first service call is @first (a stat, a delete). */
static void on_path(struct ctx *c, const struct connect_ops *ops,
		    int (*first)(struct sbx *, const char *, struct svc_reply *, struct svc_err *))
{
	struct svc_err err = {};
	struct sbx *s;
	json_t *m;
	struct connect_call *cc = fs_begin(c, ops, "path", NULL, &s, &m);
	json_decref(cc ? m : NULL);
	if (cc)
		go_on(cc, first(s, ((struct fsop *)cc->arg)->path, connect_reply(cc), &err), &err);
}

void fs_stat(struct ctx *c)
{
	on_path(c, &stat_ops, svc_file_stat);
}

static void list_json(struct connect_call *cc, int status, json_t *body)
{
	_cleanup_(json_decrefp) json_t *b = body;
	json_t *out = json_array(), *e;
	size_t i;
	json_array_foreach(json_object_get(b, "entries"), i, e)
		json_array_append_new(out, entry_info(e));
	connect_answer(cc, 200, json_pack("{s:o}", "entries", out));
}

static const struct connect_ops list_ops = {.json = list_json, .free = fsop_free};

void fs_list(struct ctx *c)
{
	struct svc_err err = {};
	struct sbx *s;
	json_t *m;
	struct connect_call *cc = fs_begin(c, &list_ops, "path", NULL, &s, &m);
	if (!cc)
		return;
	json_int_t depth = json_is_integer(json_object_get(m, "depth"))
				   ? json_integer_value(json_object_get(m, "depth")) : 1;
	json_decref(m);
	if (depth < 1 || depth > API_MAX_LIST_DEPTH) {
		connect_answer_error(cc, CONNECT_INVALID_ARGUMENT, "depth: must be 1..%d",
				     API_MAX_LIST_DEPTH);
		return;
	}
	go_on(cc, svc_file_list(s, ((struct fsop *)cc->arg)->path, (unsigned)depth, 0,
				connect_reply(cc), &err), &err);
}

/* mkdir -p @path inside @s, answered to @cc. */
static int mkdir_p(struct connect_call *cc, struct sbx *s, const char *path, struct svc_err *err)
{
	struct cordon_err perr = {};
	_cleanup_(json_decrefp) json_t *j = json_pack("{s:s, s:b}", "path", path, "parents", 1);
	_cleanup_free_ char *b = j ? json_dumps(j, JSON_COMPACT) : NULL;
	struct api_mkdir *m = NULL;
	if (!b || api_mkdir_parse(b, strlen(b), &m, &perr) < 0)
		return svc_fail(err, API_ERR_INVALID_PATH, "%s", b ? perr.msg : "out of memory");
	int r = svc_file_mkdir(s, m, connect_reply(cc), err);
	api_mkdir_free(m);
	return r;
}

/* MakeDir: a stat first, for envd's already_exists; then mkdir -p. */
static void mkdir_json(struct connect_call *cc, int status, json_t *body)
{
	struct fsop *op = cc->arg;
	if (op->stage == ST_FIRST) {
		json_decref(body);
		connect_answer_error(cc, CONNECT_ALREADY_EXISTS, "%s already exists", op->path);
		return;
	}
	answer_entry(cc, body);
}

static void mkdir_error(struct connect_call *cc, const struct svc_err *e)
{
	struct fsop *op = cc->arg;
	struct svc_err err = {};
	struct sbx *s = op->stage == ST_FIRST && e->code == API_ERR_NOT_FOUND ? again(cc) : NULL;
	if (op->stage != ST_FIRST || e->code != API_ERR_NOT_FOUND) {
		connect_answer_svc_err(cc, e);
		return;
	}
	if (s) {
		op->stage = ST_SECOND;
		go_on(cc, mkdir_p(cc, s, op->path, &err), &err);
	}
}

static const struct connect_ops mkdir_ops = {.json = mkdir_json, .error = mkdir_error,
					     .free = fsop_free};

void fs_mkdir(struct ctx *c)
{
	on_path(c, &mkdir_ops, svc_file_stat);
}

/* Move, then a stat of where it went (envd answers the entry). */
static void move_json(struct connect_call *cc, int status, json_t *body)
{
	struct fsop *op = cc->arg;
	struct svc_err err = {};
	if (op->stage == ST_SECOND) {
		answer_entry(cc, body);
		return;
	}
	json_decref(body);
	struct sbx *s = again(cc);
	if (s) {
		op->stage = ST_SECOND;
		go_on(cc, svc_file_stat(s, op->dst, connect_reply(cc), &err), &err);
	}
}

static const struct connect_ops move_ops = {.json = move_json, .free = fsop_free};

void fs_move(struct ctx *c)
{
	struct cordon_err perr = {};
	struct svc_err err = {};
	struct sbx *s;
	json_t *m;
	struct connect_call *cc = fs_begin(c, &move_ops, "source", "destination", &s, &m);
	if (!cc)
		return;
	json_decref(m);
	struct fsop *op = cc->arg;
	_cleanup_(json_decrefp) json_t *j = json_pack("{s:s, s:s}", "from", op->path, "to", op->dst);
	_cleanup_free_ char *b = j ? json_dumps(j, JSON_COMPACT) : NULL;
	struct api_move *mv = NULL;
	if (!b || api_move_parse(b, strlen(b), &mv, &perr) < 0) {
		connect_answer_error(cc, CONNECT_INVALID_ARGUMENT, "%s", b ? perr.msg : "out of memory");
		return;
	}
	go_on(cc, svc_file_move(s, mv, connect_reply(cc), &err), &err);
	api_move_free(mv);
}

static void remove_json(struct connect_call *cc, int status, json_t *body)
{
	json_decref(body);
	connect_answer(cc, 200, json_object());
}

static const struct connect_ops remove_ops = {.json = remove_json, .free = fsop_free};

void fs_remove(struct ctx *c)
{
	on_path(c, &remove_ops, svc_file_delete);
}

void fs_watch(struct ctx *c)
{
	if (envd_sbx(c, CONNECT_MODE_STREAM, NULL))
		envd_unimplemented(c, CONNECT_MODE_STREAM, "filesystem.Filesystem/WatchDir");
}

void fs_watch_poll(struct ctx *c)
{
	if (envd_sbx(c, CONNECT_MODE_UNARY, NULL))
		envd_unimplemented(c, CONNECT_MODE_UNARY, "the polling directory watcher");
}

/* ---- /files: signed URLs ---- */

/* E2B's signature of @operation on ?path= as ?username= with the sandbox's token: "v1_" and
 * base64 (unpadded) of sha256("path:operation:user:token[:expiration]"); an expiration (unix
 * seconds) that has passed fails. */
static bool signature_ok(struct ctx *c, const struct sbx *s, const char *operation)
{
	char sig[128], exp[24], path[API_MAX_PATH + 1], user[16], tok[E2B_TOKEN_LEN + 1];
	const char *sv = query_get(c, "signature", sig, sizeof(sig));
	const char *ev = query_get(c, "signature_expiration", exp, sizeof(exp));
	const char *pv = query_get(c, "path", path, sizeof(path));
	const char *uv = query_get(c, "username", user, sizeof(user));
	uint64_t expiry = 0;
	if (!sv || (ev && connect_timeout_parse(ev, &expiry) < 0) || (ev && expiry * 1000 <= now_ms()) ||
	    !e2b_access_token(s->id, tok))
		return false;
	_cleanup_free_ char *raw = NULL;
	int n = ev ? asprintf(&raw, "%s:%s:%s:%s:%s", pv ?: "", operation, uv ?: "", tok, ev)
		   : asprintf(&raw, "%s:%s:%s:%s", pv ?: "", operation, uv ?: "", tok);
	uint8_t md[EVP_MAX_MD_SIZE];
	unsigned mdlen = 0;
	if (n < 0 || !EVP_Digest(raw, (size_t)n, md, &mdlen, EVP_sha256(), NULL)) {
		raw = NULL;
		return false;
	}
	char want[3 + 48] = "v1_";
	size_t w = base64_encode_to(md, mdlen, want + 3);
	while (w && want[3 + w - 1] == '=')
		w--;
	want[3 + w] = '\0';
	return strlen(sv) == 3 + w && CRYPTO_memcmp(sv, want, 3 + w) == 0;
}

static bool signed_read(struct ctx *c, const struct sbx *s)
{
	return signature_ok(c, s, "read");
}

static bool signed_write(struct ctx *c, const struct sbx *s)
{
	return signature_ok(c, s, "write");
}

/* The op of a /files request: its sandbox and user; NULL with the error answered. */
static struct fsop *files_begin(struct ctx *c, bool (*signed_ok)(struct ctx *, const struct sbx *),
				struct sbx **ret_s)
{
	char ubuf[16];
	const char *user = NULL;
	struct sbx *s = envd_sbx(c, CONNECT_MODE_REST, signed_ok);
	if (!s)
		return NULL;
	const char *qu = query_get(c, "username", ubuf, sizeof(ubuf));
	if (qu && *qu)
		user = strcmp(qu, "root") == 0 ? "root" : strcmp(qu, "user") == 0 ? "user" : "";
	else if (envd_user(c, &user) < 0)
		user = "";
	if (user && !*user) {
		connect_refuse(c->req, CONNECT_MODE_REST, 0, 400, "username: expected user or root");
		return NULL;
	}
	struct fsop *op = calloc(1, sizeof(*op));
	if (!op) {
		connect_refuse(c->req, CONNECT_MODE_REST, 0, 500, "out of memory");
		return NULL;
	}
	snprintf(op->id, sizeof(op->id), "%s", s->id);
	op->user = user;
	*ret_s = s;
	return op;
}

/* ---- GET /files ---- */

/* @in gzip'd into a new buffer; NULL without memory. */
static struct evbuffer *gzip_buf(struct evbuffer *in)
{
	size_t n = evbuffer_get_length(in);
	z_stream z = {};
	if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8,
			 Z_DEFAULT_STRATEGY) != Z_OK)
		return NULL;
	uLong bound = deflateBound(&z, n);
	struct evbuffer *out = evbuffer_new();
	struct evbuffer_iovec v;
	if (!out || evbuffer_reserve_space(out, (ev_ssize_t)bound, &v, 1) < 1) {
		deflateEnd(&z);
		if (out)
			evbuffer_free(out);
		return NULL;
	}
	z.next_in = n ? evbuffer_pullup(in, -1) : (uint8_t *)"";
	z.avail_in = (uInt)n;
	z.next_out = v.iov_base;
	z.avail_out = (uInt)v.iov_len;
	int r = deflate(&z, Z_FINISH);
	v.iov_len = z.total_out;
	deflateEnd(&z);
	if (r != Z_STREAM_END) {
		evbuffer_free(out);
		return NULL;
	}
	evbuffer_commit_space(out, &v, 1);
	return out;
}

static void get_bytes(struct connect_call *cc, const char *type, struct evbuffer *buf)
{
	struct fsop *op = cc->arg;
	struct evbuffer *gz = op->gzip ? gzip_buf(buf) : NULL;
	if (gz)
		evhttp_add_header(evhttp_request_get_output_headers(cc->req), "Content-Encoding", "gzip");
	connect_answer_bytes(cc, "application/octet-stream", gz ? gz : buf);
	if (gz)
		evbuffer_free(gz);
}

static const struct connect_ops get_ops = {.bytes = get_bytes, .free = fsop_free};

void files_get(struct ctx *c)
{
	char raw[API_MAX_PATH + 1];
	struct cordon_err perr = {};
	struct svc_err err = {};
	struct sbx *s;
	struct fsop *op = files_begin(c, signed_read, &s);
	if (!op)
		return;
	const char *ae = evhttp_find_header(evhttp_request_get_input_headers(c->req), "Accept-Encoding");
	op->gzip = ae && strstr(ae, "gzip");
	if (envd_path(query_get(c, "path", raw, sizeof(raw)), op->user, op->path, sizeof(op->path), &perr) < 0) {
		connect_refuse(c->req, CONNECT_MODE_REST, 0, 400, perr.msg);
		fsop_free(op);
		return;
	}
	struct connect_call *cc = connect_call_new(c->req, CONNECT_MODE_REST, &get_ops, op);
	if (!cc)
		fsop_free(op);
	else
		go_on(cc, svc_file_get(s, op->path, connect_reply(cc), &err), &err);
}

/* ---- POST /files: each file's parent made, then the file written ---- */

static void upload_next(struct connect_call *cc);

/* The next file of the upload into op->path, op->data; 0 when there is none left. */
static int next_file(struct fsop *op, struct cordon_err *err)
{
	struct multipart_part part;
	const char *target = op->qpath;
	if (op->multipart) {
		int r = multipart_next(&op->mr, &part);
		if (r <= 0)
			return r < 0 ? cordon_err_setf(err, -EINVAL, "the multipart body is malformed") : 0;
		if (part.has_filename && part.filename[0] && !(op->qpath[0] && op->mr.parts == 1))
			target = part.filename;
		op->data = part.data;
		op->len = part.len;
	} else if (op->single_done) {
		return 0;
	}
	op->single_done = true;
	int r = envd_path(target, op->user, op->path, sizeof(op->path), err);
	return r < 0 ? r : 1;
}

static void upload_json(struct connect_call *cc, int status, json_t *body)
{
	struct fsop *op = cc->arg;
	struct svc_err err = {};
	json_decref(body);
	struct sbx *s = again(cc);
	if (!s)
		return;
	if (op->stage == ST_PARENT) {
		op->stage = ST_PUT;
		go_on(cc, svc_file_put(s, op->path, op->data, op->len, connect_reply(cc), &err), &err);
		return;
	}
	const char *name = strrchr(op->path, '/');
	json_array_append_new(op->written, json_pack("{s:s, s:s, s:s}", "name", name ? name + 1 : op->path,
						     "type", "file", "path", op->path));
	upload_next(cc);
}

/* A write into a directory that is not there: make it (mkdir -p), then write again, once. */
static void upload_error(struct connect_call *cc, const struct svc_err *e)
{
	struct fsop *op = cc->arg;
	struct svc_err err = {};
	char parent[API_MAX_PATH + 1];
	snprintf(parent, sizeof(parent), "%s", op->path);
	*strrchr(parent, '/') = '\0';
	if (op->stage != ST_PUT || op->retried || e->code != API_ERR_NOT_FOUND || !parent[0]) {
		connect_answer_svc_err(cc, e);
		return;
	}
	struct sbx *s = again(cc);
	if (s) {
		op->retried = true;
		op->stage = ST_PARENT;
		go_on(cc, mkdir_p(cc, s, parent, &err), &err);
	}
}

static const struct connect_ops upload_ops = {.json = upload_json, .error = upload_error,
					      .free = fsop_free};

static void upload_next(struct connect_call *cc)
{
	struct fsop *op = cc->arg;
	struct cordon_err perr = {};
	struct svc_err err = {};
	int r = next_file(op, &perr);
	if (r < 0) {
		connect_answer_error(cc, CONNECT_INVALID_ARGUMENT, "%s", perr.msg);
		return;
	}
	if (r == 0) {
		connect_answer(cc, 200, json_incref(op->written));
		return;
	}
	struct sbx *s = again(cc);
	if (!s)
		return;
	op->stage = ST_PUT;
	op->retried = false;
	go_on(cc, svc_file_put(s, op->path, op->data, op->len, connect_reply(cc), &err), &err);
}

/* A gzip body decoded into op->inflated, at most --max-upload bytes. */
static int gunzip(struct fsop *op, const void *in, size_t len, struct cordon_err *err)
{
	z_stream z = {.next_in = (uint8_t *)in, .avail_in = (uInt)len};
	size_t cap = len * 4 + 4096, max = D.cfg.max_upload;
	if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	int r = Z_OK;
	while (r == Z_OK) {
		cap = cap > max + 1 ? max + 1 : cap;
		uint8_t *b = realloc(op->inflated, cap);
		if (!b)
			break;
		op->inflated = b;
		z.next_out = b + z.total_out;
		z.avail_out = (uInt)(cap - z.total_out);
		r = inflate(&z, Z_NO_FLUSH);
		if (r == Z_BUF_ERROR || (r == Z_OK && z.total_out > max))
			break;
		cap *= 2;
	}
	op->len = z.total_out;
	inflateEnd(&z);
	op->data = op->inflated;
	if (r != Z_STREAM_END)
		return cordon_err_setf(err, op->len > max ? -EMSGSIZE : -EINVAL,
				       op->len > max ? "the decoded body is over --max-upload"
						     : "the gzip body is malformed");
	return 0;
}

/* What the body holds: multipart parts, or (octet-stream, maybe gzip) one file at ?path=. */
static int upload_body(struct ctx *c, struct fsop *op, struct cordon_err *err)
{
	char boundary[MULTIPART_MAX_BOUNDARY + 1];
	struct evkeyvalq *h = evhttp_request_get_input_headers(c->req);
	const char *ct = evhttp_find_header(h, "Content-Type");
	const char *ce = evhttp_find_header(h, "Content-Encoding");
	if (ct && strncasecmp(ct, "multipart/", 10) == 0) {
		if (multipart_boundary(ct, boundary) < 0)
			return cordon_err_setf(err, -EINVAL, "Content-Type: no valid boundary");
		multipart_init(&op->mr, boundary, c->body, c->body_len);
		op->multipart = true;
		return 0;
	}
	if (!op->qpath[0])
		return cordon_err_setf(err, -EINVAL, "path: required for an octet-stream upload");
	if (ce && strcasecmp(ce, "gzip") == 0)
		return gunzip(op, c->body, c->body_len, err);
	if (ce && strcasecmp(ce, "identity") != 0)
		return cordon_err_setf(err, -EINVAL, "Content-Encoding: gzip or none");
	op->data = (const uint8_t *)c->body;
	op->len = c->body_len;
	return 0;
}

void files_post(struct ctx *c)
{
	struct cordon_err perr = {};
	struct sbx *s;
	struct fsop *op = files_begin(c, signed_write, &s);
	if (!op)
		return;
	const char *q = query_get(c, "path", op->qpath, sizeof(op->qpath));
	if (!q)
		op->qpath[0] = '\0';
	op->written = json_array();
	int r = op->written ? upload_body(c, op, &perr) : cordon_err_setf(&perr, -ENOMEM, "out of memory");
	if (r < 0) {
		connect_refuse(c->req, CONNECT_MODE_REST, 0, api_error_status(api_error_from_errno(r)), perr.msg);
		fsop_free(op);
		return;
	}
	struct connect_call *cc = connect_call_new(c->req, CONNECT_MODE_REST, &upload_ops, op);
	if (cc)
		upload_next(cc);
	else
		fsop_free(op);
}
