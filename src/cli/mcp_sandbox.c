/* cordon mcp: what each tool does, as requests to cordond (client.h). The arguments were
 * checked against the tool's table (mcp_tools.c); what only the configuration decides
 * (maxima, the egress allow-list, which sandboxes are ours, the host files directory) is
 * checked here. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <jansson.h>

#include "basic/base64.h"
#include "basic/buf.h"
#include "basic/cleanup.h"
#include "basic/fileio.h"
#include "basic/utf8.h"
#include "cli/mcp.h"

#define URL_MAX	     (4096 * 3 + 512)
#define CALL_MARGIN_S 30	     /* an answer's wait beyond the command's own timeout */
#define LIST_MAX     1000	     /* list_files: entries shown */
#define IMAGES_MAX   (8 << 20)	     /* run_code: bytes of base64 images in one result */

static const char *str_arg(json_t *args, const char *name)
{
	return json_string_value(json_object_get(args, name));
}

/* "/v1/sandboxes/ID SUFFIX [path=PATH]" into @buf. */
static int sbx_url(char *buf, size_t size, const char *id, const char *suffix, const char *path)
{
	int n = snprintf(buf, size, "/v1/sandboxes/%s%s%s", id, suffix, path ? "?path=" : "");
	if (n < 0 || (size_t)n >= size)
		return -E2BIG;
	return path ? client_urlencode(buf, size, path) : 0;
}

static int call(struct mcp_server *s, const char *method, const char *url, json_t *req,
		long long wait_s, struct client_response *res)
{
	s->c.timeout_ms = (int)((wait_s > 0 ? wait_s : 0) + CALL_MARGIN_S) * 1000;
	return client_json(&s->c, method, url, req, res);
}

/* A sandbox the tools may touch: its id well-formed, and tagged as ours unless
 * --all-sandboxes. 0, or -1 after writing why into @o. */
static int ours(struct mcp_server *s, const char *id, struct mcp_out *o, json_t **ret_info)
{
	_cleanup_(client_response_done) struct client_response res = {};
	char url[URL_MAX];
	if (!client_valid_id(id, strlen(id)) || sbx_url(url, sizeof(url), id, "", NULL) < 0)
		return mcp_fail(o, "'%.64s' is not a sandbox id", id), -1;
	int r = call(s, "GET", url, NULL, 0, &res);
	if (r < 0 || (res.status >= 300 && res.status != 404))
		return mcp_fail_api(o, s, r, &res), -1;
	const char *tag = json_string_value(json_object_get(json_object_get(res.json, "metadata"), MCP_OWNER_KEY));
	if (res.status == 404 || (!s->cfg.all_sandboxes && (!tag || strcmp(tag, s->cfg.owner) != 0)))
		return mcp_fail(o, "no sandbox %s among this server's (list_sandboxes names them)", id), -1;
	if (ret_info)
		*ret_info = json_incref(res.json);
	return 0;
}

/* The sandbox_id argument when it is ours, its URL and @suffix in @url; NULL after writing
 * why into @o. */
static const char *our_sandbox(struct mcp_server *s, json_t *args, const char *suffix, char *url,
			       struct mcp_out *o)
{
	const char *id = str_arg(args, "sandbox_id");
	if (ours(s, id, o, NULL) < 0)
		return NULL;
	if (sbx_url(url, URL_MAX, id, suffix, NULL) < 0)
		return mcp_fail(o, "out of memory"), NULL;
	return id;
}

/* @asked seconds (or @dflt when absent) capped at @max, with a note when capped. */
static long long capped(struct mcp_out *o, json_t *asked, long long dflt, long long max, const char *what)
{
	long long v = asked ? json_integer_value(asked) : dflt;
	if (v > max) {
		mcp_out_text(o, "note: %s capped to %lld by the server's configuration", what, max);
		v = max;
	}
	return v;
}

/* ---- sandboxes ---- */

