/* The sandbox object and its agent link: the runtime started, the agent connection, frames
 * routed to the channel that owns them, the audit records and their listeners, the
 * deadline, destruction, and recovery after a crash. Who makes sandboxes for clients
 * (create.c) and who gives them a network (network.c) hear of it through hooks; the
 * processes and file operations on a sandbox, through the channel table.
 *
 * A sandbox is built asynchronously: cordon_sandbox_start() returns while the child builds
 * the jail; its setup fd wakes us when cordon-init runs; a HELLO/HELLO_OK exchange with the
 * agent makes it ready. Pooled sandboxes wait in that state for a create request to claim
 * them. Destruction is SIGKILL to the sandbox's PID 1 (the pid namespace takes everything
 * with it); the pidfd then wakes us to reap it and remove its cgroup and uid slot.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>

#include "basic/log.h"
#include "audit/audit.h"
#include "daemon/daemon.h"
#include "image/store.h"
#include "lib/frame.h"

#define AGENT_READ_HIGH (4u << 20)

static void sbx_final(struct sbx *s);

static struct sbx **id_bucket(const char *id)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	for (; *id; id++)
		h = (h ^ (uint8_t)*id) * 16777619u;
	return &D.by_id[h & (SBX_ID_BUCKETS - 1)];
}

/* ---- the disks' ledger (sbx_disk_growth()) ---- */

#define DISK_LOOK_MS 1000u /* a disk's use is looked at (an fstat) at most this often */
#define DISK_LOOKS 8u	   /* and at most this many disks per call */

static void disk_unlink(struct sbx *s)
{
	*(s->disk_prev ? &s->disk_prev->disk_next : &D.disks) = s->disk_next;
	*(s->disk_next ? &s->disk_next->disk_prev : &D.disks_tail) = s->disk_prev;
	s->disk_next = s->disk_prev = NULL;
}

static void disk_append(struct sbx *s)
{
	s->disk_next = NULL;
	s->disk_prev = D.disks_tail;
	*(s->disk_prev ? &s->disk_prev->disk_next : &D.disks) = s;
	D.disks_tail = s;
}

static void disk_prepend(struct sbx *s)
{
	s->disk_prev = NULL;
	s->disk_next = D.disks;
	*(s->disk_next ? &s->disk_next->disk_prev : &D.disks_tail) = s;
	D.disks = s;
}

static void disk_track(struct sbx *s)
{
	s->disk_counted = s->spec.disk_bytes;
	s->disk_used = s->disk_used_ms = 0;
	D.disk_size_sum += s->disk_counted;
	disk_prepend(s); /* never looked at: looked at first */
}

static void disk_untrack(struct sbx *s)
{
	disk_unlink(s);
	D.disk_size_sum -= s->disk_counted;
	D.disk_used_sum -= s->disk_used;
}

/* @s's use looked at again; it goes to the end of the order. */
static void disk_look(struct sbx *s, uint64_t now)
{
	uint64_t used = cordon_sandbox_disk_used(s->rt);
	if (used > s->disk_counted)
		used = s->disk_counted;
	D.disk_used_sum = D.disk_used_sum - s->disk_used + used;
	s->disk_used = used;
	s->disk_used_ms = now;
	disk_unlink(s);
	disk_append(s);
}

uint64_t sbx_disk_growth(uint64_t now)
{
	for (unsigned i = 0; i < DISK_LOOKS && D.disks; i++) {
		struct sbx *s = D.disks;
		if (s->disk_used_ms && now - s->disk_used_ms < DISK_LOOK_MS)
			break; /* the oldest look is recent: so are the others */
		disk_look(s, now);
	}
	return D.disk_size_sum - D.disk_used_sum;
}

static void list_add(struct sbx *s)
{
	struct sbx **b = id_bucket(s->id);
	s->prev = D.sandboxes_tail;
	s->next = NULL;
	*(s->prev ? &s->prev->next : &D.sandboxes) = s;
	D.sandboxes_tail = s;
	s->id_next = *b;
	*b = s;
	if (s->pooled)
		sbx_pool_link(s);
	s->listed = true;
	disk_track(s);
	D.n_live++;
}

