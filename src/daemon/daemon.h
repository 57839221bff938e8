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
#define MAX_ARCHIVE_BYTES    (4ULL << 30) /* file data of a directory out of a sandbox */
#define ARCHIVE_MEM_BYTES    (8u << 20) /* of a download, held in memory; the rest spooled to disk (files.c) */
#define MAX_ARCHIVE_ENTRIES  (1u << 20)
#define SUBSCRIBER_BACKLOG  (8u << 20) /* bytes queued to one slow stream reader */
#define AGENT_GRACE_MS      10000 /* a request the agent does not answer ends the sandbox */
#define AGENT_HELLO_MS      10000

struct config {
	char *socket_path;
	char *state_dir;
	char *runtime_dir;
	char *listen;
	char *e2b_listen, *e2b_domain; /* the E2B-compatible surface (e2b_api.c): HOST:PORT, DOMAIN */
	char *e2b_base_template;       /* the Cordon template E2B's templateID "base" names */
	char *e2b_code_template;       /* ... and "code-interpreter-v1" (@e2b/code-interpreter's) */
	char *api_keys;
	char *config_file;
	char *egress_limits;
	char *events_webhook, *events_webhook_key;
	char *network_profiles;
	char *socket_group;
	char *default_runtime;	       /* as given: jail, gvisor, microvm or auto */
	const char *runtime;	       /* ...resolved on this host (the registry's name) */
	uint64_t pool;
	uint64_t pool_refill_quiet_ms; /* a refill with stock waits for a pause this long... */
	uint64_t pool_refill_defer_ms; /* ...and this long at the most (create.c) */
	uint64_t max_sandboxes;
	uint64_t max_timeout_s;
	uint64_t max_output;
	uint64_t max_upload;
	uint64_t max_download;         /* a file read out of a sandbox (spooled past ARCHIVE_MEM_BYTES) */
	uint64_t disk_overcommit;      /* percent of the free space (svc_sandbox.c's admission) */
	uint64_t max_connections;      /* TCP, at once */
	uint64_t max_peer_connections; /* TCP, at once from one address; 0: no per-address cap */
	uint64_t header_timeout_s;     /* to send a complete request head */
	uint64_t max_inflight;         /* request body bytes held at once, per listener */
	uint64_t max_spool;            /* upload bytes in spool files at once, per listener */
	uint64_t max_snapshot_bytes;   /* the snapshots' total size on disk */
	uint64_t max_pause_s;          /* a sandbox paused longer is destroyed */
	uint64_t ready_timeout_s;      /* a template's READY passes within this, or the create fails */
	uint64_t verbose;
};

int config_parse(struct config *cfg, int argc, char **argv);
void config_usage(FILE *out);

