/* cordon-egress's pieces and the one struct they share (internal to the proxy).
 *
 * The proxy is one process with one libevent loop. struct egress holds everything that
 * lives as long as the process (the loop, the resolver, the control channel, the limits,
 * the sandboxes' table, the DNS filter's state); every callback reaches it through the
 * struct sbx or struct conn it was given, and nothing else is file-scope. One file per
 * concern:
 *
 *   main.c       the order of setup, seccomp, the "ready" line, the loop
 *   host.c       what the host gives: limits from the environment, its own addresses
 *                (always blocked), the upstream resolver, the listening sockets
 *   sbx.c        the sandboxes' table: lookup by source address, set, del, the
 *                new-connections-per-second bucket
 *   conn.c       a TCP connection from a sandbox: accept, admission, the first bytes
 *                (TLS SNI, HTTP Host via net/sniff.c) and their deadline, teardown
 *   dial.c       resolving the checked name, dropping always-blocked answers, connecting
 *   decide.c     the policy verdicts (policy/egress.c) and the reports to the controller
 *   relay.c      the relay table: which relay carries an allowed connection
 *   relay-tls.c  the intercepting relay: TLS terminated for a host the sandbox has a secret
 *                for, each HTTP/1.1 request checked, the placeholder replaced by the value
 *   relay-raw.c  the raw relay: bytes both ways, backpressure, close when flushed (and, for a
 *                sandbox with secrets, a search for their placeholders in what it sends)
 *   secret.c     a sandbox's secrets: locked, wiped pages; finding a placeholder
 *   tls.c        the Cordon egress CA, leaf certificates, the upstream verifying context
 *   dns.c        the DNS filter (net/dnsmsg.c), UDP and TCP
 *   ctl.c        the control channel with cordond or cordon run: set, del, replies
 *
 * A TCP connection goes conn_accept -> decide_addr: an address rule -> dial_addr; else
 * the first bytes -> decide_sniffed -> dial_name (or dial_addr when there is no name) ->
 * connected: decide_report says "allow" and relay_start() hands the connection to the relay
 * the table picks. Any refusal on the way is conn_block(c, reason). A relay owns the connection from then on and
 * ends it with conn_close(). To add one, write relay-NAME.c with a `const struct relay_ops
 * relay_NAME` and list it in relay.c's table before "raw" (as relay-tls.c is); connection
 * and decision code do not change.
 */
#pragma once

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <event2/bufferevent.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <jansson.h>

#include "net/dnsmsg.h"
#include "net/sniff.h"
#include "policy/egress.h"

#define EGRESS_MAX_SANDBOXES 4096
#define SNIFF_MAX SNIFF_TLS_WAIT_MAX
#define SNIFF_TIMEOUT_S 10
#define DNS_TIMEOUT_S 5
#define MAX_DNS_PENDING 1024
#define CTL_BACKLOG_MAX (4u << 20)

/* Per-sandbox ceilings; $CORDON_EGRESS_LIMITS="CONNS,PER_SEC,BYTES" (set by cordond's
 * --egress-limits, or by hand for cordon run) overrides the defaults (host.c). */
struct egress_limits {
	unsigned max_conns, conns_per_sec, bytes_per_sec;
};

struct egress;

#define SECRET_NAME_MAX 64
#define SECRET_PH_MIN 16
#define SECRET_PH_MAX 64
#define SECRET_VALUE_MAX 4096 /* also the size of its locked pages */
#define SECRET_HOSTS_MAX 8
#define SECRETS_MAX 16 /* per sandbox */
enum { SECRET_IN_HEADER = 1, SECRET_IN_QUERY = 2, SECRET_IN_BODY = 4 };

/* A secret of a sandbox (secret.c): the sandbox holds @placeholder; @value (locked pages,
 * wiped when freed) replaces it only on intercepted requests to one of @hosts, and only in
 * the parts of the request @in allows. */
struct egress_secret {
	char name[SECRET_NAME_MAX];
	char placeholder[SECRET_PH_MAX];
	size_t ph_len;
	uint8_t *value;
	size_t value_len;
	char hosts[SECRET_HOSTS_MAX][256];
	size_t n_hosts;
	unsigned in; /* SECRET_IN_* */
};

