/* cordond's settings: every flag is also a key of the config file (`key = value`, # comments);
 * flags win over the file. One table describes both. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cordon/cordon.h>

#include "basic/log.h"
#include "daemon/daemon.h"

enum opt_type { OPT_STR, OPT_UINT, OPT_SIZE, OPT_FLAG };

static const struct option_def {
	const char *name;
	enum opt_type type;
	size_t offset;
	const char *def, *help;
} options[] = {
	{"socket", OPT_STR, offsetof(struct config, socket_path), "/run/cordon/cordon.sock", "unix socket of the API (mode 0660)"},
	{"socket-group", OPT_STR, offsetof(struct config, socket_group), NULL, "group owning the unix socket (whose members may use the API)"},
	{"state-dir", OPT_STR, offsetof(struct config, state_dir), "/var/lib/cordon", "state.db and audit/"},
	{"runtime-dir", OPT_STR, offsetof(struct config, runtime_dir), "/run/cordon", "runtime files (uid slot locks are host-wide in /run/cordon/slots)"},
	{"listen", OPT_STR, offsetof(struct config, listen), NULL, "also serve HOST:PORT over TCP (needs --api-keys)"},
	{"e2b-listen", OPT_STR, offsetof(struct config, e2b_listen), NULL, "also serve the E2B-compatible API (control plane and envd) on HOST:PORT (needs --api-keys; docs/e2b.md)"},
	{"e2b-domain", OPT_STR, offsetof(struct config, e2b_domain), NULL, "route envd requests by Host <port>-<id>.DOMAIN as well as by the E2b-Sandbox-Id header"},
	{"e2b-base-template", OPT_STR, offsetof(struct config, e2b_base_template), "base", "the template E2B's templateID \"base\" (the SDK's default) names"},
	{"e2b-code-template", OPT_STR, offsetof(struct config, e2b_code_template), "code-interpreter", "the template E2B's templateID \"code-interpreter-v1\" (the code interpreter SDK's default) names"},
	{"api-keys", OPT_STR, offsetof(struct config, api_keys), NULL, "file of 'KEY NAME MAX_SANDBOXES [widen-network]' lines"},
	{"config", OPT_STR, offsetof(struct config, config_file), NULL, "read settings from FILE (key = value)"},
	{"default-runtime", OPT_STR, offsetof(struct config, default_runtime), "jail", "jail, gvisor, microvm or auto (the strongest this host can run): the runtime of a create that names none"},
	{"pool", OPT_UINT, offsetof(struct config, pool), "2", "ready sandboxes kept warm per template"},
	{"pool-refill-quiet", OPT_UINT, offsetof(struct config, pool_refill_quiet_ms), "3", "ms without a request that a refill waits for while more than half of the pool is ready"},
	{"pool-refill-defer", OPT_UINT, offsetof(struct config, pool_refill_defer_ms), "50", "ms such a refill waits at the most (0: refills never wait)"},
	{"max-sandboxes", OPT_UINT, offsetof(struct config, max_sandboxes), "1000", "live sandboxes at most, pool included"},
	{"max-timeout", OPT_UINT, offsetof(struct config, max_timeout_s), "86400", "longest sandbox TTL a client may ask for, seconds"},
	{"max-output", OPT_SIZE, offsetof(struct config, max_output), "1M", "stdout (and stderr) bytes an exec returns"},
	{"disk-overcommit", OPT_UINT, offsetof(struct config, disk_overcommit), "2000", "percent of the state filesystem's free space that sandbox disks may add up to (what each could still grow into)"},
	{"max-upload", OPT_SIZE, offsetof(struct config, max_upload), "64M", "largest file upload"},
	{"max-download", OPT_SIZE, offsetof(struct config, max_download), "4G", "largest file read out of a sandbox (spooled to the state directory past 8 MiB)"},
	{"max-connections", OPT_UINT, offsetof(struct config, max_connections), "1024", "TCP connections at once (lowered to fit RLIMIT_NOFILE)"},
	{"max-peer-connections", OPT_UINT, offsetof(struct config, max_peer_connections), "64", "TCP connections at once from one address (0: no limit)"},
	{"header-timeout", OPT_UINT, offsetof(struct config, header_timeout_s), "5", "seconds a connection has to send its request headers"},
	{"max-inflight", OPT_SIZE, offsetof(struct config, max_inflight), "256M", "request body bytes held at once, per listener"},
	{"max-spool", OPT_SIZE, offsetof(struct config, max_spool), "4G", "upload bytes spooled to the state directory at once, per listener"},
	{"max-snapshot-bytes", OPT_SIZE, offsetof(struct config, max_snapshot_bytes), "10G", "total size of the snapshots kept on disk"},
	{"ready-timeout", OPT_UINT, offsetof(struct config, ready_timeout_s), "30", "seconds a template's READY has to pass before the create fails"},
	{"max-pause", OPT_UINT, offsetof(struct config, max_pause_s), "3600", "seconds a sandbox may stay paused before it is destroyed"},
	{"egress-limits", OPT_STR, offsetof(struct config, egress_limits), "256,200,16777216", "per sandbox: connections, new connections/s, bytes/s"},
	{"events-webhook", OPT_STR, offsetof(struct config, events_webhook), NULL, "POST each security event to http://HOST[:PORT]/PATH, signed"},
	{"events-webhook-key", OPT_STR, offsetof(struct config, events_webhook_key), NULL, "the webhook's HMAC key, 32 bytes [STATE-DIR/events-webhook.key, made at first start]"},
	{"network-profiles", OPT_STR, offsetof(struct config, network_profiles), NULL, "egress profiles a create may name: a JSON file of name -> {description, policy, allow, approve, secret_hosts}"},
	{"verbose", OPT_FLAG, offsetof(struct config, verbose), "0", "log every request"},
};

static const struct option_def *find(const char *name, size_t len)
{
	for (size_t i = 0; i < ELEMENTSOF(options); i++)
		if (strlen(options[i].name) == len && strncmp(options[i].name, name, len) == 0)
			return &options[i];
	return NULL;
}

static int set(struct config *cfg, const struct option_def *o, const char *val)
{
	void *field = (char *)cfg + o->offset;
	uint64_t v;
	char *end;

	switch (o->type) {
	case OPT_STR:
		free(*(char **)field);
		*(char **)field = strdup(val);
		return *(char **)field ? 0 : -ENOMEM;
	case OPT_UINT:
	case OPT_FLAG:
		errno = 0;
		v = strtoull(val, &end, 10);
		if (errno || *end || *val == '-' || end == val)
			goto bad;
		*(uint64_t *)field = v;
		return 0;
	case OPT_SIZE:
		if (cordon_parse_size(val, &v) < 0)
			goto bad;
		*(uint64_t *)field = v;
		return 0;
	}
bad:
	log_error("--%s '%s': expected %s", o->name, val, o->type == OPT_SIZE ? "a size" : "a number");
	return -EINVAL;
}

static int load_file(struct config *cfg, const char *path)
{
	_cleanup_fclose_ FILE *f = fopen(path, "re");
	char line[1024];
	int lineno = 0;

	if (!f) {
		log_error("config '%s': %m", path);
		return -errno;
	}
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		char *p = line + strspn(line, " \t");
		p[strcspn(p, "\r\n")] = '\0';
		if (*p == '#' || *p == '\0')
			continue;
		char *eq = strchr(p, '=');
		size_t klen = eq ? strcspn(p, " \t=") : 0;
		const struct option_def *o = eq ? find(p, klen) : NULL;
		if (!o || strcmp(o->name, "config") == 0) {
			log_error("config '%s' line %d: unknown setting '%.*s'", path, lineno, (int)(eq ? klen : strlen(p)), p);
			return -EINVAL;
		}
		char *val = eq + 1 + strspn(eq + 1, " \t");
		for (char *e = val + strlen(val); e > val && (e[-1] == ' ' || e[-1] == '\t');)
			*--e = '\0';
		int r = set(cfg, o, val);
		if (r < 0)
			return r;
	}
	return 0;
}

void config_usage(FILE *out)
{
	fprintf(out, "usage: cordond [OPTIONS]\n\noptions (each also a config file key):\n");
	for (size_t i = 0; i < ELEMENTSOF(options); i++)
		fprintf(out, "  --%-20s %s%s%s%s\n", options[i].name, options[i].help,
			options[i].def ? " [" : "", options[i].def ? options[i].def : "",
			options[i].def ? "]" : "");
}

/* --default-runtime resolved once, on this host, as a create's "runtime" is: a runtime that
 * cannot run here stops the start (fail closed) rather than failing every create later. */
