/* Request validation for cordond's HTTP/JSON API (docs/api/openapi.yaml is the contract).
 *
 * Every request body is untrusted. Each parser takes the raw bytes, and either returns a
 * typed, fully validated struct with the documented defaults applied, or fails with a
 * negative errno and a struct cordon_err whose message names the offending field
 * ("limits.memory_mb: must be an integer between 16 and 65536"). The errno says which
 * error code the daemon answers with (api_error_from_errno()):
 *
 *     -EMSGSIZE  payload_too_large  body over API_MAX_BODY
 *     -EBADMSG   bad_request        not JSON, not an object, nested too deep, duplicate key
 *     -EBADRQC   unknown_field      a field this API does not know, at any level
 *     -EINVAL    invalid_field      wrong type, out of range, bad characters, too long
 *     -ENOMEM    internal
 *
 *     struct cordon_err err = {};
 *     struct api_create *c = NULL;
 *     int r = api_create_parse(body, len, server_max_timeout_s, &c, &err);
 *     if (r < 0) {
 *             enum api_error e = api_error_from_errno(r);
 *             char *json = api_error_render(e, err.msg);
 *             reply(api_error_status(e), json);
 *             ...
 *     }
 *     ...
 *     api_create_free(c);
 *
 * Parsed structs are immutable after parsing; their strings point into a JSON document
 * the struct owns, so they live exactly as long as the struct. Messages never echo request
 * values, only field names, with anything unprintable replaced, so they are safe to log.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cordon/spec.h>
#include <cordon/err.h>

/* Every limit an attacker could push on has a name and a test. */
#define API_MAX_BODY	     (1024 * 1024) /* bytes of a request body, checked before parsing */
#define API_MAX_DEPTH	     32		   /* nesting of objects and arrays */
#define API_MAX_KV	     64		   /* entries of env, metadata, a metadata filter */
#define API_MAX_KEY	     128	   /* bytes of an env name or metadata key */
#define API_MAX_VALUE	     4096	   /* bytes of an env or metadata value */
#define API_MAX_ARGV	     4096	   /* entries of argv */
#define API_MAX_ARG	     131071	   /* bytes of one argv entry or cmd (MAX_ARG_STRLEN - 1) */
#define API_MAX_PATH	     4096	   /* bytes of a path inside a sandbox (PATH_MAX) */
#define API_MAX_ALLOW	     256	   /* network.allow rules */
#define API_MAX_RULE	     255	   /* bytes of one network rule */
#define API_MAX_APPROVE	     32		   /* network.approve rules */
#define API_MAX_APPROVE_LIST 8		   /* methods, paths of one approve rule */
#define API_MAX_APPROVE_PATH 255	   /* bytes of a path prefix */
#define API_MAX_APPROVE_TIMEOUT 86400	   /* seconds a request may wait for a decision */
#define API_DEFAULT_APPROVE_TIMEOUT 300
#define API_MAX_REASON	     200	   /* bytes of an approval decision's reason */
#define API_MAX_PROFILE	     63		   /* bytes of an egress profile's name */
#define API_MAX_TAG	     64		   /* bytes of a process tag */
#define API_MAX_TEMPLATE     64		   /* bytes of a template name */
#define API_MAX_EXEC_TIMEOUT 86400	   /* seconds a process may be given */
#define API_MAX_LIST_DEPTH   32		   /* depth of GET .../files/list */
#define API_MAX_VOLUME_NAME  63		   /* bytes of a volume name */
#define API_MAX_VOLUMES	     CORDON_MAX_VOLUMES /* volumes of one sandbox */
#define API_MIN_VOLUME_MB    16
#define API_MAX_VOLUME_MB    (16u << 20)   /* 16 TiB */

#define API_DEFAULT_TEMPLATE	   "host"
#define API_DEFAULT_TIMEOUT_S	   300 /* a sandbox's TTL; capped by the server maximum */
#define API_DEFAULT_EXEC_TIMEOUT_S 60

struct json_t; /* jansson's, kept out of this header */

/* ---- shared pieces -------------------------------------------------------------------- */

struct api_kv {
	const char *key;
	const char *value;
};

