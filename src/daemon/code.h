/* The code interpreter's state in one sandbox (code.c), for its service (svc_code.c): the
 * interpreter server (recipes/code-interpreter/code-interpreter), one per sandbox, run through
 * the process service (proc_spawn_own) as the sandbox's user; the requests in flight over its
 * stdin, each with an id its answers carry; its stdout checked line by line (hostile: the
 * sandbox can write it); the contexts, whose list is cordond's (the server only runs kernels).
 *
 *     struct code *c = code_ready(s, &err);      // made, the server running, room for one more
 *     struct code_op *op = code_op_new(c, OP_EXEC, ctx, rp, ms);
 *     code_send(c, json_pack(... "id", op->id ...)); if (c->up) code_op_open(op);
 *
 * Everything answers through the op: its svc_reply (or, for a cell, its stream) once the
 * server's last line for it came, the server died, or the watchdog fired. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "daemon/daemon.h"
#include "daemon/service.h"

#define CODE_SERVER		"/usr/lib/cordon/code-interpreter"
#define CODE_DEFAULT_CONTEXT	"default"
#define CODE_MAX_CONTEXTS	8	     /* per sandbox, the default one included */
#define CODE_MAX_INFLIGHT	64	     /* requests waiting for the server, per sandbox */
#define CODE_MAX_OUTPUT		API_MAX_CODE_OUTPUT /* bytes of events one cell streams */
#define CODE_MAX_LINE		API_MAX_CODE_LINE   /* one line of the server */
#define CODE_MAX_VIOLATIONS	3
#define CODE_MAX_WASTE		(16u << 20) /* dropped bytes past which the server is killed */
/* Its stdin is paced by its acks: at most CODE_WINDOW bytes unread (the agent queues 2 MiB per
 * process and refuses more), one request line at most CODE_MAX_REQUEST, CODE_MAX_PENDING
 * waiting here. */
#define CODE_WINDOW		(1u << 20)
#define CODE_MAX_REQUEST	(1536u << 10)
#define CODE_MAX_PENDING	(8u << 20)
#define CODE_DEFAULT_TIMEOUT_S	300
#define CODE_GRACE_MS		20000 /* past a cell's timeout: the interrupt, then a restart */
#define CODE_CTL_MS		90000 /* a kernel's start or restart */


struct code_ctx {
	char id[API_MAX_CONTEXT_ID + 1];
	enum api_language lang;
	char *cwd;
	struct code_ctx *next;
};

enum op_kind { OP_EXEC, OP_CREATE, OP_RESTART, OP_QUIET /* no client: a default or re-made context */ };

/* A request to the server, until its last answer ("end", "ok" or "fail"). */
struct code_op {
	uint64_t id;
	enum op_kind kind;
	struct code *c;
	struct svc_reply *rep;	/* its client's answer, until it is given (an exec's: the stream) */
	struct stream_sink *k;	/* an exec's stream, once open */
	char ctx[API_MAX_CONTEXT_ID + 1];
	size_t bytes;
	bool truncated;
	bool stop_when_gone; /* an exec: its client's going interrupts it (code_op_stop_when_gone) */
	struct event *watchdog;
	struct code_op *next;
};

struct code {
	struct sbx *s;
	struct proc *p; /* the server; NULL: not running */
	struct proc_hooks hooks;
	bool up;	/* the agent started it */
	bool none;	/* the template has no interpreter */
	struct evbuffer *line;
	struct evbuffer *pending; /* request lines not yet written: before SPAWNED, past the window */
	size_t unacked;		  /* bytes written to its stdin that it has not said it read */
	bool skipping;	/* the rest of a line past CODE_MAX_LINE */
	uint64_t waste; /* bytes of lines dropped (too long, past a cell's bound) since it started */
	unsigned violations;
	uint64_t next_id;
	size_t n_ctx, n_ops;
	struct code_ctx *ctxs;
	struct code_op *ops;
};


/* ---- contexts ---- */
struct code_ctx *code_ctx_find(struct code *c, const char *id);
json_t *code_ctx_json(const struct code_ctx *x);
void code_ctx_free(struct code *c, struct code_ctx *x);
/* A context in the list (its kernel not started: code_ctx_start()); 429 past the bound. */
int code_ctx_add(struct code *c, const char *id, enum api_language lang, const char *cwd,
		 struct code_ctx **ret, struct svc_err *err);
/* Its kernel started (OP_CREATE, OP_QUIET) or started again (OP_RESTART); @rp hears of it. */
int code_ctx_start(struct code *c, struct code_ctx *x, enum op_kind kind, struct svc_reply *rp,
		   struct svc_err *err);

/* ---- requests ---- */
/* A request in flight, its watchdog armed for @ms; @rp (may be NULL) is answered through it. */
struct code_op *code_op_new(struct code *c, enum op_kind kind, const char *ctx,
			    struct svc_reply *rp, uint64_t ms);
void code_op_free(struct code_op *op);
void code_op_open(struct code_op *op); /* a cell's client gets its stream */
/* Exec @op ends as at its timeout once its client goes (the server's "interrupt"). */
void code_op_stop_when_gone(struct code_op *op);
/* Steals @msg: one line to the server, written as its acks allow. -E2BIG past
 * CODE_MAX_REQUEST, -ENOBUFS past CODE_MAX_PENDING, -EPIPE when it does not run. */
int code_send(struct code *c, json_t *msg);
void code_flush(struct code *c); /* what the window has room for, written */
void code_fail_all(struct code *c, enum api_error code, const char *msg);

/* ---- the state and the server ---- */
bool code_template_has_server(const struct sbx *s);
int code_no_interpreter(const struct sbx *s, struct svc_err *err); /* 409, -1 */
struct code *code_get(struct sbx *s, struct svc_err *err); /* s->code, made on first use */
struct code *code_ready(struct sbx *s, struct svc_err *err);
int code_server_ensure(struct code *c, struct svc_err *err);
int code_server_spawn(struct code *c, enum cordon_user user, const char **env, size_t n_env,
		      const char *cwd, struct svc_err *err);
/* Kills it; every request in flight is answered (@why). The next request starts another. */
void code_server_kill(struct code *c, const char *why);
struct code *code_free(struct code *c); /* NULL; the server killed, its requests answered */