struct api_key {
	char key[128];
	char name[64];
	uint64_t max_sandboxes;
	uint64_t live;
	bool widen_network; /* may give a network wider than the profile it names */
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
	int setup_err;             /* -errno of a setup that failed, for its waiters' answer */
	/* Its disk in the ledger of what every live disk may still grow into (sbx_disk_growth()):
	 * its size as counted, its use when last looked at, and its place in the order of looks. */
	uint64_t disk_counted, disk_used, disk_used_ms;
	struct sbx *disk_next, *disk_prev;
	const char *end_reason;    /* sbx_destroy()'s reason, a literal */
	char end_why[160];         /* what failed, when a setup or the agent did */
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
	struct sbx_secrets *secrets; /* NULL: none. secrets.c; memory only, wiped at destroy */
	struct code *code;         /* the code interpreter (svc_code.c); NULL until first used */
	unsigned n_watches;          /* dirwatch.c: directory watches open */
	unsigned n_ports;            /* ports.c: port connections open */
	struct sbx_usage *usage;     /* usage.c: samples of CPU, memory, disk; NULL until the first */
	/* From the template's template.json: defaults of its processes, and what runs before
	 * the sandbox is handed out (START in the background, READY until it succeeds). */
	char *workdir;
	enum cordon_user user_default;
	bool user_default_set;
	json_t *start, *ready;
	json_t *volumes;           /* [{name, path, read_only}] as mounted, or NULL */
	struct sbx_volumes *vol_claim; /* volumes.c's: what it holds for this sandbox */
	struct event *ready_ev;
	uint64_t ready_deadline_ms;
	/* Paused (sbx_pause()): the TTL stops, what was left of it is kept, and the pause has
	 * a bound of its own (--max-pause), past which the sandbox is destroyed. */
	bool paused;
	uint64_t ttl_left_ms, paused_ms;
	struct event *pause_ev;
	/* A snapshot of it (a fork's too) is being made on the snapshot thread (svc_snapshot.c),
	 * which has its runtime handle until then: no route reaches the sandbox but its info,
	 * destroy, timeout and audit log (409 sandbox_busy), and a destroy meanwhile kills and
	 * frees it only after (sbx_busy_end()). */
	bool busy;
	bool final_wait; /* its PID 1 was reaped while busy: the rest at sbx_busy_end() */
	/* Made from a snapshot (and by a fork of @parent): named in its first audit record. */
	char from_snapshot[32], parent[SBX_ID_LEN + 1];
	/* D.sandboxes (creation order), its bucket of D.by_id, and D.pool while pooled: each
	 * add, removal and lookup O(1), whatever the number alive. */
	struct sbx *next, *prev, *id_next, *pool_next, *pool_prev;
	bool listed;
};

#define SBX_ID_BUCKETS 4096u /* a power of two; ids are random, chains stay short */

struct daemon {
	struct config cfg;
	struct event_base *base;
	struct evhttp *http_unix, *http_tcp, *http_e2b;
	struct api_key *keys;
	size_t n_keys;
	struct sbx *sandboxes, *sandboxes_tail; /* every sandbox but destroyed ones, newest last */
	struct sbx *pool, *pool_tail; /* the pooled ones among them, oldest first (never destroyed) */
	struct sbx *disks, *disks_tail; /* every listed one, the disk looked at longest ago first */
	uint64_t disk_size_sum, disk_used_sum; /* over D.disks: sizes, and uses as last looked at */
	struct sbx *by_id[SBX_ID_BUCKETS];
	size_t n_live, n_pool_ready, n_pool_creating;
	size_t n_dying; /* destroyed, PID 1 not reaped yet */
	int audit_dirfd;
	struct audit_log *daemon_audit;
	struct sqlite3 *db;
	struct event *sig_ev[2];
	bool stopping;
	int exit_status; /* main()'s: 1 when a failure, not a signal, stopped us */
	struct bufferevent *egress; /* cordon-egress's control socket; NULL without networking */
	uint16_t egress_tcp_port, egress_dns_port;
	int snap_dirfd; /* <state>/snapshots (snapstore.c) */
};

extern struct daemon D;

/* metrics.c */
enum metric {
	M_NET_BLOCKED, M_NET_ALLOWED,
	M_CREATES, M_CREATE_FAILURES, M_DESTROYS, M_TIMEOUTS, M_PROC_TIMEOUTS, M_OOM_KILLS,
	M_AUDIT_EVENTS, M_EXECS, M_AGENT_ERRORS, M_HTTP_ERRORS, M_PAUSES, M_SNAPSHOTS, M_FORKS,
	M_PAUSE_TIMEOUTS, M_SECRET_MISUSE, M_SECRET_USES, _M_MAX
};
enum histogram { H_CREATE, H_EXEC, H_SNAPSHOT, _H_MAX };
void metric_inc(enum metric m);
void metric_observe(enum histogram h, double seconds);
char *metrics_render(void);

