/* Prometheus text exposition of cordond's counters and latency histograms. */
#include <stdio.h>
#include <string.h>

#include "daemon/daemon.h"

static uint64_t counters[_M_MAX];

static const struct {
	const char *name, *help;
} counter_info[_M_MAX] = {
	[M_NET_BLOCKED] = {"cordon_net_blocked_total", "Network attempts from sandboxes that were blocked."},
	[M_NET_ALLOWED] = {"cordon_net_allowed_total", "Network connections and DNS queries from sandboxes that were allowed."},
	[M_CREATES] = {"cordon_sandbox_creates_total", "Sandboxes handed to clients."},
	[M_CREATE_FAILURES] = {"cordon_sandbox_create_failures_total", "Sandbox creations that failed."},
	[M_DESTROYS] = {"cordon_sandbox_destroys_total", "Sandboxes destroyed."},
	[M_TIMEOUTS] = {"cordon_sandbox_timeouts_total", "Sandboxes destroyed at their deadline."},
	[M_PROC_TIMEOUTS] = {"cordon_process_timeouts_total", "Processes killed at their timeout."},
	[M_OOM_KILLS] = {"cordon_oom_kills_total", "Processes killed by a sandbox's memory limit."},
	[M_AUDIT_EVENTS] = {"cordon_audit_events_total", "Audit records written."},
	[M_EXECS] = {"cordon_process_starts_total", "Processes started through the API."},
	[M_AGENT_ERRORS] = {"cordon_agent_errors_total", "Sandboxes destroyed for a broken or hostile agent."},
	[M_HTTP_ERRORS] = {"cordon_http_errors_total", "API requests answered with an error."},
	[M_PAUSES] = {"cordon_sandbox_pauses_total", "Sandboxes paused."},
	[M_SNAPSHOTS] = {"cordon_snapshots_total", "Snapshots made."},
	[M_FORKS] = {"cordon_forks_total", "Forks (one snapshot, N children)."},
	[M_PAUSE_TIMEOUTS] = {"cordon_pause_timeouts_total", "Sandboxes destroyed for staying paused past --max-pause."},
	[M_SECRET_USES] = {"cordon_secret_uses_total", "Requests into which the proxy put a secret's value (counted per secret)."},
	[M_SECRET_MISUSE] = {"cordon_secret_misuse_total", "Connections refused for a secret's placeholder where that secret does not go."},
};

/* Buckets in seconds, from 100 us to 10 s. */
static const double bounds[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
				0.025,	0.05,	 0.1,	 0.25,	0.5,	1,     2.5, 10};
#define N_BOUNDS (sizeof(bounds) / sizeof(bounds[0]))

static struct {
	uint64_t bucket[N_BOUNDS], count;
	double sum;
} hist[_H_MAX];

static const struct {
	const char *name, *help;
} hist_info[_H_MAX] = {
	[H_CREATE] = {"cordon_create_latency_seconds", "Time from a create request to a ready sandbox."},
	[H_EXEC] = {"cordon_exec_latency_seconds", "Time from an exec request to its result."},
	[H_SNAPSHOT] = {"cordon_snapshot_latency_seconds", "Time to copy a sandbox's snapshot."},
};

void metric_inc(enum metric m)
{
	counters[m]++;
}

void metric_observe(enum histogram h, double seconds)
{
	for (size_t i = 0; i < N_BOUNDS; i++)
		if (seconds <= bounds[i])
			hist[h].bucket[i]++;
	hist[h].count++;
	hist[h].sum += seconds;
}

char *metrics_render(void)
{
	char *buf = NULL;
	size_t size = 0;
	FILE *f = open_memstream(&buf, &size);
	if (!f)
		return NULL;
	fprintf(f, "# HELP cordon_sandboxes_live Sandboxes that exist, pooled ones included.\n"
		   "# TYPE cordon_sandboxes_live gauge\ncordon_sandboxes_live %zu\n", D.n_live);
	fprintf(f, "# HELP cordon_pool_ready Ready sandboxes waiting in the warm pool.\n"
		   "# TYPE cordon_pool_ready gauge\ncordon_pool_ready %zu\n", D.n_pool_ready);
	fprintf(f, "# HELP cordon_approvals_pending Requests the egress proxy holds for a decision.\n"
		   "# TYPE cordon_approvals_pending gauge\ncordon_approvals_pending %zu\n", approvals_pending());
	size_t n_snap;
	uint64_t snap_bytes;
	snapstore_usage(&n_snap, &snap_bytes);
	fprintf(f, "# HELP cordon_snapshots Snapshots kept on disk.\n"
		   "# TYPE cordon_snapshots gauge\ncordon_snapshots %zu\n", n_snap);
	fprintf(f, "# HELP cordon_snapshot_bytes Bytes the snapshots take on disk.\n"
		   "# TYPE cordon_snapshot_bytes gauge\ncordon_snapshot_bytes %llu\n",
		(unsigned long long)snap_bytes);
	for (int m = 0; m < _M_MAX; m++)
		fprintf(f, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", counter_info[m].name,
			counter_info[m].help, counter_info[m].name, counter_info[m].name,
			(unsigned long long)counters[m]);
	for (int h = 0; h < _H_MAX; h++) {
		const char *n = hist_info[h].name;
		fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", n, hist_info[h].help, n);
		for (size_t i = 0; i < N_BOUNDS; i++)
			fprintf(f, "%s_bucket{le=\"%g\"} %llu\n", n, bounds[i],
				(unsigned long long)hist[h].bucket[i]);
		fprintf(f, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", n,
			(unsigned long long)hist[h].count, n, hist[h].sum, n,
			(unsigned long long)hist[h].count);
	}
	events_metrics(f);
	webhook_metrics(f);
	fclose(f);
	return buf;
}
