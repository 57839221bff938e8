/* envd's directory watches (e2b.h) over the files service's one (svc_watch_open, dirwatch.c):
 *
 *   WatchDir          a server stream: {start}, then {filesystem: {name, type}} per event
 *   CreateWatcher     the same watch, its events kept here for the caller to poll:
 *   GetWatcherEvents  the events since the last poll (at most POLL_BACKLOG bytes of them;
 *                     past that the watch's own overflow rule drops events)
 *   RemoveWatcher     ends it
 *
 * An event's name is its path relative to the watched directory, as envd names it; its type
 * is Cordon's as E2B's EventType. Cordon's "overflow" has no EventType: it is not passed on
 * (docs/e2b.md). A polled watcher's sandbox that ends, ends it: the next poll answers
 * unavailable and forgets it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "daemon/daemon.h"
#include "daemon/e2b.h"
#include "daemon/e2b_envd.h"
#include "daemon/service.h"

#define POLL_BACKLOG (256u << 10) /* bytes of events a polled watcher holds */
#define WATCHER_ID_LEN 32
#define MAX_POLLERS    64 /* per sandbox, ended ones not yet polled included */

/* Cordon's event line as envd's FilesystemEvent; NULL for one E2B has no type for. */
static json_t *fs_event(const json_t *ev, const char *root)
{
	static const struct {
		const char *cordon, *e2b;
	} types[] = {{"create", "EVENT_TYPE_CREATE"}, {"write", "EVENT_TYPE_WRITE"},
		     {"remove", "EVENT_TYPE_REMOVE"}, {"rename", "EVENT_TYPE_RENAME"},
		     {"chmod", "EVENT_TYPE_CHMOD"}};
	const char *t = json_string_value(json_object_get(ev, "type")) ?: "";
	const char *path = json_string_value(json_object_get(ev, "path")) ?: "";
	size_t rl = strlen(root);
	if (strncmp(path, root, rl) == 0 && (path[rl] == '/' || path[rl] == '\0' || rl == 1))
		path += rl + (rl > 1 && path[rl] == '/');
	for (size_t i = 0; i < ELEMENTSOF(types); i++)
		if (strcmp(t, types[i].cordon) == 0)
			return json_pack("{s:s, s:s}", "name", path, "type", types[i].e2b);
	return NULL;
}

/* ---- WatchDir ---- */

static json_t *watch_line(struct connect_call *cc, json_t *ev, bool *ret_end)
{
	struct fsop *op = cc->arg;
	const char *type = json_string_value(json_object_get(ev, "type")) ?: "";
	if (strcmp(type, "keepalive") == 0)
		return json_pack("{s:{}}", "keepalive");
	json_t *e = fs_event(ev, op->path);
	return e ? json_pack("{s:o}", "filesystem", e) : NULL;
}

static json_t *watch_start(struct connect_call *cc)
{
	return json_pack("{s:{}}", "start");
}

static const struct connect_ops watch_ops = {.line = watch_line, .start = watch_start,
					     .free = fsop_free};

void fs_watch(struct ctx *c)
{
	struct svc_err err = {};
	struct sbx *s;
	json_t *m;
	struct connect_call *cc = fsop_begin(c, CONNECT_MODE_STREAM, &watch_ops, "path", NULL, &s, &m);
	if (!cc)
		return;
	bool recursive = json_is_true(json_object_get(m, "recursive"));
	json_decref(m);
	struct fsop *op = cc->arg;
	fsop_go_on(cc, svc_watch_open(s, op->path, recursive, connect_reply(cc), &err), &err);
}

/* ---- the polling watcher ---- */

struct poller {
	struct poller *next;
	char id[WATCHER_ID_LEN + 1];
	char sbx[SBX_ID_LEN + 1];
	char path[API_MAX_PATH + 1];
	struct svc_reply r;   /* the service's, until the agent has the watch */
	struct stream_sink k; /* then its events */
	bool pending, open;
	struct svc_err err;   /* why it ended, when it did */
	json_t *events;       /* FilesystemEvents not yet polled */
	size_t bytes;
	void (*drained)(void *arg);
	void *drained_arg;
};

