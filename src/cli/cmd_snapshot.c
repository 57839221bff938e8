/* cordon pause|resume ID, cordon snapshot ID | ls | rm ID, cordon fork ID [-n N]: clients of
 * cordond's pause, snapshot and fork routes (docs/api/openapi.yaml). */
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

/* POST /v1/sandboxes/ID<suffix> with @req; prints the JSON or @field of the answer. */
static int post(const struct cli_values *v, const char *id, const char *suffix, json_t *req,
		const char *field)
{
	_cleanup_(client_response_done) struct client_response res = {};
	char path[256];
	if (cli_sandbox_path(path, sizeof(path), id, suffix) < 0)
		return CORDON_EXIT_USAGE;
	int r = cli_call(v->socket, "POST", path, req, &res);
	if (r)
		return r;
	if (v->json || !field)
		cli_print_json(res.json);
	else
		printf("%s\n", json_string_value(json_object_get(res.json, field)) ?: "?");
	return 0;
}

/* A subcommand that POSTs to one sandbox's @suffix and prints @field of the answer. */
static int simple(enum cli_cmd cmd, const char *synopsis, const char *suffix, const char *field,
		  int argc, char **argv)
{
	struct cli_values v;
	_cleanup_(cli_args_done) struct cli_args a = {};
	int r = cli_parse_cmd(cmd, synopsis, NULL, argc, argv, 1, CLI_NO_COMMAND, &v, &a);
	if (r != CLI_GO_ON)
		return r;
	return post(&v, a.pos[0], suffix, NULL, field);
}

int cmd_pause(int argc, char **argv)
{
	return simple(CLI_PAUSE, "pause [OPTIONS] ID", "/pause", "state", argc, argv);
}

int cmd_resume(int argc, char **argv)
{
	return simple(CLI_RESUME, "resume [OPTIONS] ID", "/resume", "state", argc, argv);
}

static void print_snapshots(json_t *list)
{
	json_t *s;
	size_t i;
	printf("%-24s %-24s %-10s %6s %12s  %s\n", "ID", "SANDBOX", "TEMPLATE", "MEMORY", "BYTES",
	       "CREATED");
	json_array_foreach(list, i, s)
		printf("%-24s %-24s %-10s %6s %12lld  %s\n",
		       json_string_value(json_object_get(s, "id")) ?: "?",
		       json_string_value(json_object_get(s, "sandbox")) ?: "?",
		       json_string_value(json_object_get(s, "template")) ?: "?",
		       json_is_true(json_object_get(s, "memory")) ? "yes" : "no",
		       (long long)json_integer_value(json_object_get(s, "size_bytes")),
		       json_string_value(json_object_get(s, "created_at")) ?: "?");
}

static int snapshot_ls(int argc, char **argv)
{
	struct cli_values v;
	_cleanup_(cli_args_done) struct cli_args a = {};
	_cleanup_(client_response_done) struct client_response res = {};
	int r = cli_parse_cmd(CLI_SNAPSHOT_LS, "snapshot ls [OPTIONS]", NULL, argc, argv, 0,
			      CLI_NO_COMMAND, &v, &a);
	if (r != CLI_GO_ON)
		return r;
	if ((r = cli_call(v.socket, "GET", "/v1/snapshots", NULL, &res)))
		return r;
	if (v.json)
		cli_print_json(res.json);
	else
		print_snapshots(json_object_get(res.json, "snapshots"));
	return 0;
}

static int snapshot_rm(int argc, char **argv)
{
	struct cli_values v;
	_cleanup_(cli_args_done) struct cli_args a = {};
	_cleanup_(client_response_done) struct client_response res = {};
	char path[96];
	int r = cli_parse_cmd(CLI_SNAPSHOT_RM, "snapshot rm [OPTIONS] ID", NULL, argc, argv, 1,
			      CLI_NO_COMMAND, &v, &a);
	if (r != CLI_GO_ON)
		return r;
	if (!client_valid_id(a.pos[0], strlen(a.pos[0]))) {
		log_error("snapshot rm: '%s' is not a snapshot id", a.pos[0]);
		return CORDON_EXIT_USAGE;
	}
	snprintf(path, sizeof(path), "/v1/snapshots/%s", a.pos[0]);
	return cli_call(v.socket, "DELETE", path, NULL, &res);
}

int cmd_snapshot(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "ls") == 0)
		return snapshot_ls(argc - 1, argv + 1);
	if (argc > 1 && strcmp(argv[1], "rm") == 0)
		return snapshot_rm(argc - 1, argv + 1);
	return simple(CLI_SNAPSHOT, "snapshot [OPTIONS] ID | snapshot ls | snapshot rm ID",
		      "/snapshots", "id", argc, argv);
}

/* One child's id per line; the failures on stderr, and then exit status 1. */
static int print_children(json_t *children)
{
	json_t *child;
	size_t i;
	int failed = 0;
	json_array_foreach(children, i, child) {
		const char *id = json_string_value(json_object_get(child, "id"));
		if (id) {
			printf("%s\n", id);
			continue;
		}
		failed = 1;
		fprintf(stderr, "cordon: fork: child %zu: %s\n", i,
			json_string_value(json_object_get(json_object_get(child, "error"), "message")) ?: "failed");
	}
	return failed;
}

int cmd_fork(int argc, char **argv)
{
	struct cli_values v;
	_cleanup_(cli_args_done) struct cli_args a = {};
	_cleanup_(client_response_done) struct client_response res = {};
	char path[256];
	long long secs;
	int r = cli_parse_cmd(CLI_FORK, "fork [OPTIONS] ID", NULL, argc, argv, 1, CLI_NO_COMMAND,
			      &v, &a);
	if (r != CLI_GO_ON)
		return r;
	int t = cli_seconds("timeout", v.timeout_ms, 1, &secs);
	if (t < 0 && t != -ENOENT)
		return CORDON_EXIT_USAGE;
	_cleanup_(json_decrefp) json_t *req =
		json_pack("{s:I}", "count", (json_int_t)(v.count == CLI_UNSET ? 1 : v.count));
	if (!req || (t == 0 && json_object_set_new(req, "timeout_s", json_integer(secs)) < 0))
		return 1;
	if (cli_sandbox_path(path, sizeof(path), a.pos[0], "/fork") < 0)
		return CORDON_EXIT_USAGE;
	if ((r = cli_call(v.socket, "POST", path, req, &res)))
		return r;
	if (v.json) {
		cli_print_json(res.json);
		return 0;
	}
	return print_children(res.json);
}
