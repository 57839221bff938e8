/* cordon create | ls | info | kill | timeout: a sandbox's life through cordond's API. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include <cordon/cordon.h>

#include "basic/cleanup.h"
#include "basic/log.h"
#include "cli/cli.h"
#include "cli/client.h"

#define PATH_MAX_API 16384

/* ---- values ---- */

static int parse_uint(const char *name, const char *arg, long long min, long long max,
		      long long *ret)
{
	char *end;
	errno = 0;
	long long v = strtoll(arg, &end, 10);
	if (errno || end == arg || *end || v < min || v > max) {
		log_error("--%s '%s': expected an integer between %lld and %lld", name, arg, min, max);
		return -EINVAL;
	}
	*ret = v;
	return 0;
}

/* The API's whole MiB, in the one vocabulary of sizes (cordon_parse_size()): "512" is
 * 512 MiB, as for cordon run; "1G" and "256M" are sizes. cordond checks the range. */
static int parse_mb(const char *name, const char *arg, long long *ret)
{
	uint64_t bytes;
	if (cordon_parse_size(arg, &bytes) < 0 || bytes == 0 || bytes % (1 << 20) ||
	    bytes >> 20 > INT32_MAX) {
		log_error("--%s '%s': expected whole MiB, such as 512 (MiB), 256M or 2G", name, arg);
		return -EINVAL;
	}
	*ret = (long long)(bytes >> 20);
	return 0;
}

/* ---- create ---- */

struct create_ctx {
	struct cli_common co;
	json_t *req, *limits, *env, *meta;
	json_t *network; /* {"policy": .., "allow": [..]}: shared with `cordon network` */
	json_t *add, *remove; /* cordon network --add/--remove: rules to edit in */
};

/* --net and --allow, for create and network: {"policy": "allow", "allow": [RULE...]}. */
static int opt_net(void *ctx, const char *a)
{
	struct create_ctx *c = ctx;
	if (strcmp(a, "none") == 0)
		a = "deny";
	if (strcmp(a, "deny") != 0 && strcmp(a, "allow") != 0 && strcmp(a, "public") != 0) {
		log_error("--net '%s': expected none, allow or public", a);
		return -EINVAL;
	}
	return json_object_set_new(c->network, "policy", json_string(a)) < 0 ? -ENOMEM : 0;
}

static int opt_allow(void *ctx, const char *a)
{
	struct create_ctx *c = ctx;
	json_t *rules = json_object_get(c->network, "allow");
	if (!rules) {
		rules = json_array();
		if (json_object_set_new(c->network, "allow", rules) < 0)
			return -ENOMEM;
	}
	if (!json_object_get(c->network, "policy"))
		json_object_set_new(c->network, "policy", json_string("allow"));
	return json_array_append_new(rules, json_string(a)) < 0 ? -ENOMEM : 0;
}

static int set_int(json_t *obj, const char *key, long long v)
{
	return json_object_set_new(obj, key, json_integer(v)) < 0 ? -ENOMEM : 0;
}

/* Checked by the server, which knows what it can run. */
static int opt_runtime(void *ctx, const char *a)
{
	struct create_ctx *c = ctx;
	return json_object_set_new(c->req, "runtime", json_string(a)) < 0 ? -EINVAL : 0;
}

static int opt_template(void *ctx, const char *a)
{
	struct create_ctx *c = ctx;
	return json_object_set_new(c->req, "template", json_string(a)) < 0 ? -EINVAL : 0;
}

static int opt_timeout(void *ctx, const char *a)
{
	struct create_ctx *c = ctx;
	long long v;
	return cli_parse_seconds("--timeout", a, 1, &v) ?: set_int(c->req, "timeout_s", v);
}

static int opt_memory(void *ctx, const char *a)
{
	struct create_ctx *c = ctx;
	long long v;
	return parse_mb("memory", a, &v) ?: set_int(c->limits, "memory_mb", v);
}

