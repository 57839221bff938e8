/* A small HTTP/1.1 client for cordond, and the helpers the client subcommands share.
 *
 * One request per connection (Connection: close), over the unix socket or over TCP:
 *
 *     struct client c;
 *     client_init(&c, opt_socket);          // --socket, else $CORDON_URL, $CORDON_SOCKET, default
 *     _cleanup_(client_response_done) struct client_response res = {};
 *     r = client_json(&c, "GET", "/v1/sandboxes", NULL, &res);
 *     if (r < 0) return client_fail(&c, r);  // prints one line; exit status 3 or 1
 *     if (res.status >= 400) return client_api_error(&res);
 *     ... res.json ...
 *
 * Streams: client_open() sends a request and reads the response head; the body is then pulled
 * with client_pump() (one read, for a caller's own poll loop on client_fd()) or client_drain()
 * (to the end), each handing the decoded bytes to a sink. client_lines_sink() cuts them into
 * lines (NDJSON). Every wait is bounded by c->timeout_ms except a stream's body, which may
 * stay idle as long as the daemon keeps it open (a running process, `logs --follow`).
 *
 * Errors are -errno. c->stage tells whether the daemon was reached at all.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

#include <jansson.h>

#include "cli/opts.h"

#define CLIENT_DEFAULT_SOCKET	 "/run/cordon/cordon.sock"
#define CLIENT_TIMEOUT_MS	 30000
#define CLIENT_HEAD_MAX		 (64 * 1024)	     /* status line and headers */
#define CLIENT_BODY_MAX		 (64 * 1024 * 1024)  /* a buffered (JSON) body */
#define CLIENT_LINE_MAX		 (4 * 1024 * 1024)   /* one NDJSON line */
#define CLIENT_MEM_UPLOAD_MAX	 (1024LL * 1024 * 1024) /* a non-seekable upload held in memory */

/* Exit statuses of the client subcommands besides 0 and CORDON_EXIT_USAGE (2). */
#define CLI_EXIT_API	     1
#define CLI_EXIT_UNREACHABLE 3

enum client_stage { CLIENT_CONNECT, CLIENT_SEND, CLIENT_RECEIVE, CLIENT_PROTOCOL };

struct client {
	char unix_path[108];
	char host[256];
	char port[8];
	char *api_key;	   /* from $CORDON_API_KEY, TCP only; borrowed from the environment */
	int timeout_ms;
	/* Exit statuses of the client subcommands besides 0 and CORDON_EXIT_USAGE (2). */
#define CLI_EXIT_API	     1
#define CLI_EXIT_UNREACHABLE 3

enum client_stage stage; /* where the last failure happened */
	char where[320];	 /* "unix socket /run/cordon/cordon.sock" or "http://host:port" */
};

/* A request body: @data/@len in memory, or @len bytes read from @fd when @fd >= 0. */
struct client_body {
	const char *content_type;
	const void *data;
	size_t len;
	int fd;
};

struct client_response {
	int status;
	char content_type[128];
	char *body; /* NUL-terminated; owned */
	size_t body_len;
	json_t *json; /* body parsed when it is JSON, else NULL; owned */
};

void client_response_done(struct client_response *res);

/* An open response whose body has not been read yet. */
struct client_conn;

typedef int (*client_sink)(const char *data, size_t len, void *userdata);

/* Sets up @c from @socket_path (may be NULL), $CORDON_URL, $CORDON_API_KEY, $CORDON_SOCKET.
 * -EINVAL (and a message) for a malformed $CORDON_URL. Ignores SIGPIPE for the process. */
int client_init(struct client *c, const char *socket_path);

/* Sends a request and reads the response head; @ret_res gets the status and content type.
 * Returns the connection, whose body the caller reads with client_pump/client_drain and then
 * frees with client_conn_free (accepts NULL, returns NULL). */
int client_open(struct client *c, const char *method, const char *path,
		const struct client_body *body, struct client_response *ret_res,
		struct client_conn **ret_conn);
struct client_conn *client_conn_free(struct client_conn *conn);
static inline void client_conn_freep(struct client_conn **p)
{
	client_conn_free(*p);
}
int client_fd(const struct client_conn *conn);
/* After a 101 (a tunnel): the bytes that follow are a body read to EOF with client_pump(). */
void client_conn_raw(struct client_conn *conn);

