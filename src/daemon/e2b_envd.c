/* E2B's envd, served by cordond (e2b.h): which sandbox a request is for and whether it may
 * reach it, and the process service (process.Process over Connect). Files are e2b_files.c.
 *
 * The sandbox is the one the E2b-Sandbox-Id header names (E2B_SANDBOX_URL: one base URL
 * for every sandbox), or, with --e2b-domain, the Host <port>-<id>.<domain>. One that does
 * not exist, is not running, or was made on the unix socket (it has no key) is 502, as
 * E2B's proxy answers. A sandbox made secure (E2B's default) needs its access token,
 * X-Access-Token, on every request (or a signed URL for /files); then the request acts for
 * the sandbox's key. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/http.h>
#include <openssl/crypto.h>

#include "basic/base64.h"
#include "daemon/connect.h"
#include "daemon/daemon.h"
#include "daemon/e2b.h"
#include "daemon/e2b_envd.h"
#include "daemon/reqhead.h"
#include "daemon/service.h"

#define MAX_STDIN (API_MAX_BODY / 2) /* decoded bytes of one SendInput */

/* ---- which sandbox, and may the caller reach it ---- */

static const char *header(const struct ctx *c, const char *name)
{
	return evhttp_find_header(evhttp_request_get_input_headers(c->req), name);
}

/* The sandbox a request names, by its E2b-Sandbox-Id value @hdr (@hlen bytes) or else its
 * Host @host under --e2b-domain, into @id; the port the Host names in *@port (envd's when by
 * header). Values need not be NUL-terminated. */
static bool name_sandbox(const char *hdr, size_t hlen, const char *host, size_t host_len,
			 char id[E2B_ID_LEN + 4], unsigned *port)
{
	const char *dom = D.cfg.e2b_domain;
	*port = E2B_ENVD_PORT;
	if (hdr)
		return e2b_sbx_id(hdr, hlen, id);
	const char *hend = host ? host + host_len : NULL;
	const char *dash = host ? memchr(host, '-', host_len) : NULL;
	const char *dot = dash ? memchr(dash, '.', (size_t)(hend - dash)) : NULL;
	size_t dl = dom ? strlen(dom) : 0;
	if (!dom || !dot || (size_t)(hend - dot - 1) < dl || strncasecmp(dot + 1, dom, dl) != 0 ||
	    (dot + 1 + dl < hend && dot[1 + dl] != ':'))
		return false;
	unsigned long p = 0;
	for (const char *c = host; c < dash && *c >= '0' && *c <= '9' && p < 65536; c++)
		p = p * 10 + (unsigned long)(*c - '0');
	*port = (unsigned)p;
	return e2b_sbx_id(dash + 1, (size_t)(dot - dash - 1), id);
}

/* By header, the port is E2b-Sandbox-Port's (E2B's SDKs send it with the id), or else
 * @dflt: the port of the route table asking. */
static bool named_id(const struct ctx *c, char id[E2B_ID_LEN + 4], unsigned dflt, unsigned *port)
{
	const char *h = header(c, "E2b-Sandbox-Id"), *host = header(c, "Host");
	const char *p = h ? header(c, "E2b-Sandbox-Port") : NULL;
	bool named = name_sandbox(h, h ? strlen(h) : 0, host, host ? strlen(host) : 0, id, port);
	if (h) {
		char *end = NULL;
		unsigned long v = p ? strtoul(p, &end, 10) : dflt;
		*port = p && (end == p || *end || v > 65535) ? 0 : (unsigned)v;
	}
	return named;
}

/* The ports of a sandbox this surface serves, each by its own route table: envd's
 * (e2b_envd.c, e2b_files.c, e2b_transfer.c) and the code interpreter's (e2b_code.c).
 * Any other port, named by host, is tunnelled into the sandbox (envd_claim()). */
static const unsigned served_ports[] = {E2B_ENVD_PORT, E2B_CODE_PORT};

static bool port_served(unsigned port)
{
	for (size_t i = 0; i < ELEMENTSOF(served_ports); i++)
		if (served_ports[i] == port)
			return true;
	return false;
}