/* An object of string values (env, metadata), in request order; keys are unique. */
struct api_kvmap {
	struct api_kv *items;
	size_t n;
};

enum api_runtime {
	API_RUNTIME_JAIL = 0,
	API_RUNTIME_AUTO, /* the strongest runtime the host offers (registry.c's strongest()) */
	API_RUNTIME_GVISOR,  /* known names, refused where the host cannot run them */
	API_RUNTIME_MICROVM,
};

/* "jail", "auto", ...: the name a request gave, for cordon_runtime_resolve(). */
/* The runtime called @name in the API ("jail", "gvisor", ...); -ENOENT for none. */
int api_runtime_from_name(const char *name, enum api_runtime *ret);
const char *api_runtime_name(enum api_runtime r);

enum api_net_policy {
	API_NET_DENY = 0, /* loopback only */
	API_NET_ALLOW,	  /* only what network.allow lists */
	API_NET_PUBLIC,	  /* the internet, never private ranges */
};

/* {"approve": HOST, "methods": [..], "paths": [..], "timeout_s": N}: requests to HOST (a
 * name or "*."-wildcard, with an optional :port) whose method is one of @methods and whose
 * path is under one of @paths (none given: any) wait for a person's decision. */
struct api_approve_rule {
	const char *host;
	const char **methods; /* upper-case tokens, n_methods of them */
	size_t n_methods;
	const char **paths; /* each starting with "/" */
	size_t n_paths;
	uint32_t timeout_s; /* default API_DEFAULT_APPROVE_TIMEOUT */
};

/* Shape only: rules are checked for length and characters ([A-Za-z0-9.:/_-], "*." only as
 * a prefix, "[...]" for IPv6); src/policy/ compiles them and may still refuse one. */
struct api_network {
	enum api_net_policy policy;
	bool policy_given; /* false: the profile's, or deny */
	const char **allow; /* n_allow entries, NULL-terminated */
	size_t n_allow;
	bool allow_given;
	struct api_approve_rule *approve;
	size_t n_approve;
	const char *profile; /* NULL: none; [a-z0-9][a-z0-9_-]* */
};

/* The approve rules in the proxy's form (a JSON array, the caller's), and back. */
struct json_t *api_approve_json(const struct api_approve_rule *rules, size_t n);

/* ---- POST /v1/approvals/{id} ---------------------------------------------------------- */

/* {"decision": "allow"|"deny" (required), "reason": printable, at most API_MAX_REASON}. */
struct api_decision {
	bool allow;
	const char *reason; /* NULL: none; points into root_ */
	struct json_t *root_;
};
int api_decision_parse(const char *body, size_t len, struct api_decision **ret, struct cordon_err *err);
struct api_decision *api_decision_free(struct api_decision *d);
/* An approval's id as the proxy makes them: "ap-" and 1 to 20 hex digits. */
bool api_approval_id_ok(const char *s);

/* ---- secrets (secrets.c) ---------------------------------------------------------------- */

#define API_MAX_SECRETS	     16	  /* secrets of a sandbox (the egress proxy's bound) */
#define API_MAX_SECRET_NAME  63	  /* bytes of a secret's name, an environment variable's */
#define API_MAX_SECRET_VALUE 4096 /* bytes of a value, no control characters */
#define API_MAX_SECRET_HOSTS 8	  /* hosts a secret is for */
#define API_MAX_SECRET_HOST  253  /* bytes of one, a DNS name */

enum { API_SECRET_IN_HEADER = 1, API_SECRET_IN_QUERY = 2, API_SECRET_IN_BODY = 4 };

/* {"value": "...", "hosts": ["api.example.com"], "in": ["header"|"query"|"body"]}; the
 * strings point into the request's JSON (the daemon wipes it on free). */
struct api_secret {
	const char *name;
	const char *value;
	size_t value_len;
	const char *hosts[API_MAX_SECRET_HOSTS];
	size_t n_hosts;
	unsigned in; /* API_SECRET_IN_*; default header */
};

struct api_secrets {
	struct api_secret *items;
	size_t n;
};

bool api_secret_name_ok(const char *s, size_t n);

