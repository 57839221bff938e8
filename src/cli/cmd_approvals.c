/* cordon approvals [--follow] [--json]: the requests cordon-egress holds for a decision
 * (GET /v1/approvals), one line each; --follow then prints each approval.pending and
 * approval.decided event as it comes (GET /v1/events?follow=1).
 * cordon approve ID [--reason R], cordon deny ID [--reason R]: POST /v1/approvals/ID. */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include <cordon/cordon.h>

#include "basic/cleanup.h"
#include "cli/cli.h"
#include "cli/client.h"

static void print_one(json_t *a)
{
	const char *kind = json_string_value(json_object_get(a, "kind"));
	const char *decision = json_string_value(json_object_get(a, "decision"));
	printf("%-18s %-26s %-7s %s%s%s", json_string_value(json_object_get(a, "id")) ?: "-",
	       json_string_value(json_object_get(a, "sandbox")) ?: "-",
	       json_string_value(json_object_get(a, "method")) ?: "-",
	       json_string_value(json_object_get(a, "host")) ?: "-",
	       json_string_value(json_object_get(a, "path")) ?: "", kind ? "  " : "");
	if (kind && decision)
		printf("%s by %s", decision, json_string_value(json_object_get(a, "decider")) ?: "?");
	else if (kind)
		printf("pending, %llds to decide", (long long)json_integer_value(json_object_get(a, "timeout_s")));
	else
		printf("  %.0fs of %llds", json_real_value(json_object_get(a, "age_s")),
		       (long long)json_integer_value(json_object_get(a, "timeout_s")));
	printf("\n");
}

static int on_event(char *line, size_t len, void *userdata)
{
	const struct cli_values *c = userdata;
	_cleanup_(json_decrefp) json_t *e = json_loadb(line, len, 0, NULL);
	const char *kind = json_string_value(json_object_get(e, "kind"));
	if (!kind || strncmp(kind, "approval.", 9) != 0)
		return 0; /* "lagged", say */
	if (c->json)
		printf("%s\n", line);
	else
		print_one(e);
	fflush(stdout);
	return 0;
}

static int follow(struct cli_values *co)
{
	_cleanup_(client_response_done) struct client_response res = {};
	_cleanup_(client_conn_freep) struct client_conn *conn = NULL;
	struct client_lines lines = {.cb = on_event, .userdata = co};
	struct client c;
	if (client_init(&c, co->socket) < 0)
		return CORDON_EXIT_USAGE;
	int r = client_get_stream(&c, "/v1/events?follow=1&kind=approval.pending,approval.decided", &res, &conn);
	if (r)
		return r;
	r = client_drain(&c, conn, client_lines_sink, &lines, false);
	if (r >= 0)
		r = client_lines_finish(&lines);
	client_lines_done(&lines);
	return r < 0 ? client_fail(&c, r) : 0;
}

int cmd_approvals(int argc, char **argv)
{
	struct cli_values co;
	_cleanup_(client_response_done) struct client_response res = {};
	_cleanup_(cli_args_done) struct cli_args a = {};
	int r = cli_parse_cmd(CLI_APPROVALS, "approvals [OPTIONS]", NULL, argc, argv, 0, CLI_NO_COMMAND, &co, &a);
	if (r != CLI_GO_ON)
		return r;
	r = cli_call(co.socket, "GET", "/v1/approvals", NULL, &res);
	if (r)
		return r;
	json_t *list = json_object_get(res.json, "approvals"), *v;
	size_t i;
	if (co.json && !co.follow)
		cli_print_json(res.json);
	else if (!co.json)
		json_array_foreach(list, i, v)
			print_one(v);
	fflush(stdout);
	return co.follow ? follow(&co) : 0;
}

static int decide(int argc, char **argv, bool allow)
{
	struct cli_values co;
	_cleanup_(client_response_done) struct client_response res = {};
	_cleanup_(cli_args_done) struct cli_args a = {};
	_cleanup_(json_decrefp) json_t *req = NULL;
	char path[128] = "/v1/approvals/";
	int r = cli_parse_cmd(CLI_DECIDE, allow ? "approve [OPTIONS] ID" : "deny [OPTIONS] ID", NULL, argc, argv,
			      1, CLI_NO_COMMAND, &co, &a);
	if (r != CLI_GO_ON)
		return r;
	if (client_urlencode(path, sizeof(path), a.pos[0]) < 0) {
		fprintf(stderr, "cordon: %s: not an approval id\n", a.pos[0]);
		return CORDON_EXIT_USAGE;
	}
	req = json_pack("{s:s, s:s?}", "decision", allow ? "allow" : "deny", "reason", co.reason);
	r = cli_call(co.socket, "POST", path, req, &res);
	if (r)
		return r;
	if (co.json)
		cli_print_json(res.json);
	else
		printf("%s %s\n", a.pos[0], allow ? "allowed" : "denied");
	return 0;
}

int cmd_approve(int argc, char **argv)
{
	return decide(argc, argv, true);
}

int cmd_deny(int argc, char **argv)
{
	return decide(argc, argv, false);
}