static struct poller *pollers;

static void poller_free(struct poller *p)
{
	for (struct poller **pp = &pollers; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	if (p->pending && p->r.gone)
		p->r.gone(p->r.gone_arg);
	if (p->open && p->k.gone)
		p->k.gone(p->k.gone_arg);
	json_decref(p->events);
	free(p);
}

static void ended(struct poller *p, enum api_error code, const char *msg)
{
	p->pending = p->open = false;
	if (!p->err.msg[0])
		p->err = (struct svc_err){.code = code};
	if (!p->err.msg[0])
		snprintf(p->err.msg, sizeof(p->err.msg), "%s", msg);
}

static void p_json(struct svc_reply *r, int status, json_t *body)
{
	json_decref(body);
	ended(OWNER_OF(r, struct poller, r), API_ERR_INTERNAL, "the watch answered no stream");
}

static void p_bytes(struct svc_reply *r, const char *type, struct evbuffer *buf)
{
	ended(OWNER_OF(r, struct poller, r), API_ERR_INTERNAL, "the watch answered no stream");
}

static void p_error(struct svc_reply *r, const struct svc_err *err)
{
	struct poller *p = OWNER_OF(r, struct poller, r);
	p->err = *err;
	ended(p, err->code, err->msg);
}

static int k_write(struct stream_sink *k, const void *data, size_t len)
{
	struct poller *p = OWNER_OF(k, struct poller, k);
	if (p->bytes + len > POLL_BACKLOG)
		return -ENOBUFS;
	_cleanup_(json_decrefp) json_t *line = json_loadb(data, len, 0, NULL);
	json_t *e = line ? fs_event(line, p->path) : NULL;
	if (e && json_array_append_new(p->events, e) == 0)
		p->bytes += len;
	return 0;
}

static void k_end(struct stream_sink *k, const void *last, size_t len)
{
	ended(OWNER_OF(k, struct poller, k), API_ERR_UNAVAILABLE,
	      "the watch ended: the sandbox was killed or the directory went");
}

static size_t k_backlog(const struct stream_sink *k)
{
	return OWNER_OF(k, const struct poller, k)->bytes;
}

static int k_watch(struct stream_sink *k, void (*drained)(void *arg), void *arg)
{
	struct poller *p = OWNER_OF(k, struct poller, k);
	p->drained = drained, p->drained_arg = arg;
	return 0;
}

static struct stream_sink *p_stream(struct svc_reply *r, const char *type)
{
	struct poller *p = OWNER_OF(r, struct poller, r);
	p->pending = false;
	p->open = true;
	p->k = (struct stream_sink){.write = k_write, .end = k_end, .backlog = k_backlog,
				    .watch = k_watch};
	return &p->k;
}

/* Watchers of sandboxes that are gone, which nobody will poll again. */
static void sweep(void)
{
	for (struct poller *p = pollers, *next; p; p = next) {
		next = p->next;
		struct sbx *s = sbx_find(NULL, p->sbx);
		if (!p->open && !p->pending && (!s || s->state == SBX_DESTROYED))
			poller_free(p);
	}
}

static struct poller *poller_new(const struct sbx *s, const char *path)
{
	uint8_t rnd[WATCHER_ID_LEN / 2];
	size_t n = 0;
	for (struct poller *q = pollers; q; q = q->next)
		n += strcmp(q->sbx, s->id) == 0;
	struct poller *p = n < MAX_POLLERS ? calloc(1, sizeof(*p)) : NULL;
	if (!p || !(p->events = json_array()) || getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd)) {
		free(p);
		return NULL;
	}
	for (size_t i = 0; i < sizeof(rnd); i++)
		snprintf(p->id + 2 * i, 3, "%02x", rnd[i]);
	snprintf(p->sbx, sizeof(p->sbx), "%s", s->id);
	snprintf(p->path, sizeof(p->path), "%s", path);
	p->r = (struct svc_reply){.json = p_json, .bytes = p_bytes, .error = p_error,
				  .stream = p_stream};
	p->pending = true;
	p->next = pollers;
	pollers = p;
	return p;
}