/* @s->next stays: a loop that destroys what it walks may still take the next step. */
static void list_del(struct sbx *s)
{
	if (!s->listed)
		return;
	*(s->prev ? &s->prev->next : &D.sandboxes) = s->next;
	*(s->next ? &s->next->prev : &D.sandboxes_tail) = s->prev;
	for (struct sbx **p = id_bucket(s->id); *p; p = &(*p)->id_next)
		if (*p == s) {
			*p = s->id_next;
			break;
		}
	sbx_pool_unlink(s);
	disk_untrack(s);
	s->listed = false;
	D.n_live--;
}

/* Oldest first: a claim takes the sandbox that has waited longest. */
void sbx_pool_link(struct sbx *s)
{
	s->pool_next = NULL;
	s->pool_prev = D.pool_tail;
	*(s->pool_prev ? &s->pool_prev->pool_next : &D.pool) = s;
	D.pool_tail = s;
}

void sbx_pool_unlink(struct sbx *s)
{
	if (!s->pool_prev && D.pool != s)
		return; /* not pooled */
	*(s->pool_prev ? &s->pool_prev->pool_next : &D.pool) = s->pool_next;
	*(s->pool_next ? &s->pool_next->pool_prev : &D.pool_tail) = s->pool_prev;
	s->pool_next = s->pool_prev = NULL;
}

struct sbx *sbx_lookup(const char *id)
{
	for (struct sbx *s = *id_bucket(id); s; s = s->id_next)
		if (strcmp(s->id, id) == 0)
			return s;
	return NULL;
}

struct sbx *sbx_find(const struct api_key *principal, const char *id)
{
	if (!id || !valid_id(id))
		return NULL;
	struct sbx *s = sbx_lookup(id);
	if (!s || s->pooled)
		return NULL;
	return !principal || s->owner == principal ? s : NULL;
}

/* For records of outcomes (process.exit, net.decision), which come after the fact and cannot
 * be refused: a failure is logged by sbx_audit_rc() and the torn tail it may leave is
 * repaired before the next record. */
void sbx_audit(struct sbx *s, const char *event, json_t *fields)
{
	sbx_audit_rc(s, event, fields);
}

static int audit_prepare(struct sbx *s)
{
	struct cordon_err err = {};
	char name[SBX_ID_LEN + 8];
	if (s->audit)
		return 0;
	snprintf(name, sizeof(name), "%s.jsonl", s->id);
	s->audit = audit_open(D.audit_dirfd, name, &err);
	if (!s->audit) {
		log_error("audit %s: %s", s->id, err.msg);
		return err.code ? err.code : -EIO;
	}
	return 0;
}

/* A sandbox that has no record at all (a pooled one nobody claimed, or one whose create was
 * refused because its record could not be written) leaves no empty audit file behind. */
static bool audit_discard(struct sbx *s)
{
	char name[SBX_ID_LEN + 8];
	if (!s->audit || !audit_empty(s->audit))
		return false;
	snprintf(name, sizeof(name), "%s.jsonl", s->id);
	unlinkat(D.audit_dirfd, name, 0);
	return true;
}

/* The last record. A destroy cannot be refused, so a record that cannot be written now is
 * written when there is space (recover.c); a written one seals the log. */
static void audit_final(struct sbx *s, const char *reason)
{
	if (sbx_audit_rc(s, AUDIT_SANDBOX_DESTROY, json_pack("{s:s}", "reason", reason)) == 0) {
		if (audit_seal(s->audit) < 0)
			log_warning("audit %s: cannot seal the log: %m", s->id);
		return;
	}
	if (audit_discard(s))
		return; /* nothing was recorded, so nothing was done */
	s->audit = audit_free(s->audit); /* the late writer opens it again */
	audit_late(s->id, reason);
}

