/* cordon info ID [--json]: one sandbox. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <cordon/cordon.h>

#include "basic/cleanup.h"
#include "basic/log.h"
#include "cli/cli.h"
#include "cli/util.h"
#include "cli/client.h"

static void info_print(json_t *sb)
{
	static const char *const strs[] = {"id", "template", "runtime", "state"};
	json_t *lim = json_object_get(sb, "limits"), *meta = json_object_get(sb, "metadata");
	_cleanup_free_ char *m = cli_metadata_string(meta);
	char rel[64];

	for (size_t i = 0; i < ELEMENTSOF(strs); i++)
		printf("%-10s %s\n", strs[i], json_string_value(json_object_get(sb, strs[i])) ?: "-");
	for (int i = 0; i < 2; i++) {
		const char *k = i ? "expires_at" : "created_at";
		const char *iso = json_string_value(json_object_get(sb, k));
		cli_relative_time(iso, rel, sizeof(rel));
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

	int r = cli_parse_cmd(CLI_INFO, "info [OPTIONS] ID", NULL, argc, argv, 1, CLI_NO_COMMAND,
			      &co, &a);
	if (r != CLI_GO_ON)
		return r;
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
