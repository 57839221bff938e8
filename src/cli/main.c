/* cordon: the command line, a dispatch table of subcommands (one file each: cmd_<name>.c).
 * `cordon run` builds a sandbox in-process through the runtime; the other subcommands are
 * clients of cordond. A new subcommand is one row here, one declaration in cli.h, one file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cordon/cordon.h>

#include "basic/cleanup.h"
#include "basic/log.h"
#include "cli/cli.h"
#include "cli/opts.h"

_Static_assert(CLI_EXIT_USAGE == CORDON_EXIT_USAGE, "the option parser's usage status");

struct subcommand {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *help;
};

static const struct subcommand subcommands[] = {
	{"run", cmd_run, "run one command in a fresh sandbox and destroy it (no daemon)"},
	{"create", cmd_create, "create a sandbox and print its id"},
	{"ls", cmd_ls, "list sandboxes"},
	{"info", cmd_info, "show a sandbox"},
	{"exec", cmd_exec, "run a command in a sandbox, streaming its output"},
	{"code", cmd_code, "run a cell of code in a sandbox's interpreter (a Jupyter kernel)"},
	{"cp", cmd_cp, "copy a file into or out of a sandbox"},
	{"logs", cmd_logs, "show a sandbox's audit records"},
	{"timeout", cmd_timeout, "set a sandbox's deadline to now + SECONDS"},
	{"network", cmd_network, "show, replace or edit a sandbox's network policy"},
	{"kill", cmd_kill, "destroy sandboxes"},
	{"pause", cmd_pause, "freeze a sandbox's processes (its TTL stops)"},
	{"resume", cmd_resume, "let a paused sandbox run again"},
	{"snapshot", cmd_snapshot, "snapshot a sandbox; snapshot ls, snapshot rm ID"},
	{"fork", cmd_fork, "snapshot a sandbox and start N children from it"},
	{"audit", cmd_audit, "verify an audit file's hash chain (no daemon)"},
	{"runtimes", cmd_runtimes, "which runtimes can run, why not, their capabilities"},
	{"volume", cmd_volume, "create, list and remove persistent volumes"},
	{"mcp", cmd_mcp, "serve the Model Context Protocol (stdio, or HTTP with --listen)"},
	{"approvals", cmd_approvals, "list the requests waiting for a decision (--follow: as they come)"},
	{"approve", cmd_approve, "let a held request go on"},
	{"deny", cmd_deny, "refuse a held request (the sandbox gets a 403)"},
	{"port-forward", cmd_port_forward, "reach a port inside a sandbox from the host"},
	{"template", cmd_template, "build, import, list, inspect, remove and gc templates (no daemon)"},
};

static int usage(FILE *f)
{
	fprintf(f, "usage: cordon [--socket PATH] COMMAND [OPTIONS]\n\ncommands:\n");
	for (size_t i = 0; i < ELEMENTSOF(subcommands); i++)
		fprintf(f, "  %-10s %s\n", subcommands[i].name, subcommands[i].help);
	fprintf(f, "\nThe client commands talk to cordond on --socket PATH, $CORDON_SOCKET or %s,\n"
		   "or on $CORDON_URL (http://HOST:PORT, with $CORDON_API_KEY).\n"
		   "'cordon COMMAND --help' tells more.\n",
		"/run/cordon/cordon.sock");
	return f == stderr ? CORDON_EXIT_USAGE : 0;
}

int main(int argc, char **argv)
{
	/* `cordon --socket PATH COMMAND`: the same as $CORDON_SOCKET for that command. */
	if (argc >= 3 && strcmp(argv[1], "--socket") == 0) {
		setenv("CORDON_SOCKET", argv[2], 1);
		unsetenv("CORDON_URL");
		argc -= 2;
		argv += 2;
	}
	if (argc < 2)
		return usage(stderr);
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)
		return usage(stdout);
	for (size_t i = 0; i < ELEMENTSOF(subcommands); i++)
		if (strcmp(argv[1], subcommands[i].name) == 0)
			return subcommands[i].run(argc - 1, argv + 1);
	log_error("unknown command '%s'", argv[1]);
	return usage(stderr);
}
