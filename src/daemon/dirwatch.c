/* Directory watches (GET /v1/sandboxes/{id}/files/watch): the agent's inotify (WATCH_OPEN,
 * then WATCH_EVENT frames on the watch's channel), as NDJSON lines to one reader. The path
 * is resolved by the agent as the sandbox's user, as for every file operation, so nothing
 * outside the sandbox can be watched; the paths of events are the sandbox's bytes, shown
 * with json_set_name() (a path_b64 where they are not UTF-8).
 *
 * Bounded on both sides: the agent reads inotify only while its queue to us has room (the
 * kernel's queue, past which it says OVERFLOW, holds the rest); here, a reader more than
 * WATCH_BACKLOG behind loses events, and the next line it gets is {"type":"overflow"}: said,
 * never silent, never unbounded memory. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/daemon.h"
#include "daemon/service.h"
#include "lib/frame.h"

#define MAX_WATCHES   16          /* per sandbox: the agent's limit too */
#define WATCH_BACKLOG (256u << 10) /* bytes queued to a reader before events are dropped */

struct dirwatch {
	struct chan ch;
	struct sbx *s;
	struct svc_reply *rep;  /* until the agent said OK or ERROR */
	struct stream_sink *k;  /* then the reader */
	bool dropped;           /* events were dropped since the last line: overflow first */
	bool closing;           /* WATCH_CLOSE sent: its OK is the channel's last frame */
	char *path;
};

static const struct {
	uint32_t bit;
	const char *name;
} ev_names[] = {
	{FRAME_WATCH_EV_CREATE, "create"}, {FRAME_WATCH_EV_WRITE, "write"},
	{FRAME_WATCH_EV_REMOVE, "remove"}, {FRAME_WATCH_EV_RENAME, "rename"},
	{FRAME_WATCH_EV_CHMOD, "chmod"},   {FRAME_WATCH_EV_OVERFLOW, "overflow"},
};

static void dirwatch_free(struct dirwatch *w)
{
	if (w->rep) {
		struct svc_err err = {.code = API_ERR_CONFLICT};
		snprintf(err.msg, sizeof(err.msg), "the sandbox was destroyed");
		w->rep->error(w->rep, &err);
	}
	if (w->k) {
		w->k->gone = NULL;
		w->k->end(w->k, NULL, 0);
	}
	sbx_chan_del(w->s, &w->ch);
	w->s->n_watches--;
	free(w->path);
	free(w);
}

static void dirwatch_close(struct chan *ch)
{
	dirwatch_free(OWNER_OF(ch, struct dirwatch, ch));
}

/* Ends the agent's watch; what it sent before it read WATCH_CLOSE is dropped, and the OK
 * after it frees @w (the channel must outlive every frame the agent sends on it). */
static void dirwatch_end(struct dirwatch *w)
{
	w->closing = true;
	if (sbx_send(w->s, FRAME_WATCH_CLOSE, w->ch.id, NULL) < 0)
		dirwatch_free(w);
}

/* The reader went away: the agent's watch ends too. */
static void on_reader_gone(void *arg)
{
	struct dirwatch *w = arg;
	w->k = NULL; /* freed by its surface after this */
	dirwatch_end(w);
}

static void on_rep_gone(void *arg)
{
	struct dirwatch *w = arg;
	w->rep = NULL;
}

static void put_line(struct dirwatch *w, json_t *ev)
{
	size_t n = 0;
	_cleanup_free_ char *line = json_ndjson_line(ev, &n);
	if (line && (w->k->backlog(w->k) + n > WATCH_BACKLOG || w->k->write(w->k, line, n) < 0))
		w->dropped = true;
}

/* Once the reader caught up with half the backlog, the overflow line says what it missed. */
static void overflow_said(struct dirwatch *w)
{
	if (w->dropped && w->k->backlog(w->k) < WATCH_BACKLOG / 2) {
		w->dropped = false;
		json_t *o = json_pack("{s:s}", "type", "overflow");
		if (o)
			json_set_name(o, "path", w->path);
		put_line(w, o);
	}
}

static void on_drained(void *arg)
{
	overflow_said(arg);
}