/* Writes one audit record for @s; takes @fields. The host writes before it acts. */
int sbx_audit_rc(struct sbx *s, const char *event, json_t *fields)
{
	_cleanup_(json_decrefp) json_t *f = fields ? fields : json_object();
	int r = audit_prepare(s);
	if (r < 0)
		return r;
	r = audit_append(s->audit, s->id, event, f);
	if (r < 0) {
		log_error("audit %s %s: %s", s->id, event, strerror(-r));
		return r;
	}
	metric_inc(M_AUDIT_EVENTS);
	for (struct audit_listener *l = s->listeners, *next; l; l = next) {
		next = l->next; /* a listener that falls behind leaves */
		l->record(l);
	}
	return 0;
}

void sbx_listen(struct sbx *s, struct audit_listener *l)
{
	l->next = s->listeners;
	s->listeners = l;
}

void sbx_unlisten(struct sbx *s, struct audit_listener *l)
{
	for (struct audit_listener **p = &s->listeners; *p; p = &(*p)->next)
		if (*p == l) {
			*p = l->next;
			return;
		}
}

/* Channel ids are never reused in a sandbox's life: a late frame for a closed channel is a
 * protocol error (but its ERROR: on_frame()), never another owner's. */
void sbx_chan_add(struct sbx *s, struct chan *ch, const struct chan_ops *ops)
{
	*ch = (struct chan){.id = s->next_chan++, .ops = ops, .next = s->chans};
	s->chans = ch;
}

void sbx_chan_del(struct sbx *s, struct chan *ch)
{
	for (struct chan **p = &s->chans; *p; p = &(*p)->next)
		if (*p == ch) {
			*p = ch->next;
			return;
		}
}

static struct chan *chan_find(struct sbx *s, uint32_t id)
{
	for (struct chan *ch = s->chans; ch; ch = ch->next)
		if (ch->id == id)
			return ch;
	return NULL;
}

/* Every channel's owner answers its waiting client and goes; then every audit follower. */
static void channels_close(struct sbx *s)
{
	while (s->chans)
		s->chans->ops->close(s->chans);
	while (s->listeners)
		s->listeners->end(s->listeners);
}

json_t *sbx_json(const struct sbx *s)
{
	static const char *const states[] = {"creating", "ready", "running", "destroyed"};
	char created[40], expires[40];
	enum sbx_state st = s->state == SBX_RUNNING && !s->used ? SBX_READY : s->state;
	/* Paused, the deadline is what is left of the TTL from now (it moves until resumed). */
	uint64_t deadline = s->paused ? now_ms() + s->ttl_left_ms : s->deadline_ms;
	json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:I, s:O, s:O, s:O}",
			      "id", s->id, "template", s->template_name[0] ? s->template_name : "host",
			      "runtime", s->runtime ? s->runtime : "jail", "state",
			      s->paused ? "paused" : states[st], "created_at",
			      iso_time(s->created_ms, created), "expires_at",
			      iso_time(deadline, expires), "timeout_s", (json_int_t)s->timeout_s,
			      "limits", s->limits, "network", s->network, "metadata", s->metadata);
	if (j && s->from_snapshot[0])
		json_object_set_new(j, "snapshot", json_string(s->from_snapshot));
	if (j && s->parent[0])
		json_object_set_new(j, "parent", json_string(s->parent));
	if (j && s->secrets) /* names and hosts, never a value or a placeholder */
		json_object_set_new(j, "secrets", secrets_public_json(s->secrets));
	if (j)
		json_object_set_new(j, "volumes", s->volumes ? json_incref(s->volumes) : json_array());
	return j;
}