/* @t (@len bytes) is the sandbox's token. */
static bool token_matches(const struct sbx *s, const char *t, size_t len)
{
	char tok[E2B_TOKEN_LEN + 1];
	return t && len == E2B_TOKEN_LEN && e2b_access_token(s->id, tok) &&
	       CRYPTO_memcmp(t, tok, E2B_TOKEN_LEN) == 0;
}

/* @t (@len bytes) is the sandbox's traffic token, its other ports' (e2b_traffic_token()). */
static bool traffic_matches(const struct sbx *s, const char *t, size_t len)
{
	char tok[E2B_TOKEN_LEN + 1];
	return t && len == E2B_TOKEN_LEN && e2b_traffic_token(s->id, tok) &&
	       CRYPTO_memcmp(t, tok, E2B_TOKEN_LEN) == 0;
}

static bool token_ok(const struct ctx *c, const struct sbx *s)
{
	const char *t = header(c, "X-Access-Token");
	return token_matches(s, t, t ? strlen(t) : 0);
}

static bool live(const struct sbx *s)
{
	return s && s->owner && s->state == SBX_RUNNING && !s->paused && !s->busy;
}

#define NOT_FOUND_MSG "The sandbox was not found: it does not exist, is not running, or has been killed"

/* ---- a port of the sandbox by host: <port>-<id>.<domain> ---- */

/* A whole HTTP/1.1 answer in E2B's error shape, for a taken-over socket; malloc'd. */
static char *port_answer(int status, const char *msg)
{
	_cleanup_free_ char *body = e2b_render_status(status, msg);
	char *out = NULL;
	if (!body || asprintf(&out, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
			      "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
			      status, status == 401 ? "Unauthorized" : "Bad Gateway", strlen(body), body) < 0)
		out = NULL;
	return out;
}

/* What a tunnel that could not be made answers: E2B's proxy's 502, the service's code in
 * the message (port_unreachable: nothing listens there). */
static char *port_fail(const struct svc_err *err)
{
	char msg[700];
	snprintf(msg, sizeof(msg), "%s: %s", api_error_code(err->code), err->msg);
	return port_answer(err->code == API_ERR_UNAUTHORIZED ? 401 : 502, msg);
}

static void port_refuse(int fd, int status, const char *msg)
{
	_cleanup_free_ char *a = port_answer(status, msg);
	if (a)
		(void)!send(fd, a, strlen(a), MSG_NOSIGNAL | MSG_DONTWAIT);
	close(fd);
}

/* The request, whole, goes to the port inside (params: the sandbox's id, the port): a live
 * sandbox, its token if secure (E2b-Traffic-Access-Token or X-Access-Token), then
 * svc_port_open(), which answers the rest. */
static void port_tunnel(struct raw_ctx *c)
{
	struct reqhead h;
	struct svc_err err = {};
	struct sbx *s = sbx_find(NULL, c->params[0]);
	reqhead_parse(c->rest, reqhead_end(c->rest, c->rest_len), &h);
	if (!live(s)) {
		port_refuse(c->fd, 502, NOT_FOUND_MSG);
		return;
	}
	if (e2b_secure(s) && !traffic_matches(s, h.traffic_token, h.traffic_token_len) &&
	    !token_matches(s, h.traffic_token, h.traffic_token_len) &&
	    !token_matches(s, h.access_token, h.access_token_len)) {
		port_refuse(c->fd, 401, "this sandbox's ports need its token (E2b-Traffic-Access-Token)");
		return;
	}
	svc_port_open(s, (uint32_t)strtoul(c->params[1], NULL, 10), c->fd, c->rest, c->rest_len,
		      "", port_fail, &err); /* answered either way */
}

static raw_fn envd_claim(const struct reqhead *h, char params[2][80])
{
	char id[E2B_ID_LEN + 4];
	unsigned port;
	if (h->sandbox_id || !name_sandbox(NULL, 0, h->host, h->host_len, id, &port) ||
	    port == 0 || port > 65535)
		return NULL;
	snprintf(params[0], 80, "%s", id);
	snprintf(params[1], 80, "%u", port);
	return port_served(port) ? NULL : port_tunnel; /* cordond's own routes, or the sandbox's */
}