/* The end of what a stream has shown, to find a placeholder split between two reads. */
struct secret_tail {
	uint8_t b[SECRET_PH_MAX];
	size_t n;
};

#define APPROVE_RULES_MAX 32 /* per sandbox */
#define APPROVE_METHODS_MAX 8
#define APPROVE_PATHS_MAX 8
#define APPROVE_TIMEOUT_DEFAULT 300
#define APPROVE_TIMEOUT_MAX 86400
#define APPROVE_GRACE_S 30 /* our backstop, after the controller's own timeout */
#define APPROVALS_PER_SBX 8 /* requests held at once, per sandbox */
#define APPROVALS_MAX 256   /* in all */
#define APPROVALS_HELD_BYTES (16u << 20)
#define PREVIEW_HEADERS 32
#define PREVIEW_VALUE_MAX 256
#define PREVIEW_BODY_MAX 1024
#define PREVIEW_PATH_MAX 1024

/* An approve rule (approve.c): a request to @host (one name rule: a name or wildcard, with
 * its ports) whose method is one of @methods and whose path is under one of @paths (none
 * given: any) is held until the controller decides. */
struct approve_rule {
	struct egress_policy *host;
	char methods[APPROVE_METHODS_MAX][16];
	size_t n_methods;
	char paths[APPROVE_PATHS_MAX][256];
	size_t n_paths;
	unsigned timeout_s;
	char text[300];
};

/* One sandbox, known by its source address. An entry that was deleted keeps its memory
 * (ip 0, a deny policy) while connections still point at it, and is reused once idle. */
struct sbx {
	struct egress *e;
	struct in_addr ip;
	char id[72];
	char ifname[16]; /* set when we own its nftables entries (cordon run) */
	struct egress_policy *policy;
	unsigned conns; /* TCP connections open: relayed, being decided, DNS */
	double tokens;
	struct timeval last;
	struct ev_token_bucket_cfg *rate;
	struct bufferevent_rate_limit_group *group;
	struct egress_secret *secrets; /* set by the controller; none: nothing is intercepted */
	size_t n_secrets;
	struct egress_limits limits; /* the proxy's, or lower (a profile's: sbx_set_limits) */
	struct approve_rule *approve; /* set by the controller */
	size_t n_approve;
	unsigned n_held; /* its requests waiting for a decision */
};

struct held;

/* A query forwarded upstream, waiting for its answer. */
struct dns_pending {
	uint16_t id, orig_id;
	struct sockaddr_in client;
	struct dns_question q;
	struct sbx *s;
	struct bufferevent *tcp; /* NULL: the client asked over UDP */
	time_t when;
	bool used;
};

struct egress {
	struct event_base *base;
	struct evdns_base *dns;  /* resolves the names the proxy dials */
	struct bufferevent *ctl; /* JSON lines with the controller */
	struct egress_limits limits;
	/* Always blocked: the built-in ranges plus every address of the host itself. Every
	 * policy points at it (->extra). */
	struct egress_blocklist blocks;
	struct sockaddr_storage upstream; /* the host's resolver */
	socklen_t upstream_len;
	uint16_t tcp_port, dns_port;
	int dns_udp_fd, upstream_fd;
	struct egress_tls *tls; /* NULL: no CA given, no connection is intercepted (tls.c) */
	struct sbx *sbxs[EGRESS_MAX_SANDBOXES];
	struct held *held; /* requests waiting for approval (approve.c) */
	size_t n_held, held_bytes;
	uint64_t approval_seq;
	struct dns_pending pending[MAX_DNS_PENDING];
};

struct relay_ops;

/* A TCP connection from a sandbox. @in is the sandbox's side, @out the upstream's. */
struct conn {
	struct sbx *s;
	struct bufferevent *in, *out;
	struct sockaddr_in orig; /* where the sandbox was going (SO_ORIGINAL_DST) */
	char dst[INET_ADDRSTRLEN];
	char name[256]; /* the sniffed name, "" when the address decided */
	const char *proto;
	const struct egress_rule *rule; /* what allowed it */
	struct evdns_getaddrinfo_request *dnsreq;
	bool counted; /* in s->conns */
	bool by_name; /* dialled to an address the proxy resolved for ->name itself */
	const struct relay_ops *relay;
	void *relay_state; /* the relay's own, freed by its ->free */
};

