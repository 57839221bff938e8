/* Approval gates in cordond: the requests cordon-egress holds for a person's decision
 * (net/egress/approve.c). The proxy reports each held request ("approval.pending": id,
 * method, host, path, a preview with secrets redacted); this file keeps it, records it in the
 * sandbox's audit log (approval.request), raises the approval.pending event, and owns its
 * timeout (the rule's timeout_s: then it is denied). A decision (POST /v1/approvals/{id},
 * svc_approval_decide) is recorded first (approval.decision: decision, decider, reason; no
 * record, no decision), then sent to the proxy, which sends the request on or answers it 403.
 * A request the proxy refused at once (a bound), gave up on (its backstop) or lost (the
 * connection closed) ends here too. A destroyed sandbox's approvals go with it; the proxy
 * closes their connections when it forgets the sandbox. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "audit/audit.h"
#include "daemon/daemon.h"
#include "daemon/service.h"

struct approval {
	char id[24];
	struct sbx *s;
	json_t *info; /* what GET /v1/approvals shows, but its age */
	uint64_t created_ms;
	struct event *timer;
	struct approval *next;
};

static struct approval *pending;

static struct approval *find(const char *id)
{
	for (struct approval *a = pending; id && a; a = a->next)
		if (strcmp(a->id, id) == 0)
			return a;
	return NULL;
}

static void drop(struct approval *a)
{
	for (struct approval **p = &pending; *p; p = &(*p)->next)
		if (*p == a) {
			*p = a->next;
			break;
		}
	loop_event_free(a->timer);
	json_decref(a->info);
	free(a);
}

static void send_decision(const char *id, bool allow, const char *reason)
{
	egress_send_line(json_dumps(json_pack("{s:s, s:s, s:s, s:s}", "op", "decide", "id", id, "decision",
					      allow ? "allow" : "deny", "reason", reason ? reason : ""),
				    JSON_COMPACT));
}

/* The record and the event of an approval's end; -errno when the record failed. */
static int record_decision(struct sbx *s, const char *id, const char *decision, const char *decider,
			   const char *reason, json_t *info)
{
	json_t *f = json_pack("{s:s, s:s, s:s, s:s?}", "id", id, "decision", decision, "decider", decider,
			      "reason", reason && *reason ? reason : NULL);
	int r = s ? sbx_audit_rc(s, AUDIT_APPROVAL_DECISION, json_incref(f)) : 0;
	if (r >= 0) {
		json_t *ev = info ? json_deep_copy(info) : json_object();
		json_object_update(ev, f);
		event_raise(EVK_APPROVAL_DECIDED, s, ev);
	}
	json_decref(f);
	return r;
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct approval *a = arg;
	char why[64];
	snprintf(why, sizeof(why), "no decision within %lld s",
		 (long long)json_integer_value(json_object_get(a->info, "timeout_s")));
	/* Denied whether or not the record can be written: a timeout is no action. */
	record_decision(a->s, a->id, "deny", "timeout", why, a->info);
	send_decision(a->id, false, why);
	drop(a);
}

/* The preview and the request as the proxy gave them, for the API. */
static json_t *info_from(struct sbx *s, json_t *m)
{
	static const char *const keys[] = {"id", "method", "host", "port", "path", "proto", "rule",
					   "timeout_s", "preview"};
	json_t *o = json_object();
	for (size_t i = 0; o && i < ELEMENTSOF(keys); i++) {
		json_t *v = json_object_get(m, keys[i]);
		if (v)
			json_object_set(o, keys[i], v);
	}
	json_object_set_new(o, "sandbox", json_string(s->id));
	return o;
}

static void on_pending(struct sbx *s, json_t *m)
{
	const char *id = json_string_value(json_object_get(m, "id"));
	json_int_t t = json_integer_value(json_object_get(m, "timeout_s"));
	if (!id || !api_approval_id_ok(id) || find(id))
		return;
	struct approval *a = s && !s->pooled ? calloc(1, sizeof(*a)) : NULL;
	if (a)
		a->info = info_from(s, m);
	if (a && a->info)
		a->timer = loop_event_new(-1, 0, on_timeout, a);
	json_t *req = a && a->timer ? json_pack("{s:s, s:O, s:O, s:O, s:O?, s:O?}", "id", id, "method",
						json_object_get(m, "method"), "host", json_object_get(m, "host"),
						"path", json_object_get(m, "path"), "port", json_object_get(m, "port"),
						"rule", json_object_get(m, "rule"))
				    : NULL;
	/* No record, no request: what cannot be recorded is denied. */
	if (!req || sbx_audit_rc(s, AUDIT_APPROVAL_REQUEST, req) < 0) {
		if (a) {
			loop_event_free(a->timer);
			json_decref(a->info);
			free(a);
		}
		send_decision(id, false, "the request cannot be recorded");
		return;
	}
	snprintf(a->id, sizeof(a->id), "%s", id);
	a->s = s;
	a->created_ms = now_ms();
	a->next = pending;
	pending = a;
	struct timeval tv = {t > 0 ? (time_t)t : API_DEFAULT_APPROVE_TIMEOUT, 0};
	evtimer_add(a->timer, &tv);
	event_raise(EVK_APPROVAL_PENDING, s, json_deep_copy(a->info));
}

