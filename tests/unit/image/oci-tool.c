/* Test driver for src/image: `oci-tool apply ROOT LAYER [MAX_BYTES]` (LAYER "-" is stdin)
 * and `oci-tool import ROOT ARCHIVE [MAX_BYTES]`. Prints the error line and exits 1 on
 * failure; after an import, prints the image config one "key=value" a line. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "basic/cleanup.h"
#include "image/oci.h"

static void print_config(const struct oci_config *c)
{
	for (char **v = c->env; v && *v; v++)
		printf("env=%s\n", *v);
	for (char **v = c->cmd; v && *v; v++)
		printf("cmd=%s\n", *v);
	printf("workdir=%s\nuser=%s\n", c->working_dir ?: "", c->user ?: "");
}

int main(int argc, char **argv)
{
	struct cordon_err err = {0};
	int r;

	if (argc < 4 || argc > 5) {
		fprintf(stderr, "usage: oci-tool apply|import ROOT FILE [MAX_BYTES]\n");
		return 2;
	}
	uint64_t max = argc == 5 ? strtoull(argv[4], NULL, 0) : 1ULL << 30;
	_cleanup_close_ int root = open(argv[2], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (root < 0) {
		perror(argv[2]);
		return 2;
	}
	if (strcmp(argv[1], "apply") == 0) {
		int fd = strcmp(argv[3], "-") == 0 ? 0 : open(argv[3], O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			perror(argv[3]);
			return 2;
		}
		r = oci_apply_layer(root, fd, max, &err);
	} else {
		struct oci_config cfg = {0};
		r = oci_import(argv[3], root, max, &cfg, &err);
		if (r >= 0)
			print_config(&cfg);
		oci_config_done(&cfg);
	}
	if (r < 0) {
		fprintf(stderr, "%s\n", err.msg);
		return 1;
	}
	return 0;
}