static int config_runtime(struct config *cfg)
{
	struct cordon_err err = {};
	int r = cordon_runtime_resolve(cfg->default_runtime, &cfg->runtime, &err);
	if (r < 0)
		log_error("--default-runtime: %s", err.msg);
	return r < 0 ? -EINVAL : 0;
}

/* Defaults, then the config file (if --config is among the flags), then the flags. */
int config_parse(struct config *cfg, int argc, char **argv)
{
	int r;
	for (size_t i = 0; i < ELEMENTSOF(options); i++)
		if (options[i].def && (r = set(cfg, &options[i], options[i].def)) < 0)
			return r;
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 1; i < argc; i++) {
			const char *a = argv[i];
			if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
				return 1;
			const char *eq = strchr(a, '=');
			size_t len = eq ? (size_t)(eq - a - 2) : strlen(a) - 2;
			const struct option_def *o = strncmp(a, "--", 2) == 0 ? find(a + 2, len) : NULL;
			if (!o) {
				log_error("unknown option '%s'", a);
				return -EINVAL;
			}
			const char *val = o->type == OPT_FLAG && !eq ? "1" : eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
			if (!val) {
				log_error("--%s needs a value", o->name);
				return -EINVAL;
			}
			bool is_config = strcmp(o->name, "config") == 0;
			if (pass == 0 && is_config && (r = load_file(cfg, val)) < 0)
				return r;
			if (pass == 1 && !is_config && (r = set(cfg, o, val)) < 0)
				return r;
		}
	}
	if ((cfg->listen || cfg->e2b_listen) && !cfg->api_keys) {
		log_error("--listen and --e2b-listen need --api-keys: TCP clients are always authenticated");
		return -EINVAL;
	}
	if (cfg->max_sandboxes == 0 || cfg->max_timeout_s == 0 || cfg->max_connections == 0 ||
	    cfg->header_timeout_s == 0 || cfg->max_inflight == 0 || cfg->ready_timeout_s == 0) {
		log_error("--max-sandboxes, --max-timeout, --max-connections, --header-timeout, --max-inflight and --ready-timeout must be at least 1");
		return -EINVAL;
	}
	return config_runtime(cfg);
}
