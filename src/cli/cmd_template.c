/* cordon template ...: execs cordon-template (template_main.c), the store, importer and
 * builder; a binary of its own so that cordon does not load libarchive and libcrypto. */
#include "cli/cli.h"
#include "cli/util.h"

int cmd_template(int argc, char **argv)
{
	return cli_exec_helper("cordon-template", "CORDON_TEMPLATE", argv);
}