/* Past a bound of the proxy's: denied there at once, recorded and raised here. */
static void on_refused(struct sbx *s, json_t *m)
{
	if (!s || s->pooled)
		return;
	json_t *info = json_pack("{s:O, s:O, s:O, s:O?}", "method", json_object_get(m, "method"), "host",
				 json_object_get(m, "host"), "path", json_object_get(m, "path"), "rule",
				 json_object_get(m, "rule"));
	if (sbx_audit_rc(s, AUDIT_APPROVAL_REQUEST, json_pack("{s:s, s:O, s:O, s:O}", "id", "", "method",
							       json_object_get(info, "method"), "host",
							       json_object_get(info, "host"), "path",
							       json_object_get(info, "path"))) >= 0)
		record_decision(s, "", "deny", "limit", json_string_value(json_object_get(m, "reason")), info);
	json_decref(info);
}

/* The proxy's backstop fired, or the held connection closed: the approval is over. */
static void on_ended(struct sbx *s, json_t *m, const char *decision, const char *decider, const char *why)
{
	struct approval *a = find(json_string_value(json_object_get(m, "id")));
	if (!a)
		return; /* decided here already */
	record_decision(a->s, a->id, decision, decider, why, a->info);
	drop(a);
}

void approvals_report(struct sbx *s, const char *kind, json_t *m)
{
	if (strcmp(kind, "approval.pending") == 0)
		on_pending(s, m);
	else if (strcmp(kind, "approval.refused") == 0)
		on_refused(s, m);
	else if (strcmp(kind, "approval.timeout") == 0)
		on_ended(s, m, "deny", "timeout", "no decision in time");
	else if (strcmp(kind, "approval.gone") == 0)
		on_ended(s, m, "closed", "sandbox", "the connection closed before a decision");
}

static bool visible(const struct svc_caller *who, const struct approval *a)
{
	return !who->principal || who->principal == a->s->owner;
}

json_t *svc_approval_list(const struct svc_caller *who, const char *sandbox)
{
	json_t *list = json_array();
	uint64_t now = now_ms();
	for (const struct approval *a = pending; list && a; a = a->next) {
		if (!visible(who, a) || (sandbox && *sandbox && strcmp(sandbox, a->s->id) != 0))
			continue;
		json_t *o = json_deep_copy(a->info);
		json_object_set_new(o, "age_s", json_real((double)(now - a->created_ms) / 1000.0));
		json_array_insert_new(list, 0, o); /* oldest first */
	}
	return json_pack("{s:o}", "approvals", list);
}

int svc_approval_decide(const struct svc_caller *who, const char *id, const struct api_decision *d,
			json_t **ret, struct svc_err *err)
{
	struct approval *a = find(id);
	if (!a || !visible(who, a))
		return svc_fail(err, API_ERR_NOT_FOUND, "no pending approval '%s'", id);
	const char *decider = who->principal ? who->principal->name : "local";
	const char *decision = d->allow ? "allow" : "deny";
	int r = record_decision(a->s, a->id, decision, decider, d->reason, a->info);
	if (r < 0)
		return svc_fail_audit(err, r);
	send_decision(a->id, d->allow, d->reason);
	*ret = json_pack("{s:s, s:s, s:s, s:s, s:s?}", "id", a->id, "sandbox", a->s->id, "decision", decision,
			 "decider", decider, "reason", d->reason);
	drop(a);
	return 0;
}

/* The sandbox is going: its approvals with it (its last records say so), while its log is
 * open. The proxy closes the held connections when it forgets the sandbox. */
static void on_ending(struct sbx *s)
{
	for (struct approval *a = pending, *next; a; a = next) {
		next = a->next;
		if (a->s != s)
			continue;
		record_decision(s, a->id, "closed", "destroy", "the sandbox was destroyed", a->info);
		drop(a);
	}
}

static void on_down(struct sbx *s)
{
	for (struct approval *a = pending, *next; a; a = next) {
		next = a->next;
		if (a->s == s)
			drop(a);
	}
}

static const struct sbx_hooks approval_hooks = {.ending = on_ending, .down = on_down};

void approvals_start(void)
{
	sbx_hooks_add(&approval_hooks);
}

size_t approvals_pending(void)
{
	size_t n = 0;
	for (const struct approval *a = pending; a; a = a->next)
		n++;
	return n;
}
