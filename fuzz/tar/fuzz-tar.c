/* libFuzzer target for basic/tar.c's reader: a tar from a sandbox or a client. Fed whole and
 * in pieces of the first byte's size, its low bit choosing the reader's abs_links mode (a
 * tree out of a sandbox); an entry it hands out must be safe by its own rules, and both feeds
 * must agree. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "basic/tar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool abs_links;

static int check(const struct tar_entry *e, void *arg)
{
	bool link_ok = abs_links ? tar_link_kept(e->name, e->link) : tar_link_safe(e->name, e->link);
	if (!tar_name_safe(e->name) || (e->type == TAR_SYMLINK && !link_ok))
		abort();
	(*(int *)arg)++;
	return 0;
}

static struct tar_reader a, b;

static int run(struct tar_reader *r, const uint8_t *p, size_t n, size_t step, int *count)
{
	static const struct tar_ops ops = {.entry = check};
	tar_reader_init(r, 1u << 30, 10000);
	r->abs_links = abs_links;
	for (size_t off = 0; off < n; off += step) {
		int k = tar_reader_feed(r, p + off, n - off < step ? n - off : step, &ops, count);
		if (k < 0)
			return k;
	}
	return tar_reader_finish(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int n1 = 0, n2 = 0;
	size_t step = size ? (size_t)data[0] + 1 : 1;
	abs_links = size && (data[0] & 1);
	int r1 = run(&a, data, size, size ? size : 1, &n1);
	int r2 = run(&b, data, size, step, &n2);
	if (r1 != r2 || n1 != n2)
		abort();
	return 0;
}