int sbx_send(struct sbx *s, uint16_t type, uint32_t chan, const void *msg)
{
	if (!s->agent)
		return -ENOTCONN;
	ssize_t n = frame_build_size(type, msg);
	if (n < 0)
		return n;
	struct evbuffer *out = bufferevent_get_output(s->agent);
	bool idle = evbuffer_get_length(out) == 0;
	struct evbuffer_iovec v;
	if (evbuffer_reserve_space(out, n, &v, 1) < 1)
		return -ENOMEM;
	ssize_t m = frame_build(v.iov_base, v.iov_len, type, chan, msg);
	if (m < 0)
		return m;
	/* Nothing queued before it: straight to the socket. Queued, it would cost the loop an
	 * iteration (EPOLLOUT armed, waited for, disarmed) on every request to the agent. What
	 * the socket does not take now, or any error, goes the bufferevent's way as before; the
	 * part it took is not committed at all (the bufferevent freezes the start of its output:
	 * a drain there fails). */
	ssize_t sent = idle ? write(bufferevent_getfd(s->agent), v.iov_base, m) : 0;
	if (sent == m)
		return 0;
	if (sent > 0)
		memmove(v.iov_base, (char *)v.iov_base + sent, m - sent);
	v.iov_len = m - (sent > 0 ? sent : 0);
	evbuffer_commit_space(out, &v, 1);
	return 0;
}

/* libevent counts a timer from the time it cached at the start of the loop's iteration, which
 * is late by what the iteration did before (36 ms were seen under load): the cache is brought
 * up to date first, and on_ttl() checks the clock anyway. */
void sbx_arm_ttl(struct sbx *s)
{
	event_base_update_cache_time(D.base);
	uint64_t now = now_ms();
	uint64_t left = s->deadline_ms > now ? s->deadline_ms - now : 0;
	struct timeval tv = {left / 1000, left % 1000 * 1000};
	evtimer_add(s->ttl_ev, &tv);
}

/* ---- hooks: who makes sandboxes (create.c) and who gives them a network (network.c) ---- */

static const struct sbx_hooks *hooks[8];
static size_t n_hooks;

void sbx_hooks_add(const struct sbx_hooks *h)
{
	if (n_hooks < ELEMENTSOF(hooks))
		hooks[n_hooks++] = h;
}

/* A sandbox made for a client is up: its maker hands it out (or runs its template's START
 * and READY first). */
static int maker_up(struct sbx *s)
{
	for (size_t i = 0; i < n_hooks; i++)
		if (hooks[i]->up)
			return hooks[i]->up(s);
	return 0;
}

/* ---- destruction ---- */

void sbx_destroy(struct sbx *s, const char *reason)
{
	if (s->state == SBX_DESTROYED)
		return;
	if (s->pooled)
		(s->state == SBX_READY ? D.n_pool_ready-- : D.n_pool_creating--);
	if (!s->pooled && s->owner)
		s->owner->live--;
	s->state = SBX_DESTROYED;
	s->end_reason = reason;
	for (size_t i = 0; i < n_hooks && !s->pooled; i++) /* its last records */
		if (hooks[i]->ending)
			hooks[i]->ending(s);
	if (!s->pooled) {
		audit_final(s, reason);
		event_raise(EVK_SANDBOX_DESTROYED, s, json_pack("{s:s}", "reason", reason));
	} else {
		audit_discard(s);
	}
	list_del(s);
	state_delete(s->id);
	metric_inc(M_DESTROYS);
	for (size_t i = 0; i < n_hooks; i++) /* its waiting creates answered, its link forgotten */
		if (hooks[i]->down)
			hooks[i]->down(s);
	s->secrets = secrets_free(s->secrets); /* the proxy dropped them with the address */
	channels_close(s);
	s->agent = loop_bev_free(s->agent);
	evtimer_del(s->ttl_ev);
	evtimer_del(s->hello_ev);
	if (s->pause_ev)
		evtimer_del(s->pause_ev);
	if (s->ready_ev)
		evtimer_del(s->ready_ev);
	if (s->setup_ev)
		event_del(s->setup_ev);
	if (s->rt) {
		D.n_dying++;
		if (!s->busy) /* else at sbx_busy_end(): the handle is the snapshot thread's */
			cordon_sandbox_kill(s->rt);
	} else {
		sbx_final(s);
	}
	for (size_t i = 0; i < n_hooks && !D.stopping; i++)
		if (hooks[i]->after)
			hooks[i]->after(); /* the pool refilled */
}

