/* libFuzzer target for the HTTP front's request head reader: bytes from any client, TCP
 * strangers included, read before the API key is checked.
 *
 * Checks beyond "no crash": the head's end lies inside the input and after a newline; the path
 * is NUL-terminated, begins the target and holds no '?'; a head that is accepted has at most
 * one framing, and the values it keeps (Authorization, X-API-KEY, the query, Host,
 * E2b-Sandbox-Id, X-Access-Token) lie inside the head. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/reqhead.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data;
	size_t n = reqhead_end(p, size);
	if (n > size || (n && p[n - 1] != '\n'))
		abort();
	struct reqhead h;
	reqhead_parse(p, n ? n : size, &h);
	if (memchr(h.path, '\0', sizeof(h.path)) == NULL || strchr(h.path, '?'))
		abort();
	if (!h.bad && h.has_cl && h.chunked)
		abort();
	const char *end = p + (n ? n : size);
	const struct {
		const char *v;
		size_t len;
	} kept[] = {{h.auth, h.auth_len},	      {h.api_key, h.api_key_len},
		    {h.query, h.query_len},	      {h.host, h.host_len},
		    {h.sandbox_id, h.sandbox_id_len}, {h.access_token, h.access_token_len},
		    {h.traffic_token, h.traffic_token_len}};
	for (size_t i = 0; i < sizeof(kept) / sizeof(kept[0]); i++)
		if (kept[i].v && (kept[i].v < p || kept[i].v + kept[i].len > end))
			abort();
	return 0;
}
