/* cordond's service layer: what a client may ask of sandboxes, their processes, files,
 * networks and audit logs, with no HTTP in it. A service function takes parsed arguments
 * (src/spec's structs), returns 0 or -1 with @err set, and hands back JSON for the caller to
 * render; it never sees an evhttp_request. A route table (v1.c for /v1) parses, calls and
 * renders the result or the error in one place, so a second API surface is a second table
 * over the same calls.
 *
 * An answer that comes later (from the agent) goes to a svc_reply, and one that is not one
 * value (process events, an audit log followed as it grows) to a stream_sink; the surface
 * implements both (http.c: a reply on the request, a chunked reply). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "spec/api.h"

struct sbx;
struct api_key;

/* Why a service said no: the API's error (its code and HTTP status come from src/spec's
 * table) and a message for people. Not a cordon_err: the API has codes no errno names
 * (audit_unavailable, unsupported_runtime, no_space inside a sandbox). */
struct svc_err {
	enum api_error code;
	char msg[600];
};

/* Sets @err and returns -1, for `return svc_fail(err, API_ERR_NOT_FOUND, "no '%s'", x);`. */
int svc_fail(struct svc_err *err, enum api_error code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The audit record of the action could not be written (-@r), so the action was not done. */
int svc_fail_audit(struct svc_err *err, int r);

/* Who asks: the API key of a TCP client, NULL for the unix socket (which may do anything);
 * and what they asked, in the surface's words, for the audit record of an API call (the
 * templates' service writes one; NULL where none is written). */
struct svc_caller {
	struct api_key *principal;
	const char *method, *path;
};

/* Where a stream's bytes go. The surface implements it; a service pushes into it and never
 * learns what carries the bytes. */
struct stream_sink {
	/* Queues @len bytes; -ENOBUFS when the reader is more than SUBSCRIBER_BACKLOG behind
	 * (the service then ends the stream rather than buffer without bound). */
	int (*write)(struct stream_sink *k, const void *data, size_t len);
	/* The last call: @last (NULL for none) is queued whatever the backlog (a "lagged" line
	 * says why a stream ends), then the stream ends and @k is freed. */
	void (*end)(struct stream_sink *k, const void *last, size_t len);
	/* Bytes queued, not yet taken by the reader: what back-pressure (proc.c's PAUSE and
	 * RESUME) goes by. */
	size_t (*backlog)(const struct stream_sink *k);
	/* @drained(@arg) is called whenever the reader took some of the backlog; -ENOMEM if it
	 * cannot be (then the backlog reads 0 and the source is never paused for this reader). */
	int (*watch)(struct stream_sink *k, void (*drained)(void *arg), void *arg);
	/* Set by the service that pushes into @k: the reader went away, @k is freed after this
	 * returns and must not be used again. */
	void (*gone)(void *arg);
	void *gone_arg;
	/* Optional (NULL where the surface cannot tell): gone() as soon as the reader hangs up,
	 * not only when a write fails, for a stream that may stay quiet for minutes (a build's
	 * step). */
	void (*watch_hangup)(struct stream_sink *k);
};

/* Where an answer goes that comes after the service returned (the agent's, for a file
 * operation). A service that returned 0 owns @r and answers it exactly once through one of
 * the three (which free it) unless the client goes first (then the surface calls gone() and
 * frees it); one that returned -1 has not touched it: the caller renders the error with
 * error(). */
struct evbuffer;
struct svc_reply {
	void (*json)(struct svc_reply *r, int status, json_t *body); /* steals; NULL: no body */
	void (*bytes)(struct svc_reply *r, const char *content_type, struct evbuffer *buf); /* 200 */
	void (*error)(struct svc_reply *r, const struct svc_err *err);
	/* The answer is a stream (200, @content_type), written into the sink returned, which
	 * takes @r's place (@r is freed); NULL without memory, then @r is as it was. */
	struct stream_sink *(*stream)(struct svc_reply *r, const char *content_type);
	void (*gone)(void *arg); /* set by the service */
	void *gone_arg;
};

/* ---- sandboxes (svc_sandbox.c) ---- */

/* Whether @req may be made for @who: limits this host has, a template that exists, a network
 * policy that parses, the key's quota. Nothing is made. */
int svc_sandbox_check(const struct svc_caller *who, const struct api_create *req,
		      struct svc_err *err);
/* Makes @req for @who (create.c): from the warm pool when it can, else started now; the
 * answer (201 and the sandbox) goes to @r once it is up and its template's READY passed. */
int svc_sandbox_create(const struct svc_caller *who, const struct api_create *req,
		       struct svc_reply *r, struct svc_err *err);
/* The create path (create.c) with the scratch filled from a snapshot's fs/ directory @from
 * (-1: none) and, for a fork's child, the @parent its first audit record names. */
int svc_sandbox_create_at(const struct svc_caller *who, const struct api_create *req, int from,
			  const char *parent, struct svc_reply *r, struct svc_err *err);
/* svc_sandbox_create() for a request that may name a snapshot (svc_snapshot.c): its
 * template, runtime and limits unless the request gives them (checked as a request's), its
 * files in the new sandbox's scratch. */
int svc_sandbox_create_from(const struct svc_caller *who, const struct api_create *req,
			    const char *parent, struct svc_reply *r, struct svc_err *err);
/* The sandboxes @who may see whose metadata matches @f: {"sandboxes": [...]}. */
json_t *svc_sandbox_list(const struct svc_caller *who, const struct api_filter *f);
json_t *svc_sandbox_info(const struct sbx *s);
void svc_sandbox_destroy(struct sbx *s);
/* A new deadline, @timeout_s from now, recorded first; the sandbox's JSON in @ret. */
int svc_sandbox_timeout(struct sbx *s, uint32_t timeout_s, json_t **ret, struct svc_err *err);
/* A new egress policy, checked, recorded, applied to new connections; the policy in @ret. */
int svc_sandbox_network(const struct svc_caller *who, struct sbx *s, const struct api_network *n, json_t **ret,
			struct svc_err *err);
/* A new value (and hosts, in) for secret @p->secret.name under its placeholder, recorded
 * first (names only), sent to the proxy: its public form in @ret. 404 for a name the
 * sandbox was not created with. */
int svc_secret_put(struct sbx *s, const struct api_secret_put *p, json_t **ret, struct svc_err *err);
int svc_secret_delete(struct sbx *s, const char *name, struct svc_err *err);
/* What @s uses (usage.c): {id, interval_s, current: SAMPLE, samples: [SAMPLE...]}, oldest
 * first, at most 60 (five minutes); SAMPLE: {timestamp, cpu_ms (total so far), cpu_pct
 * (of one CPU since the sample before), memory_bytes (the cgroup's, now), disk_used_bytes,
 * disk_total_bytes (the sandbox's scratch file system, as its agent last said)}. */
int svc_sandbox_metrics(struct sbx *s, json_t **ret, struct svc_err *err);
json_t *svc_runtimes(void);
json_t *svc_health(void);

/* ---- pause, snapshots, fork (svc_snapshot.c) ---- */

/* Freezes the sandbox's processes and stops its TTL (--max-pause bounds the pause); the
 * sandbox's JSON in @ret. Paused, exec and files answer 409 sandbox_paused. */
int svc_sandbox_pause(struct sbx *s, json_t **ret, struct svc_err *err);
int svc_sandbox_resume(struct sbx *s, json_t **ret, struct svc_err *err);
/* A snapshot of @s's filesystem (and memory where the runtime can) under the state
 * directory, within --max-snapshot-bytes (507 snapshot_limit), made on the snapshot thread:
 * its meta goes to @r (201) when it is done. Meanwhile @s is busy (409 sandbox_busy to
 * everything but its info, destroy, timeout and audit log); destroyed meanwhile, the
 * snapshot is removed and @r answered 409 conflict. */
int svc_snapshot_create(const struct svc_caller *who, struct sbx *s, struct svc_reply *r,
			struct svc_err *err);
json_t *svc_snapshot_list(const struct svc_caller *who); /* {"snapshots": [...]} */
int svc_snapshot_get(const struct svc_caller *who, const char *id, json_t **ret,
		     struct svc_err *err);
int svc_snapshot_delete(const struct svc_caller *who, const char *id, struct svc_err *err);
/* One snapshot of @s (as svc_snapshot_create(): @s busy until it is made), then @f->count
 * children made from it at once; the answer (200, one entry per child: {"id": ...} or
 * {"error": {...}}) goes to @r when the last is up. */
int svc_sandbox_fork(const struct svc_caller *who, struct sbx *s, const struct api_fork *f,
		     struct svc_reply *r, struct svc_err *err);

/* ---- processes (proc.c): each is one agent channel ---- */

struct proc;
/* Runs @e (@exec: to its end, the answer its output; else started, the answer its event
 * stream once the agent has spawned it). @e's user is the template's USER unless given.
 * @e->pty_set (started ones only): on a pseudo-terminal of @e->pty's size inside the sandbox,
 * a new session with it as the controlling terminal, TERM=xterm-256color unless @e->env says;
 * its output (stdout and stderr both) comes as "stdout" events, stdin goes to the terminal. */
int svc_proc_start(struct sbx *s, struct api_exec *e, bool exec, struct svc_reply *r,
		   struct svc_err *err);
json_t *svc_proc_list(struct sbx *s); /* {"processes": [...]}: started ones still running */
struct proc *svc_proc_find(struct sbx *s, const char *pid, struct svc_err *err);
int svc_proc_stdin(struct proc *p, const struct api_stdin *in, struct svc_err *err);
int svc_proc_signal(struct proc *p, int signo, struct svc_err *err);
/* A PTY process's window (@e->pty_set at svc_proc_start); its foreground group gets SIGWINCH.
 * not_a_terminal for a process without one. */
int svc_proc_resize(struct proc *p, const struct api_winsize *w, struct svc_err *err);
/* The exit event of an exited process; else the start event and everything after, streamed. */
void svc_proc_events(struct proc *p, struct svc_reply *r);

/* ---- files (files.c): the agent opens the path inside the sandbox, as its user ---- */

int svc_file_get(struct sbx *s, const char *path, struct svc_reply *r, struct svc_err *err);
int svc_file_stat(struct sbx *s, const char *path, struct svc_reply *r, struct svc_err *err);
/* @cursor: 0, or a next_cursor of a page before. */
int svc_file_list(struct sbx *s, const char *path, unsigned depth, uint64_t cursor,
		  struct svc_reply *r, struct svc_err *err);
int svc_file_delete(struct sbx *s, const char *path, struct svc_reply *r, struct svc_err *err);
int svc_file_mkdir(struct sbx *s, const struct api_mkdir *m, struct svc_reply *r,
		   struct svc_err *err);
int svc_file_move(struct sbx *s, const struct api_move *m, struct svc_reply *r,
		  struct svc_err *err);
/* An upload's bytes: @len of them at @data, or in the file @fd (a spool, fd >= 0; the
 * caller's, the operation takes a dup of it). */
struct svc_upload {
	const void *data;
	int fd;       /* a spool to read the bytes from instead, or -1 */
	uint64_t off; /* where in fd they begin */
	uint64_t len;
};
int svc_file_put(struct sbx *s, const char *path, const struct svc_upload *u,
		 struct svc_reply *r, struct svc_err *err);
/* Watches @path (a directory; with @recursive, every directory beneath it, new ones too)
 * inside the sandbox as its user: once the agent has it, @r becomes an NDJSON stream of
 * {"type": "create"|"write"|"remove"|"rename"|"chmod"|"overflow", "path": ...} lines, until
 * the reader leaves or the sandbox ends. quota_exceeded past 16 watches; a path the files
 * API refuses is refused the same way (not_found, not_a_directory, forbidden...). */
int svc_watch_open(struct sbx *s, const char *path, bool recursive, struct svc_reply *r,
		   struct svc_err *err);
/* The tree at @path as a tar made inside the sandbox, checked whole (basic/tar.h) before it is
 * answered: unsafe_archive, payload_too_large past MAX_ARCHIVE_BYTES. */
int svc_file_archive_get(struct sbx *s, const char *path, struct svc_reply *r,
			 struct svc_err *err);
/* The tar @data checked whole, then unpacked beneath @path inside the sandbox:
 * {entries, bytes}. */
int svc_file_archive_put(struct sbx *s, const char *path, const struct svc_upload *u,
			 struct svc_reply *r, struct svc_err *err);

/* ---- ports (ports.c): a client's stream to 127.0.0.1:PORT inside, through the agent ---- */

/* Connects to @port on @s's loopback through its agent and relays the bytes of @fd (a
 * connected stream socket, the service's from this call on, whatever happens) to it and
 * back. @early: bytes the client already sent (after its request head), sent first. Once the
 * agent has connected, @ok (the surface's answer, e.g. a 101 head) is written to @fd, then
 * the relay runs until either end closes; if the connection cannot be made (port_unreachable,
 * quota_exceeded past 32 per sandbox, invalid_field, audit_unavailable), @fail's answer (a
 * malloc'd string, or NULL for none) is written instead and @fd closed. Returns -1 with @err
 * when it failed at once (already answered), else 0. */
int svc_port_open(struct sbx *s, uint32_t port, int fd, const void *early, size_t early_len,
		  const char *ok, char *(*fail)(const struct svc_err *err), struct svc_err *err);

/* ---- volumes (volumes.c) ---- */

struct sbx_volumes;
struct cordon_volume;
/* POST /v1/volumes: made, its JSON in @ret. volume_exists, insufficient_storage. */
int svc_volume_create(const struct api_volume *req, json_t **ret, struct svc_err *err);
json_t *svc_volume_list(void); /* {"volumes": [...]} */
int svc_volume_get(const char *name, json_t **ret, struct svc_err *err);
/* volume_in_use while any sandbox or process has it mounted. */
int svc_volume_delete(const char *name, struct svc_err *err);
/* The volumes @req asks for, mounted for a sandbox about to start: @spec_vols (req->n_volumes
 * of them) for its spec, what it holds in @ret (free it with sbx_volumes_free(), or leave it
 * in s->vol_claim: freed when the sandbox is reaped), its "volumes" JSON in @ret_json. */
int svc_volumes_claim(const struct api_create *req, struct cordon_volume *spec_vols,
		      struct sbx_volumes **ret, json_t **ret_json, struct svc_err *err);
void sbx_volumes_free(struct sbx_volumes *v);
/* One volume.attach record per volume of @s; -errno if one cannot be written. */
int svc_volumes_audit_attach(struct sbx *s);

/* ---- templates (svc_template.c): reads from the store, changes by a cordon-template child ---- */

int svc_template_list(json_t **ret, struct svc_err *err); /* [template.json...] */
int svc_template_get(const char *name, json_t **ret, struct svc_err *err);
/* Building and removing change what every tenant's sandboxes run: the unix socket's alone
 * (403 otherwise). A route checks this before it parses a body. */
int svc_template_may_change(const struct svc_caller *who, const char *what, struct svc_err *err);
/* Removes @name; the answer (204, or why not) goes to @r when the child is done. */
int svc_template_delete(const struct svc_caller *who, const char *name, struct svc_reply *r,
			struct svc_err *err);
/* Builds @b; @r becomes the stream of its events (NDJSON, last {"event":"exit"}). A reader
 * that goes takes the build with it. */
int svc_template_build(const struct svc_caller *who, const struct api_build *b,
		       struct svc_reply *r, struct svc_err *err);

/* ---- the code interpreter (svc_code.c): cells in Jupyter kernels, through a server inside
 * the sandbox that cordond starts on first use ---- */

/* Runs @req's cell; @r becomes its NDJSON events (stdout, stderr, result, error, one end
 * last) once the interpreter runs. 409 no_interpreter, 404 for an unknown context. */
int svc_code_run(struct sbx *s, const struct api_code *req, struct svc_reply *r,
		 struct svc_err *err);
/* svc_code_run(), but the cell ends (interrupted, as at its timeout) when its client goes,
 * rather than run on: E2B's code interpreter does so, and its SDK's timeoutMs counts on it.
 * @env (NULL: none; {NAME: value} strings, checked by the caller): environment variables of
 * this cell alone, as they were after it (their names are in its audit record). */
int svc_code_run_attended(struct sbx *s, const struct api_code *req, const json_t *env,
			  struct svc_reply *r, struct svc_err *err);
/* A new context (its own kernel): 201 and {id, language, cwd} to @r once its kernel is up. */
int svc_code_context_create(struct sbx *s, const struct api_code_context *req,
			    struct svc_reply *r, struct svc_err *err);
int svc_code_context_list(struct sbx *s, json_t **ret, struct svc_err *err); /* {"contexts"} */
int svc_code_context_delete(struct sbx *s, const char *id, struct svc_err *err);
/* A fresh kernel for context @id (its variables gone): 200 and the context to @r. */
int svc_code_context_restart(struct sbx *s, const char *id, struct svc_reply *r,
			     struct svc_err *err);

/* ---- security events (events.c) ---- */

struct events_filter;
/* The recent events that pass @f, oldest first, as NDJSON into @out. */
int svc_events(const struct events_filter *f, struct evbuffer *out);
/* ---- approvals (approvals.c) ---- */
/* {"approvals": [...]}: the pending approvals @who may see (of @sandbox only, if not NULL or
 * ""), oldest first, each with its age_s. */
json_t *svc_network_profiles(void); /* {"profiles": [...]} */
json_t *svc_approval_list(const struct svc_caller *who, const char *sandbox);
/* @d on approval @id, recorded first (decider: the API key's name, or "local"), then sent to
 * the proxy; {id, sandbox, decision, decider, reason} in @ret. 404 for one that is not
 * pending (decided, timed out, gone) or not @who's. */
struct api_decision;
int svc_approval_decide(const struct svc_caller *who, const char *id, const struct api_decision *d,
			json_t **ret, struct svc_err *err);
/* Every event from now on that passes @f goes to @k (a slow reader: {"kind":"lagged"}). */
int svc_events_follow(const struct events_filter *f, struct stream_sink *k, struct svc_err *err);

/* ---- audit (svc_sandbox.c) ---- */

/* @s's log so far (JSON Lines) into @out; @ret_next: where the next record will start. */
int svc_audit_log(const struct sbx *s, struct evbuffer *out, off_t *ret_next, struct svc_err *err);
/* Every record written for @s from @from on goes to @k, until the sandbox ends (then @k
 * ends) or the reader falls behind (then too). */
int svc_audit_follow(struct sbx *s, off_t from, struct stream_sink *k, struct svc_err *err);
