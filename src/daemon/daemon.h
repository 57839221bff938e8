/* cordond's shared state. One thread, one libevent loop: every handler runs to completion on
 * it, and nothing here is locked. Bytes from sandboxes (agent frames) and from clients (HTTP)
 * are both hostile; each has a limit named here. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <event2/event.h>
#include <event2/http.h>
#include <jansson.h>

#include <cordon/cordon.h>

#include "basic/base64.h"
#include "basic/cleanup.h"
#include "basic/clock.h"
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
struct sbx;

/* An agent channel and its owner. A process (proc.c) or a file operation (files.c) embeds
 * one; sandbox.c hands each frame on a channel to its owner's ops and, when the sandbox goes,
 * closes every channel the same way, so that it knows nothing of processes or files (and a
 * new kind of channel is a new ops table, not a new case in sandbox.c). */
struct chan;
struct chan_ops {
	int (*frame)(struct chan *ch, const struct frame *f); /* <0: the protocol is broken */
	void (*close)(struct chan *ch); /* the sandbox is destroyed: answer, sbx_chan_del(), free */
};
struct chan {
	uint32_t id;
	const struct chan_ops *ops;
	struct chan *next;
};
/* The struct that embeds @ptr (a chan, an audit_listener) as @member. */
#define OWNER_OF(ptr, type, member) ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

/* Told of each audit record written for a sandbox (GET .../audit?follow=1), and of the
 * sandbox's end, when it must sbx_unlisten() itself. */
struct audit_listener {
	void (*record)(struct audit_listener *l);
	void (*end)(struct audit_listener *l);
	struct audit_listener *next;
};

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
	struct chan *chans;        /* every open agent channel but 0 */
	struct audit_listener *listeners;
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

/* util.c (now_ms() and iso_time() are basic/clock.h, base64_encode() basic/base64.h) */
void make_id(char out[SBX_ID_LEN + 1]);
bool valid_id(const char *s);
json_t *json_from_bytes_utf8(const void *data, size_t len);
/* loop.c: events and bufferevents on fds go through these, so that debug builds can check that no
 * fd is closed while the loop watches it (basic/fdwatch.h); the free functions accept NULL
 * and return NULL. */
struct event *loop_event_new(int fd, short what, event_callback_fn cb, void *arg);
struct event *loop_event_free(struct event *ev);
struct bufferevent *loop_bev_new(int fd, int options);
struct bufferevent *loop_bev_free(struct bufferevent *bev);

/* http.c: the HTTP machinery every surface shares (matching, authentication, bodies,
 * replies); a surface (v1.c) is a table of routes. */
struct sbx;
struct stream_sink;
struct svc_err;
struct ctx;
typedef void (*handler_fn)(struct ctx *c);
/* The body a route takes at most: the front refuses a longer one before it is read. */
enum body_kind { BODY_API, BODY_UPLOAD, BODY_BUILD };
/* The states of sandbox {id} a route accepts: ST_NONE, it names none; ST_ANY, any but
 * destroyed (else 404); ST_RUNNING, one whose agent runs (else 409). */
enum route_state { ST_NONE, ST_ANY, ST_RUNNING };
struct route {
	enum evhttp_cmd_type method;
	const char *pattern; /* "{x}" captures one segment: {id} first, then one more */
	handler_fn fn;
	enum body_kind body;
	enum route_state state;
};
/* One API surface: its route table and how it renders an error (the body of a 4xx/5xx its
 * routes answer; v1: {"error": {"code", "message"}}, api_error_render()). http_start() takes
 * a list of them; a request goes to the first route of the first surface that matches. */
struct surface {
	const char *name;
	const struct route *routes;
	size_t n;
	char *(*render_error)(enum api_error e, const char *message); /* malloc'd; NULL: no body */
};
extern const struct surface v1_surface;

struct ctx {
	struct evhttp_request *req;
	struct api_key *principal; /* NULL: local (unix socket) */
	const struct route *route;
	const char *path;
	const char *query;
	const char *params[2]; /* {id} and {pid} */
	const char *body;
	size_t body_len;
};
/* Sandbox {id} in a state the route accepts; else NULL with 404 or 409 answered. */
struct sbx *ctx_sbx(struct ctx *c);
/* Renders a service's answer: @body with @status (204 without a body) when @r >= 0, else
 * @err. Steals @body. */
void reply_svc(struct evhttp_request *req, int r, int status, json_t *body,
	       const struct svc_err *err);