static int opt_disk(void *ctx, const char *a)
{
	struct create_ctx *c = ctx;
	long long v;
	return parse_mb("disk", a, &v) ?: set_int(c->limits, "disk_mb", v);
}

static int opt_pids(void *ctx, const char *a)
{
	struct create_ctx *c = ctx;
	long long v;
	return parse_uint("pids", a, 1, 1 << 22, &v) ?: set_int(c->limits, "pids", v);
}

static int opt_cpus(void *ctx, const char *a)
{
	struct create_ctx *c = ctx;
	char *end;
	errno = 0;
	double v = strtod(a, &end);
	if (errno || end == a || *end || !isfinite(v) || v <= 0) {
		log_error("--cpus '%s': expected a number of CPUs such as 0.5 or 2", a);
		return -EINVAL;
	}
	return json_object_set_new(c->limits, "cpus", json_real(v)) < 0 ? -ENOMEM : 0;
}

static int opt_env(void *ctx, const char *a)
{
	return cli_add_kv(((struct create_ctx *)ctx)->env, "env", a);
}

static int opt_meta(void *ctx, const char *a)
{
	return cli_add_kv(((struct create_ctx *)ctx)->meta, "meta", a);
}

static int opt_volume(void *ctx, const char *a)
{
	return cli_volume_add_json(((struct create_ctx *)ctx)->req, a);
}

static const struct cli_option create_options[] = {
	{"template", "NAME", opt_template, "template to start from [host]"},
	{"runtime", "NAME", opt_runtime, "jail, or auto: the strongest the server can run [jail]"},
	{"timeout", "SECONDS", opt_timeout, "destroy the sandbox after this long [server: 300]"},
	{"memory", "SIZE", opt_memory, "memory limit: MiB, or 256M, 2G [512]"},
	{"cpus", "N", opt_cpus, "CPU limit, fractions allowed, at most the host's [1]"},
	{"pids", "N", opt_pids, "process limit [256]"},
	{"disk", "SIZE", opt_disk, "the sandbox's disk: MiB, or 2G [4G]"},
	{"env", "K=V", opt_env, "environment of every process (repeatable)"},
	{"meta", "K=V", opt_meta, "a metadata label to find it by (repeatable)"},
	{"volume", "NAME:PATH[:ro]", opt_volume, "mount a persistent volume (repeatable)"},
	{"net", "none|allow|public", opt_net, "network: loopback only, --allow rules, or the internet [none]"},
	{"allow", "RULE", opt_allow, "reach a name, *.wildcard, IP or CIDR [:port[-port]] (repeatable)"},
	{"json", NULL, cli_opt_json, "print the whole sandbox as JSON"},
	{"socket", "PATH", cli_opt_socket, "cordond's socket [$CORDON_SOCKET or " CLIENT_DEFAULT_SOCKET "]"},
};

/* Puts the non-empty sub-objects into the request. */
static int create_finish(struct create_ctx *c)
{
	static const char *const keys[] = {"limits", "env", "metadata", "network"};
	json_t *objs[] = {c->limits, c->env, c->meta, c->network};
	for (size_t i = 0; i < ELEMENTSOF(keys); i++)
		if (json_object_size(objs[i]) && json_object_set(c->req, keys[i], objs[i]) < 0)
			return -ENOMEM;
	return 0;
}