/* util.c (now_ms() and iso_time() are basic/clock.h, base64_encode() basic/base64.h) */
void make_id(char out[SBX_ID_LEN + 1]);
bool valid_id(const char *s);
json_t *json_from_bytes_utf8(const void *data, size_t len);
/* @ev (stolen) as one NDJSON line, its '\n' in place of the NUL (not NUL-terminated):
 * malloc'd, @ret_len bytes; NULL for a NULL @ev or without memory. */
char *json_ndjson_line(json_t *ev, size_t *ret_len);
/* loop.c: events and bufferevents on fds go through these, so that debug builds can check that no
 * fd is closed while the loop watches it (basic/fdwatch.h); the free functions accept NULL
 * and return NULL. */
struct event *loop_event_new(int fd, short what, event_callback_fn cb, void *arg);
struct event *loop_event_free(struct event *ev);
struct bufferevent *loop_bev_new(int fd, int options);
struct bufferevent *loop_bev_free(struct bufferevent *bev);
/* worker.c: a thread of cordond's for blocking jobs, in order: @work(@work_arg) on it, then
 * @done(@arg) (may be NULL) on the loop. The thread touches no loop state: the caller keeps
 * the loop off what @work uses until @done. A struct worker is static, WORKER_INIT. */
struct worker {
	int req[2], res[2];
	size_t pending; /* handed to the thread, not back yet */
	struct event *done_ev;
};
#define WORKER_INIT {{-1, -1}, {-1, -1}, 0, NULL}
int worker_start(struct worker *w, const char *name);
/* 0: queued; -errno: nothing was done (not started, no memory, the queue full). */
int worker_call(struct worker *w, void (*work)(void *arg), void *work_arg, void (*done)(void *arg),
		void *arg);
/* teardown.c: cordon_sandbox_free() of a reaped sandbox on a thread of its own (its
 * unmounts and rmdirs cost milliseconds); @done(@arg) runs on the loop once @rt is freed.
 * 0: @rt is taken; -errno: nothing was done, the caller frees @rt itself. */
int teardown_start(void);
int teardown_free(struct cordon_sandbox *rt, void (*done)(void *arg), void *arg);
/* Any blocking @work(@work_arg) on the same thread, in order with the frees; @done (may be
 * NULL) as above. Same return. */
int teardown_call(void (*work)(void *arg), void *work_arg, void (*done)(void *arg), void *arg);
size_t teardown_pending(void); /* handed to the thread, not back yet */
/* One line (malloc'd, taken; NULL is ignored) to cordon-egress's control socket. */
void egress_send_line(char *line);


/* http.c: the HTTP machinery every surface shares (matching, authentication, bodies,
 * replies); a surface (v1.c) is a table of routes. */
struct sbx;
struct stream_sink;
struct svc_err;
struct ctx;
struct reqhead;
typedef void (*handler_fn)(struct ctx *c);
/* The body a route takes at most: the front refuses a longer one before it is read.
 * BODY_SPOOL is an upload (--max-upload) whose handler reads ctx.body_fd: the front streams
 * a large one into an unlinked file instead of memory (gate.c). */
enum body_kind { BODY_API, BODY_UPLOAD, BODY_BUILD, BODY_SPOOL };
/* The states of sandbox {id} a route accepts: ST_NONE, it names none; ST_ANY, any but
 * destroyed (else 404); ST_RUNNING, one whose agent runs (else 409). */
/* ST_RUNNING also refuses a paused one (409 sandbox_paused); ST_LIVE takes one whose agent
 * runs, paused or not (pause, resume, snapshots, fork). Both refuse one whose snapshot is
 * being made (409 sandbox_busy). */
enum route_state { ST_NONE, ST_ANY, ST_RUNNING, ST_LIVE };
/* A route that takes over its connection (a tunnel): called by the front with the socket
 * once the request head passed its checks, before evhttp sees it. */
