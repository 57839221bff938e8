/* Internal to the HTTP front (front.c: admission of connections; gate.c: the check of each
 * request head before evhttp may read the body). See front.c's opening comment. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <event2/bufferevent.h>
#include <event2/http.h>
#include <event2/listener.h>

#include "daemon/reqhead.h"

#define HEAD_MAX	   (16u << 10)	/* bytes of a request line and headers (evhttp's too) */
#define CHUNK_SLICE	   (256u << 10) /* bytes of a chunked body evhttp may read per grant */
/* The rest of a refused upload is read and dropped, so that a client still sending can read
 * the answer: from a stranger 2 s or 16 MiB at most; from a local or authenticated client the
 * body it announced, up to 10 s or 128 MiB. */
#define LINGER_MS	   2000
#define LINGER_BYTES	   (16u << 20)
#define LINGER_TRUSTED_MS  10000
#define LINGER_TRUSTED_MAX (128u << 20)
#define ACCEPT_PAUSE_MS	   200		/* after EMFILE/ENFILE */
#define UNIX_MAX_CONNS	   256
#define KEEPALIVE_IDLE_S   120		/* between requests on a kept-alive connection */

/* An upload's body past this streams into a spool file (spool.c) rather than memory, on a
 * route that reads one (BODY_SPOOL); a client silent this long in the middle of it is
 * dropped. */
#define SPOOL_MIN_BYTES (1u << 20)
#define SPOOL_IDLE_S	60

enum gate_state { G_NEW, G_HEAD, G_BODY, G_DISPATCHED, G_REFUSED, G_SPOOL };

struct front;
struct chunked;

struct gate {
	struct front *f;
	struct bufferevent *bev; /* evhttp's, made by us in bevcb */
	struct evhttp_connection *evcon;
	enum gate_state state;
	int fd;
	dev_t dev; /* with ino, the socket: a stale gate is told by it (see front_sweep) */
	ino_t ino;
	struct sockaddr_storage peer;
	socklen_t peer_len;
	struct evbuffer *buf; /* bytes read by the gate, not yet given to evhttp */
	struct event *work, *deadline;
	bool first, chunked;
	bool trusted;         /* the current head came on the unix socket or with a valid key */
	bool no_linger;       /* refused for want of fds: no dup to linger on */
	uint64_t announced;   /* its Content-Length, at most LINGER_TRUSTED_MAX */
	uint64_t charged;     /* body bytes of the current request counted in f->inflight */
	uint64_t body_seen;   /* bytes evhttp has read past the current head */
	uint64_t granted;     /* chunked: bytes past the head evhttp may read */
	uint64_t max_body;    /* bytes on the wire past the head */
	size_t route_max;     /* the route's limit on the (decoded) body */
	bool spool_want;      /* check_head: this head's body goes to a spool */
	int spool_fd;         /* the current request's spooled body (O_TMPFILE), or -1 */
	uint64_t spool_len;   /* the bytes in it so far (at the end: the body's length) */
	uint64_t spool_charged; /* what it counts in f->spooled */
	uint64_t spool_left;  /* Content-Length: what is still to come; chunked: of this chunk */
	struct chunked *chunks; /* chunked: the decoder's state (chunked.h), or NULL */
	char *spool_head;     /* G_SPOOL: the head evhttp gets at the end, Content-Length 0 */
	size_t spool_head_len;
	void (*close_cb)(struct evhttp_connection *, void *); /* a handler's */
	void *close_arg;
	struct gate *next, *prev;
};

struct front {
	bool tcp;             /* TCP: --listen or --e2b-listen */
	enum listener kind;
	struct evhttp *http;
	struct evconnlistener *lev;
	size_t conns, max_conns, max_peer; /* conns counts lingering refusals too */
	uint64_t inflight, max_inflight;
	uint64_t spooled, max_spool; /* bytes of the gates' spools (spool.c) */
	bool paused_cap, paused_err;
	struct event *resume_ev;
	uint64_t warn_ms;
	unsigned warn_count;
	struct gate *gates;
};

/* front.c */
extern struct ev_token_bucket_cfg *front_hold_cfg; /* read: no refill to speak of */
void front_listener_update(struct front *f);
void gate_free(struct gate *g);

/* gate.c */
void gate_start_head(struct gate *g);   /* holds evhttp off and waits for the next head */
void gate_release(struct gate *g);      /* lets evhttp read */
void gate_hand_over(struct gate *g, size_t head_len); /* g->buf's head (and rest) to evhttp */
void gate_drop(struct gate *g);         /* the client is gone: evhttp drops the connection */
void gate_uncharge(struct gate *g);
void gate_refuse(struct gate *g, int status, const char *code, const char *extra_header,
		 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
void gate_on_read(evutil_socket_t fd, short what, void *arg);
void gate_on_timer(evutil_socket_t fd, short what, void *arg);
void gate_on_input(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg);
void gate_on_closed(struct evhttp_connection *evcon, void *arg);
void gate_request_done(struct evhttp_request *req, void *arg);
void lingerers_end(void);

/* spool.c: the body of the head @h at the start of g->buf (@head_len bytes; a Content-Length,
 * or chunked, decoded here) into an unlinked file of the state directory, read by the gate
 * itself; evhttp then gets the head with Content-Length 0 and dispatch() the file
 * (front_spool()). False when no spool can be made: the caller hands the request over as it
 * is. */
bool spool_start(struct gate *g, size_t head_len, const struct reqhead *h);
void spool_on_read(struct gate *g);  /* G_SPOOL: the socket is readable */
void spool_on_idle(struct gate *g);  /* G_SPOOL: nothing came for SPOOL_IDLE_S */
void spool_close(struct gate *g);    /* the spool goes (end of request, connection) */