static json_t *network_json(struct mcp_server *s, json_t *rules, struct mcp_out *o)
{
	size_t i;
	json_t *v;
	if (!rules || json_array_size(rules) == 0)
		return json_pack("{s:s}", "policy", "deny");
	json_array_foreach(rules, i, v) {
		bool ok = false;
		for (size_t k = 0; k < s->cfg.n_allow && !ok; k++)
			ok = strcmp(s->cfg.allow[k], json_string_value(v)) == 0;
		if (!ok)
			return mcp_fail(o, "network: '%.200s' is not allowed by the server's configuration "
					   "(%s)", json_string_value(v),
					s->cfg.n_allow ? "--allow lists the hosts it allows" :
							 "it allows no network at all"), NULL;
	}
	return json_pack("{s:s, s:O}", "policy", "allow", "allow", rules);
}

static json_t *create_request(struct mcp_server *s, json_t *args, struct mcp_out *o)
{
	const struct mcp_config *cfg = &s->cfg;
	json_t *meta_in = json_object_get(args, "metadata");
	if (json_object_get(meta_in, MCP_OWNER_KEY))
		return mcp_fail(o, "metadata: '%s' is the server's own label", MCP_OWNER_KEY), NULL;
	long long mem = cfg->memory_mb;
	if (json_object_get(args, "memory_mb")) {
		if (!cfg->max_memory_mb)
			return mcp_fail(o, "memory_mb: the server's configuration sets the memory (--max-memory allows asking)"), NULL;
		mem = capped(o, json_object_get(args, "memory_mb"), 0, cfg->max_memory_mb, "memory_mb");
	}
	long long ttl = capped(o, json_object_get(args, "timeout"), cfg->ttl_s, cfg->max_ttl_s, "timeout");
	_cleanup_(json_decrefp) json_t *net = network_json(s, json_object_get(args, "network"), o);
	_cleanup_(json_decrefp) json_t *meta = json_is_object(meta_in) ? json_deep_copy(meta_in) : json_object();
	if (!net || !meta || json_object_set_new(meta, MCP_OWNER_KEY, json_string(cfg->owner)) < 0)
		return NULL;
	json_t *req = json_pack("{s:I, s:O, s:O}", "timeout_s", (json_int_t)(ttl ?: 1), "network", net,
				"metadata", meta);
	const char *tpl = str_arg(args, "template") ?: cfg->template;
	const char *rt = str_arg(args, "runtime") ?: cfg->runtime;
	if (req && ((tpl && json_object_set_new(req, "template", json_string(tpl)) < 0) ||
		    (rt && json_object_set_new(req, "runtime", json_string(rt)) < 0) ||
		    (mem > 0 && json_object_set_new(req, "limits", json_pack("{s:I}", "memory_mb", (json_int_t)mem)) < 0))) {
		json_decref(req);
		return NULL;
	}
	return req;
}

static int out_json(struct mcp_out *o, const char *prefix, json_t *j)
{
	_cleanup_free_ char *s = json_dumps(j, JSON_INDENT(1) | JSON_SORT_KEYS);
	return s ? mcp_out_block(o, prefix, s, strlen(s), false) : -ENOMEM;
}

/* What a model needs of a sandbox (not its secrets' hosts, not its owner tag). */
static json_t *summary(json_t *sb)
{
	return json_pack("{s:O?, s:O?, s:O?, s:O?, s:O?, s:O?, s:O?, s:O?}", "sandbox_id", json_object_get(sb, "id"),
			 "template", json_object_get(sb, "template"), "runtime", json_object_get(sb, "runtime"),
			 "state", json_object_get(sb, "state"), "expires_at", json_object_get(sb, "expires_at"),
			 "limits", json_object_get(sb, "limits"), "network", json_object_get(sb, "network"),
			 "metadata", json_object_get(sb, "metadata"));
}

