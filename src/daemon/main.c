/* cordond: owns the sandboxes of this host and serves the API (docs/api/openapi.yaml). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "basic/log.h"
#include "basic/secmem.h"
#include "audit/audit.h"
#include "daemon/daemon.h"

struct daemon D = {.audit_dirfd = -1, .snap_dirfd = -1};

static int load_keys(const char *path)
{
	_cleanup_fclose_ FILE *f = fopen(path, "re");
	char line[512];
	if (!f) {
		log_error("api keys '%s': %m", path);
		return -errno;
	}
	for (int lineno = 1; fgets(line, sizeof(line), f); lineno++) {
		char key[128], name[64], perm[64] = "";
		unsigned long long max = 0;
		char *p = line + strspn(line, " \t");
		if (*p == '#' || *p == '\n' || *p == '\0')
			continue;
		int got = sscanf(p, "%127s %63s %llu %63s", key, name, &max, perm);
		if (got < 3 || strlen(key) < 16 || (got == 4 && strcmp(perm, "widen-network") != 0)) {
			log_error("api keys '%s' line %d: expected 'KEY NAME MAX_SANDBOXES [widen-network]' with a key of 16+ characters", path, lineno);
			return -EINVAL;
		}
		struct api_key *k = realloc(D.keys, (D.n_keys + 1) * sizeof(*k));
		if (!k)
			return -ENOMEM;
		D.keys = k;
		k[D.n_keys] = (struct api_key){.max_sandboxes = max, .widen_network = got == 4};
		snprintf(k[D.n_keys].key, sizeof(k->key), "%s", key);
		snprintf(k[D.n_keys].name, sizeof(k->name), "%s", name);
		D.n_keys++;
	}
	return 0;
}

static int make_dirs(void)
{
	char audit[4096], scratch[4096];
	snprintf(audit, sizeof(audit), "%s/audit", D.cfg.state_dir);
	snprintf(scratch, sizeof(scratch), "%s/scratch", D.cfg.state_dir);
	const char *dirs[] = {D.cfg.state_dir, audit, D.cfg.runtime_dir, scratch};
	for (size_t i = 0; i < ELEMENTSOF(dirs); i++)
		if (mkdir(dirs[i], 0700) < 0 && errno != EEXIST) {
			log_error("mkdir %s: %m", dirs[i]);
			return -errno;
		}
	_cleanup_free_ char *sockdir = strdup(D.cfg.socket_path);
	char *slash = sockdir ? strrchr(sockdir, '/') : NULL;
	if (slash && slash != sockdir) {
		*slash = '\0';
		mkdir(sockdir, 0755);
	}
	/* Sandbox disks (runtime/scratch.h) live in the state directory, on its filesystem. */
	setenv("CORDON_SCRATCH_DIR", scratch, 0);
	/* Volumes (runtime/volume.h) too; `cordon run --volume` finds them with the same variable. */
	char volumes[4096];
	snprintf(volumes, sizeof(volumes), "%s/volumes", D.cfg.state_dir);
	setenv("CORDON_VOLUME_DIR", volumes, 0);
	D.audit_dirfd = open(audit, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (D.audit_dirfd < 0)
		return -errno;
	int r = snapstore_open(D.cfg.state_dir);
	if (r < 0)
		log_error("snapshots: %s/snapshots: %s", D.cfg.state_dir, strerror(-r));
	return r;
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
	log_info("signal %d: destroying every sandbox and stopping", (int)sig);
	http_stop();
	daemon_shutdown();
	event_base_loopexit(D.base, NULL);
}

/* The API surfaces, matched in this order: one route table and error renderer each. */
static const struct surface *const surfaces[] = {&v1_surface, &e2b_surface,
							&e2b_envd_surface, &e2b_code_surface};

static int keys_step(void)
{
	return D.cfg.api_keys ? load_keys(D.cfg.api_keys) : 0;
}

static int profiles_step(void)
{
	return profiles_load(D.cfg.network_profiles);
}

static int loop_step(void)
{
	D.base = event_base_new();
	return D.base ? 0 : -ENOMEM;
}

static int recover_step(void)
{
	daemon_recover();
	return 0;
}

static int http_step(void)
{
	return http_start(surfaces, ELEMENTSOF(surfaces));
}