/* CreateWatcher: a stat first, so that a path that is no directory is refused now (as
 * envd refuses it); then the watch, its id answered at once. */
static void create_json(struct connect_call *cc, int status, json_t *body)
{
	struct fsop *op = cc->arg;
	struct svc_err err = {};
	bool dir = strcmp(json_string_value(json_object_get(body, "type")) ?: "", "dir") == 0;
	json_decref(body);
	struct sbx *s = dir ? fsop_again(cc) : NULL;
	if (!dir) {
		connect_answer_error(cc, CONNECT_INVALID_ARGUMENT, "%s is not a directory", op->path);
		return;
	}
	struct poller *p = s ? poller_new(s, op->path) : NULL;
	if (s && !p)
		connect_answer_error(cc, CONNECT_RESOURCE_EXHAUSTED,
				     "at most %d watchers of a sandbox (remove some), or out of memory",
				     MAX_POLLERS);
	if (!p)
		return;
	if (svc_watch_open(s, op->path, op->depth, &p->r, &err) < 0) {
		p->pending = false;
		poller_free(p);
		connect_answer_svc_err(cc, &err);
		return;
	}
	connect_answer(cc, 200, json_pack("{s:s}", "watcherId", p->id));
}

static const struct connect_ops create_ops = {.json = create_json, .free = fsop_free};

void fs_watch_create(struct ctx *c)
{
	struct svc_err err = {};
	struct sbx *s;
	json_t *m;
	sweep();
	struct connect_call *cc = fsop_begin(c, CONNECT_MODE_UNARY, &create_ops, "path", NULL, &s, &m);
	if (!cc)
		return;
	struct fsop *op = cc->arg;
	op->depth = json_is_true(json_object_get(m, "recursive")); /* depth: whether recursive */
	json_decref(m);
	fsop_go_on(cc, svc_file_stat(s, op->path, connect_reply(cc), &err), &err);
}

/* The watcher a unary call's watcherId names, of the request's sandbox; NULL answered. */
static struct poller *named_poller(struct ctx *c)
{
	struct sbx *s = envd_sbx(c, CONNECT_MODE_UNARY, NULL);
	_cleanup_(json_decrefp) json_t *m = s ? envd_message(c, CONNECT_MODE_UNARY) : NULL;
	const char *id = json_string_value(json_object_get(m, "watcherId"));
	if (!m)
		return NULL;
	for (struct poller *p = pollers; id && p; p = p->next)
		if (strcmp(p->id, id) == 0 && strcmp(p->sbx, s->id) == 0)
			return p;
	connect_refuse(c->req, CONNECT_MODE_UNARY, CONNECT_NOT_FOUND, 404, "watcher not found");
	return NULL;
}

void fs_watch_events(struct ctx *c)
{
	struct poller *p = named_poller(c);
	if (!p)
		return;
	if (!json_array_size(p->events) && !p->open && !p->pending) {
		connect_refuse(c->req, CONNECT_MODE_UNARY, connect_code_from_api(p->err.code),
			       api_error_status(p->err.code), p->err.msg);
		poller_free(p);
		return;
	}
	json_t *events = p->events;
	p->events = json_array();
	p->bytes = 0;
	reply_json(c->req, 200, json_pack("{s:o}", "events", events));
	if (p->open && p->drained)
		p->drained(p->drained_arg);
}

void fs_watch_remove(struct ctx *c)
{
	struct poller *p = named_poller(c);
	if (!p)
		return;
	poller_free(p);
	reply_json(c->req, 200, json_object());
}