int mcp_tool_create_sandbox(struct mcp_server *s, json_t *args, struct mcp_out *o)
{
	_cleanup_(client_response_done) struct client_response res = {};
	_cleanup_(json_decrefp) json_t *req = create_request(s, args, o);
	if (!req)
		return o->is_error ? 0 : mcp_fail(o, "out of memory");
	int r = call(s, "POST", "/v1/sandboxes", req, 60, &res);
	if (r < 0 || res.status >= 300)
		return mcp_fail_api(o, s, r, &res);
	_cleanup_(json_decrefp) json_t *sum = summary(res.json);
	mcp_out_text(o, "sandbox_id: %s", json_string_value(json_object_get(res.json, "id")) ?: "?");
	return out_json(o, "sandbox", sum);
}

int mcp_tool_get_sandbox(struct mcp_server *s, json_t *args, struct mcp_out *o)
{
	_cleanup_(json_decrefp) json_t *info = NULL;
	if (ours(s, str_arg(args, "sandbox_id"), o, &info) < 0)
		return 0;
	_cleanup_(json_decrefp) json_t *sum = summary(info);
	return out_json(o, "sandbox", sum);
}

/* "metadata.K=V&" appended to @url, both percent-encoded. */
static int add_filter(char *url, size_t size, const char *k, const char *v)
{
	size_t n = strlen(url);
	if (n + 16 >= size)
		return -E2BIG;
	strcpy(url + n, "metadata.");
	if (client_urlencode(url, size, k) < 0 || strlen(url) + 2 >= size)
		return -E2BIG;
	strcat(url, "=");
	if (client_urlencode(url, size, v) < 0 || strlen(url) + 2 >= size)
		return -E2BIG;
	strcat(url, "&");
	return 0;
}

int mcp_tool_list_sandboxes(struct mcp_server *s, json_t *args, struct mcp_out *o)
{
	_cleanup_(client_response_done) struct client_response res = {};
	char url[URL_MAX] = "/v1/sandboxes?";
	const char *k;
	json_t *v;
	if (!s->cfg.all_sandboxes && add_filter(url, sizeof(url), MCP_OWNER_KEY, s->cfg.owner) < 0)
		return mcp_fail(o, "the owner label is too long");
	json_object_foreach(json_object_get(args, "metadata"), k, v)
		if (strcmp(k, MCP_OWNER_KEY) != 0 && add_filter(url, sizeof(url), k, json_string_value(v)) < 0)
			return mcp_fail(o, "metadata: too long a filter");
	int r = call(s, "GET", url, NULL, 0, &res);
	if (r < 0 || res.status >= 300)
		return mcp_fail_api(o, s, r, &res);
	_cleanup_(json_decrefp) json_t *list = json_array();
	size_t i;
	json_array_foreach(json_object_get(res.json, "sandboxes"), i, v)
		json_array_append_new(list, summary(v));
	mcp_out_text(o, "%zu sandbox%s", json_array_size(list), json_array_size(list) == 1 ? "" : "es");
	return out_json(o, "sandboxes", list);
}

int mcp_tool_kill_sandbox(struct mcp_server *s, json_t *args, struct mcp_out *o)
{
	_cleanup_(client_response_done) struct client_response res = {};
	char url[URL_MAX];
	const char *id = our_sandbox(s, args, "", url, o);
	if (!id)
		return 0;
	int r = call(s, "DELETE", url, NULL, 0, &res);
	if (r < 0 || (res.status >= 300 && res.status != 404))
		return mcp_fail_api(o, s, r, &res);
	return mcp_out_text(o, "sandbox %s destroyed", id);
}

/* ---- commands ---- */

