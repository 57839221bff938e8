/* cordond's shared state. One thread, one libevent loop: every handler runs to completion on
 * it, and nothing here is locked. Bytes from sandboxes (agent frames) and from clients (HTTP)
 * are both hostile; each has a limit named here. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <event2/event.h>
#include <event2/http.h>
#include <jansson.h>

#include <cordon/cordon.h>

#include "basic/cleanup.h"
#include "image/store.h"
#include "spec/api.h"

struct audit_log;
struct frame;
struct frame_decoder;
struct bufferevent;


#define SBX_ID_LEN          24    /* "sb-" + 20 base32 characters */
#define DEFAULT_MAX_OUTPUT  (1u << 20) /* bytes of stdout and of stderr an exec returns */
#define DEFAULT_MAX_UPLOAD  (64u << 20)
#define DEFAULT_MAX_DOWNLOAD (64u << 20)
#define SUBSCRIBER_BACKLOG  (8u << 20) /* bytes queued to one slow stream reader */
#define AGENT_GRACE_MS      10000 /* a request the agent does not answer ends the sandbox */
#define AGENT_HELLO_MS      10000

struct config {
	char *socket_path;
	char *state_dir;
	char *runtime_dir;
	char *listen;
	char *api_keys;
	char *config_file;
	char *egress_limits;
	char *socket_group;
	uint64_t pool;
	uint64_t max_sandboxes;
	uint64_t max_timeout_s;
	uint64_t max_output;
	uint64_t max_upload;
	uint64_t max_connections;      /* TCP, at once */
	uint64_t max_peer_connections; /* TCP, at once from one address; 0: no per-address cap */
	uint64_t header_timeout_s;     /* to send a complete request head */
	uint64_t max_inflight;         /* request body bytes held at once, per listener */
	uint64_t verbose;
};

int config_parse(struct config *cfg, int argc, char **argv);
void config_usage(FILE *out);

struct api_key {
	char key[128];
	char name[64];
	uint64_t max_sandboxes;
	uint64_t live;
};

enum sbx_state { SBX_CREATING, SBX_READY, SBX_RUNNING, SBX_DESTROYED };

struct proc;
struct fileop;
struct waiter;
struct follower;

struct sbx {
	char id[SBX_ID_LEN + 1];
	char template_name[65];    /* empty: host */
	struct store_version *version; /* the template's version, held until the sandbox is reaped */
	enum sbx_state state;
	bool pooled;               /* made for the pool, not yet claimed */
	bool used;                 /* a process was started: "running" rather than "ready" */
	struct cordon_sandbox *rt; /* the runtime's handle (cordon_sandbox_*), whichever runtime */
	const char *runtime;       /* the registry's name of what made it ("jail") */
	struct cordon_spec spec;   /* as created; pointers owned below */
	struct bufferevent *agent;
	struct frame_decoder *dec;
	struct event *setup_ev, *exit_ev, *ttl_ev, *hello_ev;
	uint64_t created_ms, deadline_ms, timeout_s;
	json_t *limits, *metadata;
	json_t *network;           /* {"policy": .., "allow": [..]} as in force */
	char **env;                /* "K=V", the sandbox's own variables */
	size_t n_env;
	struct api_key *owner;     /* NULL: the unix socket */
	struct audit_log *audit;
	uint32_t next_chan;
	uint64_t oom_base;
	struct proc *procs;
	struct fileop *ops;
	struct waiter *waiters;    /* create requests waiting for this one to become ready */
	struct follower *followers; /* GET .../audit?follow=1 */
	/* From the template's template.json: defaults of its processes, and what runs before
	 * the sandbox is handed out (START in the background, READY until it succeeds). */
	char *workdir;
	enum cordon_user user_default;
	bool user_default_set;
	json_t *start, *ready;
	struct event *ready_ev;
	uint64_t ready_deadline_ms;
	struct sbx *next, *prev;
};