int envd_admit(const struct reqhead *h, const char **ret_why)
{
	char id[E2B_ID_LEN + 4], query[API_MAX_PATH * 3 + 512];
	unsigned port;
	bool named = name_sandbox(h->sandbox_id, h->sandbox_id_len, h->host, h->host_len, id, &port);
	struct sbx *s = named ? sbx_find(NULL, id) : NULL;
	if (named && port != E2B_ENVD_PORT) { /* envd_claim() did not take it: a port we serve */
		*ret_why = "no such path on this port";
		return port_served(port) ? 404 : 0; /* 0: the route answers */
	}
	*ret_why = !live(s) ? NOT_FOUND_MSG : "this sandbox needs its access token (X-Access-Token) or a signed URL";
	if (!live(s))
		return 502;
	if (!e2b_secure(s) || token_matches(s, h->access_token, h->access_token_len))
		return 0;
	if (!h->query || h->query_len >= sizeof(query))
		return 401;
	memcpy(query, h->query, h->query_len);
	query[h->query_len] = '\0';
	return e2b_signature_ok(s, query, h->method == EVHTTP_REQ_GET ? "read" : "write") ? 0 : 401;
}

struct sbx *e2b_port_sbx(struct ctx *c, unsigned want, enum connect_mode mode,
			 bool (*signed_ok)(struct ctx *c, const struct sbx *s))
{
	char id[E2B_ID_LEN + 4];
	unsigned port;
	bool named = named_id(c, id, want, &port);
	struct sbx *s = named ? sbx_find(NULL, id) : NULL;
	if (named && port != want && port_served(port)) {
		connect_refuse(c->req, mode, CONNECT_NOT_FOUND, 404, "no such path on this port");
		return NULL;
	}
	if (named && port != want && header(c, "E2b-Sandbox-Id")) { /* tunnels go by host */
		connect_refuse(c->req, mode, CONNECT_UNIMPLEMENTED, 501,
			       "a sandbox's other ports are reached by host name (<port>-<id>.<domain>)");
		return NULL;
	}
	if (named && port != want) {
		bool valid = port > 0 && port < 65536;
		connect_refuse(c->req, mode, CONNECT_UNAVAILABLE, valid ? 503 : 502,
			       valid ? "the connection to this port could not be taken over; retry"
				     : "the host names no port 1..65535 of the sandbox");
		return NULL;
	}
	if (!live(s)) {
		connect_refuse(c->req, CONNECT_MODE_REST, CONNECT_UNAVAILABLE, 502, NOT_FOUND_MSG);
		return NULL;
	}
	if (e2b_secure(s) && !token_ok(c, s) && !(signed_ok && signed_ok(c, s))) {
		connect_refuse(c->req, mode, CONNECT_UNAUTHENTICATED, 401,
			       "this sandbox needs its access token (X-Access-Token) or a signed URL");
		return NULL;
	}
	c->principal = s->owner;
	return s;
}

struct sbx *envd_sbx(struct ctx *c, enum connect_mode mode,
		     bool (*signed_ok)(struct ctx *c, const struct sbx *s))
{
	return e2b_port_sbx(c, E2B_ENVD_PORT, mode, signed_ok);
}

/* Basic "<user>:" names the user; none is the template's default. */
int envd_user(const struct ctx *c, const char **ret)
{
	const char *a = header(c, "Authorization");
	*ret = NULL;
	if (!a || strncasecmp(a, "Basic ", 6) != 0)
		return 0;
	size_t n = 0;
	_cleanup_free_ uint8_t *d = NULL;
	if (base64_decode(a + 6, strlen(a + 6), &d, &n) < 0)
		return -EINVAL;
	static const char *const users[] = {"user", "root"};
	for (size_t i = 0; i < ELEMENTSOF(users); i++)
		if (n == strlen(users[i]) + 1 && memcmp(d, users[i], n - 1) == 0 && d[n - 1] == ':') {
			*ret = users[i];
			return 0;
		}
	return -EINVAL;
}