struct raw_ctx {
	int fd;                    /* a dup of the client's socket: the handler's to close */
	struct api_key *principal; /* NULL: the unix socket */
	const char *params[2];
	const void *rest;          /* what the client sent after its head */
	size_t rest_len;
};
typedef void (*raw_fn)(struct raw_ctx *c);
struct route {
	enum evhttp_cmd_type method;
	const char *pattern; /* "{x}" captures one segment: {id} first, then one more */
	handler_fn fn;
	enum body_kind body;
	enum route_state state;
	raw_fn raw;          /* set: the front hands it the connection, fn is never called */
};
/* The listeners: the unix socket, --listen and --e2b-listen. A surface says which of them
 * serve it (a bit each). On LISTEN_E2B dispatch() authenticates nobody: the E2B surface
 * reads its own credentials (X-API-KEY, a sandbox's access token) and sets ctx.principal. */
enum listener { LISTEN_UNIX, LISTEN_TCP, LISTEN_E2B, _LISTEN_MAX };
/* One API surface: its route table and how it renders an error (the body of a 4xx/5xx its
 * routes answer; v1: {"error": {"code", "message"}}, api_error_render()). http_start() takes
 * a list of them; a request goes to the first route of the first surface that matches and is
 * served on the request's listener. */
struct surface {
	const char *name;
	const struct route *routes;
	size_t n;
	char *(*render_error)(enum api_error e, const char *message); /* malloc'd; NULL: no body */
	unsigned listeners; /* 1u << enum listener, for each listener that serves it */
	/* On LISTEN_E2B, its routes need a valid X-API-KEY: the front refuses a request without
	 * one before its body (the envd routes check a sandbox's token themselves). */
	bool keyed;
	/* Optional: whether the front may read the body of an upload (a route whose body may be
	 * over API_MAX_BODY) with head @h: 0, or the HTTP status to refuse it with and why. */
	int (*admit)(const struct reqhead *h, const char **ret_why);
	/* Optional: the raw handler of a request its head alone routes, whatever its path (E2B's
	 * <port>-<id>.<domain> Host for a port of the sandbox), with its two parameters written
	 * into @params; NULL: the routes decide. */
	raw_fn (*claim)(const struct reqhead *h, char params[2][80]);
};
extern const struct surface v1_surface, e2b_surface, e2b_envd_surface, e2b_code_surface;

