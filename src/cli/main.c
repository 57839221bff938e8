/* cordon: the command line. `cordon run` builds a sandbox in-process through libcordon; the
 * other subcommands are clients of cordond. */
#include <stdio.h>
#include <string.h>

#include <cordon/cordon.h>

#include "basic/cleanup.h"
#include "basic/log.h"
#include "cli/cli.h"

struct subcommand {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *help;
};

static const struct subcommand subcommands[] = {
	{"run", cmd_run, "run one command in a fresh sandbox and destroy it (no daemon)"},
};

static int usage(FILE *f)
{
	fprintf(f, "usage: cordon COMMAND [OPTIONS]\n\ncommands:\n");
	for (size_t i = 0; i < ELEMENTSOF(subcommands); i++)
		fprintf(f, "  %-10s %s\n", subcommands[i].name, subcommands[i].help);
	fprintf(f, "\n'cordon COMMAND --help' tells more.\n");
	return f == stderr ? CORDON_EXIT_USAGE : 0;
}

int main(int argc, char **argv)
{
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