/* @p as a path of the sandbox: relative to the user's home, as envd takes it. */
int envd_path(const char *p, const char *user, char *buf, size_t size, struct cordon_err *err)
{
	const char *home = user && strcmp(user, "root") == 0 ? "/root" : "/home/user";
	if (!p || !*p)
		return cordon_err_setf(err, -EINVAL, "path: required");
	int n = p[0] == '/' ? snprintf(buf, size, "%s", p) : snprintf(buf, size, "%s/%s", home, p);
	if (n < 0 || (size_t)n >= size)
		return cordon_err_setf(err, -EINVAL, "path: longer than %d bytes", API_MAX_PATH);
	return api_path_check(buf, (size_t)n, "path", err);
}

/* The request message of a Connect call: the body (unary) or its one envelope (stream). */
json_t *envd_message(struct ctx *c, enum connect_mode mode)
{
	const uint8_t *p = (const uint8_t *)c->body;
	size_t len = c->body_len;
	struct connect_frame f;
	if (mode == CONNECT_MODE_STREAM) {
		int r = connect_envelope_single(p, len, CONNECT_MAX_MESSAGE, &f);
		if (r < 0) {
			connect_refuse(c->req, mode, CONNECT_INVALID_ARGUMENT, 400,
				       r == -EOPNOTSUPP ? "compressed messages are not supported"
						      : "the body is not one Connect envelope");
			return NULL;
		}
		p = f.data, len = f.len;
	}
	json_t *m = len ? json_loadb((const char *)p, len, JSON_REJECT_DUPLICATES, NULL) : json_object();
	if (!json_is_object(m)) {
		json_decref(m);
		connect_refuse(c->req, mode, CONNECT_INVALID_ARGUMENT, 400, "the message is not a JSON object");
		return NULL;
	}
	return m;
}

/* ---- process.Process ---- */

/* What a started process's call keeps. */
struct start {
	bool pty; /* its output is envd's "pty" data */
};

/* "exit status 1" / "signal: killed", as Go's os.ProcessState says it (envd's words). */
static json_t *end_event(json_t *ex)
{
	static const char *const signals[] = {[9] = "killed", [15] = "terminated", [2] = "interrupt",
					      [1] = "hangup", [6] = "aborted", [11] = "segmentation fault"};
	int code = (int)json_integer_value(json_object_get(ex, "exit_code"));
	int sig = (int)json_integer_value(json_object_get(ex, "signal"));
	char status[64];
	if (sig > 0 && sig < (int)ELEMENTSOF(signals) && signals[sig])
		snprintf(status, sizeof(status), "signal: %s", signals[sig]);
	else if (sig > 0)
		snprintf(status, sizeof(status), "signal: %d", sig);
	else
		snprintf(status, sizeof(status), "exit status %d", code);
	json_t *end = json_pack("{s:i, s:b, s:s}", "exitCode", sig ? -1 : code, "exited", sig == 0,
				"status", status);
	if (end && json_is_true(json_object_get(ex, "timed_out")))
		json_object_set_new(end, "error", json_string("the process's timeout passed"));
	return json_pack("{s:{s:o}}", "event", "end", end);
}

/* Cordon's process events as envd's: start, data (stdout, stderr), end, keepalive. */
static json_t *proc_line(struct connect_call *cc, json_t *ev, bool *ret_end)
{
	struct start *st = cc->arg;
	const char *type = json_string_value(json_object_get(ev, "type"));
	json_t *data = json_object_get(ev, "data");
	if (!type)
		return NULL;
	if (strcmp(type, "start") == 0) {
		json_int_t pid = json_integer_value(json_object_get(ev, "pid"));
		return json_pack("{s:{s:{s:I}}}", "event", "start", "pid", pid);
	}
	if (strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0)
		return json_pack("{s:{s:{s:O}}}", "event", "data", st && st->pty ? "pty" : type, data);
	if (strcmp(type, "keepalive") == 0)
		return json_pack("{s:{s:{}}}", "event", "keepalive");
	if (strcmp(type, "exit") == 0) {
		*ret_end = true;
		return end_event(ev);
	}
	return NULL; /* lagged: the stream ends next, with an error */
}

/* Connect to a process that has exited: the service answers its exit event alone; envd
 * knows no such process any more. */
static void exited_bytes(struct connect_call *cc, const char *type, struct evbuffer *buf)
{
	connect_answer_error(cc, CONNECT_NOT_FOUND, "the process has exited");
}

