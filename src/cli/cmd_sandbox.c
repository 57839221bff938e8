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

/* ---- create ---- */

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

/* --net and --allow, for create and network: {"policy": "allow", "allow": [RULE...]}. */
static json_t *network_json(const struct cli_values *v)
{
	_cleanup_(json_decrefp) json_t *net = json_object();
	const char *policy = v->net && strcmp(v->net, "none") == 0 ? "deny" : v->net;
	if (!policy && v->allow.n)
		policy = "allow";
	if (!net || (policy && json_object_set_new(net, "policy", json_string(policy)) < 0))
		return NULL;
	if (v->allow.n && json_object_set_new(net, "allow", cli_list_json(&v->allow, "allow")) < 0)
		return NULL;
	return TAKE_PTR(net);
}

/* The request of POST /v1/sandboxes: the non-empty sub-objects only. */
static json_t *create_request(const struct cli_values *v)
{
	static const char *const keys[] = {"limits", "env", "metadata", "network"};
	_cleanup_(json_decrefp) json_t *req = json_object();
	long long secs;
	int r = cli_seconds("timeout", v->timeout_ms, 1, &secs);
	if (!req || (r < 0 && r != -ENOENT) ||
	    (r == 0 && json_object_set_new(req, "timeout_s", json_integer(secs)) < 0) ||
	    cli_set_string(req, "template", v->template) < 0 || cli_set_string(req, "runtime", v->runtime) < 0)
		return NULL;
	json_t *objs[] = {create_limits(v), cli_kv_json(&v->env, "env"),
			  cli_kv_json(&v->meta, "meta"), network_json(v)};
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

	cli_values_init(&v);
	int r = cli_parse(CLI_CREATE, argc, argv, CLI_NO_COMMAND, &v, &a);
	if (r == 1) {
		cli_print_usage(stdout, CLI_CREATE, "create [OPTIONS]");
		printf("\nSIZE: a bare number is MiB (512); K, M, G, T suffixes are binary (256M, 2G).\n"
		       "DURATION: whole seconds here: 300, 90s, 5m.\n"
		       "cordond refuses --cpus and --memory over what its host has.\n");
		return 0;
	}
	if (r < 0 || a.n_pos || a.n_rest) {
		if (r >= 0)
			log_error("create: unexpected argument '%s'", a.n_pos ? a.pos[0] : a.rest[0]);
		return CORDON_EXIT_USAGE;
	}
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

/* ---- ls ---- */

/* "?metadata.K=V&metadata.K2=V2" for --meta K=V... into @query. */
static int ls_query(char *query, size_t size, const struct cli_list *meta)
{
	for (size_t i = 0; i < meta->n; i++) {
		const char *a = meta->v[i], *eq = strchr(a, '=');
		_cleanup_free_ char *key = strndup(a, (size_t)(eq - a));
		size_t n = strlen(query);
		if (!key || n + 12 >= size)
			return -E2BIG;
		strcat(query, n ? "&metadata." : "?metadata.");
		if (client_urlencode(query, size, key) < 0 || strlen(query) + 2 >= size ||
		    !strcat(query, "=") || client_urlencode(query, size, eq + 1) < 0) {
			log_error("--meta: the filters are too long");
			return -E2BIG;
		}
	}
	return 0;
}

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
	struct cli_values v;
	_cleanup_(client_response_done) struct client_response res = {};
	_cleanup_(cli_args_done) struct cli_args a = {};
	char query[PATH_MAX_API] = "", path[PATH_MAX_API + 16];

	cli_values_init(&v);
	int r = cli_parse(CLI_LS, argc, argv, CLI_NO_COMMAND, &v, &a);
	if (r == 1) {
		cli_print_usage(stdout, CLI_LS, "ls [OPTIONS]");
		return 0;
	}
	if (r < 0 || a.n_pos || a.n_rest) {
		if (r >= 0)
			log_error("ls: unexpected argument '%s'", a.n_pos ? a.pos[0] : a.rest[0]);
		return CORDON_EXIT_USAGE;
	}
	if (ls_query(query, sizeof(query), &v.meta) < 0)
		return CORDON_EXIT_USAGE;
	snprintf(path, sizeof(path), "/v1/sandboxes%s", query);
	r = cli_call(v.socket, "GET", path, NULL, &res);
	if (r)
		return r;
	json_t *list = json_object_get(res.json, "sandboxes");
	if (!json_is_array(list)) {
		log_error("ls: the answer carries no sandbox list");
		return 1;
	}
	if (v.json) {
		cli_print_json(list);
		return 0;
	}
	return ls_table(list, isatty(STDOUT_FILENO));
}