struct ctx {
	struct evhttp_request *req;
	struct api_key *principal; /* NULL: local (unix socket) */
	const struct route *route;
	const char *path;
	const char *query;
	const char *params[2]; /* {id} and {pid} */
	const char *body;
	size_t body_len;
	int body_fd; /* an upload the front spooled (body maps it), or -1; the front's */
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
 * names a key; the body limit of a route and its surface (-ENOENT: no such path;
 * -EOPNOTSUPP: not with @method, which may be -1, and @allow lists the methods that are). */
char *http_error_json(const char *code, const char *message);
char *e2b_render_status(int status, const char *message); /* E2B's {"code": @status, ...} */
bool http_key_ok(const char *authorization, size_t len);
struct api_key *http_api_key(const char *key, size_t len); /* the key @key names, or NULL */
int http_route_body_limit(enum listener l, int method, const char *path, size_t *ret_max,
			  bool *ret_spool, char *allow, size_t allow_size,
			  const struct surface **ret_sf);
/* The spool of @req's body (the front's, valid until the reply), its length in *@ret_len;
 * -1 when the body is in evhttp's buffer. */
int front_spool(struct evhttp_request *req, uint64_t *ret_len);
/* For the gate: when @method @path is a raw route, its handler gets a dup of @fd and true is
 * returned (the caller then lets evhttp drop the connection without touching the socket). */
bool http_takeover(enum listener l, int method, const char *path, const char *auth,
		   size_t auth_len, int fd, const void *rest, size_t rest_len);
/* For the gate: when a surface of @l claims the request @req (@len bytes so far, its head
 * whole), its handler gets a dup of @fd and the whole of @req as rest, and true is returned. */
bool http_takeover_host(enum listener l, int fd, const void *req, size_t len);
bool http_host_claimed(enum listener l, const struct reqhead *h); /* whether one would */
/* An error answer of the v1 surface as a whole HTTP/1.1 response (head and JSON body), for a
 * raw route's socket; malloc'd, NULL without memory. */
char *http_error_answer(const struct svc_err *err);

/* front.c: admission of connections and the check of each request head before its body */
struct evhttp_bound_socket;
int front_attach(struct evhttp *http, struct evhttp_bound_socket *bound, enum listener l);
void front_request(struct evhttp_request *req);
void front_on_close(struct evhttp_request *req, void (*cb)(struct evhttp_connection *, void *),
		    void *arg);
int front_listener(struct evhttp_request *req); /* its enum listener; -1 if unknown */
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
	void (*ending)(struct sbx *s); /* destroyed, before its last audit record */
	void (*final)(struct sbx *s);  /* reaped (its mounts gone), before it is freed */
	void (*pooled)(struct sbx *s); /* HELLO_OK of a pooled sandbox: it waits to be claimed */
};
void sbx_hooks_add(const struct sbx_hooks *h); /* at start, before any sandbox exists */
struct sbx *sbx_alloc(bool pooled, uint64_t disk_bytes);
/* What a sandbox is started with. */
struct sbx_start {
	uint64_t disk_bytes;
	uint64_t memory_bytes;		 /* 0: the spec's default (the pool's) */
	uint32_t cpus_milli;		 /* 0: the spec's default */
	const char *rootfs;		 /* NULL: the host's */
	const char *runtime;
	int from;			 /* a snapshot's directory to fill its scratch from, or -1 */
	const struct cordon_bind *bind;	 /* bound read-only into it, or NULL */
	const struct cordon_volume *vols; /* mounted, already claimed */
	size_t n_vols;
	/* Called on the spec before start (network.c's network_spec: a layer above). */
	void (*spec_hook)(struct cordon_spec *spec, const char *runtime);
};
/* Starts a runtime for a sandbox as @st says; -errno in @err. */
struct sbx *sbx_new(bool pooled, const struct sbx_start *st, struct cordon_err *err);
/* Pauses (@pause) or resumes the sandbox's processes and its TTL; -errno of the runtime. */
int sbx_pause(struct sbx *s, bool pause);
/* For a watchdog that fired (an agent's answer overdue): true, with @ev armed again for
 * AGENT_GRACE_MS, when the sandbox is paused or busy (a frozen agent answers nothing). */
bool sbx_watchdog_defer(struct sbx *s, struct event *ev);
/* @s->busy is over (the snapshot thread gave its handle back): a destroy that came
 * meanwhile goes on (the kill, or the free of one already reaped), so @s may be gone. */
void sbx_busy_end(struct sbx *s);
/* Takes a started runtime (s->rt) into the event loop and the list of sandboxes. */
void sbx_adopt(struct sbx *s);
void sbx_arm_ttl(struct sbx *s);
/* Closes a held template version; the last holder of a replaced one deletes it (off the loop). */
void version_free(struct store_version *v);
/* Sandbox @id as @principal may see it (NULL: the unix socket, which sees all); pooled ones
 * are nobody's yet. */
struct sbx *sbx_find(const struct api_key *principal, const char *id);
/* Any listed sandbox of @id, pooled ones too (the egress proxy's reports name them). */
struct sbx *sbx_lookup(const char *id);
/* D.pool: a pooled sandbox joins it when listed and leaves when claimed or destroyed. */
void sbx_pool_link(struct sbx *s);
/* What every listed sandbox's disk may still grow into (its size less its use), in O(1):
 * the sums are kept as sandboxes come and go, and each call looks again at the use of at
 * most a few disks, those looked at longest ago and not within the last second. Between
 * looks a disk's use is taken as it was, so the figure errs high (a loop-ext4 disk's use
 * only grows: it is mounted without discard). */