static const struct connect_ops start_ops = {.line = proc_line, .free = free};
static const struct connect_ops connect_ops = {.line = proc_line, .bytes = exited_bytes, .free = free};

/* envd's PTY {size: {cols, rows}} as Cordon's {cols, rows}; NULL when @pty has no size. */
static json_t *winsize_json(json_t *pty)
{
	json_t *size = json_object_get(pty, "size");
	return json_is_object(size) ? json_pack("{s:O*, s:O*}", "cols", json_object_get(size, "cols"),
						"rows", json_object_get(size, "rows"))
				    : NULL;
}

/* Cordon's exec request for envd's StartRequest. */
static json_t *exec_request(json_t *m, const char *user)
{
	json_t *pr = json_object_get(m, "process");
	json_t *argv = json_array(), *a;
	size_t i;
	json_array_append(argv, json_object_get(pr, "cmd"));
	json_array_foreach(json_object_get(pr, "args"), i, a)
		json_array_append(argv, a);
	json_t *e = json_pack("{s:o, s:i}", "argv", argv, "timeout_s", 0);
	json_t *envs = json_object_get(pr, "envs"), *cwd = json_object_get(pr, "cwd");
	json_t *tag = json_object_get(m, "tag");
	if (e && json_is_object(envs))
		json_object_set(e, "env", envs);
	if (e && json_is_string(cwd) && json_string_length(cwd))
		json_object_set(e, "cwd", cwd);
	if (e && json_is_string(tag))
		json_object_set(e, "tag", tag);
	if (e && user)
		json_object_set_new(e, "user", json_string(user));
	if (e && json_object_get(m, "pty"))
		json_object_set_new(e, "pty", winsize_json(json_object_get(m, "pty")) ?: json_object());
	return e;
}

static void process_start(struct ctx *c)
{
	const char *user;
	struct cordon_err perr = {};
	struct svc_err err = {};
	struct sbx *s = envd_sbx(c, CONNECT_MODE_STREAM, NULL);
	_cleanup_(json_decrefp) json_t *m = s ? envd_message(c, CONNECT_MODE_STREAM) : NULL;
	if (!m)
		return;
	if (envd_user(c, &user) < 0) {
		connect_refuse(c->req, CONNECT_MODE_STREAM, CONNECT_INVALID_ARGUMENT, 400,
			       "Authorization: expected Basic of \"user:\" or \"root:\"");
		return;
	}
	_cleanup_(json_decrefp) json_t *ej = exec_request(m, user);
	_cleanup_free_ char *body = ej ? json_dumps(ej, JSON_COMPACT) : NULL;
	struct api_exec *e = NULL;
	int r = body ? api_exec_parse(body, strlen(body), API_EXEC_START, &e, &perr) : -ENOMEM;
	struct start *st = r == 0 ? calloc(1, sizeof(*st)) : NULL;
	if (!st) {
		connect_refuse(c->req, CONNECT_MODE_STREAM,
			       r < 0 ? CONNECT_INVALID_ARGUMENT : CONNECT_INTERNAL, r < 0 ? 400 : 500,
			       r < 0 && body ? perr.msg : "out of memory");
		api_exec_free(e);
		return;
	}
	st->pty = e->pty_set;
	/* E2B's stdin: false (the default) is /dev/null from the start, as envd gives it: no
	 * pipe to close after the start event, and no close crossing the exit of a short
	 * command. A PTY keeps its input. */
	e->stdin_none = !st->pty && !json_is_true(json_object_get(m, "stdin"));
	struct connect_call *cc = connect_call_new(c->req, CONNECT_MODE_STREAM, &start_ops, st);
	if (!cc)
		free(st);
	else if (svc_proc_start(s, e, false, connect_reply(cc), &err) < 0)
		connect_answer_svc_err(cc, &err);
	api_exec_free(e);
}

/* The running process a ProcessSelector names ({pid} or {tag}), or for a stream (Connect) one
 * that has exited; NULL with not_found answered. Whether it has a PTY in *@ret_pty (may be
 * NULL). */
