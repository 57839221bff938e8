/* cordon mcp: the tool table. Each tool's arguments are rows (name, type, required, bound,
 * description): tools/list's JSON Schema is made from them and every tools/call is checked
 * against them before the tool runs, so a tool sees only arguments of the right type and
 * size. Results are built here too (text bounded by cfg.max_output, images, errors). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "basic/cleanup.h"
#include "cli/mcp.h"

enum arg_type { A_STR, A_INT, A_BOOL, A_MAP, A_LIST };

struct arg {
	const char *name;
	enum arg_type type;
	bool required;
	long long max; /* bytes of a string (of each value or item); items of a map or list; an int's maximum */
	const char *desc;
};

struct tool {
	const char *name, *title, *desc;
	int (*run)(struct mcp_server *s, json_t *args, struct mcp_out *o);
	struct arg args[8];
	bool read_only, destructive;
};

#define SBX {"sandbox_id", A_STR, true, 64, "the sandbox's id (from create_sandbox or list_sandboxes)"}
#define PATH(what) {"path", A_STR, true, 4096, what}

static const struct tool tools[] = {
	{"create_sandbox", "Create a sandbox",
	 "Create a sandbox: an isolated Linux machine (Debian userland, uid 1000, home /home/user) "
	 "that expires on its own. It has no network unless `network` lists hosts the server's "
	 "configuration allows. Returns its sandbox_id.",
	 mcp_tool_create_sandbox,
	 {{"template", A_STR, false, 128, "the image, e.g. \"code-interpreter\" (default: the server's)"},
	  {"runtime", A_STR, false, 32, "\"jail\", \"gvisor\" or \"microvm\" where the server has them"},
	  {"timeout", A_INT, false, 86400, "seconds until it is destroyed (capped by the server)"},
	  {"memory_mb", A_INT, false, 1 << 20, "memory limit in MiB (capped by the server)"},
	  {"network", A_LIST, false, 64, "egress allow-list, \"HOST:PORT\" rules, each one the server allows; empty: no network"},
	  {"metadata", A_MAP, false, 16, "labels (string values) to find it again"}},
	 false, false},
	{"run_code", "Run code",
	 "Run a cell of code in the sandbox's stateful interpreter (Jupyter kernel: variables and "
	 "imports persist between calls). Returns stdout, stderr, results (charts as images, "
	 "tables as text) and the error if it raised. Needs a sandbox of the code-interpreter template.",
	 mcp_tool_run_code,
	 {SBX, {"code", A_STR, true, 1 << 20, "the code"},
	  {"language", A_STR, false, 32, "\"python\" (default) or \"r\""},
	  {"context_id", A_STR, false, 128, "an interpreter context (default: the language's)"},
	  {"timeout", A_INT, false, 86400, "seconds the cell may run (capped by the server)"}},
	 false, false},
	{"run_command", "Run a shell command",
	 "Run a shell command (/bin/sh -c) in the sandbox and wait for it; returns its exit code, "
	 "stdout and stderr (bounded: the result says when output was cut).",
	 mcp_tool_run_command,
	 {SBX, {"command", A_STR, true, 65536, "the command line"},
	  {"timeout", A_INT, false, 86400, "seconds before it is killed (capped by the server)"},
	  {"cwd", A_STR, false, 4096, "working directory (default /home/user)"},
	  {"env", A_MAP, false, 64, "environment variables"},
	  {"stdin", A_STR, false, 1 << 20, "text written to its stdin"}},
	 false, false},
	{"read_file", "Read a file", "Read a file of the sandbox (text; an image comes back as an image).",
	 mcp_tool_read_file, {SBX, PATH("absolute path in the sandbox")}, true, false},
	{"write_file", "Write a file",
	 "Create or replace a file of the sandbox (its directory is made if missing).",
	 mcp_tool_write_file,
	 {SBX, PATH("absolute path in the sandbox"),
	  {"content", A_STR, true, 4 << 20, "the file's content"},
	  {"encoding", A_STR, false, 8, "\"utf-8\" (default) or \"base64\" for binary content"}},
	 false, false},
	{"list_files", "List files", "List a directory of the sandbox.", mcp_tool_list_files,
	 {SBX, PATH("absolute directory path in the sandbox"),
	  {"depth", A_INT, false, 8, "levels below the directory (default 1)"}},
	 true, false},
	{"upload_file", "Upload a host file",
	 "Copy a file of the host (below the server's files directory) into the sandbox.",
	 mcp_tool_upload_file,
	 {SBX, {"local_path", A_STR, true, 4096, "path relative to the server's files directory"},
	  PATH("absolute destination path in the sandbox")},
	 false, false},
	{"download_file", "Download a file to the host",
	 "Copy a file of the sandbox to the host (below the server's files directory).",
	 mcp_tool_download_file,
	 {SBX, PATH("absolute path in the sandbox"),
	  {"local_path", A_STR, true, 4096, "path relative to the server's files directory"}},
	 false, false},
	{"get_sandbox", "Describe a sandbox", "A sandbox's state, template, limits, network and expiry.",
	 mcp_tool_get_sandbox, {SBX}, true, false},
	{"list_sandboxes", "List sandboxes", "The sandboxes this server manages.",
	 mcp_tool_list_sandboxes, {{"metadata", A_MAP, false, 16, "only those with these labels"}},
	 true, false},
	{"kill_sandbox", "Destroy a sandbox", "Destroy a sandbox and everything in it.",
	 mcp_tool_kill_sandbox, {SBX}, false, true},
};

