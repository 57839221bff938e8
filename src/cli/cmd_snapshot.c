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

struct snap_ctx {
	struct cli_common co;
	long long count, timeout_s;
};

static int opt_count(void *ctx, const char *a)
{
	char *end;
	long long n = strtoll(a, &end, 10);
	if (*end || n < 1 || n > 100) {
		log_error("fork: --count: expected 1 to 100");
		return -EINVAL;
	}
	((struct snap_ctx *)ctx)->count = n;
	return 0;
}

static int opt_timeout(void *ctx, const char *a)
{
	return cli_parse_seconds("fork: --timeout", a, 1, &((struct snap_ctx *)ctx)->timeout_s);
}

static const struct cli_option plain_options[] = {
	{"json", NULL, cli_opt_json, "print the answer as JSON"},
	{"socket", "PATH", cli_opt_socket, "cordond's socket"},
};

static const struct cli_option fork_options[] = {
	{"count", "N", opt_count, "children to start, 1 to 100 [1]"},
	{"timeout", "SECONDS", opt_timeout, "the children's TTL [the parent's]"},
	{"json", NULL, cli_opt_json, "print the answer as JSON"},
	{"socket", "PATH", cli_opt_socket, "cordond's socket"},
};

/* Parses `NAME [OPTIONS] ARGS` wanting @n_pos positionals; 0 to go on, else the status. */
static int parse(const char *name, const char *synopsis, const struct cli_option *opts, size_t n,
		 struct snap_ctx *c, int argc, char **argv, int n_pos, struct cli_args *a)
{
	int r = cli_parse(name, opts, n, c, argc, argv, 0, a);
	if (r == 1) {
		cli_print_usage(stdout, synopsis, opts, n);
		return -1;
	}
	if (r < 0 || a->n_pos != n_pos || a->n_rest) {
		if (r >= 0)
			log_error("%s: usage: cordon %s", name, synopsis);
		return CORDON_EXIT_USAGE;
	}
	return 0;
}

/* POST /v1/sandboxes/ID<suffix> with @req; prints the JSON or @field of the answer. */
static int post(struct snap_ctx *c, const char *id, const char *suffix, json_t *req,
		const char *field)
{
	_cleanup_(client_response_done) struct client_response res = {};
	char path[256];
	if (cli_sandbox_path(path, sizeof(path), id, suffix) < 0)
		return CORDON_EXIT_USAGE;
	int r = cli_call(&c->co, "POST", path, req, &res);
	if (r)
		return r;
	if (c->co.json || !field)
		cli_print_json(res.json);
	else
		printf("%s\n", json_string_value(json_object_get(res.json, field)) ?: "?");
	return 0;
}

static int simple(const char *name, const char *suffix, const char *field, int argc, char **argv)
{
	struct snap_ctx c = {};
	_cleanup_(cli_args_done) struct cli_args a = {};
	char synopsis[64];
	snprintf(synopsis, sizeof(synopsis), "%s [OPTIONS] ID", name);
	int r = parse(name, synopsis, plain_options, ELEMENTSOF(plain_options), &c, argc, argv, 1, &a);
	if (r)
		return r < 0 ? 0 : r;
	return post(&c, a.pos[0], suffix, NULL, field);
}

int cmd_pause(int argc, char **argv)
{
	return simple("pause", "/pause", "state", argc, argv);
}

int cmd_resume(int argc, char **argv)
{
	return simple("resume", "/resume", "state", argc, argv);
}

static int snapshot_ls(int argc, char **argv)
{
	struct snap_ctx c = {};
	_cleanup_(cli_args_done) struct cli_args a = {};
	_cleanup_(client_response_done) struct client_response res = {};
	int r = parse("snapshot ls", "snapshot ls [OPTIONS]", plain_options,
		      ELEMENTSOF(plain_options), &c, argc, argv, 0, &a);
	if (r)
		return r < 0 ? 0 : r;
	if ((r = cli_call(&c.co, "GET", "/v1/snapshots", NULL, &res)))
		return r;
	if (c.co.json) {
		cli_print_json(res.json);
		return 0;
	}
	json_t *list = json_object_get(res.json, "snapshots"), *s;
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
	return 0;
}

static int snapshot_rm(int argc, char **argv)
{
	struct snap_ctx c = {};
	_cleanup_(cli_args_done) struct cli_args a = {};
	_cleanup_(client_response_done) struct client_response res = {};
	char path[96];
	int r = parse("snapshot rm", "snapshot rm [OPTIONS] ID", plain_options,
		      ELEMENTSOF(plain_options), &c, argc, argv, 1, &a);
	if (r)
		return r < 0 ? 0 : r;
	if (!client_valid_id(a.pos[0], strlen(a.pos[0]))) {
		log_error("snapshot rm: '%s' is not a snapshot id", a.pos[0]);
		return CORDON_EXIT_USAGE;
	}
	snprintf(path, sizeof(path), "/v1/snapshots/%s", a.pos[0]);
	return cli_call(&c.co, "DELETE", path, NULL, &res);
}

int cmd_snapshot(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "ls") == 0)
		return snapshot_ls(argc - 1, argv + 1);
	if (argc > 1 && strcmp(argv[1], "rm") == 0)
		return snapshot_rm(argc - 1, argv + 1);
	return simple("snapshot", "/snapshots", "id", argc, argv);
}

int cmd_fork(int argc, char **argv)
{
	struct snap_ctx c = {.count = 1};
	_cleanup_(cli_args_done) struct cli_args a = {};
	int r = parse("fork", "fork [OPTIONS] ID", fork_options, ELEMENTSOF(fork_options), &c, argc,
		      argv, 1, &a);
	if (r)
		return r < 0 ? 0 : r;
	_cleanup_(json_decrefp) json_t *req = json_pack("{s:I}", "count", (json_int_t)c.count);
	if (c.timeout_s)
		json_object_set_new(req, "timeout_s", json_integer(c.timeout_s));
	_cleanup_(client_response_done) struct client_response res = {};
	char path[256];
	if (cli_sandbox_path(path, sizeof(path), a.pos[0], "/fork") < 0)
		return CORDON_EXIT_USAGE;
	if ((r = cli_call(&c.co, "POST", path, req, &res)))
		return r;
	if (c.co.json) {
		cli_print_json(res.json);
		return 0;
	}
	json_t *child;
	size_t i;
	int failed = 0;
	json_array_foreach(res.json, i, child) {
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
