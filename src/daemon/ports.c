/* Ports: a client's TCP stream to 127.0.0.1:PORT inside a sandbox (GET .../ports/{port},
 * `cordon port-forward`). The bytes enter the sandbox through its agent (PORT_OPEN, then
 * PORT_WRITE and PORT_DATA on the connection's channel): the sandbox's network is never
 * opened to the host, and a server that listens on its loopback only is reached all the same.
 *
 * Bounded both ways: towards the sandbox, at most PORT_WINDOW bytes are in flight (sent, not
 * yet acknowledged by the agent's OK{SIZE}); past that the client is not read. Towards the
 * client, past PORT_CLIENT_HIGH queued bytes the agent is asked to PAUSE reading the
 * sandbox's socket, and to RESUME below PORT_CLIENT_LOW. At most MAX_PORT_CONNS connections
 * per sandbox. The client's EOF ends the tunnel (a half-close included); the sandbox's EOF
 * ends it once what the sandbox sent is written. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>

#include "audit/audit.h"
#include "daemon/daemon.h"
#include "daemon/service.h"
#include "lib/frame.h"

#define MAX_PORT_CONNS   32
#define PORT_WINDOW      (1u << 20)
#define PORT_CLIENT_HIGH (1u << 20)
#define PORT_CLIENT_LOW  (256u << 10)
/* What PAUSE leaves in flight is far below this; past it the agent did not pause (hostile),
 * and the tunnel ends rather than hold more for a client that does not read. */
#define PORT_CLIENT_MAX  SUBSCRIBER_BACKLOG

enum pc_state { PC_CONNECTING, PC_OPEN, PC_CLOSING };

struct portconn {
	struct chan ch;
	struct sbx *s;
	struct bufferevent *bev; /* the client; NULL once it is closed */
	enum pc_state state;
	bool agent_eof, paused;
	unsigned answers_due;    /* closing: PORT_CLOSE's OK, and PORT_OPEN's if not come yet */
	uint64_t sent, acked;
	char *ok;                /* the surface's answer once connected */
	char *(*fail)(const struct svc_err *err);
};

static void pc_free(struct portconn *c)
{
	c->bev = loop_bev_free(c->bev);
	sbx_chan_del(c->s, &c->ch);
	c->s->n_ports--;
	free(c->ok);
	free(c);
}

/* Ends the connection: the client is closed now, the channel once the agent answered
 * PORT_CLOSE (its OK{SIZE 0} is the last frame on it). */
static void pc_end(struct portconn *c)
{
	c->bev = loop_bev_free(c->bev);
	if (c->state == PC_CLOSING)
		return;
	c->answers_due = c->state == PC_CONNECTING ? 2 : 1;
	c->state = PC_CLOSING;
	if (sbx_send(c->s, FRAME_PORT_CLOSE, c->ch.id, NULL) < 0)
		pc_free(c);
}

static void pc_close(struct chan *ch)
{
	pc_free(OWNER_OF(ch, struct portconn, ch));
}

/* Client bytes to the agent, within the window. */
static void pump_client(struct portconn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->bev);
	while (evbuffer_get_length(in) > 0 && c->sent - c->acked < PORT_WINDOW) {
		size_t room = PORT_WINDOW - (size_t)(c->sent - c->acked);
		size_t n = evbuffer_get_length(in);
		n = n < room ? n : room;
		n = n < FRAME_MAX_DATA ? n : FRAME_MAX_DATA;
		struct frame_data d = {evbuffer_pullup(in, (ev_ssize_t)n), (uint32_t)n};
		if (!d.data || sbx_send(c->s, FRAME_PORT_WRITE, c->ch.id, &d) < 0) {
			pc_end(c);
			return;
		}
		evbuffer_drain(in, n);
		c->sent += n;
	}
	if (c->sent - c->acked >= PORT_WINDOW)
		bufferevent_disable(c->bev, EV_READ);
	else
		bufferevent_enable(c->bev, EV_READ);
}

static void on_client_read(struct bufferevent *bev, void *arg)
{
	pump_client(arg);
}

/* The client's queue drained to PORT_CLIENT_LOW (the write watermark). */
static void on_client_write(struct bufferevent *bev, void *arg)
{
	struct portconn *c = arg;
	if (c->agent_eof && evbuffer_get_length(bufferevent_get_output(bev)) == 0) {
		pc_end(c); /* the sandbox's end is done and all it sent is written */
		return;
	}
	if (c->paused && sbx_send(c->s, FRAME_RESUME, c->ch.id, NULL) == 0)
		c->paused = false;
}

static void on_client_event(struct bufferevent *bev, short what, void *arg)
{
	/* EOF too: a half-close cannot be told from a close until a write fails, which for a
	 * quiet server inside never comes, so the client's EOF ends the tunnel */
	pc_end(arg);
}

static void to_client(struct portconn *c, const struct frame *f)
{
	struct frame_data d;
	if (!c->bev || frame_msg_parse(f->type, f->payload, f->len, &d) < 0)
		return;
	struct evbuffer *out = bufferevent_get_output(c->bev);
	if (evbuffer_get_length(out) + d.len > PORT_CLIENT_MAX) {
		pc_end(c);
		return;
	}
	evbuffer_add(out, d.data, d.len);
	if (!c->paused && evbuffer_get_length(out) > PORT_CLIENT_HIGH &&
	    sbx_send(c->s, FRAME_PAUSE, c->ch.id, NULL) == 0)
		c->paused = true;
}