static const char *const type_names[] = {
	[A_STR] = "string", [A_INT] = "integer", [A_BOOL] = "boolean", [A_MAP] = "object", [A_LIST] = "array",
};

static json_t *arg_schema(const struct arg *a)
{
	json_t *p = json_pack("{s:s, s:s}", "type", type_names[a->type], "description", a->desc);
	if (!p)
		return NULL;
	int r = 0;
	if (a->type == A_STR)
		r = json_object_set_new(p, "maxLength", json_integer(a->max));
	else if (a->type == A_INT)
		r = json_object_set_new(p, "minimum", json_integer(0)) ||
		    json_object_set_new(p, "maximum", json_integer(a->max));
	else if (a->type == A_MAP)
		r = json_object_set_new(p, "additionalProperties", json_pack("{s:s}", "type", "string")) ||
		    json_object_set_new(p, "maxProperties", json_integer(a->max));
	else if (a->type == A_LIST)
		r = json_object_set_new(p, "items", json_pack("{s:s}", "type", "string")) ||
		    json_object_set_new(p, "maxItems", json_integer(a->max));
	if (r) {
		json_decref(p);
		return NULL;
	}
	return p;
}

static json_t *tool_json(const struct tool *t)
{
	_cleanup_(json_decrefp) json_t *props = json_object(), *req = json_array();
	if (!props || !req)
		return NULL;
	for (const struct arg *a = t->args; a < t->args + ELEMENTSOF(t->args) && a->name; a++) {
		if (json_object_set_new(props, a->name, arg_schema(a)) < 0 ||
		    (a->required && json_array_append_new(req, json_string(a->name)) < 0))
			return NULL;
	}
	return json_pack("{s:s, s:s, s:s, s:{s:s, s:O, s:O, s:b}, s:{s:b, s:b, s:b}}", "name", t->name,
			 "title", t->title, "description", t->desc, "inputSchema", "type", "object",
			 "properties", props, "required", req, "additionalProperties", 0, "annotations",
			 "readOnlyHint", t->read_only, "destructiveHint", t->destructive,
			 "openWorldHint", 0);
}

json_t *mcp_tools_list(void)
{
	_cleanup_(json_decrefp) json_t *list = json_array();
	for (size_t i = 0; list && i < ELEMENTSOF(tools); i++)
		if (json_array_append_new(list, tool_json(&tools[i])) < 0)
			return NULL;
	return list ? json_pack("{s:O}", "tools", list) : NULL;
}

/* ---- checking arguments ---- */

static bool strings_within(json_t *j, long long max_each)
{
	size_t i;
	const char *k;
	json_t *v;
	if (json_is_array(j)) {
		json_array_foreach(j, i, v)
			if (!json_is_string(v) || (long long)json_string_length(v) > max_each)
				return false;
	} else {
		json_object_foreach(j, k, v)
			if (!json_is_string(v) || (long long)json_string_length(v) > max_each || strlen(k) > 128)
				return false;
	}
	return true;
}

/* NULL when @v fits @a, else why not. */
static const char *arg_problem(const struct arg *a, json_t *v)
{
	switch (a->type) {
	case A_STR:
		if (!json_is_string(v))
			return "must be a string";
		if ((long long)json_string_length(v) > a->max)
			return "is too long";
		return strlen(json_string_value(v)) != json_string_length(v) ? "holds a NUL" : NULL;
	case A_INT:
		if (!json_is_integer(v) || json_integer_value(v) < 0)
			return "must be a non-negative integer";
		return json_integer_value(v) > a->max ? "is too large" : NULL;
	case A_BOOL:
		return json_is_boolean(v) ? NULL : "must be true or false";
	case A_MAP:
		if (!json_is_object(v))
			return "must be an object of strings";
		if ((long long)json_object_size(v) > a->max)
			return "has too many entries";
		return strings_within(v, 4096) ? NULL : "must map short keys to strings of at most 4096 bytes";
	case A_LIST:
		if (!json_is_array(v))
			return "must be an array of strings";
		if ((long long)json_array_size(v) > a->max)
			return "has too many items";
		return strings_within(v, 1024) ? NULL : "must hold strings of at most 1024 bytes";
	}
	return "has an unknown type";
}