struct daemon {
	struct config cfg;
	struct event_base *base;
	struct evhttp *http_unix, *http_tcp;
	struct api_key *keys;
	size_t n_keys;
	struct sbx *sandboxes; /* every sandbox but destroyed ones, newest last */
	size_t n_live, n_pool_ready, n_pool_creating;
	size_t n_dying; /* destroyed, PID 1 not reaped yet */
	int audit_dirfd;
	struct audit_log *daemon_audit;
	struct sqlite3 *db;
	struct event *sig_ev[2];
	bool stopping;
	struct bufferevent *egress; /* cordon-egress's control socket; NULL without networking */
	uint16_t egress_tcp_port, egress_dns_port;
};

extern struct daemon D;

/* metrics.c */
enum metric {
	M_NET_BLOCKED, M_NET_ALLOWED,
	M_CREATES, M_CREATE_FAILURES, M_DESTROYS, M_TIMEOUTS, M_PROC_TIMEOUTS, M_OOM_KILLS,
	M_AUDIT_EVENTS, M_EXECS, M_AGENT_ERRORS, M_HTTP_ERRORS, _M_MAX
};
enum histogram { H_CREATE, H_EXEC, _H_MAX };
void metric_inc(enum metric m);
void metric_observe(enum histogram h, double seconds);
char *metrics_render(void);

/* util.c */
uint64_t now_ms(void);
void make_id(char out[SBX_ID_LEN + 1]);
bool valid_id(const char *s);
char *iso_time(uint64_t ms, char buf[40]);
json_t *json_from_bytes_utf8(const void *data, size_t len);
char *base64_encode(const void *data, size_t len, size_t *ret_len);
/* loop.c: events and bufferevents on fds go through these, so that debug builds can check that no
 * fd is closed while the loop watches it (basic/fdwatch.h); the free functions accept NULL
 * and return NULL. */
struct event *loop_event_new(int fd, short what, event_callback_fn cb, void *arg);
struct event *loop_event_free(struct event *ev);
struct bufferevent *loop_bev_new(int fd, int options);
struct bufferevent *loop_bev_free(struct bufferevent *bev);