int cmd_create(int argc, char **argv)
{
	_cleanup_(json_decrefp) json_t *req = json_object(), *limits = json_object(),
				       *env = json_object(), *meta = json_object(), *net = json_object();
	struct create_ctx c = {.req = req, .limits = limits, .env = env, .meta = meta, .network = net};
	_cleanup_(client_response_done) struct client_response res = {};
	_cleanup_(cli_args_done) struct cli_args a = {};
	const char *id;

	if (!req || !limits || !env || !meta || !net)
		return 1;
	int r = cli_parse("create", create_options, ELEMENTSOF(create_options), &c, argc, argv, 0, &a);
	if (r == 1) {
		cli_print_usage(stdout, "create [OPTIONS]", create_options, ELEMENTSOF(create_options));
		printf("\nSIZE: a bare number is MiB (512); K, M, G, T suffixes are binary (256M, 2G).\n"
		       "cordond refuses --cpus and --memory over what its host has.\n");
		return 0;
	}
	if (r < 0 || a.n_pos || a.n_rest) {
		if (r >= 0)
			log_error("create: unexpected argument '%s'", a.n_pos ? a.pos[0] : a.rest[0]);
		return CORDON_EXIT_USAGE;
	}
	if (create_finish(&c) < 0)
		return 1;
	r = cli_call(&c.co, "POST", "/v1/sandboxes", req, &res);
	if (r)
		return r;
	if (json_unpack(res.json, "{s:s}", "id", &id) < 0) {
		log_error("create: the answer carries no sandbox id");
		return 1;
	}
	if (c.co.json)
		cli_print_json(res.json);
	else
		printf("%s\n", id);
	return 0;
}

/* ---- ls ---- */

struct ls_ctx {
	struct cli_common co;
	char query[PATH_MAX_API];
};

static int opt_filter(void *ctx, const char *a)
{
	struct ls_ctx *c = ctx;
	const char *eq = strchr(a, '=');
	_cleanup_free_ char *key = eq ? strndup(a, (size_t)(eq - a)) : NULL;
	size_t n = strlen(c->query);

	if (!eq || eq == a) {
		log_error("--meta '%s': expected KEY=VALUE", a);
		return -EINVAL;
	}
	if (!key || n + 12 >= sizeof(c->query))
		return -E2BIG;
	strcat(c->query, n ? "&metadata." : "?metadata.");
	if (client_urlencode(c->query, sizeof(c->query), key) < 0 ||
	    strlen(c->query) + 2 >= sizeof(c->query)) {
		log_error("--meta: the filters are too long");
		return -E2BIG;
	}
	strcat(c->query, "=");
	if (client_urlencode(c->query, sizeof(c->query), eq + 1) < 0) {
		log_error("--meta: the filters are too long");
		return -E2BIG;
	}
	return 0;
}

static const struct cli_option ls_options[] = {
	{"meta", "K=V", opt_filter, "only sandboxes with this metadata (repeatable)"},
	{"json", NULL, cli_opt_json, "print the list as JSON"},
	{"socket", "PATH", cli_opt_socket, "cordond's socket"},
};

/* "3m ago", "in 4m59s": a person's reading of an RFC 3339 UTC time. */
static void relative_time(const char *iso, char *buf, size_t size)
{
	struct tm tm = {};
	const char *end = iso ? strptime(iso, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
	if (!end) {
		snprintf(buf, size, "%s", iso ? iso : "-");
		return;
	}
	long long d = (long long)timegm(&tm) - (long long)time(NULL);
	long long a = d < 0 ? -d : d;
	char v[32];
	if (a < 60)
		snprintf(v, sizeof(v), "%llds", a);
	else if (a < 3600)
		snprintf(v, sizeof(v), "%lldm%02llds", a / 60, a % 60);
	else if (a < 86400)
		snprintf(v, sizeof(v), "%lldh%02lldm", a / 3600, a / 60 % 60);
	else
		snprintf(v, sizeof(v), "%lldd%02lldh", a / 86400, a / 3600 % 24);
	snprintf(buf, size, d < 0 ? "%s ago" : "in %s", v);
}

static char *metadata_string(json_t *meta)
{
	char *s = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&s, &n);
	const char *k, *sep = "";
	json_t *v;

	if (!f)
		return NULL;
	json_object_foreach(meta, k, v) {
		fprintf(f, "%s%s=%s", sep, k, json_string_value(v) ?: "");
		sep = ",";
	}
	fclose(f);
	return s;
}

#define LS_COLS 6

struct ls_row {
	char *cell[LS_COLS];
};