int mcp_tool_run_command(struct mcp_server *s, json_t *args, struct mcp_out *o)
{
	_cleanup_(client_response_done) struct client_response res = {};
	char url[URL_MAX];
	if (!our_sandbox(s, args, "/exec", url, o))
		return 0;
	long long t = capped(o, json_object_get(args, "timeout"), s->cfg.exec_timeout_s, s->cfg.max_exec_s, "timeout");
	_cleanup_(json_decrefp) json_t *req = json_pack("{s:O, s:I, s:O*, s:O*, s:O*}", "cmd",
		json_object_get(args, "command"), "timeout_s", (json_int_t)(t ?: 1), "cwd",
		json_object_get(args, "cwd"), "env", json_object_get(args, "env"), "stdin",
		json_object_get(args, "stdin"));
	if (!req)
		return mcp_fail(o, "out of memory");
	int r = call(s, "POST", url, req, t, &res);
	if (r < 0 || res.status >= 300)
		return mcp_fail_api(o, s, r, &res);
	json_t *j = res.json;
	long long code = json_integer_value(json_object_get(j, "exit_code"));
	mcp_out_text(o, "exit_code: %lld%s%s%s", code,
		     json_is_true(json_object_get(j, "timed_out")) ? " (killed: it ran past its timeout)" : "",
		     json_is_true(json_object_get(j, "oom")) ? " (killed: out of memory)" : "",
		     json_integer_value(json_object_get(j, "signal")) ? " (killed by a signal)" : "");
	static const char *const streams[] = {"stdout", "stderr"};
	for (size_t i = 0; i < ELEMENTSOF(streams); i++) {
		json_t *v = json_object_get(j, streams[i]);
		char key[32];
		snprintf(key, sizeof(key), "%s_truncated", streams[i]);
		if (json_string_length(v) || json_is_true(json_object_get(j, key)))
			mcp_out_block(o, streams[i], json_string_value(v) ?: "", json_string_length(v),
				      json_is_true(json_object_get(j, key)));
	}
	return 0;
}

/* ---- the code interpreter ---- */

struct cell {
	struct mcp_out *o;
	struct buf out, err;
	bool out_cut, err_cut, ended, truncated, timed_out;
	long long images;
	long long max;
	json_t *error;
	json_t *results; /* array of result events */
};

static void cell_add(struct buf *b, bool *cut, const char *s, size_t n, long long max)
{
	if ((long long)(b->len + n) > max) {
		*cut = true;
		n = max > (long long)b->len ? (size_t)(max - (long long)b->len) : 0;
	}
	buf_add(b, s, n);
}

static int cell_line(char *line, size_t len, void *userdata)
{
	struct cell *c = userdata;
	_cleanup_(json_decrefp) json_t *ev = json_loadb(line, len, 0, NULL);
	const char *type = json_string_value(json_object_get(ev, "type"));
	json_t *text = json_object_get(ev, "text");
	if (!type)
		return 0;
	if (strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0) {
		bool o = type[3] == 'o';
		cell_add(o ? &c->out : &c->err, o ? &c->out_cut : &c->err_cut, json_string_value(text) ?: "",
			 json_string_length(text), c->max);
	} else if (strcmp(type, "result") == 0) {
		json_array_append(c->results, ev);
	} else if (strcmp(type, "error") == 0) {
		json_decref(c->error);
		c->error = json_incref(ev);
	} else if (strcmp(type, "end") == 0) {
		c->ended = true;
		c->truncated = json_is_true(json_object_get(ev, "truncated"));
		c->timed_out = json_is_true(json_object_get(ev, "timed_out"));
	}
	return 0;
}