void sbx_agent_failed(struct sbx *s, const char *why)
{
	log_warning("sandbox %s: agent: %s; destroying it", s->id, why);
	snprintf(s->end_why, sizeof(s->end_why), "%s", why);
	metric_inc(M_AGENT_ERRORS);
	if (!s->pooled)
		event_raise(EVK_AGENT_VIOLATION, s, json_pack("{s:s}", "why", why));
	sbx_destroy(s, "agent_failed");
}

/* The sandbox is gone: its template version may go too, if it was the last holder of one
 * that a rebuild or a removal left behind (deleted off the loop). */
void version_free(struct store_version *v)
{
	store_version_close(v, true);
	free(v);
}

/* The runtime's part is gone (its cgroup, slot and mounts): what is left is ours. */
static void sbx_finish(void *arg)
{
	struct sbx *s = arg;
	for (size_t i = 0; i < n_hooks; i++) /* what its mounts held can go */
		if (hooks[i]->final)
			hooks[i]->final(s);
	json_decref(s->volumes);
	free(s->dec);
	audit_free(s->audit);
	json_decref(s->limits);
	json_decref(s->metadata);
	json_decref(s->network);
	json_decref(s->start);
	json_decref(s->ready);
	free(s->workdir);
	secrets_free(s->secrets);
	version_free(s->version);
	for (size_t i = 0; i < s->n_env; i++)
		free(s->env[i]);
	free(s->env);
	free(s);
}

/* PID 1 is gone: reap it, remove its cgroup and slot (on the teardown thread), free
 * everything. */
static void sbx_final(struct sbx *s)
{
	if (s->busy) {
		s->final_wait = true; /* sbx_busy_end() comes back here */
		return;
	}
	/* The events first: the jail closes the fds they watch. */
	struct event *evs[] = {s->setup_ev, s->exit_ev, s->ttl_ev, s->hello_ev, s->ready_ev,
			       s->pause_ev};
	for (size_t i = 0; i < ELEMENTSOF(evs); i++)
		loop_event_free(evs[i]);
	s->setup_ev = s->exit_ev = s->ttl_ev = s->hello_ev = s->ready_ev = s->pause_ev = NULL;
	struct cordon_sandbox *rt = TAKE_PTR(s->rt);
	if (rt && teardown_free(rt, sbx_finish, s) == 0)
		return;
	cordon_sandbox_free(rt);
	sbx_finish(s);
}

static void on_exit_ev(evutil_socket_t fd, short what, void *arg)
{
	struct sbx *s = arg;
	if (s->state != SBX_DESTROYED)
		sbx_destroy(s, "exited");
	D.n_dying--;
	sbx_final(s);
}

void sbx_busy_end(struct sbx *s)
{
	s->busy = false;
	if (s->state != SBX_DESTROYED)
		return;
	if (s->final_wait)
		sbx_final(s);
	else if (s->rt)
		cordon_sandbox_kill(s->rt);
}

static void on_ttl(evutil_socket_t fd, short what, void *arg)
{
	struct sbx *s = arg;
	if (now_ms() < s->deadline_ms) { /* early: never before the expires_at it was given */
		sbx_arm_ttl(s);
		return;
	}
	metric_inc(M_TIMEOUTS);
	event_raise(EVK_TIMEOUT, s, json_pack("{s:s, s:I}", "what", "sandbox", "timeout_s", (json_int_t)s->timeout_s));
	sbx_audit(s, AUDIT_SANDBOX_TIMEOUT, json_pack("{s:I}", "timeout_s", (json_int_t)s->timeout_s));
	sbx_destroy(s, "timeout");
}

/* ---- pause ---- */

static void on_pause_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct sbx *s = arg;
	metric_inc(M_PAUSE_TIMEOUTS);
	sbx_audit(s, AUDIT_SANDBOX_PAUSE_TIMEOUT,
		  json_pack("{s:I}", "max_pause_s", (json_int_t)D.cfg.max_pause_s));
	sbx_destroy(s, "pause_timeout");
}