static struct proc *selected(struct ctx *c, struct sbx *s, json_t *m, enum connect_mode mode,
			     bool *ret_pty)
{
	json_t *sel = json_object_get(json_object_get(m, "process"), "pid");
	const char *tag = json_string_value(json_object_get(json_object_get(m, "process"), "tag"));
	char pid[24] = "";
	struct svc_err err = {};
	bool pty = false;
	_cleanup_(json_decrefp) json_t *l = svc_proc_list(s);
	json_t *p;
	size_t i;
	json_array_foreach(json_object_get(l, "processes"), i, p) {
		json_t *id = json_object_get(p, "pid");
		if (tag ? strcmp(json_string_value(json_object_get(p, "tag")) ?: "", tag) == 0
			: json_is_integer(sel) && json_integer_value(sel) == json_integer_value(id)) {
			snprintf(pid, sizeof(pid), "%lld", (long long)json_integer_value(id));
			pty = json_is_true(json_object_get(p, "pty"));
		}
	}
	if (!*pid && json_is_integer(sel) && mode == CONNECT_MODE_STREAM)
		/* exited: Connect answers its end as envd does, not_found (exited_bytes()) */
		snprintf(pid, sizeof(pid), "%lld", (long long)json_integer_value(sel));
	struct proc *pr = *pid ? svc_proc_find(s, pid, &err) : NULL;
	if (!pr)
		connect_refuse(c->req, mode, CONNECT_NOT_FOUND, 404, "process not found");
	if (ret_pty)
		*ret_pty = pty;
	return pr;
}

static void process_connect(struct ctx *c)
{
	struct sbx *s = envd_sbx(c, CONNECT_MODE_STREAM, NULL);
	_cleanup_(json_decrefp) json_t *m = s ? envd_message(c, CONNECT_MODE_STREAM) : NULL;
	bool pty = false;
	struct proc *p = m ? selected(c, s, m, CONNECT_MODE_STREAM, &pty) : NULL;
	struct start *st = p ? calloc(1, sizeof(*st)) : NULL;
	if (p && !st)
		connect_refuse(c->req, CONNECT_MODE_STREAM, CONNECT_INTERNAL, 500, "out of memory");
	if (!st)
		return;
	*st = (struct start){.pty = pty};
	struct connect_call *cc = connect_call_new(c->req, CONNECT_MODE_STREAM, &connect_ops, st);
	if (cc)
		svc_proc_events(p, connect_reply(cc));
	else
		free(st);
}

static json_t *process_info(json_t *p)
{
	json_t *argv = json_object_get(p, "argv");
	json_t *args = json_array();
	for (size_t i = 1; i < json_array_size(argv); i++)
		json_array_append(args, json_array_get(argv, i));
	json_t *o = json_pack("{s:{s:O, s:o, s:{}, s:O}, s:O}", "config", "cmd",
			      json_array_get(argv, 0), "args", args, "envs", "cwd",
			      json_object_get(p, "cwd"), "pid", json_object_get(p, "pid"));
	if (o && json_object_get(p, "tag"))
		json_object_set(o, "tag", json_object_get(p, "tag"));
	return o;
}

static void process_list(struct ctx *c)
{
	struct sbx *s = envd_sbx(c, CONNECT_MODE_UNARY, NULL);
	_cleanup_(json_decrefp) json_t *m = s ? envd_message(c, CONNECT_MODE_UNARY) : NULL;
	if (!m)
		return;
	_cleanup_(json_decrefp) json_t *l = svc_proc_list(s);
	json_t *out = json_array(), *p;
	size_t i;
	json_array_foreach(json_object_get(l, "processes"), i, p)
		json_array_append_new(out, process_info(p));
	reply_json(c->req, 200, json_pack("{s:o}", "processes", out));
}

/* A unary process call's answer: {} or the error. */
static void answer_unary(struct ctx *c, int r, const struct svc_err *err)
{
	if (r < 0)
		connect_refuse(c->req, CONNECT_MODE_UNARY, connect_code_from_api(err->code),
			       api_error_status(err->code), err->msg);
	else
		reply_json(c->req, 200, json_object());
}