static void ls_row_fill(struct ls_row *row, json_t *sb, bool tty)
{
	static const char *const keys[] = {"id", "template", "state"};
	char t[64];

	for (size_t i = 0; i < ELEMENTSOF(keys); i++)
		row->cell[i] = strdup(json_string_value(json_object_get(sb, keys[i])) ?: "-");
	for (int i = 0; i < 2; i++) {
		const char *iso = json_string_value(json_object_get(sb, i ? "expires_at" : "created_at"));
		if (tty)
			relative_time(iso, t, sizeof(t));
		row->cell[3 + i] = strdup(tty ? t : iso ?: "-");
	}
	row->cell[5] = metadata_string(json_object_get(sb, "metadata"));
}

static void ls_print(struct ls_row *rows, size_t n, bool tty)
{
	size_t w[LS_COLS] = {};
	for (size_t r = 0; r < n; r++)
		for (int i = 0; i < LS_COLS; i++)
			if (rows[r].cell[i] && strlen(rows[r].cell[i]) > w[i])
				w[i] = strlen(rows[r].cell[i]);
	for (size_t r = 0; r < n; r++) {
		for (int i = 0; i < LS_COLS; i++) {
			const char *s = rows[r].cell[i] ?: "";
			if (i == LS_COLS - 1)
				printf("%s\n", s);
			else if (tty)
				printf("%-*s   ", (int)w[i], s);
			else
				printf("%s\t", s);
		}
	}
}

static int ls_table(json_t *list, bool tty)
{
	size_t n = json_array_size(list) + 1;
	_cleanup_free_ struct ls_row *rows = calloc(n, sizeof(*rows));
	static const char *const head[LS_COLS] = {"ID", "TEMPLATE", "STATE", "CREATED", "EXPIRES",
						  "METADATA"};
	size_t i;
	json_t *sb;

	if (!rows)
		return 1;
	for (int k = 0; k < LS_COLS; k++)
		rows[0].cell[k] = strdup(head[k]);
	json_array_foreach(list, i, sb)
		ls_row_fill(&rows[i + 1], sb, tty);
	ls_print(rows, n, tty);
	for (i = 0; i < n; i++)
		for (int k = 0; k < LS_COLS; k++)
			free(rows[i].cell[k]);
	return 0;
}

int cmd_ls(int argc, char **argv)
{
	struct ls_ctx c = {};
	_cleanup_(client_response_done) struct client_response res = {};
	_cleanup_(cli_args_done) struct cli_args a = {};
	char path[PATH_MAX_API + 16];

	int r = cli_parse("ls", ls_options, ELEMENTSOF(ls_options), &c, argc, argv, 0, &a);
	if (r == 1) {
		cli_print_usage(stdout, "ls [OPTIONS]", ls_options, ELEMENTSOF(ls_options));
		return 0;
	}
	if (r < 0 || a.n_pos || a.n_rest) {
		if (r >= 0)
			log_error("ls: unexpected argument '%s'", a.n_pos ? a.pos[0] : a.rest[0]);
		return CORDON_EXIT_USAGE;
	}
	snprintf(path, sizeof(path), "/v1/sandboxes%s", c.query);
	r = cli_call(&c.co, "GET", path, NULL, &res);
	if (r)
		return r;
	json_t *list = json_object_get(res.json, "sandboxes");
	if (!json_is_array(list)) {
		log_error("ls: the answer carries no sandbox list");
		return 1;
	}
	if (c.co.json) {
		cli_print_json(list);
		return 0;
	}
	return ls_table(list, isatty(STDOUT_FILENO));
}

/* ---- info ---- */

static const struct cli_option info_options[] = {
	{"json", NULL, cli_opt_json, "print the sandbox as JSON"},
	{"socket", "PATH", cli_opt_socket, "cordond's socket"},
};

