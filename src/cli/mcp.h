/* cordon mcp: a Model Context Protocol server in front of cordond.
 *
 * JSON-RPC 2.0 messages (mcp_proto.c) over stdio, one per line (cmd_mcp.c), or over
 * Streamable HTTP, POST /mcp (mcp_http.c). The tools (mcp_tools.c: the table, argument
 * checking, results; mcp_sandbox.c: what each does) reach cordond through client.h.
 *
 * Safe by default: the configuration (flags or a JSON file), never the model, sets the
 * maxima. A sandbox the server creates has `deny` egress unless the configuration allows
 * hosts (and then only those), a TTL, and the metadata tag MCP_OWNER_KEY=<owner>; the other
 * tools touch only sandboxes with that tag unless --all-sandboxes. Host files are reachable
 * (upload_file, download_file) only below --files-dir, and never through a symlink. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "cli/client.h"

#define MCP_OWNER_KEY	     "cordon-mcp"
#define MCP_LINE_MAX	     (4 * 1024 * 1024) /* one message: a stdio line, an HTTP body */
#define MCP_DEPTH_MAX	     16		       /* nesting of a message's JSON */
#define MCP_ALLOW_MAX	     64		       /* egress rules of the configuration */
#define MCP_PROTOCOL_LATEST  "2025-11-25"
#define MCP_SERVER_VERSION   "0.1.0"

struct mcp_config {
	const char *socket;	 /* --socket, else client.h's defaults */
	const char *listen;	 /* --listen ADDR:PORT: Streamable HTTP instead of stdio */
	const char *owner;	 /* the value of the owner tag (default "default") */
	const char *template;	 /* create_sandbox's template when the model names none */
	const char *runtime;	 /* the runtime of every sandbox (NULL: the server's default) */
	const char *files_dir;	 /* upload_file/download_file: host paths below it only */
	long long ttl_s;	 /* a new sandbox's TTL when the model asks none (300) */
	long long max_ttl_s;	 /* the most a model may ask (3600) */
	long long exec_timeout_s; /* run_command/run_code when the model asks none (60) */
	long long max_exec_s;	 /* the most a model may ask (600) */
	long long memory_mb;	 /* a new sandbox's memory (0: the server's default) */
	long long max_memory_mb; /* the most a model may ask (0: memory_mb, the model cannot) */
	long long max_output;	 /* bytes of text in one tool result (65536) */
	long long max_file;	 /* bytes read_file/download_file/upload_file move (16 MiB) */
	bool all_sandboxes;	 /* own every sandbox of the key, not only tagged ones */
	const char *allow[MCP_ALLOW_MAX]; /* egress rules a model may ask for (HOST:PORT) */
	size_t n_allow;
	json_t *file_doc; /* the --config file's JSON, which the strings above may point into */
};

struct mcp_server {
	struct mcp_config cfg;
	struct client c;
	bool initialized;
};

/* Parses `cordon mcp` flags and --config FILE into @cfg (defaults first). Returns CLI_GO_ON
 * (opts.h) or the exit status (0 after --help, 2 after a usage error, said). */
int mcp_config_parse(int argc, char **argv, struct mcp_config *cfg);
void mcp_config_done(struct mcp_config *cfg);

/* One message's text: its answer (a JSON-RPC response or error, to be sent), or NULL for
 * a notification or a response (nothing to send). Bounds the depth; never fails to
 * answer a request (NULL then only when out of memory). */
json_t *mcp_handle_text(struct mcp_server *s, const char *text, size_t len);
/* A JSON-RPC error response for @id (NULL: null). */
json_t *mcp_rpc_error(json_t *id, int code, const char *message);
bool mcp_protocol_supported(const char *version);

/* The tools: the tools/list result, and a tools/call's result for @name with @args
 * (borrowed; NULL or an object). -ENOENT: no such tool (a protocol error); any other
 * failure is a result with isError. */
json_t *mcp_tools_list(void);
int mcp_tools_call(struct mcp_server *s, const char *name, json_t *args, json_t **ret);

/* The serving loops; return the exit status. */
int mcp_serve_stdio(struct mcp_server *s);
int mcp_serve_http(struct mcp_server *s, const char *listen);

/* ---- for the tools (mcp_tools.c <-> mcp_sandbox.c) ---- */

/* A tool result being made: content items and whether it is an error. */
struct mcp_out {
	json_t *content; /* array */
	bool is_error;
	long long left;	 /* bytes of text still allowed (cfg.max_output) */
};

int mcp_out_text(struct mcp_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Tool failure: isError and one text item. Returns 0 so that tools can `return mcp_fail()`. */
int mcp_fail(struct mcp_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* @len bytes of output under @label, cut to what the result still allows; says so when cut
 * here or when @cut_before (the daemon's own bound) is true. */
int mcp_out_block(struct mcp_out *o, const char *label, const char *data, size_t len,
		  bool cut_before);
int mcp_out_image(struct mcp_out *o, const char *mime, const char *b64);
/* The daemon's error answer (or a transport failure @r < 0) as a failed result. */
int mcp_fail_api(struct mcp_out *o, struct mcp_server *s, int r, const struct client_response *res);

/* The tools themselves (mcp_sandbox.c): @args are already checked against the tool's table. */
#define MCP_TOOLS(X)                                                                               \
	X(create_sandbox) X(run_code) X(run_command) X(read_file) X(write_file) X(list_files)      \
	X(upload_file) X(download_file) X(get_sandbox) X(list_sandboxes) X(kill_sandbox)
#define MCP_DECLARE(name) int mcp_tool_##name(struct mcp_server *s, json_t *args, struct mcp_out *o);
MCP_TOOLS(MCP_DECLARE)
#undef MCP_DECLARE