/* PUT /v1/sandboxes/{id}/secrets/{name}: {value (required), hosts, in}; what is not given
 * stays as it was. */
struct api_secret_put {
	struct api_secret secret;
	bool hosts_given, in_given;
	struct json_t *root_;
};
int api_secret_put_parse(const char *name, const char *body, size_t len, struct api_secret_put **ret,
			 struct cordon_err *err);
struct api_secret_put *api_secret_put_free(struct api_secret_put *p);

/* ---- POST /v1/sandboxes ------------------------------------------------------------------ */

/* The disk a sandbox gets unless asked (MiB): a sparse scratch costs nothing until written. */
#define API_DEFAULT_DISK_MB 4096
#define API_DEFAULT_MEMORY_MB 512
#define API_DEFAULT_CPUS_MILLI 1000

struct api_limits {
	uint32_t cpus_milli; /* 100..64000; 1000 = one CPU */
	uint32_t memory_mb;
	uint32_t pids;
	uint32_t disk_mb;
};

enum { API_LIMIT_CPUS = 1, API_LIMIT_MEMORY = 2, API_LIMIT_PIDS = 4, API_LIMIT_DISK = 8 };
/* One of "volumes": [{name, path, read_only}] at create. */
struct api_volume_mount {
	const char *name;  /* [a-z0-9][a-z0-9._-]{0,62} */
	const char *path;  /* absolute, normalised, not "/", not in /proc, /sys or /dev */
	bool read_only;
};

struct api_create {
	const char *template_name; /* [a-z0-9][a-z0-9._-]{0,63}; default "host" */
	enum api_runtime runtime;
	uint32_t timeout_s; /* 1..server max; default min(300, server max) */
	struct api_limits limits;
	struct api_network network;
	struct api_kvmap env;
	struct api_kvmap metadata;
	const char **env_strv; /* env as "K=V", env.n entries, NULL-terminated */
	const char *snapshot;  /* "sn-" + 20 of [a-z2-7]: start from it; NULL: from a template */
	/* Which fields the body gave: from a snapshot, the rest are the snapshot's. */
	bool template_set, runtime_set;
	unsigned limits_set; /* API_LIMIT_* given in "limits" */
	struct api_secrets secrets;
	struct api_volume_mount volumes[API_MAX_VOLUMES]; /* no name twice */
	size_t n_volumes;

	struct json_t *root_;
	char *env_buf_;
};

/* Parses a create body. An empty body means `{}`. @max_timeout_s is the server's cap on a
 * sandbox's TTL (>= 1). On success *ret_create is the caller's; free it with
 * api_create_free(). */
int api_create_parse(const char *body, size_t len, uint32_t max_timeout_s,
		     struct api_create **ret_create, struct cordon_err *err);
struct api_create *api_create_free(struct api_create *c);

/* What the host can give one sandbox (src/basic/host.h), known only at run time. */
struct api_host_max {
	uint32_t cpus_milli;
	uint32_t memory_mb; /* 0: unknown, no ceiling */
};

/* Refuses limits this host could never honour (cpus over its CPUs, memory over its memory),
 * with -EINVAL naming the field and the host's maximum: "limits.cpus: must be at most 2,
 * this host's CPUs". Refused rather than clamped: a sandbox that silently gets less than it
 * asked for fails later in a way that is harder to read. */
int api_limits_check(const struct api_limits *l, const struct api_host_max *max,
		     struct cordon_err *err);

/* Fills what a create request says into @spec, which the caller has set up with
 * cordon_spec_init(): limits, timeout and env. Pointers in @spec then point into @c, which
 * must outlive them. Left to the caller: the template (rootfs), runtime, network policy and
 * metadata; spec->net stays CORDON_NET_NONE whatever c->network says (fail closed). */
void api_create_to_spec(const struct api_create *c, struct cordon_spec *spec);

/* ---- POST /v1/volumes ------------------------------------------------------------------- */

/* {name, size_mb}: both required; size_mb API_MIN_VOLUME_MB..API_MAX_VOLUME_MB. */
struct api_volume {
	const char *name;
	uint32_t size_mb;

	struct json_t *root_;
};
int api_volume_parse(const char *body, size_t len, struct api_volume **ret_volume,
		     struct cordon_err *err);