static void info_print(json_t *sb)
{
	static const char *const strs[] = {"id", "template", "runtime", "state"};
	json_t *lim = json_object_get(sb, "limits"), *meta = json_object_get(sb, "metadata");
	_cleanup_free_ char *m = metadata_string(meta);
	char rel[64];

	for (size_t i = 0; i < ELEMENTSOF(strs); i++)
		printf("%-10s %s\n", strs[i], json_string_value(json_object_get(sb, strs[i])) ?: "-");
	for (int i = 0; i < 2; i++) {
		const char *k = i ? "expires_at" : "created_at";
		const char *iso = json_string_value(json_object_get(sb, k));
		relative_time(iso, rel, sizeof(rel));
		printf("%-10s %s (%s)\n", i ? "expires" : "created", iso ?: "-", rel);
	}
	printf("%-10s %lld s\n", "timeout",
	       (long long)json_integer_value(json_object_get(sb, "timeout_s")));
	printf("%-10s cpus %g, memory %lld MB, pids %lld, disk %lld MB\n", "limits",
	       json_number_value(json_object_get(lim, "cpus")),
	       (long long)json_integer_value(json_object_get(lim, "memory_mb")),
	       (long long)json_integer_value(json_object_get(lim, "pids")),
	       (long long)json_integer_value(json_object_get(lim, "disk_mb")));
	printf("%-10s %s\n", "network",
	       json_string_value(json_object_get(json_object_get(sb, "network"), "policy")) ?: "-");
	printf("%-10s %s\n", "metadata", m && *m ? m : "-");
}

int cmd_info(int argc, char **argv)
{
	struct cli_common co = {};
	_cleanup_(client_response_done) struct client_response res = {};
	_cleanup_(cli_args_done) struct cli_args a = {};
	char path[256];

	int r = cli_parse("info", info_options, ELEMENTSOF(info_options), &co, argc, argv, 0, &a);
	if (r == 1) {
		cli_print_usage(stdout, "info [OPTIONS] ID", info_options, ELEMENTSOF(info_options));
		return 0;
	}
	if (r < 0 || a.n_pos != 1 || a.n_rest) {
		if (r >= 0)
			log_error("info: expected one sandbox id");
		return CORDON_EXIT_USAGE;
	}
	if (cli_sandbox_path(path, sizeof(path), a.pos[0], "") < 0)
		return CORDON_EXIT_USAGE;
	r = cli_call(&co, "GET", path, NULL, &res);
	if (r)
		return r;
	if (co.json)
		cli_print_json(res.json);
	else
		info_print(res.json);
	return 0;
}

/* ---- kill ---- */

static const struct cli_option kill_options[] = {
	{"socket", "PATH", cli_opt_socket, "cordond's socket"},
};

int cmd_kill(int argc, char **argv)
{
	struct cli_common co = {};
	_cleanup_(cli_args_done) struct cli_args a = {};
	char path[256];
	int status = 0;

	int r = cli_parse("kill", kill_options, ELEMENTSOF(kill_options), &co, argc, argv, 0, &a);
	if (r == 1) {
		cli_print_usage(stdout, "kill [OPTIONS] ID...", kill_options, ELEMENTSOF(kill_options));
		return 0;
	}
	if (r < 0 || a.n_pos + a.n_rest == 0) {
		if (r >= 0)
			log_error("kill: expected at least one sandbox id");
		return CORDON_EXIT_USAGE;
	}
	for (int i = 0; i < a.n_pos + a.n_rest; i++) {
		const char *id = i < a.n_pos ? a.pos[i] : a.rest[i - a.n_pos];
		_cleanup_(client_response_done) struct client_response res = {};
		if (cli_sandbox_path(path, sizeof(path), id, "") < 0) {
			status = status ?: 1;
			continue;
		}
		r = cli_call(&co, "DELETE", path, NULL, &res);
		if (r == CLI_EXIT_UNREACHABLE)
			return r;
		if (r == 0)
			printf("%s\n", id);
		status = status ?: r;
	}
	return status;
}

/* ---- timeout ---- */

static const struct cli_option timeout_options[] = {
	{"json", NULL, cli_opt_json, "print the sandbox as JSON"},
	{"socket", "PATH", cli_opt_socket, "cordond's socket"},
};