/* A way of carrying an allowed connection. ->start runs once both sides are connected and
 * the decision is reported; from then on the relay owns @c's callbacks and ends it with
 * conn_close() (which calls ->free, if any, for relay_state). ->wants says whether this
 * relay is for @c (NULL: any connection); relay.c asks the table in order. */
struct relay_ops {
	const char *name;
	bool (*wants)(const struct conn *c);
	void (*start)(struct conn *c);
	void (*free)(struct conn *c);
};

extern const struct relay_ops relay_tls, relay_http, relay_raw;

/* host.c */
int host_read_limits(struct egress_limits *ret);
int host_blocklist(struct egress_blocklist *ret);
int host_read_upstream(struct sockaddr_storage *ret, socklen_t *ret_len);
struct evconnlistener *host_listen_tcp(struct egress *e, evconnlistener_cb cb, uint16_t *ret_port);

/* sbx.c */
struct sbx *sbx_by_ip(struct egress *e, struct in_addr ip);
struct sbx *sbx_by_sockaddr(struct egress *e, const struct sockaddr *sa);
/* Takes ownership of @pol. The entry for @ip, made (or an idle one reused) when missing;
 * NULL when the table is full or out of memory (then @pol is freed). */
struct sbx *sbx_set(struct egress *e, struct in_addr ip, const char *id, struct egress_policy *pol);
/* Points @ifname's traffic at this proxy in nftables; the entry is removed with the
 * sandbox (sbx_del) or when the controller goes (sbx_del_all_nft). */
int sbx_own_nft(struct sbx *s, const char *ifname, struct cordon_err *err);
void sbx_del(struct sbx *s);
/* @l's non-zero fields, at most the proxy's own limits, become @s's; zero: the proxy's. */
void sbx_set_limits(struct sbx *s, const struct egress_limits *l);
/* One token of the sandbox's new-connections-per-second bucket; false when empty. */
bool sbx_rate_ok(struct sbx *s);
void sbx_del_all_nft(struct egress *e);

/* conn.c */
void conn_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
		 void *arg);
/* Frees @c and both its sides. */
void conn_close(struct conn *c);
/* Reports @c blocked for @reason, then closes it. */
void conn_block(struct conn *c, const char *reason);

/* dial.c */
/* Connects to @c->orig itself. */
void dial_addr(struct conn *c);
/* Resolves @c->name and connects to its first address that is not always blocked. */
void dial_name(struct conn *c);
bool dial_addr_ok(const struct egress *e, const struct sockaddr *sa);

/* decide.c */
/* At accept: the address rule that relays @c at once (the server may speak first), or
 * NULL: wait for the first bytes. */
const struct egress_rule *decide_addr(struct conn *c);
/* Whether @c must name its host before it is let through, though its address alone would
 * do: public mode with approve rules, on 80 and 443 (the rules match names). */
bool decide_needs_name(const struct conn *c);
/* After the first bytes: @r is the sniffer's result. Dials, or blocks @c. */
void decide_sniffed(struct conn *c, int r);
/* The decision for @c, to the controller; @rule NULL means blocked for @reason. */
void decide_report(const struct conn *c, const struct egress_rule *rule, const char *reason);
void decide_report_dns(const struct sbx *s, const char *name, const struct egress_rule *rule,
		       const char *reason);
/* A placeholder of @sec seen where it may not go ({"kind":"secret.misuse",..., a block});
 * names the secret, never its value or placeholder. @c NULL: a DNS query for @name. */
void decide_report_misuse(const struct sbx *s, const struct conn *c, const char *name,
			  const struct egress_secret *sec, const char *where);
/* @sec's value was put in a request on @c ({"kind":"secret.use","secret",..,"name",..}):
 * the name and the host, never the value. Bounded like every report. */
void decide_report_use(const struct conn *c, const struct egress_secret *sec);

/* approve.c */
struct httpreq;
/* The controller's "approve" list into @ret (malloc'd, @ret_n rules). */
int approve_rules_parse(struct egress *e, json_t *a, struct approve_rule **ret, size_t *ret_n,
			struct cordon_err *err);