bool sbx_watchdog_defer(struct sbx *s, struct event *ev)
{
	if (!s->paused && !s->busy)
		return false;
	struct timeval tv = {AGENT_GRACE_MS / 1000, AGENT_GRACE_MS % 1000 * 1000};
	evtimer_add(ev, &tv);
	return true;
}

/* The TTL stops while paused: what is left of it is kept and counts again from the resume. */
int sbx_pause(struct sbx *s, bool pause)
{
	if (pause == s->paused)
		return 0;
	if (pause && !s->pause_ev && !(s->pause_ev = evtimer_new(D.base, on_pause_timeout, s)))
		return -ENOMEM;
	int r = pause ? cordon_sandbox_pause(s->rt) : cordon_sandbox_resume(s->rt);
	if (r < 0)
		return r;
	uint64_t now = now_ms();
	s->paused = pause;
	if (pause) {
		s->ttl_left_ms = s->deadline_ms > now ? s->deadline_ms - now : 0;
		s->paused_ms = now;
		evtimer_del(s->ttl_ev);
		struct timeval tv = {(time_t)D.cfg.max_pause_s, 0};
		evtimer_add(s->pause_ev, &tv);
	} else {
		evtimer_del(s->pause_ev);
		s->deadline_ms = now + s->ttl_left_ms;
		sbx_arm_ttl(s);
	}
	state_put(s);
	return 0;
}

/* ---- the agent connection ---- */

static int on_frame(struct sbx *s, const struct frame *f)
{
	switch (f->type) {
	case FRAME_HELLO_OK:
		if (s->state != SBX_CREATING || f->channel != 0)
			return -EPROTO;
		evtimer_del(s->hello_ev);
		/* OOM kills from here on are its processes'; for a pooled one read now, not at
		 * its claim, which is a request's path */
		s->oom_base = cordon_sandbox_oom_kills(s->rt);
		if (s->pooled) {
			D.n_pool_creating--;
			D.n_pool_ready++;
			s->state = SBX_READY;
			audit_prepare(s); /* creating the file (and syncing its directory) costs */
			for (size_t i = 0; i < n_hooks; i++)
				if (hooks[i]->pooled)
					hooks[i]->pooled(s);
		} else {
			s->state = SBX_RUNNING;
			/* made when it is up (a microvm's boot takes seconds): its TTL counts from then */
			s->created_ms = now_ms();
			s->deadline_ms = s->created_ms + s->timeout_s * 1000;
			sbx_arm_ttl(s);
			return maker_up(s);
		}
		return 0;
	case FRAME_PONG:
		return 0;
	case FRAME_ERROR:
		if (f->channel == 0)
			return -EPROTO; /* the agent gave up on the protocol */
		break;
	default:
		break;
	}
	if (s->state == SBX_CREATING)
		return -EPROTO;
	struct chan *ch = chan_find(s, f->channel);
	/* The ERROR of a request that crossed its channel's end (a client's stdin close or
	 * signal sent as the process exited: the agent answers ESRCH once it reaped it) comes
	 * after the channel is gone; ids are never reused, so it is nobody's. */
	if (!ch && f->type == FRAME_ERROR && f->channel < s->next_chan)
		return 0;
	return ch ? ch->ops->frame(ch, f) : -EPROTO; /* an answer nobody asked for */
}

static void on_agent_read(struct bufferevent *bev, void *arg)
{
	struct sbx *s = arg;
	struct evbuffer *in = bufferevent_get_input(bev);

	while (evbuffer_get_length(in) > 0 || frame_decoder_pending(s->dec) > 0) {
		uint8_t *space;
		size_t room = frame_decoder_space(s->dec, &space);
		if (room > 0 && evbuffer_get_length(in) > 0)
			frame_decoder_commit(s->dec, evbuffer_remove(in, space, room));
		struct frame f;
		int n, handled = 0;
		while ((n = frame_decoder_next(s->dec, &f)) == 1) {
			handled++;
			if (on_frame(s, &f) < 0) {
				sbx_agent_failed(s, "a frame that breaks the protocol");
				return;
			}
			if (s->state == SBX_DESTROYED)
				return;
		}
		if (n < 0) {
			sbx_agent_failed(s, "an unreadable frame");
			return;
		}
		if (!handled && (room == 0 || evbuffer_get_length(in) == 0))
			break;
	}
}