int cmd_timeout(int argc, char **argv)
{
	struct cli_common co = {};
	_cleanup_(client_response_done) struct client_response res = {};
	_cleanup_(cli_args_done) struct cli_args a = {};
	_cleanup_(json_decrefp) json_t *req = NULL;
	long long secs;
	char path[256];

	int r = cli_parse("timeout", timeout_options, ELEMENTSOF(timeout_options), &co, argc, argv,
			  0, &a);
	if (r == 1) {
		cli_print_usage(stdout, "timeout [OPTIONS] ID SECONDS", timeout_options,
				ELEMENTSOF(timeout_options));
		return 0;
	}
	if (r < 0 || a.n_pos != 2 || a.n_rest) {
		if (r >= 0)
			log_error("timeout: expected a sandbox id and a number of seconds");
		return CORDON_EXIT_USAGE;
	}
	if (cli_sandbox_path(path, sizeof(path), a.pos[0], "/timeout") < 0 ||
	    cli_parse_seconds("timeout", a.pos[1], 1, &secs) < 0)
		return CORDON_EXIT_USAGE;
	req = json_pack("{s:I}", "timeout_s", (json_int_t)secs);
	r = cli_call(&co, "POST", path, req, &res);
	if (r)
		return r;
	if (co.json)
		cli_print_json(res.json);
	else
		printf("%s expires at %s\n", a.pos[0],
		       json_string_value(json_object_get(res.json, "expires_at")) ?: "?");
	return 0;
}

/* ---- network ---- */

static int opt_rule_list(json_t **list, const char *name, const char *a)
{
	if (!*list && !(*list = json_array()))
		return -ENOMEM;
	if (json_array_append_new(*list, json_string(a)) < 0) {
		log_error("--%s: the rule is not valid UTF-8", name);
		return -EINVAL;
	}
	return 0;
}

static int opt_add(void *ctx, const char *a)
{
	return opt_rule_list(&((struct create_ctx *)ctx)->add, "add", a);
}

static int opt_remove(void *ctx, const char *a)
{
	return opt_rule_list(&((struct create_ctx *)ctx)->remove, "remove", a);
}

static const struct cli_option network_options[] = {
	{"net", "none|allow|public", opt_net, "the new policy (--allow and --add imply allow)"},
	{"allow", "RULE", opt_allow, "replace the rules with these (repeatable)"},
	{"add", "RULE", opt_add, "add a rule to those in force (repeatable)"},
	{"remove", "RULE", opt_remove, "remove a rule from those in force (repeatable)"},
	{"json", NULL, cli_opt_json, "print the policy as JSON"},
	{"socket", "PATH", cli_opt_socket, "cordond's socket"},
};

static ssize_t rule_index(json_t *rules, const char *rule)
{
	size_t i;
	json_t *r;
	json_array_foreach(rules, i, r)
		if (json_is_string(r) && strcmp(json_string_value(r), rule) == 0)
			return (ssize_t)i;
	return -1;
}

/* The rules in force (@cur's), less --remove's, plus --add's not there yet. */
static json_t *edited_rules(const struct create_ctx *c, json_t *cur)
{
	_cleanup_(json_decrefp) json_t *rules = json_deep_copy(json_object_get(cur, "allow"));
	size_t i;
	json_t *r;

	if (!json_is_array(rules) && !(rules = json_array()))
		return NULL;
	json_array_foreach(c->remove, i, r) {
		ssize_t k = rule_index(rules, json_string_value(r));
		if (k < 0) {
			log_error("network: --remove '%s': no such rule in force (see 'cordon network ID')",
				  json_string_value(r));
			return NULL;
		}
		json_array_remove(rules, (size_t)k);
	}
	json_array_foreach(c->add, i, r)
		if (rule_index(rules, json_string_value(r)) < 0 && json_array_append(rules, r) < 0)
			return NULL;
	return TAKE_PTR(rules);
}

/* --add and --remove: reads the policy in force (GET), edits it into c->network, which the
 * caller PUTs. Not atomic: a change another client makes between the two is lost. */