/* The process a unary call's message selects, the message in *@ret_m; NULL answered. */
static struct proc *unary_proc(struct ctx *c, json_t **ret_m)
{
	struct sbx *s = envd_sbx(c, CONNECT_MODE_UNARY, NULL);
	json_t *m = s ? envd_message(c, CONNECT_MODE_UNARY) : NULL;
	struct proc *p = m ? selected(c, s, m, CONNECT_MODE_UNARY, NULL) : NULL;
	if (!p)
		json_decref(m);
	*ret_m = p ? m : NULL;
	return p;
}

/* envd's ProcessInput {stdin | pty} (base64) as Cordon's; false when it is not base64 of at
 * most MAX_STDIN bytes. */
static bool input_bytes(json_t *in, uint8_t **ret, size_t *ret_len)
{
	const char *b64 = json_string_value(json_object_get(in, "stdin"))
				  ?: json_string_value(json_object_get(in, "pty"));
	*ret = NULL, *ret_len = 0;
	return !b64 || (base64_decode(b64, strlen(b64), ret, ret_len) == 0 && *ret_len <= MAX_STDIN);
}

static void process_input(struct ctx *c, bool close)
{
	struct svc_err err = {};
	json_t *mm;
	struct proc *p = unary_proc(c, &mm);
	_cleanup_(json_decrefp) json_t *m = mm;
	if (!p)
		return;
	size_t n = 0;
	_cleanup_free_ uint8_t *data = NULL;
	if (!input_bytes(json_object_get(m, "input"), &data, &n)) {
		connect_refuse(c->req, CONNECT_MODE_UNARY, CONNECT_INVALID_ARGUMENT, 400,
			       "input: stdin or pty must be base64 of at most 512 KiB");
		return;
	}
	struct api_stdin st = {.data = data, .len = n, .eof = close};
	answer_unary(c, svc_proc_stdin(p, &st, &err), &err);
}

static void process_send_input(struct ctx *c)
{
	process_input(c, false);
}

static void process_close_stdin(struct ctx *c)
{
	process_input(c, true);
}

static void process_signal(struct ctx *c)
{
	struct svc_err err = {};
	json_t *mm;
	struct proc *p = unary_proc(c, &mm);
	_cleanup_(json_decrefp) json_t *m = mm;
	if (!p)
		return;
	json_t *sig = json_object_get(m, "signal");
	const char *name = json_string_value(sig);
	int signo = json_is_integer(sig) ? (int)json_integer_value(sig)
		    : name && strcmp(name, "SIGNAL_SIGKILL") == 0 ? 9
		    : name && strcmp(name, "SIGNAL_SIGTERM") == 0 ? 15 : 0;
	if (signo != 9 && signo != 15) {
		connect_refuse(c->req, CONNECT_MODE_UNARY, CONNECT_INVALID_ARGUMENT, 400,
			       "signal: must be SIGNAL_SIGKILL or SIGNAL_SIGTERM");
		return;
	}
	answer_unary(c, svc_proc_signal(p, signo, &err), &err);
}

/* Update {process, pty: {size}}: the PTY's new window. */
static void process_update(struct ctx *c)
{
	struct cordon_err perr = {};
	struct svc_err err = {};
	struct api_winsize w;
	json_t *mm;
	struct proc *p = unary_proc(c, &mm);
	_cleanup_(json_decrefp) json_t *m = mm;
	_cleanup_(json_decrefp) json_t *size = p ? winsize_json(json_object_get(m, "pty")) : NULL;
	_cleanup_free_ char *body = size ? json_dumps(size, JSON_COMPACT) : NULL;
	if (!p)
		return;
	if (!body || api_resize_parse(body, strlen(body), &w, &perr) < 0) {
		connect_refuse(c->req, CONNECT_MODE_UNARY, CONNECT_INVALID_ARGUMENT, 400,
			       body ? perr.msg : "pty.size: required");
		return;
	}
	answer_unary(c, svc_proc_resize(p, &w, &err), &err);
}

/* StreamInput: a client stream, read whole by the front: a start naming the process, then
 * data envelopes, each the process's input in order; keepalives are skipped. */