struct api_volume *api_volume_free(struct api_volume *v);
/* [a-z0-9][a-z0-9._-]{0,62}: a volume's name (the {name} of /v1/volumes/{name} too). */
bool api_volume_name_ok(const char *s, size_t len);

/* ---- POST /v1/sandboxes/{id}/timeout ----------------------------------------------------- */

/* {timeout_s}: required, 1..@max_timeout_s. */
int api_timeout_parse(const char *body, size_t len, uint32_t max_timeout_s, uint32_t *ret_timeout_s,
		      struct cordon_err *err);

/* ---- the code interpreter: POST /v1/sandboxes/{id}/code, .../code/contexts (code.c) ---- */

#define API_MAX_CODE	     (1000 * 1000) /* bytes of a cell's code */
#define API_MAX_CONTEXT_ID   64	   /* bytes of a context's id: [A-Za-z0-9_-] */
#define API_MAX_CODE_TIMEOUT 3600  /* seconds a cell may be given */

enum api_language { API_LANG_PYTHON, API_LANG_R, API_LANG_COUNT_ };
const char *api_language_name(enum api_language l);
/* The id of @l's default context: "default" (Python's) or "default-<language>". */
const char *api_language_default_context(enum api_language l);
/* Whether @id is a language's default context (made on first use), and whose. */
bool api_default_context_language(const char *id, enum api_language *ret);

/* {code (required), language ("python" or "r"; absent: the context's, else python), context
 * (NULL: the language's default), timeout_s (0: the default)} */
struct api_code {
	const char *code;
	size_t code_len;
	enum api_language language;
	bool language_set; /* given: a context of another language is refused */
	const char *context;
	uint32_t timeout_s;

	struct json_t *root_;
};
int api_code_parse(const char *body, size_t len, struct api_code **ret, struct cordon_err *err);
struct api_code *api_code_free(struct api_code *c);

/* {language ("python" or "r"), cwd (NULL: the sandbox's default)}; an empty body is {}. */
struct api_code_context {
	enum api_language language;
	const char *cwd;

	struct json_t *root_;
};
int api_code_context_parse(const char *body, size_t len, struct api_code_context **ret,
			   struct cordon_err *err);
struct api_code_context *api_code_context_free(struct api_code_context *c);
bool api_context_id_ok(const char *s, size_t len);

/* One line of the interpreter server's stdout (without its newline): hostile bytes, since the
 * sandbox can write them. A JSON object of a known "type" with fields of the right types:
 * {"type":"ready"}; {"id", "type": stdout|stderr, "text"}; {"id", "type":"result", "is_main",
 * "data": {MIME: string}, "chart" (optional: a figure's, E2B's shape, its known fields of the
 * right types)}; {"id", "type":"error", "name", "value", "traceback"}; {"id",
 * "type":"end", "execution_count", "truncated", "timed_out"}; {"id", "type":"ok"}; {"id",
 * "type":"fail", "message"}; {"type":"ack", "bytes"}: it read that many bytes of its stdin
 * (what paces our writes). -EPROTO with @err saying why for anything else. */
#define API_MAX_CODE_OUTPUT  (4u << 20) /* bytes of events one cell streams */
#define API_MAX_CODE_LINE    (API_MAX_CODE_OUTPUT + (64u << 10))
#define API_MAX_CODE_MESSAGE 1024	/* bytes of a "fail" message kept */
enum api_code_line_kind {
	API_LINE_READY, API_LINE_ACK, API_LINE_EVENT, API_LINE_END, API_LINE_OK, API_LINE_FAIL
};
struct api_code_line {
	enum api_code_line_kind kind;
	uint64_t id;	  /* all but READY and ACK */
	uint64_t bytes;	  /* ACK: >= 1 */
	struct json_t *event; /* EVENT: made anew from the known fields (MIME types outside
			       * the list dropped); the caller's to json_decref() */
	int64_t execution_count; /* END */
	bool truncated, timed_out;
	char message[API_MAX_CODE_MESSAGE + 1]; /* FAIL, cut */
};
int api_code_line_parse(const char *line, size_t len, struct api_code_line *ret,
			struct cordon_err *err);
