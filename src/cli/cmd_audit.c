/* cordon audit verify FILE: execs cordon-audit (audit_main.c), which checks an audit file's
 * hash chain locally; a binary of its own so that cordon does not load libcrypto. */
#include "cli/cli.h"
#include "cli/util.h"

int cmd_audit(int argc, char **argv)
{
	return cli_exec_helper("cordon-audit", "CORDON_AUDIT", argv);
}