/* One line per kind of the event (an event may carry several). */
static void on_event(struct dirwatch *w, const struct frame_watch_event *ev)
{
	overflow_said(w);
	if (w->dropped)
		return;
	for (size_t i = 0; i < ELEMENTSOF(ev_names); i++) {
		if (!(ev->type & ev_names[i].bit))
			continue;
		json_t *o = json_pack("{s:s}", "type", ev_names[i].name);
		if (o)
			json_set_name(o, "path", ev->name);
		put_line(w, o);
	}
}

static int on_answer(struct dirwatch *w, const struct frame *f)
{
	struct svc_reply *rp = w->rep;
	struct frame_error e;
	w->rep = NULL;
	if (f->type == FRAME_ERROR) {
		if (frame_msg_parse(f->type, f->payload, f->len, &e) < 0)
			return -EPROTO;
		struct svc_err err = {.code = file_error(e.errnum)};
		snprintf(err.msg, sizeof(err.msg), "cannot watch: %s",
			 e.errnum > 0 && e.errnum < 4096 ? strerror((int)e.errnum) : "error");
		if (rp)
			rp->error(rp, &err);
		dirwatch_free(w);
		return 0;
	}
	w->k = rp ? rp->stream(rp, "application/x-ndjson") : NULL;
	if (!w->k) { /* the client left before, or no memory (then @rp is answered 500) */
		if (rp)
			rp->error(rp, &(struct svc_err){.code = API_ERR_INTERNAL, .msg = "out of memory"});
		dirwatch_end(w);
		return 0;
	}
	w->k->gone = on_reader_gone;
	w->k->gone_arg = w;
	if (w->k->watch(w->k, on_drained, w) < 0) { /* no backlog to go by: no bound either */
		w->k->gone = NULL;
		w->k->end(w->k, NULL, 0);
		w->k = NULL;
		dirwatch_end(w);
		return 0;
	}
	if (w->k->watch_hangup)
		w->k->watch_hangup(w->k); /* a quiet directory: know when the reader left */
	return 0;
}

static int dirwatch_frame(struct chan *ch, const struct frame *f)
{
	struct dirwatch *w = OWNER_OF(ch, struct dirwatch, ch);
	struct frame_watch_event ev;

	bool opening = !w->k && !w->closing;

	if (f->type == FRAME_OK || f->type == FRAME_ERROR) {
		if (opening)
			return on_answer(w, f);
		if (!w->closing)
			return -EPROTO; /* the watch was open: nothing to answer */
		dirwatch_free(w);
		return 0;
	}
	if (f->type != FRAME_WATCH_EVENT || opening ||
	    frame_msg_parse(f->type, f->payload, f->len, &ev) < 0 ||
	    (ev.type & ~FRAME_WATCH_EV_ALL) || !ev.type || ev.name[0] != '/')
		return -EPROTO;
	if (w->k)
		on_event(w, &ev);
	return 0;
}

static const struct chan_ops dirwatch_chan = {.frame = dirwatch_frame, .close = dirwatch_close};

int svc_watch_open(struct sbx *s, const char *path, bool recursive, struct svc_reply *rp,
		   struct svc_err *err)
{
	if (s->n_watches >= MAX_WATCHES)
		return svc_fail(err, API_ERR_QUOTA_EXCEEDED,
				"at most %d watches at once in a sandbox", MAX_WATCHES);
	struct dirwatch *w = calloc(1, sizeof(*w));
	if (!w || !(w->path = strdup(path))) {
		free(w);
		return svc_fail(err, API_ERR_INTERNAL, "out of memory");
	}
	w->s = s;
	s->n_watches++;
	sbx_chan_add(s, &w->ch, &dirwatch_chan);
	struct frame_file m = {.path = path, .user = FRAME_USER_USER,
			       .flags = recursive ? FRAME_WATCH_RECURSIVE : 0};
	int r = sbx_send(s, FRAME_WATCH_OPEN, w->ch.id, &m);
	if (r < 0) {
		dirwatch_free(w);
		return svc_fail(err, api_error_from_errno(r), "cannot reach the sandbox's agent");
	}
	w->rep = rp;
	rp->gone = on_rep_gone;
	rp->gone_arg = w;
	return 0;
}