/* One read(2) of the body (the socket is non-blocking), decoded bytes to @sink. 0: more to
 * come, 1: the body is complete, -errno (or @sink's negative return). */
int client_pump(struct client *c, struct client_conn *conn, client_sink sink, void *userdata);

/* Reads the body to its end; with @idle_timeout, fails with -ETIMEDOUT after c->timeout_ms
 * without data. */
int client_drain(struct client *c, struct client_conn *conn, client_sink sink, void *userdata,
		 bool idle_timeout);

/* Reads the rest of @conn's body into @res (as client_request does). */
int client_read_body(struct client *c, struct client_conn *conn, struct client_response *res);

/* A whole request, the body buffered in @ret_res (and parsed into ret_res->json if JSON). */
int client_request(struct client *c, const char *method, const char *path,
		   const struct client_body *body, struct client_response *ret_res);

/* The same with a JSON body (@req may be NULL: no body; borrowed). */
int client_json(struct client *c, const char *method, const char *path, json_t *req,
		struct client_response *ret_res);

/* Line splitting for NDJSON: @cb gets each line without its '\n' (NUL-terminated). Lines over
 * CLIENT_LINE_MAX fail with -E2BIG. client_lines_finish() delivers a last unterminated line. */
typedef int (*client_line_cb)(char *line, size_t len, void *userdata);
struct client_lines {
	client_line_cb cb;
	void *userdata;
	char *buf;
	size_t len, cap;
};
int client_lines_sink(const char *data, size_t len, void *userdata);
int client_lines_finish(struct client_lines *l);
void client_lines_done(struct client_lines *l);

/* Prints one line for a failed exchange and returns the exit status: 3 when the daemon could
 * not be reached or the connection failed, 1 for a malformed response. */
int client_fail(const struct client *c, int r);

/* Prints `cordon: <code>: <message>` for an error response; returns 1. */
int client_api_error(const struct client_response *res);

/* GET @path for a streamed body: 0 when the answer is 200 and its body is ready for
 * client_drain(); otherwise the exit status, the failure already printed (an error answer's
 * body is read and reported with client_api_error()). */
int client_get_stream(struct client *c, const char *path, struct client_response *ret_res,
		      struct client_conn **ret_conn);

/* Appends @s to @buf (of @size) percent-encoded for a query value or a path segment. -E2BIG
 * when it does not fit. */
int client_urlencode(char *buf, size_t size, const char *s);

/* Sandbox ids as the API accepts them: [A-Za-z0-9_-]{1,64}. */
bool client_valid_id(const char *s, size_t len);

/* One JSON exchange for a subcommand: 0 on a 2xx answer (in @ret_res), else the exit status
 * after printing why (1 API error, 2 bad setup, 3 daemon unreachable). @socket: --socket or
 * NULL. */
int cli_call(const char *socket, const char *method, const char *path, json_t *req,
	     struct client_response *ret_res);

/* "/v1/sandboxes/<id><suffix>" into @buf; -EINVAL (with a message) for a malformed id. */
int cli_sandbox_path(char *buf, size_t size, const char *id, const char *suffix);

/* Whole seconds, at least @min: "300", "90s", "5m". @name prefixes the message. */
int cli_parse_seconds(const char *name, const char *arg, long long min, long long *ret);

/* Prints @j as indented JSON and a newline to stdout. */
void cli_print_json(json_t *j);

/* The "K=V" values of --@what as an object of strings (a later K wins); NULL after printing
 * why (not UTF-8) or out of memory. */
json_t *cli_kv_json(const struct cli_list *l, const char *what);

/* --net and --allow, for create and network: {"policy": P, "allow": [RULE...]}, "none" as the
 * API's "deny", --allow alone meaning "allow"; NULL after printing why. */
json_t *cli_network_json(const struct cli_values *v);

/* @obj[@key] = @s, unless @s is NULL (an option not given). -EINVAL: not UTF-8. */
int cli_set_string(json_t *obj, const char *key, const char *s);

/* The strings of @l as a JSON array; NULL after printing why. */
json_t *cli_list_json(const struct cli_list *l, const char *what);
