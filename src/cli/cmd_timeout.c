/* cordon timeout ID SECONDS: the sandbox's deadline becomes now + SECONDS. */
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

int cmd_timeout(int argc, char **argv)
{
	struct cli_values co;
	_cleanup_(client_response_done) struct client_response res = {};
	_cleanup_(cli_args_done) struct cli_args a = {};
	_cleanup_(json_decrefp) json_t *req = NULL;
	long long secs;
	char path[256];

	int r = cli_parse_cmd(CLI_TIMEOUT, "timeout [OPTIONS] ID SECONDS", NULL, argc, argv, 2,
			      CLI_NO_COMMAND, &co, &a);
	if (r != CLI_GO_ON)
		return r;
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
