/* cordon kill ID...: destroys sandboxes; the exit status is the first failure's. */
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