static void cell_result(struct cell *c, json_t *ev)
{
	static const char *const images[] = {"image/png", "image/jpeg", "image/svg+xml"};
	static const char *const texts[] = {"text/plain", "text/markdown", "text/html", "application/json"};
	json_t *data = json_object_get(ev, "data");
	bool shown = false;
	for (size_t i = 0; i < 2; i++) { /* svg goes as text */
		json_t *v = json_object_get(data, images[i]);
		if (!json_is_string(v))
			continue;
		if (c->images + (long long)json_string_length(v) > IMAGES_MAX) {
			mcp_out_text(c->o, "[%s result cut: the result's image bound was reached]", images[i]);
		} else {
			c->images += (long long)json_string_length(v);
			mcp_out_image(c->o, images[i], json_string_value(v));
		}
		shown = true;
	}
	/* a table (pandas) has text/plain beside text/html: the text is what a model reads best */
	for (size_t i = 0; i < ELEMENTSOF(texts) && !(shown && i > 0); i++) {
		json_t *v = json_object_get(data, texts[i]);
		if (json_is_string(v)) {
			mcp_out_block(c->o, json_is_true(json_object_get(ev, "is_main")) ? "result" : "display",
				      json_string_value(v), json_string_length(v), false);
			break;
		}
	}
}

static void cell_report(struct cell *c)
{
	if (c->out.len || c->out_cut)
		mcp_out_block(c->o, "stdout", c->out.p ? c->out.p + c->out.head : "", c->out.len, c->out_cut);
	if (c->err.len || c->err_cut)
		mcp_out_block(c->o, "stderr", c->err.p ? c->err.p + c->err.head : "", c->err.len, c->err_cut);
	size_t i;
	json_t *ev;
	json_array_foreach(c->results, i, ev)
		cell_result(c, ev);
	if (c->error) {
		_cleanup_free_ char *s = NULL;
		const char *tb = json_string_value(json_object_get(c->error, "traceback")) ?: "";
		int n = asprintf(&s, "%s: %s\n%s", json_string_value(json_object_get(c->error, "name")) ?: "Error",
				 json_string_value(json_object_get(c->error, "value")) ?: "", tb);
		if (n >= 0)
			mcp_out_block(c->o, "error", s, (size_t)n, false);
	}
	if (c->truncated)
		mcp_out_text(c->o, "[output cut: the cell's output bound was reached in the sandbox]");
	if (c->timed_out)
		mcp_out_text(c->o, "[the cell ran past its timeout and was interrupted]");
	if (!c->ended)
		mcp_fail(c->o, "the interpreter's stream ended early: the cell's result is unknown");
}

static int code_request(struct mcp_server *s, json_t *args, const char *url, struct mcp_out *o, long long t)
{
	_cleanup_(client_response_done) struct client_response res = {};
	_cleanup_(client_conn_freep) struct client_conn *conn = NULL;
	_cleanup_(json_decrefp) json_t *req = json_pack("{s:O, s:O*, s:O*, s:I}", "code", json_object_get(args, "code"),
		"language", json_object_get(args, "language"), "context", json_object_get(args, "context_id"),
		"timeout_s", (json_int_t)(t ?: 1));
	_cleanup_free_ char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
	struct client_body b = {"application/json", body, body ? strlen(body) : 0, -1};
	if (!body)
		return mcp_fail(o, "out of memory");
	s->c.timeout_ms = (int)(t + CALL_MARGIN_S) * 1000;
	int r = client_open(&s->c, "POST", url, &b, &res, &conn);
	if (r == 0 && res.status >= 300 && (r = client_read_body(&s->c, conn, &res)) == 0) {
		if (res.status == 404 && res.body && strstr(res.body, "no such route"))
			return mcp_fail(o, "this cordond has no code interpreter (POST /v1/sandboxes/{id}/code "
					   "is not in this build): use run_command");
		return mcp_fail_api(o, s, r, &res);
	}
	if (r < 0)
		return mcp_fail_api(o, s, r, &res);
	struct cell c = {.o = o, .max = s->cfg.max_output, .results = json_array()};
	struct client_lines lines = {.cb = cell_line, .userdata = &c};
	r = client_drain(&s->c, conn, client_lines_sink, &lines, true);
	if (r == 0)
		client_lines_finish(&lines);
	client_lines_done(&lines);
	cell_report(&c);
	buf_done(&c.out);
	buf_done(&c.err);
	json_decref(c.error);
	json_decref(c.results);
	return 0;
}

