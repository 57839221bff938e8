/* cordon logs ID [--follow] [--json]: a sandbox's audit records from cordond, one line each.
 * (cordon audit verify FILE checks a copy locally: cmd_audit.c.) */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include <cordon/cordon.h>

#include "basic/cleanup.h"
#include "basic/helper.h"
#include "basic/log.h"
#include "cli/cli.h"
#include "cli/client.h"
#include "audit/audit.h"

#define SUMMARY_VALUE_MAX 200

/* The fields worth one line, per event (docs/audit.md); others print all their fields. */
static const struct {
	const char *event;
	const char *keys[7];
} summaries[] = {
	{AUDIT_SANDBOX_CREATE, {"template", "runtime"}},
	{AUDIT_SANDBOX_DESTROY, {"reason"}},
	{AUDIT_SANDBOX_TIMEOUT, {"timeout_s"}},
	{AUDIT_PROCESS_START, {"pid", "user", "cwd", "argv"}},
	{AUDIT_PROCESS_EXIT, {"pid", "code", "signal", "timed_out", "oom", "duration_ms"}},
	{AUDIT_FILE_WRITE, {"path", "bytes"}},
	{AUDIT_FILE_REMOVE, {"path"}},
	{AUDIT_FILE_MKDIR, {"path"}},
	{AUDIT_FILE_MOVE, {"from", "to"}},
	{AUDIT_NET_DECISION, {"action", "proto", "host", "dst", "port", "rule", "reason"}},
	{AUDIT_POLICY_CHANGE, {"kind", "principal"}},
	{AUDIT_API_CALL, {"principal", "method", "path"}},
	{AUDIT_SECRET_MISUSE, {"secret", "host", "proto", "port", "reason"}},
	{AUDIT_SECRET_USE, {"secret", "host", "port"}},
	{AUDIT_LOG_RECOVERED, {"reason", "offset", "bytes"}},
};

/* key=value; an array of strings (argv) is written space-separated in brackets. */
static void print_field(const char *key, json_t *v)
{
	size_t i;
	json_t *e;

	if (json_is_string(v)) {
		printf(" %s=%.*s", key, SUMMARY_VALUE_MAX, json_string_value(v));
		return;
	}
	if (json_is_array(v)) {
		printf(" %s=[", key);
		json_array_foreach(v, i, e) {
			_cleanup_free_ char *s = json_is_string(e) ? NULL : json_dumps(e, JSON_ENCODE_ANY);
			printf("%s%.*s", i ? " " : "", SUMMARY_VALUE_MAX,
			       json_is_string(e) ? json_string_value(e) : s ?: "?");
		}
		printf("]");
		return;
	}
	_cleanup_free_ char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
	printf(" %s=%.*s", key, SUMMARY_VALUE_MAX, s ?: "?");
}

static void print_summary(const char *event, json_t *fields)
{
	const char *k;
	json_t *v;

	for (size_t i = 0; i < ELEMENTSOF(summaries); i++) {
		if (strcmp(summaries[i].event, event) != 0)
			continue;
		for (size_t j = 0; j < ELEMENTSOF(summaries[i].keys) && summaries[i].keys[j]; j++)
			if ((v = json_object_get(fields, summaries[i].keys[j])))
				print_field(summaries[i].keys[j], v);
		if (json_is_true(json_object_get(fields, "truncated")))
			printf(" (truncated)");
		return;
	}
	json_object_foreach(fields, k, v)
		print_field(k, v);
}

static int on_record(char *line, size_t len, void *userdata)
{
	const struct cli_values *c = userdata;
	_cleanup_(json_decrefp) json_t *rec = NULL;
	const char *t = "-", *event = "?";
	json_t *fields = NULL;

	rec = json_loadb(line, len, 0, NULL);
	if (c->net_only && (!rec || strcmp(json_string_value(json_object_get(rec, "event")) ?: "",
				      AUDIT_NET_DECISION) != 0))
		return 0;
	if (c->json) {
		printf("%s\n", line);
	} else {
		if (!rec || json_unpack(rec, "{s?s, s?s, s?o}", "t", &t, "event", &event, "fields",
					&fields) < 0) {
			log_error("logs: a record that is not JSON: %.100s", line);
			return 0;
		}
		printf("%s  %-16s", t, event);
		print_summary(event, fields);
		printf("\n");
	}
	if (c->follow)
		fflush(stdout);
	return 0;
}

static int logs_stream(struct cli_values *lc, const char *path)
{
	_cleanup_(client_response_done) struct client_response res = {};
	_cleanup_(client_conn_freep) struct client_conn *conn = NULL;
	struct client_lines lines = {.cb = on_record, .userdata = lc};
	struct client c;

	if (client_init(&c, lc->socket) < 0)
		return CORDON_EXIT_USAGE;
	int r = client_get_stream(&c, path, &res, &conn);
	if (r)
		return r;
	/* Following waits as long as the sandbox is quiet; a plain read is bounded. */
	r = client_drain(&c, conn, client_lines_sink, &lines, !lc->follow);
	if (r >= 0)
		r = client_lines_finish(&lines);
	client_lines_done(&lines);
	fflush(stdout);
	return r < 0 ? client_fail(&c, r) : 0;
}

int cmd_logs(int argc, char **argv)
{
	struct cli_values c;
	_cleanup_(cli_args_done) struct cli_args a = {};
	char path[256];

	int r = cli_parse_cmd(CLI_LOGS, "logs [OPTIONS] ID", NULL, argc, argv, 1, CLI_NO_COMMAND,
			      &c, &a);
	if (r != CLI_GO_ON)
		return r;
	if (cli_sandbox_path(path, sizeof(path), a.pos[0], c.follow ? "/audit?follow=1" : "/audit") < 0)
		return CORDON_EXIT_USAGE;
	return logs_stream(&c, path);
}
