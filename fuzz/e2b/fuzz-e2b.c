/* libFuzzer target for E2B's create body: any holder of an API key sends it to --e2b-listen.
 *
 * Checks beyond "no crash": a body that parses is a request Cordon's own parser accepted,
 * with a template, a timeout within the server's cap and the reserved metadata key only when
 * the body asked for secure: false. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/e2b.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cordon_err err = {};
	struct e2b_create c = {};
	static const struct e2b_alias base = {"base", "base"};
	if (e2b_create_parse((const char *)data, size, 3600, &base, 1, size & 1, &c, &err) < 0)
		return 0;
	if (!c.req || !c.req->template_name || c.req->timeout_s < 1 || c.req->timeout_s > 3600)
		abort();
	bool reserved = false;
	for (size_t i = 0; i < c.req->metadata.n; i++)
		reserved |= strcmp(c.req->metadata.items[i].key, E2B_META_INSECURE) == 0;
	if (reserved == c.secure)
		abort();
	e2b_create_done(&c);
	return 0;
}