/* ---- info ---- */

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
	struct cli_values co;
	_cleanup_(client_response_done) struct client_response res = {};
	_cleanup_(cli_args_done) struct cli_args a = {};
	char path[256];

	cli_values_init(&co);
	int r = cli_parse(CLI_INFO, argc, argv, CLI_NO_COMMAND, &co, &a);
	if (r == 1) {
		cli_print_usage(stdout, CLI_INFO, "info [OPTIONS] ID");
		return 0;
	}
	if (r < 0 || a.n_pos != 1 || a.n_rest) {
		if (r >= 0)
			log_error("info: expected one sandbox id");
		return CORDON_EXIT_USAGE;
	}
	if (cli_sandbox_path(path, sizeof(path), a.pos[0], "") < 0)
		return CORDON_EXIT_USAGE;
	r = cli_call(co.socket, "GET", path, NULL, &res);
	if (r)
		return r;
	if (co.json)
		cli_print_json(res.json);
	else
		info_print(res.json);
	return 0;
}

/* ---- kill ---- */

int cmd_kill(int argc, char **argv)
{
	struct cli_values co;
	_cleanup_(cli_args_done) struct cli_args a = {};
	char path[256];
	int status = 0;

	cli_values_init(&co);
	int r = cli_parse(CLI_KILL, argc, argv, CLI_NO_COMMAND, &co, &a);
	if (r == 1) {
		cli_print_usage(stdout, CLI_KILL, "kill [OPTIONS] ID...");
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
		r = cli_call(co.socket, "DELETE", path, NULL, &res);
		if (r == CLI_EXIT_UNREACHABLE)
			return r;
		if (r == 0)
			printf("%s\n", id);
		status = status ?: r;
	}
	return status;
}

/* ---- timeout ---- */

int cmd_timeout(int argc, char **argv)
{
	struct cli_values co;
	_cleanup_(client_response_done) struct client_response res = {};
	_cleanup_(cli_args_done) struct cli_args a = {};
	_cleanup_(json_decrefp) json_t *req = NULL;
	long long secs;
	char path[256];

	cli_values_init(&co);
	int r = cli_parse(CLI_TIMEOUT, argc, argv, CLI_NO_COMMAND, &co, &a);
	if (r == 1) {
		cli_print_usage(stdout, CLI_TIMEOUT, "timeout [OPTIONS] ID SECONDS");
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
	r = cli_call(co.socket, "POST", path, req, &res);
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

/* What cordon network was asked; @add and @remove are NULL without --add, --remove. */
struct network_ctx {
	const char *socket;
	bool json;
	json_t *network, *add, *remove;
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
static json_t *edited_rules(const struct network_ctx *c, json_t *cur)
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
static int network_edit(struct network_ctx *c, const char *id)
{
	_cleanup_(client_response_done) struct client_response res = {};
	char path[256];

	if (cli_sandbox_path(path, sizeof(path), id, "") < 0)
		return CORDON_EXIT_USAGE;
	int r = cli_call(c->socket, "GET", path, NULL, &res);
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

static void network_print(const struct network_ctx *c, json_t *pol)
{
	if (c->json) {
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
	struct cli_values v;
	_cleanup_(client_response_done) struct client_response res = {};
	_cleanup_(cli_args_done) struct cli_args a = {};
	char path[256];

	cli_values_init(&v);
	int r = cli_parse(CLI_NETWORK, argc, argv, CLI_NO_COMMAND, &v, &a);
	if (r == 1) {
		cli_print_usage(stdout, CLI_NETWORK, "network [OPTIONS] ID");
		printf("\nWithout options it shows the policy. --net and --allow replace it; --add and\n"
		       "--remove read the rules in force, edit them and write them back (a change\n"
		       "another client makes in between is lost); removing a rule not in force fails.\n");
		return 0;
	}
	_cleanup_(json_decrefp) json_t *net = r == 0 ? network_json(&v) : NULL;
	_cleanup_(json_decrefp) json_t *add = v.add.n ? cli_list_json(&v.add, "add") : NULL;
	_cleanup_(json_decrefp) json_t *remove = v.remove.n ? cli_list_json(&v.remove, "remove") : NULL;
	struct network_ctx c = {v.socket, v.json, net, add, remove};
	if ((v.add.n && !add) || (v.remove.n && !remove))
		return CORDON_EXIT_USAGE;
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
	r = cli_call(c.socket, change ? "PUT" : "GET", path, change ? net : NULL, &res);
	if (r)
		return r;
	network_print(&c, change ? res.json : json_object_get(res.json, "network"));
	return 0;
}