uint64_t sbx_disk_growth(uint64_t now_ms);
void sbx_pool_unlink(struct sbx *s);
void sbx_destroy(struct sbx *s, const char *reason);
int sbx_set_timeout(struct sbx *s, uint64_t timeout_s);
json_t *sbx_json(const struct sbx *s);
/* snapstore.c: the snapshots on disk, <state>/snapshots/<id>/{meta.json, fs/}; a snapshot
 * is made under .tmp-<id> and renamed into place whole, removed by a rename to .rm-<id>
 * first. The meta is the JSON the API shows. */
int snapstore_open(const char *state_dir); /* and sweeps what a crash left */
void snapstore_new_id(char out[32]);
int snapstore_begin(const char *id, int *ret_fsfd);        /* .tmp-<id>/fs, empty */
int snapstore_commit(const char *id, json_t *meta);        /* meta.json, then the rename */
void snapstore_abort(const char *id);
int snapstore_read(const char *id, json_t **ret_meta);     /* -ENOENT: none */
int snapstore_fs(const char *id);                          /* its fs/ directory, an fd */
int snapstore_remove(const char *id);
/* Every snapshot's meta, oldest first: @fn(@meta, @arg). */
void snapstore_each(void (*fn)(json_t *meta, void *arg), void *arg);
void snapstore_usage(size_t *ret_n, uint64_t *ret_bytes);
/* svc_snapshot.c: the snapshot thread (a worker), started once at cordond's start; the
 * snapshots handed to it and not back yet (a stop waits for them, as for the reaps). */
int svc_snapshot_start(void);
size_t svc_snapshot_pending(void);
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
bool pool_settled(void);
void pool_request_seen(void); /* any thread: a request arrived (a refill with stock waits) */

/* proc.c */
/* Starts a template's START (in the background, @ready_exit NULL) or READY (whether it
 * exited 0 told to @ready_exit) in @s, as the daemon's own process. */
int proc_spawn_template(struct sbx *s, json_t *argv, void (*ready_exit)(struct sbx *s, bool ok));
/* A long-lived process of the daemon's own in @s (svc_code.c's interpreter server): started
 * like any (audited, as the template's USER, with the sandbox's environment), but not listed
 * and not reachable by pid through the API. Its stdout and stderr go to @h->output, whether
 * it started to @h->spawned (0, or the agent's errno), its end (or the sandbox's) to
 * @h->exited, after which the process is freed; stdin the agent refused to @h->refused. @h is borrowed until then or proc_own_kill(). */
struct proc_hooks {
	void (*output)(void *arg, int which, const void *data, size_t len);
	void (*spawned)(void *arg, int errnum);
	void (*exited)(void *arg);
	void (*refused)(void *arg); /* the agent refused its stdin (its queue was full) */
	void *arg;
};
struct api_exec;
struct proc *proc_spawn_own(struct sbx *s, const struct api_exec *e, const struct proc_hooks *h,
			    struct svc_err *err);
/* In a pooled sandbox (nobody's yet, its log not begun) the process.start record waits for
 * this, which the claim calls after sandbox.create; -errno if it could not be written. */
int proc_own_record(struct proc *p);
int proc_own_write(struct proc *p, const void *data, size_t len); /* to its stdin */
/* SIGKILL; its hooks are not called again (the process is freed at its exit). */
void proc_own_kill(struct proc *p);

/* svc_code.c: its hooks (a pooled sandbox of a template with the interpreter starts it and
 * its default kernel; a sandbox's interpreter goes with it) */
void code_start(void);
/* A warm pooled sandbox was claimed (after its sandbox.create record): the interpreter's
 * deferred record, and the sandbox's environment as the request made it, to its kernels. */