static int signals_step(void)
{
	int sigs[] = {SIGTERM, SIGINT};
	for (int i = 0; i < 2; i++) {
		D.sig_ev[i] = evsignal_new(D.base, sigs[i], on_signal, NULL);
		if (!D.sig_ev[i] || event_add(D.sig_ev[i], NULL) < 0)
			return -ENOMEM;
	}
	return 0;
}

static bool settled(void)
{
	return pool_settled() && svc_snapshot_pending() == 0;
}

static int hooks_step(void)
{
	volumes_start();
	code_start();
	approvals_start();
	return 0;
}

static int fill_step(void)
{
	pool_fill();
	return 0;
}

/* The start, in order; the first failure stops it. With CORDON_DEBUG_STEPS set each step's
 * time goes to stderr (docs/ARCHITECTURE.md's figures of a start were taken so). */
static const struct setup_step {
	const char *name;
	int (*run)(void);
} setup_table[] = {
    {"state lock", state_lock},
    {"directories", make_dirs},
    {"event loop", loop_step},
    {"teardown", teardown_start},
    {"snapshots", svc_snapshot_start},
    {"egress start", network_boot}, /* on the teardown thread, until "network" */
    {"state.db", state_open},
    {"api keys", keys_step},
    {"egress profiles", profiles_step},
    {"recover", recover_step},
    {"http", http_step},
    {"signals", signals_step},
    {"hooks", hooks_step},
    {"usage", usage_start},
    {"task token", token_start},
    {"webhook", webhook_start},
    {"network", network_start},
    {"pool", pool_start},
    {"pool fill", fill_step},
};

static uint64_t mono_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static int setup_steps(void)
{
	bool timed = getenv("CORDON_DEBUG_STEPS") != NULL;
	for (size_t i = 0; i < ELEMENTSOF(setup_table); i++) {
		uint64_t t0 = timed ? mono_us() : 0;
		int r = setup_table[i].run();
		if (timed)
			fprintf(stderr, "cordond: step %-16s %8.3f ms\n", setup_table[i].name,
				(double)(mono_us() - t0) / 1000);
		if (r < 0)
			return r;
	}
	return 0;
}

static int setup(int argc, char **argv)
{
	/* A request body or a control line may carry a secret's value: every JSON value is
	 * wiped when freed. */
	json_set_alloc_funcs(malloc, secmem_free_wiped);
	/* Secrets' values live in this process: no core dump of it, and no ptrace or /proc/PID/mem
	 * by its own uid (the values' pages are MADV_DONTDUMP too; stray heap copies are not). */
	if (prctl(PR_SET_DUMPABLE, 0) < 0)
		return -errno;
	int r = config_parse(&D.cfg, argc, argv);
	if (r != 0) {
		config_usage(r > 0 ? stdout : stderr); /* --help is an answer, not an error */
		return r < 0 ? r : -ECANCELED;
	}
	log_prefix = "cordond";
	log_max_level = D.cfg.verbose ? LOG_DEBUG : LOG_INFO;
	if (geteuid() != 0)
		log_warning("not root: sandboxes get no cgroup limits and share one uid");
	signal(SIGPIPE, SIG_IGN);
	return setup_steps();
}

int main(int argc, char **argv)
{
	int r = setup(argc, argv);
	if (r == -ECANCELED) /* --help */
		return 0;
	if (r < 0)
		return 1;
	log_info("serving on %s%s%s (pool %llu, at most %llu sandboxes)", D.cfg.socket_path,
		 D.cfg.listen ? " and " : "", D.cfg.listen ? D.cfg.listen : "",
		 (unsigned long long)D.cfg.pool, (unsigned long long)D.cfg.max_sandboxes);
	event_base_dispatch(D.base);
	/* Reap what the shutdown killed, so that no cgroup or slot is left behind; a snapshot
	 * being made gives its sandbox back first. */
	struct timeval limit = {10, 0};
	event_base_loopexit(D.base, &limit);
	while (!settled() && event_base_loop(D.base, EVLOOP_ONCE) == 0)
		;
	if (!settled())
		log_warning("stopping with sandboxes not yet reaped; the next start sweeps them");
	for (int i = 0; i < 2; i++)
		if (D.sig_ev[i])
			event_free(D.sig_ev[i]);
	state_close();
	return D.exit_status;
}
