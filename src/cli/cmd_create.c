/* cordon create [OPTIONS]: a sandbox through POST /v1/sandboxes; prints its id. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <cordon/cordon.h>

#include "basic/cleanup.h"
#include "basic/log.h"
#include "cli/cli.h"
#include "cli/client.h"
#include "net/secretenv.h"

/* The API's whole MiB of a SIZE that --@name gave. cordond checks the range. */
static int set_mib(json_t *limits, const char *name, const char *key, uint64_t bytes)
{
	if (bytes == CLI_UNSET)
		return 0;
	if (bytes == 0 || bytes % (1 << 20) || bytes >> 20 > INT32_MAX) {
		log_error("--%s: expected whole MiB, such as 512 (MiB), 256M or 2G", name);
		return -EINVAL;
	}
	return json_object_set_new(limits, key, json_integer((json_int_t)(bytes >> 20))) < 0 ? -ENOMEM : 0;
}

static json_t *create_limits(const struct cli_values *v)
{
	_cleanup_(json_decrefp) json_t *lim = json_object();
	if (!lim || set_mib(lim, "memory", "memory_mb", v->memory_bytes) < 0 ||
	    set_mib(lim, "disk", "disk_mb", v->disk_bytes) < 0)
		return NULL;
	if (v->pids != CLI_UNSET && json_object_set_new(lim, "pids", json_integer((json_int_t)v->pids)) < 0)
		return NULL;
	if (v->cpus_milli != CLI_UNSET &&
	    json_object_set_new(lim, "cpus", json_real(v->cpus_milli / 1000.0)) < 0)
		return NULL;
	return TAKE_PTR(lim);
}

/* One --secret NAME=VALUE@HOST[,HOST] or NAME@HOST... (the value in our variable NAME), as
 * cordon run has it, into @secrets; the value leaves our argv (or environment) once read. */
static int add_secret(json_t *secrets, const char *arg)
{
	struct secret_desc d = {0};
	char *v;
	size_t n;
	if (secretenv_parse_arg(&d, (char *)arg, &v, &n) < 0) {
		log_error("--secret: expected NAME=VALUE@HOST[,HOST...] or NAME@HOST[,HOST...] (the value in "
			  "the variable NAME), with DNS names as hosts (at most %d)", SECRETENV_HOSTS_MAX);
		return -EINVAL;
	}
	char *env = v ? NULL : getenv(d.name);
	if (env) {
		v = env;
		n = strlen(env);
	}
	if (!v || n == 0) {
		log_error("--secret %s: no value (give NAME=VALUE@HOST, or set %s)", d.name, d.name);
		return -EINVAL;
	}
	json_t *o = secretenv_public_json(&d);
	if (!o || json_object_set_new(o, "value", json_stringn(v, n)) < 0 ||
	    json_object_set_new(secrets, d.name, o) < 0)
		return -ENOMEM;
	explicit_bzero(v, n); /* out of /proc/self/cmdline and environ from now on */
	if (env)
		unsetenv(d.name);
	json_object_del(o, "name");
	return 0;
}

static json_t *create_secrets(const struct cli_values *v)
{
	_cleanup_(json_decrefp) json_t *secrets = json_object();
	for (size_t i = 0; secrets && i < v->secret.n; i++)
		if (add_secret(secrets, v->secret.v[i]) < 0)
			return NULL;
	return TAKE_PTR(secrets);
}

/* The request of POST /v1/sandboxes: the non-empty sub-objects only. */
static json_t *create_request(const struct cli_values *v)
{
	static const char *const keys[] = {"limits", "env", "metadata", "network", "secrets"};
	_cleanup_(json_decrefp) json_t *req = json_object();
	long long secs;
	int r = cli_seconds("timeout", v->timeout_ms, 1, &secs);
	if (!req || (r < 0 && r != -ENOENT) ||
	    (r == 0 && json_object_set_new(req, "timeout_s", json_integer(secs)) < 0) ||
	    cli_set_string(req, "template", v->template) < 0 || cli_set_string(req, "runtime", v->runtime) < 0 ||
	    cli_set_string(req, "snapshot", v->snapshot) < 0)
		return NULL;
	for (size_t i = 0; i < v->volume.n; i++)
		if (cli_volume_add_json(req, v->volume.v[i]) < 0)
			return NULL;
	json_t *objs[] = {create_limits(v), cli_kv_json(&v->env, "env"),
			  cli_kv_json(&v->meta, "meta"), cli_network_json(v), create_secrets(v)};
	bool ok = true;
	for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
		ok = ok && objs[i];
		if (ok && json_object_size(objs[i]) && json_object_set(req, keys[i], objs[i]) < 0)
			ok = false;
	}
	for (size_t i = 0; i < ELEMENTSOF(objs); i++)
		json_decref(objs[i]);
	return ok ? TAKE_PTR(req) : NULL;
}

int cmd_create(int argc, char **argv)
{
	_cleanup_(client_response_done) struct client_response res = {};
	_cleanup_(cli_args_done) struct cli_args a = {};
	struct cli_values v;
	const char *id;

	int r = cli_parse_cmd(CLI_CREATE, "create [OPTIONS]",
			      "SIZE: a bare number is MiB (512); K, M, G, T suffixes are binary (256M, 2G).\n"
			      "DURATION: whole seconds here: 300, 90s, 5m.\n"
			      "cordond refuses --cpus and --memory over what its host has.\n",
			      argc, argv, 0, CLI_NO_COMMAND, &v, &a);
	if (r != CLI_GO_ON)
		return r;
	_cleanup_(json_decrefp) json_t *req = create_request(&v);
	if (!req)
		return CORDON_EXIT_USAGE;
	r = cli_call(v.socket, "POST", "/v1/sandboxes", req, &res);
	if (r)
		return r;
	if (json_unpack(res.json, "{s:s}", "id", &id) < 0) {
		log_error("create: the answer carries no sandbox id");
		return 1;
	}
	if (v.json)
		cli_print_json(res.json);
	else
		printf("%s\n", id);
	return 0;
}