void code_claimed(struct sbx *s);
/* files.c: what an agent's errno means to a client of a file operation (no_space for ENOSPC,
 * invalid_path for EINVAL...); @key of @o set to a sandbox's path, with @key_b64 when it is
 * not UTF-8. */
enum api_error file_error(uint32_t errnum);
void json_set_name(json_t *o, const char *key, const char *s);

/* usage.c: the per-sandbox samples of GET .../metrics, taken every few seconds */
int usage_start(void);

/* volumes.c */
void volumes_start(void); /* its hooks, the sweep */

/* network.c */
int network_boot(void);  /* the egress proxy started on the teardown thread (teardown.c) */
int network_start(void); /* waits for it, then watches its control socket */
/* Validates @policy ("deny", "allow", "public") and @allow, then hands them to the proxy for
 * @s's address, with @extra's "approve" rules and "limits" (NULL: none), whose keys ("profile"
 * too) s->network shows; -EINVAL with @err naming the rule. */
int network_set(struct sbx *s, const char *policy, const char *const *allow, size_t n,
		json_t *extra, struct cordon_err *err);
void network_forget(struct sbx *s);
/* The sandbox's secrets as they are now (rotated, revoked) to the proxy, with its policy
 * unchanged; they apply from the next request. -ENOTCONN: it has no link yet. */
int network_secrets_push(struct sbx *s);
/* A runtime that cannot be given a network later (cordon_runtime_attaches_net()) gets its
 * link in @spec at start, when this server has a proxy. Any thread. */
void network_spec(struct cordon_spec *spec, const char *runtime);
/* The runtime's hook (any thread): points the sandbox's interface at our proxy. */
int network_hook(void *data, const char *ip, const char *ifname, struct cordon_err *err);

/* approvals.c: requests the proxy holds for a person's decision */
void approvals_start(void); /* its hooks */
/* A report of the proxy's about a held request ("approval.pending", ".refused", ".timeout",
 * ".gone") for sandbox @s (NULL: unknown). */
void approvals_report(struct sbx *s, const char *kind, json_t *m);
size_t approvals_pending(void);

/* profiles.c: egress profiles (--network-profiles) */
int profiles_load(const char *path); /* at start; NULL: none */
bool profile_has_approve(const char *name);
/* The network @n asks for, its profile applied (@who may narrow it, or widen it with the
 * widen-network permission): 403 for a widening, 400 for an unknown profile. */
struct net_eff {
	enum api_net_policy policy;
	const char *const *allow; /* the request's or the profile's */
	size_t n_allow;
	json_t *approve; /* the proxy's form, owned */
	const char *profile; /* its name, or NULL */
	json_t *limits; /* the profile's egress limits, borrowed; NULL: the server's */
};
struct svc_err;
int net_resolve(const struct api_network *n, const struct api_key *who, struct net_eff *ret, const char *prefix,
		struct svc_err *err);
void net_eff_done(struct net_eff *e);
/* {"approve", "limits"?, "profile"?} for network_set(); the caller's. */
json_t *net_eff_extra(const struct net_eff *e);
/* A create's secrets only for its profile's secret_hosts (unless @who may widen). */
int profile_check_secrets(const struct api_create *req, const struct api_key *who, struct svc_err *err);

/* recover.c: audit records that must not be lost (a destroy on a full disk, a dead daemon's
 * logs) */
void audit_late(const char *id, const char *reason); /* @id's destroy record, when possible */
void audit_late_flush(void);
size_t audit_late_pending(void);
/* Closes every unsealed log of the audit directory; @left: ids state.db still had. */
int audit_recover(char *const *left, size_t n_left);

/* secrets.c: a sandbox's secrets, in locked memory and nowhere else */
struct sbx_secrets;
struct api_secrets;
struct api_secret_put;
/* After the proxy made or loaded its CA in @ca_dir: the trust bundle sandboxes with secrets
 * get (<state-dir>/trust-bundle.crt, the host's bundle plus the CA). */