int mcp_tool_run_code(struct mcp_server *s, json_t *args, struct mcp_out *o)
{
	char url[URL_MAX];
	if (!our_sandbox(s, args, "/code", url, o))
		return 0;
	long long t = capped(o, json_object_get(args, "timeout"), s->cfg.exec_timeout_s, s->cfg.max_exec_s, "timeout");
	return code_request(s, args, url, o, t);
}

/* ---- files ---- */

/* The entry at @path (GET files/stat), or NULL after writing why. */
static json_t *stat_file(struct mcp_server *s, const char *id, const char *path, struct mcp_out *o)
{
	_cleanup_(client_response_done) struct client_response res = {};
	char url[URL_MAX];
	if (path[0] != '/')
		return mcp_fail(o, "path: '%.200s' is not absolute", path), NULL;
	if (sbx_url(url, sizeof(url), id, "/files/stat", path) < 0)
		return mcp_fail(o, "path: too long"), NULL;
	int r = call(s, "GET", url, NULL, 0, &res);
	if (r < 0 || res.status >= 300)
		return mcp_fail_api(o, s, r, &res), NULL;
	return json_incref(res.json);
}

/* The bytes of regular file @path, at most cfg.max_file; -1 after writing why. */
static int fetch_file(struct mcp_server *s, const char *id, const char *path, struct mcp_out *o,
		      struct client_response *res)
{
	_cleanup_(json_decrefp) json_t *st = NULL;
	char url[URL_MAX];
	if (ours(s, id, o, NULL) < 0 || !(st = stat_file(s, id, path, o)))
		return -1;
	const char *type = json_string_value(json_object_get(st, "type")) ?: "";
	long long size = json_integer_value(json_object_get(st, "size"));
	if (strcmp(type, "dir") == 0)
		return mcp_fail(o, "%.200s is a directory: list_files lists it", path), -1;
	if (size > s->cfg.max_file)
		return mcp_fail(o, "%.200s has %lld bytes, more than this server moves (%lld)", path, size,
				s->cfg.max_file), -1;
	if (sbx_url(url, sizeof(url), id, "/files", path) < 0)
		return mcp_fail(o, "path: too long"), -1;
	int r = call(s, "GET", url, NULL, 0, res);
	if (r < 0 || res->status >= 300)
		return mcp_fail_api(o, s, r, res), -1;
	if ((long long)res->body_len > s->cfg.max_file)
		return mcp_fail(o, "%.200s grew past what this server moves (%lld bytes)", path, s->cfg.max_file), -1;
	return 0;
}

static bool valid_utf8(const char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		int k = utf8_seq((const uint8_t *)s + i, n - i);
		if (k <= 0 || s[i] == 0)
			return false;
		i += (size_t)k;
	}
	return true;
}

static const char *image_type(const char *p, size_t n)
{
	if (n >= 8 && memcmp(p, "\x89PNG\r\n\x1a\n", 8) == 0)
		return "image/png";
	if (n >= 3 && memcmp(p, "\xff\xd8\xff", 3) == 0)
		return "image/jpeg";
	if (n >= 6 && (memcmp(p, "GIF87a", 6) == 0 || memcmp(p, "GIF89a", 6) == 0))
		return "image/gif";
	return NULL;
}

int mcp_tool_read_file(struct mcp_server *s, json_t *args, struct mcp_out *o)
{
	_cleanup_(client_response_done) struct client_response res = {};
	const char *path = str_arg(args, "path");
	if (fetch_file(s, str_arg(args, "sandbox_id"), path, o, &res) < 0)
		return 0;
	const char *img = image_type(res.body, res.body_len);
	size_t b64_len;
	if (img && (long long)base64_encoded_len(res.body_len) <= IMAGES_MAX) {
		_cleanup_free_ char *b64 = base64_encode(res.body, res.body_len, &b64_len);
		return b64 ? mcp_out_image(o, img, b64) : mcp_fail(o, "out of memory");
	}
	if (valid_utf8(res.body, res.body_len))
		return mcp_out_block(o, path, res.body, res.body_len, false);
	_cleanup_free_ char *b64 = base64_encode(res.body, res.body_len, &b64_len);
	if (!b64)
		return mcp_fail(o, "out of memory");
	mcp_out_text(o, "%s is binary (%zu bytes); its base64 follows", path, res.body_len);
	return mcp_out_block(o, "base64", b64, b64_len, false);
}

