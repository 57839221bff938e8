/* E2B's envd /files REST (e2b.h): GET downloads a file (gzip when the client asks for it), POST
 * uploads one (octet-stream, maybe gzip) or several (multipart/form-data, each part's
 * filename its path), over the files service. Signed URLs (E2B's v1 signature: sha256 of
 * "path:operation:user:token[:expiry]") stand for the access token. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

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

/* ---- /files: signed URLs ---- */

/* E2B's signature of @operation on ?path= as ?username= with the sandbox's token: "v1_" and
 * base64 (unpadded) of sha256("path:operation:user:token[:expiration]"); an expiration (unix
 * seconds) that has passed fails. */
bool e2b_signature_ok(const struct sbx *s, const char *query, const char *operation)
{
	char sig[128], exp[24], path[API_MAX_PATH + 1], user[16], tok[E2B_TOKEN_LEN + 1];
	const struct ctx q = {.query = query};
	const char *sv = query_get(&q, "signature", sig, sizeof(sig));
	const char *ev = query_get(&q, "signature_expiration", exp, sizeof(exp));
	const char *pv = query_get(&q, "path", path, sizeof(path));
	const char *uv = query_get(&q, "username", user, sizeof(user));
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
	return e2b_signature_ok(s, c->query, "read");
}

static bool signed_write(struct ctx *c, const struct sbx *s)
{
	return e2b_signature_ok(s, c->query, "write");
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
	struct fsop *op = fsop_new();
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

/* Whether Accept-Encoding @ae asks for gzip on purpose: gzip alone ("gzip", "gzip;q=1"), as
 * the SDK's read({gzip: true}) sends it. A list ("gzip, deflate": what node's fetch and
 * Python's HTTP clients add to every request) gets the bytes as they are, which identity
 * always allows: on the links this serves, deflating a file costs more than it saves (a
 * 1 MiB read over loopback: 22 ms gzip'd, 6 ms not; bench/RESULTS.md). */
static bool gzip_asked(const char *ae)
{
	if (!ae)
		return false;
	ae += strspn(ae, " \t");
	if (strncasecmp(ae, "gzip", 4) != 0)
		return false;
	const char *rest = ae + 4 + strspn(ae + 4, " \t"), *q = strstr(rest, "q=");
	return !*rest || (*rest == ';' && !strchr(rest, ',') && (!q || strtod(q + 2, NULL) > 0));
}

static void get_bytes(struct connect_call *cc, const char *type, struct evbuffer *buf)
{
	struct fsop *op = cc->arg;
	/* Past ARCHIVE_MEM_BYTES the file is a spool on disk (files.c), sent as it is: gzip
	 * would pull it into memory; Content-Encoding says which the client got. */
	bool spooled = evbuffer_get_length(buf) > ARCHIVE_MEM_BYTES;
	struct evbuffer *gz = op->gzip && !spooled ? gzip_buf(buf) : NULL;
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
	op->gzip = gzip_asked(evhttp_find_header(evhttp_request_get_input_headers(c->req), "Accept-Encoding"));
	if (envd_path(query_get(c, "path", raw, sizeof(raw)), op->user, op->path, sizeof(op->path), &perr) < 0) {
		connect_refuse(c->req, CONNECT_MODE_REST, 0, 400, perr.msg);
		fsop_free(op);
		return;
	}
	struct connect_call *cc = connect_call_new(c->req, CONNECT_MODE_REST, &get_ops, op);
	if (!cc)
		fsop_free(op);
	else
		fsop_go_on(cc, svc_file_get(s, op->path, connect_reply(cc), &err), &err);
}

/* ---- POST /files: each file's parent made, then the file written ---- */

static void upload_next(struct connect_call *cc);

/* The file's bytes for svc_file_put(): in memory, or a range of the spool. */
static int put_file(struct connect_call *cc, struct sbx *s, struct svc_err *err)
{
	struct fsop *op = cc->arg;
	struct svc_upload u = {.data = op->data, .fd = op->data ? -1 : op->body_fd, .off = op->off,
			       .len = op->len};
	return svc_file_put(s, op->path, &u, connect_reply(cc), err);
}

/* The next file of the upload into op->path, op->data; 0 when there is none left. */
static int next_file(struct fsop *op, struct cordon_err *err)
{
	struct multipart_part part;
	const char *target = op->qpath;
	if (op->mr) {
		int r = multipart_next(op->mr, &part);
		if (r == -EIO)
			return cordon_err_setf(err, -EIO, "the upload's spool cannot be read");
		if (r <= 0)
			return r < 0 ? cordon_err_setf(err, -EINVAL, "the multipart body is malformed") : 0;
		if (part.has_filename && part.filename[0] && !(op->qpath[0] && op->mr->parts == 1))
			target = part.filename;
		op->data = part.data;
		op->off = part.off;
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
	struct sbx *s = fsop_again(cc);
	if (!s)
		return;
	if (op->stage == FS_PARENT) {
		op->stage = FS_PUT;
		fsop_go_on(cc, put_file(cc, s, &err), &err);
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
	if (op->stage != FS_PUT || op->retried || e->code != API_ERR_NOT_FOUND || !parent[0]) {
		connect_answer_svc_err(cc, e);
		return;
	}
	struct sbx *s = fsop_again(cc);
	if (s) {
		op->retried = true;
		op->stage = FS_PARENT;
		fsop_go_on(cc, fsop_mkdir_p(cc, s, parent, &err), &err);
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
	struct sbx *s = fsop_again(cc);
	if (!s)
		return;
	op->stage = FS_PUT;
	op->retried = false;
	fsop_go_on(cc, put_file(cc, s, &err), &err);
}

#define GUNZIP_CHUNK (64u << 10)

/* Feeds @n bytes at @in to @z, the output appended to @fd (*@out bytes so far, at most @max):
 * Z_STREAM_END at the end of the stream, Z_OK for more, else a failure (-EMSGSIZE past
 * @max, -EIO for the file, a zlib error). */
static int inflate_into(z_stream *z, const uint8_t *in, size_t n, int fd, uint64_t *out,
			uint64_t max, uint8_t *buf)
{
	z->next_in = (uint8_t *)in;
	z->avail_in = (uInt)n;
	int r = Z_OK;
	while (r == Z_OK && (z->avail_in > 0 || z->avail_out == 0)) {
		z->next_out = buf;
		z->avail_out = GUNZIP_CHUNK;
		r = inflate(z, Z_NO_FLUSH);
		size_t got = GUNZIP_CHUNK - z->avail_out;
		if (r == Z_BUF_ERROR && got == 0 && z->avail_in == 0)
			return Z_OK; /* wants more input */
		if (*out + got > max)
			return -EMSGSIZE;
		if (got && pwrite(fd, buf, got, (off_t)*out) != (ssize_t)got)
			return -EIO;
		*out += got;
	}
	return r;
}

/* The gzip body (in memory, or @c's spool) decoded, 64 KiB at a time, into a file of the state
 * directory (O_TMPFILE: nothing stays if the daemon dies), at most --max-upload bytes: a small
 * body that inflates a thousandfold costs disk, bounded, not memory. */
static int gunzip(struct ctx *c, struct fsop *op, struct cordon_err *err)
{
	_cleanup_free_ uint8_t *buf = malloc(2 * GUNZIP_CHUNK);
	z_stream z = {};
	if (!buf || inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	op->inflated_fd = open(D.cfg.state_dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	int r = op->inflated_fd < 0 ? -EIO : Z_OK;
	uint64_t out = 0;
	if (c->body_fd < 0 && r == Z_OK)
		r = inflate_into(&z, (const uint8_t *)c->body, c->body_len, op->inflated_fd, &out,
				 D.cfg.max_upload, buf);
	for (uint64_t off = 0; c->body_fd >= 0 && r == Z_OK && off < c->body_len;) {
		ssize_t n = pread(c->body_fd, buf + GUNZIP_CHUNK, GUNZIP_CHUNK, (off_t)off);
		r = n <= 0 ? -EIO : inflate_into(&z, buf + GUNZIP_CHUNK, (size_t)n, op->inflated_fd, &out,
						 D.cfg.max_upload, buf);
		off += n > 0 ? (uint64_t)n : 0;
	}
	inflateEnd(&z);
	op->body_fd = op->inflated_fd;
	op->data = NULL;
	op->off = 0;
	op->len = out;
	if (r == Z_STREAM_END)
		return 0;
	if (r == -EMSGSIZE)
		return cordon_err_setf(err, -EMSGSIZE, "the decoded body is over --max-upload");
	if (r == -EIO)
		return cordon_err_setf(err, -EIO, "the decoded body cannot be written: %s", strerror(errno));
	return cordon_err_setf(err, -EINVAL, "the gzip body is malformed");
}

/* What the body holds: multipart parts, or (octet-stream, maybe gzip) one file at ?path=. A
 * large body is the gate's spool (c->body_fd), read in pieces, never whole in memory. */
static int upload_body(struct ctx *c, struct fsop *op, struct cordon_err *err)
{
	char boundary[MULTIPART_MAX_BOUNDARY + 1];
	struct evkeyvalq *h = evhttp_request_get_input_headers(c->req);
	const char *ct = evhttp_find_header(h, "Content-Type");
	const char *ce = evhttp_find_header(h, "Content-Encoding");
	if (ct && strncasecmp(ct, "multipart/", 10) == 0) {
		if (multipart_boundary(ct, boundary) < 0)
			return cordon_err_setf(err, -EINVAL, "Content-Type: no valid boundary");
		if (!(op->mr = malloc(sizeof(*op->mr))))
			return cordon_err_setf(err, -ENOMEM, "out of memory");
		if (c->body_fd >= 0)
			multipart_init_fd(op->mr, boundary, c->body_fd, c->body_len);
		else
			multipart_init(op->mr, boundary, c->body, c->body_len);
		op->body_fd = c->body_fd;
		return 0;
	}
	if (!op->qpath[0])
		return cordon_err_setf(err, -EINVAL, "path: required for an octet-stream upload");
	if (ce && strcasecmp(ce, "gzip") == 0)
		return gunzip(c, op, err);
	if (ce && strcasecmp(ce, "identity") != 0)
		return cordon_err_setf(err, -EINVAL, "Content-Encoding: gzip or none");
	op->body_fd = c->body_fd;
	op->data = c->body_fd < 0 ? (const uint8_t *)c->body : NULL;
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
