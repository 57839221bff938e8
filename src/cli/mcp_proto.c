/* cordon mcp: the JSON-RPC 2.0 side of the Model Context Protocol. One message in, its answer
 * out; the transports (stdio, Streamable HTTP) only move text. Methods are a table. */
#include <errno.h>
#include <string.h>

#include <jansson.h>

#include "basic/cleanup.h"
#include "cli/mcp.h"

#define RPC_PARSE_ERROR	     (-32700)
#define RPC_INVALID_REQUEST  (-32600)
#define RPC_METHOD_NOT_FOUND (-32601)
#define RPC_INVALID_PARAMS   (-32602)
#define RPC_INTERNAL_ERROR   (-32603)

/* Newest first: the answer to a version we do not know is the first. */
static const char *const protocol_versions[] = {MCP_PROTOCOL_LATEST, "2025-06-18", "2025-03-26",
						"2024-11-05"};

bool mcp_protocol_supported(const char *version)
{
	for (size_t i = 0; version && i < ELEMENTSOF(protocol_versions); i++)
		if (strcmp(version, protocol_versions[i]) == 0)
			return true;
	return false;
}

json_t *mcp_rpc_error(json_t *id, int code, const char *message)
{
	return json_pack("{s:s, s:O?, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id, "error", "code", code,
			 "message", message);
}

static json_t *rpc_result(json_t *id, json_t *result)
{
	return result ? json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result) : NULL;
}

/* A method: its result (new reference), or NULL with *code and *msg set. */
typedef json_t *(*method_fn)(struct mcp_server *s, json_t *params, int *code, const char **msg);

static json_t *m_initialize(struct mcp_server *s, json_t *params, int *code, const char **msg)
{
	const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
	if (!asked) {
		*code = RPC_INVALID_PARAMS;
		*msg = "initialize: params.protocolVersion (a string) is missing";
		return NULL;
	}
	s->initialized = true;
	return json_pack("{s:s, s:{s:{s:b}}, s:{s:s, s:s, s:s}, s:s}", "protocolVersion",
			 mcp_protocol_supported(asked) ? asked : protocol_versions[0], "capabilities",
			 "tools", "listChanged", 0, "serverInfo", "name", "cordon", "title",
			 "Cordon sandboxes", "version", MCP_SERVER_VERSION, "instructions",
			 "Run untrusted code in Cordon sandboxes: create_sandbox, then run_code "
			 "(a stateful Python interpreter) or run_command; files with read_file, "
			 "write_file, list_files; kill_sandbox when done. Sandboxes have no network "
			 "unless the server's configuration allows hosts, and expire on their own.");
}

static json_t *m_ping(struct mcp_server *s, json_t *params, int *code, const char **msg)
{
	(void)s, (void)params, (void)code, (void)msg;
	return json_object();
}

static json_t *m_tools_list(struct mcp_server *s, json_t *params, int *code, const char **msg)
{
	(void)s, (void)params, (void)code, (void)msg;
	return mcp_tools_list();
}

static json_t *m_tools_call(struct mcp_server *s, json_t *params, int *code, const char **msg)
{
	const char *name = json_string_value(json_object_get(params, "name"));
	json_t *args = json_object_get(params, "arguments"), *res = NULL;
	if (!name || (args && !json_is_object(args) && !json_is_null(args))) {
		*code = RPC_INVALID_PARAMS;
		*msg = "tools/call: params.name must be a string and params.arguments an object";
		return NULL;
	}
	int r = mcp_tools_call(s, name, json_is_object(args) ? args : NULL, &res);
	if (r == -ENOENT) {
		*code = RPC_INVALID_PARAMS;
		*msg = "tools/call: no such tool (tools/list names them)";
	} else if (r < 0) {
		*code = RPC_INTERNAL_ERROR;
		*msg = "tools/call: out of memory";
	}
	return res;
}

static const struct {
	const char *name;
	method_fn fn;
} methods[] = {
	{"initialize", m_initialize},
	{"ping", m_ping},
	{"tools/list", m_tools_list},
	{"tools/call", m_tools_call},
};

static int depth_of(json_t *j, int limit)
{
	if (limit < 0)
		return 1;
	size_t i;
	const char *k;
	json_t *v;
	if (json_is_array(j)) {
		json_array_foreach(j, i, v)
			if (depth_of(v, limit - 1))
				return 1;
	} else if (json_is_object(j)) {
		json_object_foreach(j, k, v)
			if (depth_of(v, limit - 1))
				return 1;
	}
	return 0;
}

static json_t *handle_request(struct mcp_server *s, json_t *msg, json_t *id, const char *method)
{
	json_t *params = json_object_get(msg, "params");
	int code = RPC_METHOD_NOT_FOUND;
	const char *emsg = "no such method";
	if (params && !json_is_object(params))
		return mcp_rpc_error(id, RPC_INVALID_PARAMS, "params must be an object");
	for (size_t i = 0; i < ELEMENTSOF(methods); i++)
		if (strcmp(method, methods[i].name) == 0) {
			emsg = NULL;
			json_t *res = methods[i].fn(s, params, &code, &emsg);
			if (res)
				return rpc_result(id, res);
			break;
		}
	return mcp_rpc_error(id, code, emsg ? emsg : "out of memory");
}

static json_t *handle_message(struct mcp_server *s, json_t *msg)
{
	if (!json_is_object(msg))
		return mcp_rpc_error(NULL, RPC_INVALID_REQUEST,
				     "a message is one JSON-RPC object (batches are not part of MCP)");
	json_t *id = json_object_get(msg, "id");
	const char *method = json_string_value(json_object_get(msg, "method"));
	bool id_ok = json_is_string(id) || json_is_integer(id);
	if (!method && !json_object_get(msg, "method") && id_ok &&
	    (json_object_get(msg, "result") || json_object_get(msg, "error")))
		return NULL; /* a response to a request of ours: we send none, nothing to do */
	if (!json_is_string(json_object_get(msg, "jsonrpc")) ||
	    strcmp(json_string_value(json_object_get(msg, "jsonrpc")), "2.0") != 0 || !method ||
	    (id && !id_ok))
		return mcp_rpc_error(id_ok ? id : NULL, RPC_INVALID_REQUEST,
				     "not a JSON-RPC 2.0 request: jsonrpc \"2.0\", a string method, "
				     "an integer or string id");
	if (!id)
		return NULL; /* notifications (initialized, cancelled, ...) need no answer */
	return handle_request(s, msg, id, method);
}

json_t *mcp_handle_text(struct mcp_server *s, const char *text, size_t len)
{
	json_error_t e;
	_cleanup_(json_decrefp) json_t *msg = json_loadb(text, len, JSON_REJECT_DUPLICATES, &e);
	if (!msg)
		return mcp_rpc_error(NULL, RPC_PARSE_ERROR, "not JSON (or a duplicate key)");
	if (depth_of(msg, MCP_DEPTH_MAX))
		return mcp_rpc_error(NULL, RPC_INVALID_REQUEST, "the message nests too deep");
	return handle_message(s, msg);
}