/* Whether a line of @kind answers a cell (else a context's create, restart or delete). */
bool api_code_line_for_cell(enum api_code_line_kind kind);

/* ---- POST /v1/sandboxes/{id}/fork ------------------------------------------------------- */

#define API_MAX_FORK 100 /* children of one fork */
#define API_SNAPSHOT_ID_LEN 23 /* "sn-" + 20 */

struct api_fork {
	uint32_t count;	    /* 1..API_MAX_FORK; required */
	uint32_t timeout_s; /* the children's TTL, 1..@max_timeout_s; 0: the parent's */
};

/* {count, timeout_s}. */
int api_fork_parse(const char *body, size_t len, uint32_t max_timeout_s, struct api_fork *ret,
		   struct cordon_err *err);
/* Whether @s is a snapshot id as cordond makes them. */
bool api_snapshot_id_ok(const char *s);

/* ---- POST /v1/sandboxes/{id}/exec and POST /v1/sandboxes/{id}/processes ------------------ */

enum api_exec_kind {
	API_EXEC_RUN = 0, /* exec: run and wait; takes "stdin" */
	API_EXEC_START,	  /* processes: start and stream; stdin goes through .../stdin */
};

/* "encoding" of an exec's stdout and stderr: text (invalid UTF-8 and NUL become U+FFFD) or
 * the exact bytes in base64. */
enum api_encoding {
	API_ENCODING_UTF8 = 0,
	API_ENCODING_BASE64,
};

/* A PTY's window: {cols, rows}, each 1..API_MAX_PTY_DIM (frame.h's FRAME_MAX_PTY_DIM). */
#define API_MAX_PTY_DIM 1000u
struct api_winsize {
	uint32_t cols, rows;
};

struct api_exec {
	const char **argv; /* argc entries, NULL-terminated; from "cmd": /bin/sh -c cmd */
	size_t argc;
	const char *cmd; /* the "cmd" string, or NULL when "argv" was given */
	const char *cwd; /* absolute; NULL: the user's home */
	struct api_kvmap env;
	const char **env_strv; /* env as "K=V", env.n entries, NULL-terminated */
	const char *snapshot;  /* "sn-" + 20 of [a-z2-7]: start from it; NULL: from a template */
	/* Which fields the body gave: from a snapshot, the rest are the snapshot's. */
	bool template_set, runtime_set;
	unsigned limits_set; /* API_LIMIT_* given in "limits" */
	enum cordon_user user;
	bool user_given;    /* "user" was in the request (else a template's USER may apply) */
	const char *stdin_data; /* API_EXEC_RUN only; NULL: none (stdin is /dev/null) */
	size_t stdin_len;
	bool stdin_none;    /* API_EXEC_START, set by a caller (no JSON field): stdin is /dev/null */
	uint32_t timeout_s; /* RUN: 1..86400, default 60; START: 0 (none) ..86400, default 60 */
	const char *tag;    /* NULL: none */
	enum api_encoding encoding; /* API_EXEC_RUN: how stdout/stderr are returned */
	/* API_EXEC_START: "pty": {cols, rows} (default 80x24) runs it on a pseudo-terminal */
	bool pty_set;
	struct api_winsize pty;

	struct json_t *root_;
	char *env_buf_;
};

int api_exec_parse(const char *body, size_t len, enum api_exec_kind kind,
		   struct api_exec **ret_exec, struct cordon_err *err);
struct api_exec *api_exec_free(struct api_exec *e);

/* ---- POST /v1/templates ------------------------------------------------------------------ */

#define API_MAX_BUILD_BODY (48u << 20) /* a recipe and a context of API_MAX_CONTEXT, base64 */
#define API_MAX_RECIPE     (1u << 20)  /* bytes of the recipe (recipe.h's RECIPE_MAX_BYTES) */
#define API_MAX_CONTEXT    (32u << 20) /* bytes of the context archive */

/* {name, recipe, build_args: {K: V}, no_cache, context: base64 tar}; name and recipe are
 * required, name is a template name other than "host". */