/* http.c */
struct ctx {
	struct evhttp_request *req;
	struct api_key *principal; /* NULL: local (unix socket) */
	const char *path;
	const char *query;
	const char *params[2]; /* {id} and {pid} */
	const char *body;
	size_t body_len;
};
int http_start(void);
void http_stop(void);
void reply_json(struct evhttp_request *req, int status, json_t *body); /* steals @body */
void reply_error(struct evhttp_request *req, enum api_error e, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void reply_errno(struct evhttp_request *req, int code, const char *msg);
void reply_empty(struct evhttp_request *req, int status);
/* Every reply goes through here (or the helpers above): it also forgets the request's close
 * callback, whose argument may not outlive the request. @type may be NULL. */
void reply_buf(struct evhttp_request *req, int status, const char *type, struct evbuffer *buf);
const char *query_get(const struct ctx *c, const char *key, char *buf, size_t size);
bool stream_start(struct evhttp_request *req, const char *content_type);
bool stream_send(struct evhttp_request *req, const char *line, size_t len);
void stream_end(struct evhttp_request *req);
void req_on_close(struct evhttp_request *req, void (*cb)(struct evhttp_connection *, void *),
		  void *arg);
/* For front.c: {"error": {...}} (the caller frees it); whether an Authorization header value
 * names a key; the body limit of a route (-ENOENT: no such path; -EOPNOTSUPP: not with
 * @method, which may be -1, and @allow lists the methods that are). */
char *http_error_json(const char *code, const char *message);
bool http_key_ok(const char *authorization, size_t len);
int http_route_body_limit(int method, const char *path, size_t *ret_max, char *allow,
			  size_t allow_size);

/* front.c: admission of connections and the check of each request head before its body */
struct evhttp_bound_socket;
int front_attach(struct evhttp *http, struct evhttp_bound_socket *bound, bool tcp);
void front_request(struct evhttp_request *req);
void front_on_close(struct evhttp_request *req, void (*cb)(struct evhttp_connection *, void *),
		    void *arg);
void front_quiesce(void); /* before evhttp_free() */
void front_stop(void);     /* after it */

/* sandbox.c */
struct sbx *sbx_find(const struct ctx *c, const char *id);
/* The sandbox of route parameter {id} (running, if @running); else answers 404 or 409. */
struct sbx *sbx_lookup(struct ctx *c, bool running);
int sbx_create(struct ctx *c, const struct api_create *req);
void sbx_destroy(struct sbx *s, const char *reason);
int sbx_set_timeout(struct sbx *s, uint64_t timeout_s);
json_t *sbx_json(const struct sbx *s);
int pool_start(void);
void pool_fill(void);
void templates_watch(void); /* templates.c: the pool hears of the store's rebuilds; idempotent */
int sbx_send(struct sbx *s, uint16_t type, uint32_t chan, const void *msg);
void sbx_audit(struct sbx *s, const char *event, json_t *fields); /* steals @fields */
int sbx_audit_rc(struct sbx *s, const char *event, json_t *fields); /* same, -errno if not written */
/* 503 audit_unavailable: the action's record could not be written (-@r), so it was refused. */
void reply_audit_failed(struct evhttp_request *req, int r);
void audit_followers_push(struct sbx *s);
void audit_followers_end(struct sbx *s);
void sbx_agent_failed(struct sbx *s, const char *why);
int daemon_recover(void);
void daemon_shutdown(void);
bool daemon_settled(void);

/* proc.c */
void handle_exec(struct ctx *c);
void handle_proc_start(struct ctx *c);
void handle_proc_list(struct ctx *c);
void handle_proc_stdin(struct ctx *c);
void handle_proc_signal(struct ctx *c);
void handle_proc_events(struct ctx *c);
int proc_frame(struct sbx *s, const struct frame *f);
/* Starts a template's START (in the background) or READY (its exit reported to
 * sbx_ready_result()) in @s, as the daemon's own process. */
int proc_spawn_template(struct sbx *s, json_t *argv, bool ready_check);
void sbx_ready_result(struct sbx *s, bool ok);
void procs_free(struct sbx *s);

/* files.c */
void handle_file_get(struct ctx *c);
void handle_file_put(struct ctx *c);
void handle_file_delete(struct ctx *c);
void handle_file_list(struct ctx *c);
void handle_file_stat(struct ctx *c);
void handle_file_mkdir(struct ctx *c);
void handle_file_move(struct ctx *c);
int fileop_frame(struct sbx *s, const struct frame *f);
void fileops_free(struct sbx *s);

/* handlers.c */
void handle_create(struct ctx *c);
void handle_list(struct ctx *c);
void handle_info(struct ctx *c);
void handle_destroy(struct ctx *c);
void handle_timeout(struct ctx *c);
void handle_network(struct ctx *c);
void handle_audit(struct ctx *c);
void handle_healthz(struct ctx *c);
void handle_metrics(struct ctx *c);
void handle_runtimes(struct ctx *c);

/* templates.c: GET, DELETE /v1/templates/{name}; GET, POST /v1/templates (a build, streamed) */
void handle_template_list(struct ctx *c);
void handle_template_get(struct ctx *c);
void handle_template_delete(struct ctx *c);
void handle_template_build(struct ctx *c);

/* network.c */
int network_start(void);
/* Validates @policy ("deny", "allow", "public") and @allow, then hands them to the proxy for
 * @s's address; -EINVAL with @err naming the rule. */
int network_set(struct sbx *s, const char *policy, const char *const *allow, size_t n,
		struct cordon_err *err);
void network_forget(struct sbx *s);
/* The runtime's hook (any thread): points the sandbox's interface at our proxy. */
int network_hook(void *data, const char *ip, const char *ifname, struct cordon_err *err);

/* recover.c: audit records that must not be lost (a destroy on a full disk, a dead daemon's
 * logs) */
void audit_late(const char *id, const char *reason); /* @id's destroy record, when possible */
void audit_late_flush(void);
size_t audit_late_pending(void);
/* Closes every unsealed log of the audit directory; @left: ids state.db still had. */
int audit_recover(char *const *left, size_t n_left);

/* state.c */
/* Takes <state-dir>/cordond.lock for the life of the process; -EBUSY (logged, naming the
 * holder's pid) when another cordond holds it. Call before anything reads the directory. */
int state_lock(void);
int state_open(void);
int state_put(const struct sbx *s);
int state_delete(const char *id);
int state_recover(void (*cb)(const char *id, void *data), void *data);
void state_close(void);