int secrets_setup(const char *ca_dir);
const char *secrets_bundle(void); /* NULL: no CA, so no secrets on this server */
/* Placeholders made, values copied into locked pages; *@ret is the caller's. */
int secrets_new(const struct api_secrets *req, struct sbx_secrets **ret, struct svc_err *err);
struct sbx_secrets *secrets_free(struct sbx_secrets *ss); /* wipes; NULL is fine */
/* Rotation: a new value (and hosts, in, if given) under the same placeholder. */
int secrets_update(struct sbx_secrets *ss, const struct api_secret_put *p, struct svc_err *err);
int secrets_revoke(struct sbx_secrets *ss, const char *name, struct svc_err *err);
/* Appends NAME=<placeholder> and the CA variables (= @bundle_dst) to the "K=V" array; @ss
 * NULL: the CA variables only (a sandbox whose requests the proxy reads for approve rules). */
int secrets_env(const struct sbx_secrets *ss, const char *bundle_dst, char ***env, size_t *n_env);
/* HOST:443 rules for every host of every secret into @rules; how many. */
size_t secrets_rules(const struct sbx_secrets *ss, char (*rules)[270], size_t max);
json_t *secrets_proxy_json(const struct sbx_secrets *ss);  /* holds the values: for the proxy only */
json_t *secrets_public_json(const struct sbx_secrets *ss); /* [{"name","hosts","in"}] */
json_t *secrets_one_json(const struct sbx_secrets *ss, const char *name);

/* events.c: security events (GET /v1/events, /metrics, the webhook) */
enum event_kind {
	EVK_EGRESS_BLOCKED, EVK_SECRET_MISUSE, EVK_OOM, EVK_TIMEOUT, EVK_AGENT_VIOLATION,
	EVK_SANDBOX_DESTROYED, EVK_APPROVAL_PENDING, EVK_APPROVAL_DECIDED, _EVK_MAX
};
/* Which events a reader gets: @principal's sandboxes' (NULL: all), one sandbox's ("": all),
 * the kinds whose bit is set (0: all). */
struct events_filter {
	const struct api_key *principal;
	char sandbox[SBX_ID_LEN + 1];
	unsigned kinds;
};
/* Raises @kind for @s (NULL: the server's), with @fields (taken) beside seq, time, kind and
 * sandbox: to followers, the ring of recent events, the count, the webhook. */
void event_raise(enum event_kind kind, const struct sbx *s, json_t *fields);
const char *event_kind_name(enum event_kind k);
int event_kind_from(const char *s, size_t n); /* -1: no such kind */
void events_metrics(FILE *out);
/* webhook.c */
int webhook_start(void); /* nothing without --events-webhook */
void webhook_push(const char *line, size_t len);
void webhook_metrics(FILE *out);

/* token.c: CORDON_TASK_TOKEN, an HS256 JWT naming the sandbox, its template, metadata and
 * deadline, signed with <state-dir>/task-token.key (made at the first start, 0600) */
int token_start(void);
char *token_issue(const struct sbx *s); /* malloc'd; NULL without a key or memory */
int token_env(struct sbx *s);           /* sets (or replaces) CORDON_TASK_TOKEN in s->env */
json_t *token_key_json(void);           /* {"alg":"HS256","format":"JWT","key":base64url} */
/* HMAC-SHA256(key, @label ":" @msg) in hex: a secret of one purpose (@label) derived from the
 * same key (the E2B surface's access tokens); false without a key. */
bool token_derive(const char *label, const char *msg, char ret[65]);

/* state.c */
/* Takes <state-dir>/cordond.lock for the life of the process; -EBUSY (logged, naming the
 * holder's pid) when another cordond holds it. Call before anything reads the directory. */
int state_lock(void);
int state_open(void);
int state_put(const struct sbx *s);
int state_delete(const char *id);
int state_recover(void (*cb)(const char *id, void *data), void *data);
void state_close(void);