struct api_build {
	const char *name;
	const char *recipe;
	struct api_kvmap build_args; /* keys as env names, at most API_MAX_KV */
	bool no_cache;
	uint8_t *context;            /* the decoded archive, or NULL */
	size_t context_len;

	struct json_t *root_;
};

int api_build_parse(const char *body, size_t len, struct api_build **ret_build,
		    struct cordon_err *err);
struct api_build *api_build_free(struct api_build *b);

/* ---- POST /v1/sandboxes/{id}/processes/{pid}/stdin ---------------------------------------- */

/* {data: base64 (RFC 4648, padded), eof: bool}; at least one of them. */
struct api_stdin {
	uint8_t *data; /* decoded; NULL when len == 0 */
	size_t len;
	bool eof; /* close the process's stdin after writing data */
};

int api_stdin_parse(const char *body, size_t len, struct api_stdin *ret_stdin,
		    struct cordon_err *err);
/* Frees what api_stdin_parse() allocated (not @s itself). */
void api_stdin_done(struct api_stdin *s);

/* ---- POST /v1/sandboxes/{id}/processes/{pid}/resize --------------------------------------- */

/* {cols, rows}: both required. */
int api_resize_parse(const char *body, size_t len, struct api_winsize *ret, struct cordon_err *err);

/* ---- POST /v1/sandboxes/{id}/processes/{pid}/signal --------------------------------------- */

/* {signal: "SIGTERM" | "TERM" | 15}: one of the allowed signals (api_signal_name()). */
int api_signal_parse(const char *body, size_t len, int *ret_signo, struct cordon_err *err);
/* "SIGTERM" for an allowed signal, NULL otherwise. */
const char *api_signal_name(int signo);

/* ---- PUT /v1/sandboxes/{id}/network ------------------------------------------------------- */

/* {policy (required), allow[]}. Strings in *ret_net point into *ret_root; free both with
 * api_network_free(). */
struct api_network_req {
	struct api_network network;
	struct json_t *root_;
};

int api_network_parse(const char *body, size_t len, struct api_network_req **ret_req,
		      struct cordon_err *err);
struct api_network_req *api_network_free(struct api_network_req *n);

/* ---- files -------------------------------------------------------------------------------- */

/* A path inside a sandbox (query value ?path=, already URL-decoded, or a body field):
 * absolute, no NUL, at most API_MAX_PATH bytes. @field names it in the message. It is
 * resolved by cordon-init inside the sandbox, so ".." cannot leave the sandbox. */
int api_path_check(const char *path, size_t len, const char *field, struct cordon_err *err);

/* ?depth= of files/list: NULL or "" means 1; else decimal 1..API_MAX_LIST_DEPTH. */
int api_depth_parse(const char *s, unsigned *ret_depth, struct cordon_err *err);

/* A boolean query value (?follow=): NULL or "" -> false; "1"/"true" or "0"/"false". */
int api_query_bool_parse(const char *s, const char *field, bool *ret, struct cordon_err *err);

struct api_move {
	const char *from;
	const char *to;
	struct json_t *root_;
	char *from_b64_, *to_b64_; /* decoded from_b64, to_b64 */
};

/* POST .../files/move {from, to}: both required; instead of either, from_b64 or to_b64 (the
 * exact bytes of a path that is not UTF-8, base64). */
int api_move_parse(const char *body, size_t len, struct api_move **ret_move,
		   struct cordon_err *err);
struct api_move *api_move_free(struct api_move *m);

struct api_mkdir {
	const char *path;
	bool parents; /* like mkdir -p; default false */
	struct json_t *root_;
	char *path_b64_; /* decoded path_b64 */
};

/* POST .../files/mkdir {path, parents}: path (or path_b64, its bytes in base64) required. */
int api_mkdir_parse(const char *body, size_t len, struct api_mkdir **ret_mkdir,
		    struct cordon_err *err);
struct api_mkdir *api_mkdir_free(struct api_mkdir *m);

/* ---- GET /v1/sandboxes?metadata.k=v&... ---------------------------------------------------- */

/* Owns its strings. Every parameter of the query must be "metadata.<key>=<value>": an unknown
 * parameter is an error, not ignored, because a mistyped filter that matched everything would
 * be worse than a 400. Same limits as metadata; a key may appear once. */