static void on_agent_event(struct bufferevent *bev, short what, void *arg)
{
	struct sbx *s = arg;
	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
		sbx_agent_failed(s, "connection closed");
}

static void on_hello_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct sbx *s = arg;
	sbx_agent_failed(s, s->agent ? "no HELLO_OK in time" : "the jail's setup did not end in time");
}

static int agent_connect(struct sbx *s)
{
	int fd = cordon_sandbox_agent_fd(s->rt);
	evutil_make_socket_nonblocking(fd);
	s->dec = malloc(sizeof(*s->dec)); /* pages are touched only as frames arrive */
	s->agent = loop_bev_new(fd, 0);
	if (!s->dec || !s->agent)
		return -ENOMEM;
	frame_decoder_init(s->dec, FRAME_TO_HOST);
	bufferevent_setcb(s->agent, on_agent_read, NULL, on_agent_event, s);
	bufferevent_setwatermark(s->agent, EV_READ, 0, AGENT_READ_HIGH);
	bufferevent_enable(s->agent, EV_READ | EV_WRITE);
	struct frame_hello h = {.version = FRAME_PROTOCOL_VERSION};
	return sbx_send(s, FRAME_HELLO, 0, &h); /* hello_ev runs since sbx_adopt() */
}

static void on_setup(evutil_socket_t fd, short what, void *arg)
{
	struct sbx *s = arg;
	struct cordon_err err = {};
	int r = cordon_sandbox_finish(s->rt, &err);
	if (r == -EAGAIN)
		return;
	/* Unwatched, then closed: never the other way round (basic/fdwatch.h). */
	s->setup_ev = loop_event_free(s->setup_ev);
	cordon_sandbox_setup_close(s->rt);
	if (r < 0 || (r = agent_connect(s)) < 0) {
		snprintf(s->end_why, sizeof(s->end_why), "%.159s", err.msg[0] ? err.msg : strerror(-r));
		log_error("sandbox %s: setup failed: %s", s->id, s->end_why);
		s->setup_err = r;
		metric_inc(M_CREATE_FAILURES);
		sbx_destroy(s, "setup_failed");
	}
}

/* ---- creation ---- */

struct sbx *sbx_alloc(bool pooled, uint64_t disk_bytes)
{
	struct sbx *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	make_id(s->id);
	s->pooled = pooled;
	s->state = SBX_CREATING;
	s->created_ms = now_ms();
	s->next_chan = 1;
	cordon_spec_init(&s->spec);
	s->spec.disk_bytes = disk_bytes;
	s->spec.timeout_ms = 0; /* the daemon's own timer is the deadline */
	s->limits = json_pack("{s:f, s:i, s:i, s:i}", "cpus", 1.0, "memory_mb", 512, "pids", 256,
			      "disk_mb", (int)(disk_bytes >> 20));
	s->metadata = json_object();
	s->network = json_pack("{s:s, s:[]}", "policy", "deny", "allow");
	s->ttl_ev = evtimer_new(D.base, on_ttl, s);
	s->hello_ev = evtimer_new(D.base, on_hello_timeout, s);
	if (!s->limits || !s->metadata || !s->ttl_ev || !s->hello_ev) {
		sbx_final(s);
		return NULL;
	}
	return s;
}