static int stream_input_one(struct proc **p, struct sbx *s, json_t *ev, struct svc_err *err)
{
	json_t *start = json_object_get(ev, "start"), *data = json_object_get(ev, "data");
	size_t n = 0;
	_cleanup_free_ uint8_t *bytes = NULL;
	if (start) {
		char pid[24];
		json_t *sel = json_object_get(json_object_get(start, "process"), "pid");
		snprintf(pid, sizeof(pid), "%lld", (long long)json_integer_value(sel));
		*p = json_is_integer(sel) ? svc_proc_find(s, pid, err) : NULL;
		return *p ? 0 : svc_fail(err, API_ERR_NOT_FOUND, "process not found");
	}
	if (!data)
		return 0;
	if (!*p)
		return svc_fail(err, API_ERR_INVALID_FIELD, "start: must come before data");
	if (!input_bytes(json_object_get(data, "input"), &bytes, &n))
		return svc_fail(err, API_ERR_INVALID_FIELD, "input: must be base64 of at most 512 KiB");
	struct api_stdin in = {.data = bytes, .len = n};
	return svc_proc_stdin(*p, &in, err);
}

static void process_stream_input(struct ctx *c)
{
	struct svc_err err = {};
	struct connect_frame f;
	struct proc *p = NULL;
	struct sbx *s = envd_sbx(c, CONNECT_MODE_STREAM, NULL);
	const uint8_t *b = (const uint8_t *)c->body;
	size_t left = c->body_len;
	int r = 0, n;
	while (s && r == 0 && left && (n = connect_envelope_next(b, left, CONNECT_MAX_MESSAGE, &f)) > 0) {
		_cleanup_(json_decrefp) json_t *ev =
			f.flags & CONNECT_FLAG_END ? NULL : json_loadb((const char *)f.data, f.len, 0, NULL);
		r = f.flags & CONNECT_FLAG_END ? 0
		    : json_is_object(ev)       ? stream_input_one(&p, s, ev, &err)
					       : svc_fail(&err, API_ERR_INVALID_FIELD, "a message is not a JSON object");
		b += n, left -= (size_t)n;
	}
	if (s && r == 0 && left)
		r = svc_fail(&err, API_ERR_INVALID_FIELD, "the body is not whole Connect envelopes");
	if (s && r < 0)
		connect_refuse(c->req, CONNECT_MODE_STREAM, connect_code_from_api(err.code),
			       api_error_status(err.code), err.msg);
	else if (s) {
		struct connect_call *cc = connect_call_new(c->req, CONNECT_MODE_STREAM, NULL, NULL);
		if (cc)
			connect_answer(cc, 200, json_object());
	}
}

/* envd's GET /health: 204 while the sandbox runs (the SDK asks it when a stream breaks). */
static void envd_health(struct ctx *c)
{
	if (envd_sbx(c, CONNECT_MODE_REST, NULL))
		reply_empty(c->req, 204);
}

#define POST EVHTTP_REQ_POST
#define GET EVHTTP_REQ_GET
#define PROC "/process.Process/"
#define FS "/filesystem.Filesystem/"

static const struct route envd_routes[] = {
	{GET, "/health", envd_health},
	{POST, PROC "Start", process_start},
	{POST, PROC "Connect", process_connect},
	{POST, PROC "List", process_list},
	{POST, PROC "SendInput", process_send_input},
	{POST, PROC "CloseStdin", process_close_stdin},
	{POST, PROC "SendSignal", process_signal},
	{POST, PROC "Update", process_update},
	{POST, PROC "StreamInput", process_stream_input},
	{POST, FS "Stat", fs_stat},
	{POST, FS "ListDir", fs_list},
	{POST, FS "MakeDir", fs_mkdir},
	{POST, FS "Move", fs_move},
	{POST, FS "Remove", fs_remove},
	{POST, FS "WatchDir", fs_watch},
	{POST, FS "CreateWatcher", fs_watch_create},
	{POST, FS "GetWatcherEvents", fs_watch_events},
	{POST, FS "RemoveWatcher", fs_watch_remove},
	{GET, "/files", files_get},
	{POST, "/files", files_post, BODY_SPOOL},
};

const struct surface e2b_envd_surface = {
	"e2b-envd", envd_routes, ELEMENTSOF(envd_routes), e2b_render_error, 1u << LISTEN_E2B,
	.admit = envd_admit, .claim = envd_claim,
};