struct api_filter {
	struct api_kv *items;
	size_t n;
};

/* @query is the raw query string without '?' (may be NULL or empty: an empty filter). */
int api_filter_parse(const char *query, size_t len, struct api_filter **ret_filter,
		     struct cordon_err *err);
struct api_filter *api_filter_free(struct api_filter *f);
/* True when every pair of @f is in @metadata with the same value (an empty filter matches). */
bool api_filter_match(const struct api_filter *f, const struct api_kvmap *metadata);

/* ---- errors -------------------------------------------------------------------------------- */

/* Stable codes of {"error": {"code": ..., "message": ...}}; never renumber or rename. */
enum api_error {
	API_ERR_BAD_REQUEST = 0,   /* 400 */
	API_ERR_INVALID_FIELD,	   /* 400 */
	API_ERR_UNKNOWN_FIELD,	   /* 400 */
	API_ERR_PAYLOAD_TOO_LARGE, /* 413 */
	API_ERR_NOT_FOUND,	   /* 404 */
	API_ERR_CONFLICT,	   /* 409 */
	API_ERR_QUOTA_EXCEEDED,	   /* 429 */
	API_ERR_CAPACITY,	   /* 503 */
	API_ERR_UNAUTHORIZED,	   /* 401 */
	API_ERR_FORBIDDEN,	   /* 403 */
	API_ERR_INTERNAL,	   /* 500 */
	API_ERR_UNAVAILABLE,	   /* 503 */
	API_ERR_TIMEOUT,	   /* 504 */
	/* What a file operation in the sandbox ran into (the agent's errno, files.c) */
	API_ERR_READ_ONLY,	   /* 409 EROFS: that part of the sandbox is read-only */
	API_ERR_INVALID_PATH,	   /* 400 ELOOP, ENAMETOOLONG, EINVAL: the path cannot be used */
	API_ERR_NO_SPACE,	   /* 409 ENOSPC, EDQUOT inside the sandbox: its disk is full */
	API_ERR_NOT_A_DIRECTORY,   /* 409 ENOTDIR */
	API_ERR_IS_A_DIRECTORY,	   /* 409 EISDIR */
	API_ERR_CROSS_DEVICE,	   /* 409 EXDEV: a move between two file systems */
	API_ERR_AUDIT_UNAVAILABLE, /* 503: the action's audit record cannot be written */
	API_ERR_UNSUPPORTED_RUNTIME, /* 400: a runtime this host cannot run */
	API_ERR_SANDBOX_PAUSED,	   /* 409: the sandbox is paused (POST .../resume first) */
	API_ERR_SNAPSHOT_LIMIT,	   /* 507: the snapshots' total size cap is reached */
	API_ERR_VOLUME_IN_USE,	   /* 409: mounted read-write already, or by another process */
	API_ERR_VOLUME_EXISTS,	   /* 409: POST /v1/volumes of a name that is taken */
	API_ERR_INSUFFICIENT_STORAGE, /* 507: more than the host's disk can hold */
	API_ERR_UNSAFE_ARCHIVE,	   /* 400: a tar with '..', absolute names, links out, devices */
	API_ERR_NO_INTERPRETER,	   /* 409: the sandbox's template has no code interpreter */
	API_ERR_NOT_A_TERMINAL,	   /* 409: a resize of a process that has no PTY */
	API_ERR_PORT_UNREACHABLE,  /* 502: nothing listens on that port inside the sandbox */
	API_ERR_SANDBOX_BUSY,	   /* 409: a snapshot of the sandbox is being made */
	_API_ERR_MAX,
};

const char *api_error_code(enum api_error e); /* "not_found"; "internal" if out of range */
int api_error_status(enum api_error e);	      /* 404; 500 if out of range */
/* The one errno -> API error table (@code is a negative errno; unknown ones: internal). */
enum api_error api_error_from_errno(int code);
/* {"error":{"code":"...","message":"..."}} as a compact, NUL-terminated string that the
 * caller frees; NULL only when out of memory. @message may be NULL or not UTF-8. */
char *api_error_render(enum api_error e, const char *message);