/* @err's answer (the surface's @fail) on @fd, which is closed. */
static int refuse(int fd, char *(*fail)(const struct svc_err *err), const struct svc_err *err)
{
	_cleanup_free_ char *answer = fail(err);
	if (answer)
		(void)!send(fd, answer, strlen(answer), MSG_NOSIGNAL | MSG_DONTWAIT);
	close(fd);
	return -1;
}

/* The agent connected (OK) or could not (ERROR): the surface's answer, then the relay. */
static int on_connect(struct portconn *c, const struct frame *f)
{
	struct frame_error e;
	if (f->type == FRAME_OK) {
		c->state = PC_OPEN;
		bufferevent_write(c->bev, c->ok, strlen(c->ok));
		pump_client(c);
		return 0;
	}
	if (frame_msg_parse(f->type, f->payload, f->len, &e) < 0)
		return -EPROTO;
	struct svc_err err = {.code = e.errnum == ECONNREFUSED ? API_ERR_PORT_UNREACHABLE
							     : api_error_from_errno(-(int)e.errnum)};
	snprintf(err.msg, sizeof(err.msg), "cannot connect to port inside sandbox %s: %s",
		 c->s->id, e.errnum > 0 && e.errnum < 4096 ? strerror((int)e.errnum) : "error");
	refuse(dup(bufferevent_getfd(c->bev)), c->fail, &err);
	pc_free(c); /* the agent forgot the connection with its ERROR */
	return 0;
}

static int pc_frame(struct chan *ch, const struct frame *f)
{
	struct portconn *c = OWNER_OF(ch, struct portconn, ch);
	struct frame_ok ok;

	if (c->state == PC_CONNECTING)
		return f->type == FRAME_OK || f->type == FRAME_ERROR ? on_connect(c, f) : -EPROTO;
	if (f->type == FRAME_OK) {
		if (frame_msg_parse(f->type, f->payload, f->len, &ok) < 0)
			return -EPROTO;
		if (c->state == PC_CLOSING) {
			if (ok.size == 0 && --c->answers_due == 0)
				pc_free(c); /* PORT_CLOSE's answer: the channel's last frame */
			return 0;
		}
		if (ok.size < c->acked || ok.size > c->sent)
			return -EPROTO; /* it cannot have taken what was never sent */
		c->acked = ok.size;
		pump_client(c);
		return 0;
	}
	if (c->state == PC_CLOSING) {
		if (f->type == FRAME_ERROR && c->answers_due > 1)
			c->answers_due--; /* PORT_OPEN's, which failed after all */
		return f->type == FRAME_PORT_DATA || f->type == FRAME_PORT_EOF ||
			       f->type == FRAME_ERROR ? 0 : -EPROTO;
	}
	switch (f->type) {
	case FRAME_PORT_DATA:
		to_client(c, f);
		return 0;
	case FRAME_PORT_EOF:
		c->agent_eof = true;
		if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
			pc_end(c);
		return 0;
	case FRAME_ERROR:
		pc_end(c); /* a PORT_WRITE the agent could not take */
		return 0;
	default:
		return -EPROTO;
	}
}

static const struct chan_ops port_chan = {.frame = pc_frame, .close = pc_close};

static struct portconn *pc_new(struct sbx *s, int fd, const char *ok,
			       char *(*fail)(const struct svc_err *err))
{
	struct portconn *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	*c = (struct portconn){.s = s, .fail = fail, .ok = strdup(ok)};
	c->bev = c->ok ? loop_bev_new(fd, BEV_OPT_CLOSE_ON_FREE) : NULL;
	if (!c->bev) { /* @fd is still the caller's */
		free(c->ok);
		free(c);
		return NULL;
	}
	s->n_ports++;
	sbx_chan_add(s, &c->ch, &port_chan);
	bufferevent_setcb(c->bev, on_client_read, on_client_write, on_client_event, c);
	bufferevent_setwatermark(c->bev, EV_WRITE, PORT_CLIENT_LOW, 0);
	bufferevent_enable(c->bev, EV_WRITE);
	return c;
}

int svc_port_open(struct sbx *s, uint32_t port, int fd, const void *early, size_t early_len,
		  const char *ok, char *(*fail)(const struct svc_err *err), struct svc_err *err)
{
	if (port < 1 || port > 65535) {
		svc_fail(err, API_ERR_INVALID_FIELD, "port: must be 1..65535");
		return refuse(fd, fail, err);
	}
	if (s->n_ports >= MAX_PORT_CONNS) {
		svc_fail(err, API_ERR_QUOTA_EXCEEDED,
			 "at most %d port connections at once per sandbox", MAX_PORT_CONNS);
		return refuse(fd, fail, err);
	}
	struct portconn *c = pc_new(s, fd, ok, fail);
	if (!c) {
		svc_fail(err, API_ERR_INTERNAL, "out of memory");
		return refuse(fd, fail, err);
	}
	int r = sbx_audit_rc(s, AUDIT_PORT_OPEN, json_pack("{s:I, s:I}", "connection",
							   (json_int_t)c->ch.id, "port",
							   (json_int_t)port));
	if (r < 0) {
		svc_fail_audit(err, r);
		refuse(dup(fd), fail, err);
		pc_free(c);
		return -1;
	}
	struct frame_port m = {.port = port};
	r = sbx_send(s, FRAME_PORT_OPEN, c->ch.id, &m);
	/* what the client sent after its head goes along: the agent holds it until connected */
	if (r == 0 && early_len)
		r = evbuffer_prepend(bufferevent_get_input(c->bev), early, early_len);
	if (r < 0) {
		svc_fail(err, API_ERR_UNAVAILABLE, "cannot reach the sandbox's agent");
		refuse(dup(fd), fail, err);
		pc_free(c);
		return -1;
	}
	return 0;
}
