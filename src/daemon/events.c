/* Security events as they happen: one stream for the whole server (GET /v1/events, NDJSON,
 * ?follow=1 to stay open, ?sandbox= and ?kind= to filter), a count per kind in /metrics, and
 * the optional webhook (webhook.c). Kinds (enum event_kind, daemon.h): egress.blocked
 * (the proxy refused a connection or a DNS name), secret.misuse, oom, timeout (a sandbox's
 * deadline, or a process's), agent.violation (the agent broke the protocol or stopped
 * answering: the sandbox is destroyed), sandbox.destroyed (any client sandbox, with the
 * reason), approval.pending (a request held for a decision: approvals.c) and
 * approval.decided (its end: allow, deny, timeout, closed; the decider).
 *
 * An event is {"seq", "time", "kind", "sandbox", ...}: no value of a secret (the proxy's
 * reports never carry one). The last EVENTS_RING are kept, for a reader that connects
 * later. A follower whose reader is slow is never buffered without bound: past
 * EVENTS_FOLLOWER_MAX queued bytes its events are dropped and counted, and once its reader
 * has caught up it gets {"kind":"lagged","dropped":N} before the next ones. A TCP client sees
 * the events of its own sandboxes only. A leaf, but for the webhook it feeds. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "daemon/daemon.h"
#include "daemon/service.h"

#define EVENTS_RING 1024
#define EVENTS_FOLLOWER_MAX (256u << 10)

static const char *const kinds[_EVK_MAX] = {
	[EVK_EGRESS_BLOCKED] = "egress.blocked", [EVK_SECRET_MISUSE] = "secret.misuse",
	[EVK_OOM] = "oom",			 [EVK_TIMEOUT] = "timeout",
	[EVK_AGENT_VIOLATION] = "agent.violation", [EVK_SANDBOX_DESTROYED] = "sandbox.destroyed",
	[EVK_APPROVAL_PENDING] = "approval.pending", [EVK_APPROVAL_DECIDED] = "approval.decided",
};

struct event_rec {
	char *line; /* the JSON, with its newline */
	size_t len;
	enum event_kind kind;
	char sandbox[SBX_ID_LEN + 1];
	const struct api_key *owner;
};

struct follower {
	struct stream_sink *k;
	struct events_filter f;
	uint64_t dropped;
	struct follower *next;
};

static struct event_rec ring[EVENTS_RING];
static size_t ring_next, ring_n;
static uint64_t seq, counts[_EVK_MAX];
static struct follower *followers;

const char *event_kind_name(enum event_kind k)
{
	return (unsigned)k < _EVK_MAX ? kinds[k] : "?";
}

int event_kind_from(const char *s, size_t n)
{
	for (int i = 0; i < _EVK_MAX; i++)
		if (strlen(kinds[i]) == n && strncmp(kinds[i], s, n) == 0)
			return i;
	return -1;
}

static bool matches(const struct events_filter *f, const struct event_rec *e)
{
	if (f->principal && f->principal != e->owner)
		return false;
	if (f->sandbox[0] && strcmp(f->sandbox, e->sandbox) != 0)
		return false;
	return !f->kinds || (f->kinds & (1u << e->kind));
}

static void follower_drop(struct follower *f)
{
	for (struct follower **p = &followers; *p; p = &(*p)->next)
		if (*p == f) {
			*p = f->next;
			break;
		}
	free(f);
}

static void on_gone(void *arg)
{
	follower_drop(arg);
}

/* The reader took some: after a gap, say how much it missed, once there is room again. */
static void on_drained(void *arg)
{
	struct follower *f = arg;
	char line[96];
	if (!f->dropped || f->k->backlog(f->k) > EVENTS_FOLLOWER_MAX / 2)
		return;
	int n = snprintf(line, sizeof(line), "{\"kind\":\"lagged\",\"dropped\":%llu}\n",
			 (unsigned long long)f->dropped);
	if (f->k->write(f->k, line, (size_t)n) == 0)
		f->dropped = 0;
}

static void push(struct follower *f, const struct event_rec *e)
{
	if (!matches(&f->f, e))
		return;
	on_drained(f); /* a gap is told first, if there is room now */
	if (f->dropped || f->k->backlog(f->k) + e->len > EVENTS_FOLLOWER_MAX || f->k->write(f->k, e->line, e->len) < 0)
		f->dropped++;
}

void event_raise(enum event_kind kind, const struct sbx *s, json_t *fields)
{
	char when[40];
	_cleanup_(json_decrefp) json_t *o = fields ? fields : json_object();
	if ((unsigned)kind >= _EVK_MAX || !o)
		return;
	counts[kind]++;
	json_object_set_new(o, "seq", json_integer((json_int_t)++seq));
	json_object_set_new(o, "time", json_string(iso_time(now_ms(), when)));
	json_object_set_new(o, "kind", json_string(kinds[kind]));
	json_object_set_new(o, "sandbox", s ? json_string(s->id) : json_null());
	char *text = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
	size_t n = text ? strlen(text) : 0;
	char *line = text ? realloc(text, n + 2) : NULL;
	if (!line) {
		free(text);
		return;
	}
	memcpy(line + n, "\n", 2);
	struct event_rec *e = &ring[ring_next];
	free(e->line);
	*e = (struct event_rec){.line = line, .len = n + 1, .kind = kind, .owner = s ? s->owner : NULL};
	snprintf(e->sandbox, sizeof(e->sandbox), "%s", s ? s->id : "");
	ring_next = (ring_next + 1) % EVENTS_RING;
	ring_n += ring_n < EVENTS_RING;
	for (struct follower *f = followers; f; f = f->next)
		push(f, e);
	webhook_push(line, n);
}

int svc_events(const struct events_filter *f, struct evbuffer *out)
{
	for (size_t i = 0; i < ring_n; i++) {
		const struct event_rec *e = &ring[(ring_next + EVENTS_RING - ring_n + i) % EVENTS_RING];
		if (matches(f, e) && evbuffer_add(out, e->line, e->len) < 0)
			return -ENOMEM;
	}
	return 0;
}

int svc_events_follow(const struct events_filter *f, struct stream_sink *k, struct svc_err *err)
{
	struct follower *fl = calloc(1, sizeof(*fl));
	if (!fl)
		return svc_fail(err, API_ERR_INTERNAL, "out of memory");
	*fl = (struct follower){.k = k, .f = *f, .next = followers};
	followers = fl;
	k->gone = on_gone;
	k->gone_arg = fl;
	(void)k->watch(k, on_drained, fl); /* without it, a reader that lags is told at its next event */
	return 0;
}

void events_metrics(FILE *out)
{
	fprintf(out, "# HELP cordon_events_total Security events raised (GET /v1/events), by kind.\n"
		     "# TYPE cordon_events_total counter\n");
	for (int i = 0; i < _EVK_MAX; i++)
		fprintf(out, "cordon_events_total{kind=\"%s\"} %llu\n", kinds[i], (unsigned long long)counts[i]);
}