static int put_file(struct mcp_server *s, const char *id, const char *path, const struct client_body *b,
		    struct mcp_out *o)
{
	_cleanup_(client_response_done) struct client_response res = {}, mk = {};
	_cleanup_free_ char *dir = strdup(path);
	char url[URL_MAX];
	if (!dir)
		return mcp_fail(o, "out of memory");
	if (path[0] != '/' || path[strlen(path) - 1] == '/')
		return mcp_fail(o, "path: '%.200s' must be an absolute file path", path);
	const char *parent = dirname(dir);
	_cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:b}", "path", parent, "parents", 1);
	if (!req || sbx_url(url, sizeof(url), id, "/files/mkdir", NULL) < 0)
		return mcp_fail(o, "out of memory");
	int r = strcmp(parent, "/") == 0 ? 0 : call(s, "POST", url, req, 0, &mk);
	if (r < 0 || (mk.status >= 300 && mk.status != 409))
		return mcp_fail_api(o, s, r, &mk);
	if (sbx_url(url, sizeof(url), id, "/files", path) < 0)
		return mcp_fail(o, "path: too long");
	s->c.timeout_ms = CALL_MARGIN_S * 1000 * 4;
	r = client_request(&s->c, "PUT", url, b, &res);
	if (r < 0 || res.status >= 300)
		return mcp_fail_api(o, s, r, &res);
	return mcp_out_text(o, "wrote %zu bytes to %s", b->len, path);
}

int mcp_tool_write_file(struct mcp_server *s, json_t *args, struct mcp_out *o)
{
	const char *id = str_arg(args, "sandbox_id"), *enc = str_arg(args, "encoding") ?: "utf-8";
	json_t *content = json_object_get(args, "content");
	_cleanup_free_ uint8_t *bin = NULL;
	struct client_body b = {"application/octet-stream", json_string_value(content), json_string_length(content), -1};
	if (ours(s, id, o, NULL) < 0)
		return 0;
	if (strcmp(enc, "base64") == 0) {
		if (base64_decode(b.data, b.len, &bin, &b.len) < 0)
			return mcp_fail(o, "content: not valid base64");
		b.data = bin;
	} else if (strcmp(enc, "utf-8") != 0 && strcmp(enc, "utf8") != 0) {
		return mcp_fail(o, "encoding: \"utf-8\" or \"base64\"");
	}
	if ((long long)b.len > s->cfg.max_file)
		return mcp_fail(o, "content: %zu bytes, more than this server moves (%lld)", b.len, s->cfg.max_file);
	return put_file(s, id, str_arg(args, "path"), &b, o);
}