static int network_edit(struct create_ctx *c, const char *id)
{
	_cleanup_(client_response_done) struct client_response res = {};
	char path[256];

	if (cli_sandbox_path(path, sizeof(path), id, "") < 0)
		return CORDON_EXIT_USAGE;
	int r = cli_call(&c->co, "GET", path, NULL, &res);
	if (r)
		return r;
	json_t *cur = json_object_get(res.json, "network");
	/* A copy: setting c->network's policy below frees the string --net put there. */
	char given[16];
	snprintf(given, sizeof(given), "%s",
		 json_string_value(json_object_get(c->network, "policy")) ?:
			 json_string_value(json_object_get(cur, "policy")) ?: "deny");
	const char *policy = given;
	_cleanup_(json_decrefp) json_t *rules = edited_rules(c, cur);
	if (!rules)
		return CLI_EXIT_API;
	if (json_array_size(rules) && strcmp(policy, "deny") == 0 &&
	    !json_object_get(c->network, "policy"))
		policy = "allow"; /* --add to a sandbox without a network: as --allow */
	if (json_array_size(rules) && strcmp(policy, "allow") != 0) {
		log_error("network: policy '%s' takes no rules (--net allow restricts the sandbox to them)",
			  strcmp(policy, "deny") ? policy : "none");
		return CLI_EXIT_API;
	}
	/* Only "allow" has rules: for the others the list is empty, as the API wants it. */
	if (json_object_set_new(c->network, "policy", json_string(policy)) < 0 ||
	    json_object_set(c->network, "allow", rules) < 0)
		return CLI_EXIT_API;
	return 0;
}

static void network_print(const struct create_ctx *c, json_t *pol)
{
	if (c->co.json) {
		cli_print_json(pol);
		return;
	}
	printf("policy: %s\n", json_string_value(json_object_get(pol, "policy")) ?: "?");
	size_t i;
	json_t *rule;
	json_array_foreach(json_object_get(pol, "allow"), i, rule)
		printf("allow:  %s\n", json_string_value(rule));
}

/* cordon network ID [--net P] [--allow R]... [--add R]... [--remove R]...: shows the policy
 * without options; --net and --allow replace it; --add and --remove edit the rules in force. */
int cmd_network(int argc, char **argv)
{
	_cleanup_(json_decrefp) json_t *net = json_object();
	struct create_ctx c = {.network = net};
	_cleanup_(client_response_done) struct client_response res = {};
	_cleanup_(cli_args_done) struct cli_args a = {};
	char path[256];

	int r = cli_parse("network", network_options, ELEMENTSOF(network_options), &c, argc, argv, 0, &a);
	_cleanup_(json_decrefp) json_t *add = c.add, *remove = c.remove;
	if (r == 1) {
		cli_print_usage(stdout, "network [OPTIONS] ID", network_options, ELEMENTSOF(network_options));
		printf("\nWithout options it shows the policy. --net and --allow replace it; --add and\n"
		       "--remove read the rules in force, edit them and write them back (a change\n"
		       "another client makes in between is lost); removing a rule not in force fails.\n");
		return 0;
	}
	if (r < 0 || a.n_pos != 1 || a.n_rest || !net) {
		if (r >= 0)
			log_error("network: expected one sandbox id");
		return CORDON_EXIT_USAGE;
	}
	if ((add || remove) && json_object_get(net, "allow")) {
		log_error("network: --allow replaces the rules, --add and --remove edit them: not both");
		return CORDON_EXIT_USAGE;
	}
	if ((add || remove) && (r = network_edit(&c, a.pos[0])) != 0)
		return r;
	bool change = json_object_size(net) > 0;
	if (cli_sandbox_path(path, sizeof(path), a.pos[0], change ? "/network" : "") < 0)
		return CORDON_EXIT_USAGE;
	r = cli_call(&c.co, change ? "PUT" : "GET", path, change ? net : NULL, &res);
	if (r)
		return r;
	network_print(&c, change ? res.json : json_object_get(res.json, "network"));
	return 0;
}