void approve_rules_free(struct approve_rule *rules, size_t n);
/* The name rule of an approve rule that lets @s reach @name:@port (approved requests must
 * get there), or that lets it resolve @name; NULL when none. */
const struct egress_rule *approve_host_rule(const struct sbx *s, const char *name, uint16_t port);
const struct egress_rule *approve_dns_rule(const struct sbx *s, const char *name);
/* The first approve rule that holds this request on @c; NULL: it goes on. */
const struct approve_rule *approve_match(const struct conn *c, const uint8_t *p, const struct httpreq *req);
/* Holds the request at @p (its head parsed in @req, @avail bytes of it read) and reports it
 * pending; NULL when a bound refuses it (*@ret_refused says which, reported too). The relay
 * keeps the result and calls approve_release() if @c closes first; a decision or the
 * backstop calls relay_approved(). */
struct held *approve_hold(struct conn *c, const struct approve_rule *r, const uint8_t *p, size_t avail,
			  const struct httpreq *req, const char **ret_refused);
void approve_release(struct held *h);
/* The controller's decision on @id; -ENOENT when no request waits under it. */
int approve_decide(struct egress *e, const char *id, bool allow, const char *reason);
/* Closes every held connection of @s (it is deleted). */
void approve_drop_sbx(struct egress *e, const struct sbx *s);
/* @p[0..len) printable, every placeholder and value of @s's secrets "[secret NAME]", into
 * @out; how many bytes of @p it covered. */
size_t approve_redact(const struct sbx *s, const uint8_t *p, size_t len, char *out, size_t size);

/* relay-tls.c */
/* The decision on a held request of @c: sent on as it was, or answered 403 with @reason. */
void relay_approved(struct conn *c, bool allow, const char *reason);

/* relay.c */
/* @c is connected and allowed: hands it to its relay. */
void relay_start(struct conn *c);

/* secret.c */
/* -1 for an unknown part of a request. */
int secret_in_from(const char *s);
/* Checks and copies the fields into @sec (its value into locked pages). */
int secret_init(struct egress_secret *sec, const char *name, const char *placeholder,
		const char *value, size_t value_len, struct cordon_err *err);
void secret_clear(struct egress_secret *sec);
void secrets_free(struct egress_secret *secs, size_t n);
bool secret_for_host(const struct egress_secret *sec, const char *host);
bool sbx_has_secret_for(const struct sbx *s, const char *host);
/* The first of the sandbox's secrets whose placeholder is in @p (exact bytes), in @name
 * (case-insensitive), or in @buf's bytes joined to what @t kept of the stream (which then
 * keeps the end of @buf); NULL when none. */
const struct egress_secret *secret_in_bytes(const struct sbx *s, const uint8_t *p, size_t len);
const struct egress_secret *secret_in_name(const struct sbx *s, const char *name);
const struct egress_secret *secret_in_stream(const struct sbx *s, struct secret_tail *t,
					     struct evbuffer *buf);

/* tls.c */
/* The CA, from $CORDON_EGRESS_CA_DIR (made there once when missing): before the controller
 * is told the proxy is ready, as it reads ca.crt then. 0 with e->tls NULL when the variable
 * is unset. */
int tls_setup(struct egress *e);
/* The TLS contexts, with the host's CA store (plus $CORDON_EGRESS_UPSTREAM_CA) for upstream
 * servers: most of the proxy's start, so after its ready line, and before seccomp, since it
 * reads files. 0 without a CA. */
int tls_contexts(struct egress *e);
/* A server-side SSL for a connection to @name, with a leaf certificate minted by the CA
 * (cached); the client-side SSL that checks @name's real server. NULL on failure. */
struct ssl_st *tls_new_server(struct egress_tls *t, const char *name);
struct ssl_st *tls_new_client(struct egress_tls *t, const char *name);

/* dns.c */
int dns_setup(struct egress *e);

/* ctl.c */
/* Takes ownership of @fd. */
int ctl_setup(struct egress *e, int fd);
/* One line to the controller. @bounded: dropped when the controller is CTL_BACKLOG_MAX
 * behind (reports); replies are never dropped. */
void ctl_send(struct egress *e, const char *line, bool bounded);