void reply_svc_err(struct evhttp_request *req, const struct svc_err *err);
/* 503 audit_unavailable: the action's record could not be written (-@r), so it was refused. */
void reply_audit_failed(struct evhttp_request *req, int r);
/* A stream_sink over a chunked reply of @req; http_sink_start() sends the head. The sink
 * frees itself at its end() or when the client goes (after its gone()). */
struct stream_sink *http_sink_new(struct evhttp_request *req);
void http_sink_start(struct stream_sink *k, const char *content_type);
/* A svc_reply answered on @req (service.h); NULL when out of memory. */
struct svc_reply *http_reply_new(struct evhttp_request *req);
/* The routes of @surfaces[0..@n) on both listeners; borrowed for the daemon's life. */
int http_start(const struct surface *const *surfaces, size_t n);
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

/* sandbox.c: the sandbox object and its agent link, nothing else */
/* What sandbox.c tells the modules above it, so that it calls none of them: its maker
 * (create.c) hands a sandbox out when it is up and refills the pool after a destroy; the
 * network (network.c) forgets a destroyed sandbox's address. */
struct sbx_hooks {
	int (*up)(struct sbx *s);    /* HELLO_OK of a sandbox made for a client; the first hook's */
	void (*down)(struct sbx *s); /* destroyed: its waiters answered, its link forgotten */
	void (*after)(void);         /* after a destroy, unless the daemon stops */
};
void sbx_hooks_add(const struct sbx_hooks *h); /* at start, before any sandbox exists */
struct sbx *sbx_alloc(bool pooled, uint64_t disk_bytes);
/* Starts a runtime for a sandbox of @rootfs (NULL: host); -errno in @err. */
struct sbx *sbx_new(bool pooled, uint64_t disk_bytes, const char *rootfs, const char *runtime,
		    struct cordon_err *err);
/* Takes a started runtime (s->rt) into the event loop and the list of sandboxes. */
void sbx_adopt(struct sbx *s);
void sbx_arm_ttl(struct sbx *s);
/* Closes a held template version; the last holder of a replaced one deletes it (off the loop). */
void version_free(struct store_version *v);
/* Sandbox @id as @principal may see it (NULL: the unix socket, which sees all); pooled ones
 * are nobody's yet. */
struct sbx *sbx_find(const struct api_key *principal, const char *id);
void sbx_destroy(struct sbx *s, const char *reason);
int sbx_set_timeout(struct sbx *s, uint64_t timeout_s);
json_t *sbx_json(const struct sbx *s);
/* svc_template.c: @changed (the pool) hears of the store's rebuilds and removals; idempotent */
void templates_watch(void (*changed)(void));
int sbx_send(struct sbx *s, uint16_t type, uint32_t chan, const void *msg);
void sbx_chan_add(struct sbx *s, struct chan *ch, const struct chan_ops *ops); /* sets ch->id */
void sbx_chan_del(struct sbx *s, struct chan *ch);
void sbx_listen(struct sbx *s, struct audit_listener *l);
void sbx_unlisten(struct sbx *s, struct audit_listener *l);
void sbx_audit(struct sbx *s, const char *event, json_t *fields); /* steals @fields */
int sbx_audit_rc(struct sbx *s, const char *event, json_t *fields); /* same, -errno if not written */
void sbx_agent_failed(struct sbx *s, const char *why);
int daemon_recover(void);
void daemon_shutdown(void);

/* create.c: creates for clients (svc_sandbox_create), the warm pool, a template's START and
 * READY */
int pool_start(void);
void pool_fill(void);
bool daemon_settled(void);

/* proc.c */
/* Starts a template's START (in the background, @ready_exit NULL) or READY (whether it
 * exited 0 told to @ready_exit) in @s, as the daemon's own process. */
int proc_spawn_template(struct sbx *s, json_t *argv, void (*ready_exit)(struct sbx *s, bool ok));

/* network.c */
int network_start(void);
/* Validates @policy ("deny", "allow", "public") and @allow, then hands them to the proxy for
 * @s's address; -EINVAL with @err naming the rule. */
int network_set(struct sbx *s, const char *policy, const char *const *allow, size_t n,
		struct cordon_err *err);
void network_forget(struct sbx *s);
/* A runtime that cannot be given a network later (cordon_runtime_attaches_net()) gets its
 * link in @spec at start, when this server has a proxy. Any thread. */
void network_spec(struct cordon_spec *spec, const char *runtime);
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
