/* cordon-audit verify FILE: checks an audit file's hash chain, no daemon needed. `cordon
 * audit` runs this binary, which alone of the CLI links libcrypto. */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <cordon/cordon.h>

#include "basic/log.h"
#include "audit/audit.h"

static int audit_verify_file(const char *file)
{
	struct audit_verify_result res;

	/* audit_verify opens @name relative to the directory fd: AT_FDCWD takes any path. */
	int r = audit_verify(AT_FDCWD, file, &res);
	if (r == 0) {
		printf("ok: %" PRIu64 " records\n", res.records);
		return 0;
	}
	log_error("audit verify %s: %s", file, res.msg);
	return 1;
}

int main(int argc, char **argv)
{
	static const char usage[] = "usage: cordon audit verify FILE\n\n"
				    "Checks the hash chain of an audit file (no daemon needed).\n"
				    "exit status: 0 intact, 1 not intact or unreadable, 2 usage.\n";

	if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		fputs(usage, stdout);
		return 0;
	}
	if (argc == 3 && strcmp(argv[1], "verify") == 0 && strcmp(argv[2], "--help") == 0) {
		fputs(usage, stdout);
		return 0;
	}
	if (argc != 3 || strcmp(argv[1], "verify") != 0) {
		fputs(usage, stderr);
		return CORDON_EXIT_USAGE;
	}
	return audit_verify_file(argv[2]);
}