static const struct arg *find_arg(const struct tool *t, const char *name)
{
	for (const struct arg *a = t->args; a < t->args + ELEMENTSOF(t->args) && a->name; a++)
		if (strcmp(a->name, name) == 0)
			return a;
	return NULL;
}

static int check_args(const struct tool *t, json_t *args, struct mcp_out *o)
{
	const char *k;
	json_t *v;
	json_object_foreach(args, k, v) {
		const struct arg *a = find_arg(t, k);
		const char *why = a ? arg_problem(a, v) : "is not an argument of this tool";
		if (why)
			return mcp_fail(o, "invalid arguments: '%.64s' %s", k, why), -EINVAL;
	}
	for (const struct arg *a = t->args; a < t->args + ELEMENTSOF(t->args) && a->name; a++)
		if (a->required && !json_object_get(args, a->name))
			return mcp_fail(o, "invalid arguments: '%s' is required (%s)", a->name, a->desc), -EINVAL;
	return 0;
}

int mcp_tools_call(struct mcp_server *s, const char *name, json_t *args, json_t **ret)
{
	const struct tool *t = NULL;
	for (size_t i = 0; i < ELEMENTSOF(tools); i++)
		if (strcmp(tools[i].name, name) == 0)
			t = &tools[i];
	if (!t)
		return -ENOENT;
	_cleanup_(json_decrefp) json_t *empty = args ? NULL : json_object();
	struct mcp_out o = {.content = json_array(), .left = s->cfg.max_output};
	if (!o.content)
		return -ENOMEM;
	if (check_args(t, args ?: empty, &o) == 0)
		t->run(s, args ?: empty, &o);
	if (json_array_size(o.content) == 0)
		mcp_out_text(&o, "done");
	*ret = json_pack("{s:o, s:b}", "content", o.content, "isError", o.is_error);
	return *ret ? 0 : -ENOMEM;
}

/* ---- results ---- */

static int add_text(struct mcp_out *o, const char *text, size_t len)
{
	return json_array_append_new(o->content, json_pack("{s:s, s:s%}", "type", "text", "text", text, len));
}

static int vtext(struct mcp_out *o, const char *fmt, va_list ap)
{
	_cleanup_free_ char *s = NULL;
	if (vasprintf(&s, fmt, ap) < 0)
		return -ENOMEM;
	return add_text(o, s, strlen(s));
}

int mcp_out_text(struct mcp_out *o, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = vtext(o, fmt, ap);
	va_end(ap);
	return r;
}

int mcp_fail(struct mcp_out *o, const char *fmt, ...)
{
	va_list ap;
	o->is_error = true;
	va_start(ap, fmt);
	vtext(o, fmt, ap);
	va_end(ap);
	return 0;
}

/* The longest prefix of @s (at most @n bytes) that does not cut a UTF-8 character. */
static size_t utf8_prefix(const char *s, size_t n)
{
	while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
		n--;
	return n;
}

int mcp_out_block(struct mcp_out *o, const char *label, const char *data, size_t len, bool cut_before)
{
	size_t keep = len;
	if ((long long)len > o->left)
		keep = utf8_prefix(data, o->left > 0 ? (size_t)o->left : 0);
	o->left -= (long long)keep;
	_cleanup_free_ char *s = NULL;
	int n;
	if (keep < len)
		n = asprintf(&s, "%s:\n%.*s\n[%s cut: the first %zu of %zu bytes are shown]", label, (int)keep,
			     data, label, keep, len);
	else if (cut_before)
		n = asprintf(&s, "%s:\n%.*s\n[%s cut: the sandbox's output bound was reached]", label,
			     (int)keep, data, label);
	else
		n = asprintf(&s, "%s:\n%.*s", label, (int)keep, data);
	return n < 0 ? -ENOMEM : add_text(o, s, (size_t)n);
}

int mcp_out_image(struct mcp_out *o, const char *mime, const char *b64)
{
	return json_array_append_new(o->content, json_pack("{s:s, s:s, s:s}", "type", "image", "data", b64,
							   "mimeType", mime));
}

int mcp_fail_api(struct mcp_out *o, struct mcp_server *s, int r, const struct client_response *res)
{
	const char *code = NULL, *msg = NULL;
	if (r < 0)
		return mcp_fail(o, "cordond at %s: %s", s->c.where,
				s->c.stage == CLIENT_CONNECT ? "cannot be reached" : strerror(-r));
	if (json_unpack(res->json, "{s:{s:s, s:s}}", "error", "code", &code, "message", &msg) == 0)
		return mcp_fail(o, "%s: %s", code, msg);
	return mcp_fail(o, "cordond answered HTTP %d", res->status);
}