int mcp_tool_list_files(struct mcp_server *s, json_t *args, struct mcp_out *o)
{
	_cleanup_(client_response_done) struct client_response res = {};
	const char *id = str_arg(args, "sandbox_id"), *path = str_arg(args, "path");
	json_t *depth = json_object_get(args, "depth");
	char url[URL_MAX], tail[32];
	if (ours(s, id, o, NULL) < 0)
		return 0;
	snprintf(tail, sizeof(tail), "&depth=%lld", depth ? (long long)json_integer_value(depth) ?: 1 : 1);
	if (path[0] != '/' || sbx_url(url, sizeof(url), id, "/files/list", path) < 0 ||
	    strlen(url) + strlen(tail) >= sizeof(url))
		return mcp_fail(o, "path: '%.200s' must be an absolute path", path);
	strcat(url, tail);
	int r = call(s, "GET", url, NULL, 0, &res);
	if (r < 0 || res.status >= 300)
		return mcp_fail_api(o, s, r, &res);
	_cleanup_(buf_done) struct buf b = {};
	json_t *entries = json_object_get(res.json, "entries"), *e;
	size_t i, n = json_array_size(entries);
	json_array_foreach(entries, i, e) {
		if (i == LIST_MAX)
			break;
		char line[4096 + 64];
		int k = snprintf(line, sizeof(line), "%-7s %10lld  %s\n", json_string_value(json_object_get(e, "type")) ?: "?",
				 (long long)json_integer_value(json_object_get(e, "size")),
				 json_string_value(json_object_get(e, "path")) ?: "?");
		buf_add(&b, line, k > 0 ? (size_t)k : 0);
	}
	bool more = n > LIST_MAX || json_is_true(json_object_get(res.json, "truncated"));
	mcp_out_text(o, "%zu entr%s under %s%s", n > LIST_MAX ? LIST_MAX : n, n == 1 ? "y" : "ies", path,
		     more ? " [listing cut: there are more entries; list a subdirectory or a smaller depth]" : "");
	return b.len ? mcp_out_block(o, "entries", b.p + b.head, b.len, false) : 0;
}

/* ---- host files, below --files-dir only ---- */

static int open_beneath(const struct mcp_config *cfg, const char *rel, int flags, struct mcp_out *o)
{
	if (!cfg->files_dir)
		return mcp_fail(o, "host files are off: the server was started without --files-dir"), -1;
	_cleanup_close_ int dir = open(cfg->files_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct open_how how = {.flags = (uint64_t)(flags | O_CLOEXEC | O_NOFOLLOW), .mode = flags & O_CREAT ? 0644 : 0,
			       .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
	int fd = dir < 0 ? -1 : (int)syscall(SYS_openat2, dir, rel, &how, sizeof(how));
	if (fd < 0)
		return mcp_fail(o, "local_path '%.200s': %s (paths are relative to the files directory, "
				   "without '..' or symlinks)", rel, strerror(errno)), -1;
	return fd;
}

int mcp_tool_upload_file(struct mcp_server *s, json_t *args, struct mcp_out *o)
{
	const char *id = str_arg(args, "sandbox_id");
	struct stat st;
	if (ours(s, id, o, NULL) < 0)
		return 0;
	_cleanup_close_ int fd = open_beneath(&s->cfg, str_arg(args, "local_path"), O_RDONLY, o);
	if (fd < 0)
		return 0;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return mcp_fail(o, "local_path: not a regular file");
	if (st.st_size > s->cfg.max_file)
		return mcp_fail(o, "local_path: %lld bytes, more than this server moves (%lld)",
				(long long)st.st_size, s->cfg.max_file);
	struct client_body b = {"application/octet-stream", NULL, (size_t)st.st_size, fd};
	return put_file(s, id, str_arg(args, "path"), &b, o);
}

int mcp_tool_download_file(struct mcp_server *s, json_t *args, struct mcp_out *o)
{
	_cleanup_(client_response_done) struct client_response res = {};
	const char *local = str_arg(args, "local_path");
	if (!s->cfg.files_dir)
		return mcp_fail(o, "host files are off: the server was started without --files-dir");
	if (fetch_file(s, str_arg(args, "sandbox_id"), str_arg(args, "path"), o, &res) < 0)
		return 0;
	_cleanup_close_ int fd = open_beneath(&s->cfg, local, O_WRONLY | O_CREAT | O_TRUNC, o);
	if (fd < 0)
		return 0;
	if (write_all(fd, res.body, res.body_len) < 0)
		return mcp_fail(o, "local_path '%.200s': %s", local, strerror(errno));
	return mcp_out_text(o, "wrote %zu bytes to %s/%s", res.body_len, s->cfg.files_dir, local);
}
