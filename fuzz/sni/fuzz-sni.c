/* libFuzzer target for the TLS ClientHello SNI sniffer: bytes from inside a sandbox, read by
 * the egress proxy before it decides where to connect.
 *
 * Checks beyond "no crash": a name that comes back is lowercase LDH without a trailing dot
 * and never matches as an IP literal; a smaller output buffer gives the same verdict or
 * -ENOBUFS; the verdict is one of the documented ones. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "net/sniff.h"
#include "policy/egress.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_name(const char *name)
{
	size_t len = strlen(name);

	if (len == 0 || len > EGRESS_NAME_MAX || name[len - 1] == '.' ||
	    !egress_name_valid(name, len, false) || egress_name_is_ip_literal(name, len))
		abort();
	for (size_t i = 0; i < len; i++)
		if (name[i] >= 'A' && name[i] <= 'Z')
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char name[256], small[16];
	int r = sniff_tls_sni(data, size, name, sizeof(name));

	if (r != 0 && r != -EAGAIN && r != -ENOENT && r != -EBADMSG)
		abort();
	if (r == -EAGAIN && size >= SNIFF_TLS_WAIT_MAX)
		abort(); /* it must not wait for ever */
	if (r == 0)
		check_name(name);
	int r2 = sniff_tls_sni(data, size, small, sizeof(small));
	if ((r == 0 && strlen(name) >= sizeof(small)) ? r2 != -ENOBUFS : r2 != r)
		abort();
	if (r2 == 0 && strcmp(small, name) != 0)
		abort();
	return 0;
}