/* Takes a started jail into the event loop: its setup fd and pidfd are watched from now on. */
void sbx_adopt(struct sbx *s)
{
	s->setup_ev = loop_event_new(cordon_sandbox_setup_fd(s->rt), EV_READ | EV_PERSIST,
				     on_setup, s);
	s->exit_ev = loop_event_new(cordon_sandbox_pidfd(s->rt), EV_READ, on_exit_ev, s);
	event_add(s->setup_ev, NULL);
	event_add(s->exit_ev, NULL);
	/* One deadline for setup and HELLO_OK: no sandbox stays "creating" for ever (a
	 * microVM's boot may take longer than the usual). */
	uint64_t ms = cordon_sandbox_setup_ms(s->rt, AGENT_HELLO_MS);
	struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
	evtimer_add(s->hello_ev, &tv);
	list_add(s);
	if (s->pooled)
		D.n_pool_creating++;
}

struct sbx *sbx_new(bool pooled, const struct sbx_start *st, struct cordon_err *err)
{
	struct sbx *s = sbx_alloc(pooled, st->disk_bytes);
	if (!s) {
		cordon_err_setf(err, -ENOMEM, "out of memory");
		return NULL;
	}
	s->spec.rootfs = st->rootfs; /* read by the child, which has its own copy, before start returns */
	s->spec.runtime = st->runtime;
	s->spec.cached_only = true; /* on the loop: an image to make first is the creator's (create.c) */
	if (st->memory_bytes) /* a microvm's guest has them from its boot */
		s->spec.memory_bytes = st->memory_bytes;
	if (st->cpus_milli)
		s->spec.cpus_milli = st->cpus_milli;
	if (st->spec_hook)
		st->spec_hook(&s->spec, st->runtime);
	if (st->bind) /* opened by the child before start returns, like the rootfs */
		s->spec.binds[s->spec.n_binds++] = *st->bind;
	for (size_t i = 0; i < st->n_vols && i < CORDON_MAX_VOLUMES; i++) /* read before start returns */
		s->spec.volumes[s->spec.n_volumes++] = st->vols[i];
	/* One made from a snapshot is named after itself: a fork's children differ from each
	 * other and from their parent (which is "cordon", as every sandbox from a template). */
	if (st->from >= 0)
		s->spec.hostname = s->id;
	int r = st->from >= 0 ? cordon_sandbox_restore(&s->spec, st->from, &s->rt, err)
			      : cordon_sandbox_start(&s->spec, &s->rt, err);
	if (r < 0) {
		sbx_final(s);
		return NULL;
	}
	s->runtime = cordon_sandbox_runtime(s->rt);
	sbx_adopt(s);
	return s;
}

int sbx_set_timeout(struct sbx *s, uint64_t timeout_s)
{
	s->timeout_s = timeout_s;
	if (s->paused) { /* counts from the resume */
		s->ttl_left_ms = timeout_s * 1000;
		state_put(s);
		return 0;
	}
	s->deadline_ms = now_ms() + timeout_s * 1000;
	sbx_arm_ttl(s);
	state_put(s);
	return 0;
}

/* ---- start and stop of the daemon ---- */

struct left {
	char **ids;
	size_t n;
};

static void recover_one(const char *id, void *data)
{
	/* The sandbox died with the daemon that made it (its PID 1 had a parent-death signal);
	 * what it left in the kernel (a cgroup) went in the sweep. Its audit log gets its
	 * destroy record in audit_recover(), with every other log that lacks one. */
	struct left *l = data;
	char **v = realloc(l->ids, (l->n + 1) * sizeof(*v));
	if (!v || !(v[l->n] = strdup(id))) {
		l->ids = v ? v : l->ids;
		return;
	}
	l->ids = v;
	l->n++;
	log_info("sandbox %s: left by a previous cordond, destroyed", id);
}

int daemon_recover(void)
{
	struct left l = {};
	cordon_sweep_stale();
	int r = state_recover(recover_one, &l);
	int q = audit_recover(l.ids, l.n);
	for (size_t i = 0; i < l.n; i++)
		free(l.ids[i]);
	free(l.ids);
	return r < 0 ? r : q;
}

void daemon_shutdown(void)
{
	D.stopping = true;
	while (D.sandboxes)
		sbx_destroy(D.sandboxes, "shutdown");
	audit_late_flush();
	if (audit_late_pending())
		log_error("%zu destroy records could not be written; the next start writes them",
			  audit_late_pending());
}
