/* libFuzzer target for the HTTP Host sniffer: a request head from inside a sandbox, read by
 * the egress proxy before it decides where to connect.
 *
 * Checks beyond "no crash": a host that comes back is lowercase LDH without a trailing dot,
 * never an IP literal, with a port of 1-65535; a smaller output buffer gives the same
 * verdict or -ENOBUFS; the verdict is one of the documented ones. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "net/sniff.h"
#include "policy/egress.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char host[256], small[16];
	uint16_t port = 0, port2 = 0;
	int r = sniff_http_host(data, size, host, sizeof(host), &port);

	if (r != 0 && r != -EAGAIN && r != -ENOENT && r != -EBADMSG)
		abort();
	if (r == -EAGAIN && size >= SNIFF_HTTP_MAX)
		abort();
	if (r == 0) {
		size_t len = strlen(host);
		if (port == 0 || len == 0 || host[len - 1] == '.' ||
		    !egress_name_valid(host, len, false) || egress_name_is_ip_literal(host, len))
			abort();
		for (size_t i = 0; i < len; i++)
			if (host[i] >= 'A' && host[i] <= 'Z')
				abort();
	}
	int r2 = sniff_http_host(data, size, small, sizeof(small), &port2);
	if ((r == 0 && strlen(host) >= sizeof(small)) ? r2 != -ENOBUFS : r2 != r)
		abort();
	if (r2 == 0 && (strcmp(small, host) != 0 || port2 != port))
		abort();
	return 0;
}
