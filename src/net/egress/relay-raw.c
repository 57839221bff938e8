/* The raw relay: bytes both ways as they come, with large buffers and no per-byte work.
 * Each side stops reading while the other has RELAY_HIGH bytes queued, and when one side
 * ends, what is queued for the other is flushed before the connection closes. */
#include <stdlib.h>

#include <event2/buffer.h>

#include "net/egress/egress.h"

#define RELAY_HIGH (1u << 20)

static struct bufferevent *other(struct conn *c, struct bufferevent *bev)
{
	return bev == c->in ? c->out : c->in;
}

/* A sandbox with secrets: what it sends on a connection that is not intercepted must not
 * carry a placeholder (plain HTTP, an IP literal, any other protocol the proxy can read). */
static bool placeholder_sent(struct conn *c, struct bufferevent *bev)
{
	if (bev != c->in || !c->s->n_secrets)
		return false;
	if (!c->relay_state && !(c->relay_state = calloc(1, sizeof(struct secret_tail))))
		return true; /* cannot check: fail closed */
	const struct egress_secret *sec = secret_in_stream(c->s, c->relay_state, bufferevent_get_input(bev));
	if (!sec)
		return false;
	decide_report_misuse(c->s, c, NULL, sec,
			     c->name[0] ? "on a connection that is not intercepted" : "to an address, not a name");
	return true;
}

static void relay_read(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	if (placeholder_sent(c, bev)) {
		conn_close(c);
		return;
	}
	struct bufferevent *to = other(c, bev);
	struct evbuffer *dst = bufferevent_get_output(to);
	evbuffer_add_buffer(dst, bufferevent_get_input(bev));
	if (evbuffer_get_length(dst) >= RELAY_HIGH) {
		/* Backpressure: stop reading until the other side has drained. */
		bufferevent_disable(bev, EV_READ);
		bufferevent_setwatermark(to, EV_WRITE, RELAY_HIGH / 2, 0);
	}
}

static void relay_drained(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	bufferevent_setwatermark(bev, EV_WRITE, 0, 0);
	bufferevent_enable(other(c, bev), EV_READ);
}

static void close_when_flushed(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
		conn_close(c);
}

static void relay_event(struct bufferevent *bev, short what, void *arg)
{
	struct conn *c = arg;
	if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
		return;
	struct bufferevent *to = other(c, bev);
	if (to && evbuffer_get_length(bufferevent_get_output(to)) > 0) {
		/* Let what is queued reach the other side, then close. */
		bufferevent_setcb(to, NULL, close_when_flushed, relay_event, c);
		bufferevent_disable(to, EV_READ);
		return;
	}
	conn_close(c);
}

static void raw_free(struct conn *c)
{
	free(c->relay_state);
	c->relay_state = NULL;
}

static void raw_start(struct conn *c)
{
	bufferevent_setcb(c->in, relay_read, relay_drained, relay_event, c);
	bufferevent_setcb(c->out, relay_read, relay_drained, relay_event, c);
	bufferevent_enable(c->in, EV_READ | EV_WRITE);
	bufferevent_enable(c->out, EV_READ | EV_WRITE);
	/* What the sandbox already sent (the ClientHello or the request) goes first. */
	if (evbuffer_get_length(bufferevent_get_input(c->in)))
		relay_read(c->in, c);
}

const struct relay_ops relay_raw = {
	.name = "raw",
	.start = raw_start,
	.free = raw_free,
};
