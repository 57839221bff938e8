/* What each sandbox uses over time (GET /v1/sandboxes/{id}/metrics): CPU and memory from its
 * cgroup (v1 or v2, lib/cgroup.c through cordon_sandbox_stats()), and its disk from inside:
 * the agent's STATFS of /tmp, which is on the sandbox's scratch file system in every runtime.
 * One timer samples every live sandbox each USAGE_PERIOD_MS into a ring of USAGE_SAMPLES per
 * sandbox (five minutes), so memory is bounded by the number of sandboxes.
 *
 * The agent's numbers are the sandbox's word about itself: shown to its caller as they are,
 * clamped (used <= total), never used for a decision. One STATFS is outstanding at a time;
 * an agent that does not answer keeps its last disk figures. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/daemon.h"
#include "daemon/service.h"
#include "lib/frame.h"

#define USAGE_SAMPLES   60
#define USAGE_PERIOD_MS 5000
#define USAGE_FS_PATH   "/tmp"

struct usage_sample {
	uint64_t t_ms, cpu_ms, memory_bytes, disk_used, disk_total;
};

struct sbx_usage {
	struct chan ch;
	struct sbx *s;
	bool chan_open, pending;
	uint64_t disk_used, disk_total; /* the agent's last answer */
	struct usage_sample ring[USAGE_SAMPLES];
	size_t head, n;
};

static struct event *usage_timer;

static int usage_frame(struct chan *ch, const struct frame *f)
{
	struct sbx_usage *u = OWNER_OF(ch, struct sbx_usage, ch);
	struct frame_fs_usage fu;

	if (!u->pending)
		return -EPROTO; /* nothing was asked */
	u->pending = false;
	if (f->type == FRAME_ERROR)
		return 0;
	if (f->type != FRAME_FS_USAGE || frame_msg_parse(f->type, f->payload, f->len, &fu) < 0)
		return -EPROTO;
	u->disk_total = fu.total;
	u->disk_used = fu.used < fu.total ? fu.used : fu.total;
	return 0;
}

/* The sandbox is destroyed: the channel goes, the figures stay until it is reaped. */
static void usage_close(struct chan *ch)
{
	struct sbx_usage *u = OWNER_OF(ch, struct sbx_usage, ch);
	struct sbx *s = u->s;
	sbx_chan_del(s, ch);
	u->chan_open = false;
	u->pending = false;
}

static const struct chan_ops usage_chan = {.frame = usage_frame, .close = usage_close};

static bool sbx_live(const struct sbx *s)
{
	return !s->pooled && (s->state == SBX_READY || s->state == SBX_RUNNING);
}

static struct sbx_usage *usage_of(struct sbx *s)
{
	if (!s->usage && (s->usage = calloc(1, sizeof(*s->usage)))) {
		s->usage->s = s;
		sbx_chan_add(s, &s->usage->ch, &usage_chan);
		s->usage->chan_open = true;
	}
	return s->usage;
}

static struct usage_sample usage_now(struct sbx *s, const struct sbx_usage *u)
{
	struct cordon_stats st = {};
	(void)cordon_sandbox_stats(s->rt, &st);
	return (struct usage_sample){now_ms(), st.cpu_ms, st.memory_bytes, u->disk_used,
				     u->disk_total};
}

static void usage_sample(struct sbx *s)
{
	struct sbx_usage *u = usage_of(s);
	if (!u)
		return;
	u->ring[u->head] = usage_now(s, u);
	u->head = (u->head + 1) % USAGE_SAMPLES;
	u->n += u->n < USAGE_SAMPLES;
	/* A frozen agent answers nothing: ask again once it runs. */
	if (u->chan_open && !u->pending && !s->paused && !s->busy &&
	    sbx_send(s, FRAME_STATFS, u->ch.id,
		     &(struct frame_file){.path = USAGE_FS_PATH, .user = FRAME_USER_ROOT}) == 0)
		u->pending = true;
}

static void on_usage_tick(evutil_socket_t fd, short what, void *arg)
{
	for (struct sbx *s = D.sandboxes; s; s = s->next)
		if (sbx_live(s))
			usage_sample(s);
}

static void usage_final(struct sbx *s)
{
	free(s->usage);
	s->usage = NULL;
}

static const struct sbx_hooks usage_hooks = {.final = usage_final};

int usage_start(void)
{
	struct timeval tv = {USAGE_PERIOD_MS / 1000, USAGE_PERIOD_MS % 1000 * 1000};
	usage_timer = event_new(D.base, -1, EV_PERSIST, on_usage_tick, NULL);
	if (!usage_timer)
		return -ENOMEM;
	sbx_hooks_add(&usage_hooks);
	return event_add(usage_timer, &tv) < 0 ? -ENOMEM : 0;
}

/* One sample as JSON; CPU as a share of one CPU since @prev (NULL: none, 0). */
static json_t *sample_json(const struct usage_sample *x, const struct usage_sample *prev)
{
	char t[40];
	double pct = 0;
	if (prev && x->t_ms > prev->t_ms && x->cpu_ms >= prev->cpu_ms)
		pct = 100.0 * (double)(x->cpu_ms - prev->cpu_ms) / (double)(x->t_ms - prev->t_ms);
	return json_pack("{s:s, s:I, s:f, s:I, s:I, s:I}", "timestamp", iso_time(x->t_ms, t),
			 "cpu_ms", (json_int_t)x->cpu_ms, "cpu_pct", pct, "memory_bytes",
			 (json_int_t)x->memory_bytes, "disk_used_bytes", (json_int_t)x->disk_used,
			 "disk_total_bytes", (json_int_t)x->disk_total);
}

int svc_sandbox_metrics(struct sbx *s, json_t **ret, struct svc_err *err)
{
	struct sbx_usage *u = usage_of(s);
	if (!u)
		return svc_fail(err, API_ERR_INTERNAL, "out of memory");
	json_t *samples = json_array();
	const struct usage_sample *prev = NULL;
	for (size_t i = 0; i < u->n; i++) {
		const struct usage_sample *x =
			&u->ring[(u->head + USAGE_SAMPLES - u->n + i) % USAGE_SAMPLES];
		json_array_append_new(samples, sample_json(x, prev));
		prev = x;
	}
	struct usage_sample now = usage_now(s, u);
	*ret = json_pack("{s:s, s:i, s:o, s:o}", "id", s->id, "interval_s",
			 USAGE_PERIOD_MS / 1000, "current", sample_json(&now, prev), "samples",
			 samples);
	if (!*ret)
		return svc_fail(err, API_ERR_INTERNAL, "out of memory");
	return 0;
}
