/* Connect-RPC's envelope and codes (connect.h): pure, for the E2B surface and its fuzzer. */
#include <errno.h>
#include <string.h>

#include "basic/cleanup.h"
#include "daemon/connect.h"

int connect_envelope_next(const uint8_t *p, size_t len, size_t max, struct connect_frame *ret)
{
	if (len < CONNECT_ENVELOPE_HEAD)
		return 0;
	uint8_t flags = p[0];
	uint32_t n = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
	if (flags & ~(CONNECT_FLAG_COMPRESSED | CONNECT_FLAG_END))
		return -EBADMSG;
	if (n > max)
		return -EMSGSIZE;
	if (len - CONNECT_ENVELOPE_HEAD < n)
		return 0;
	*ret = (struct connect_frame){.flags = flags, .data = p + CONNECT_ENVELOPE_HEAD, .len = n};
	return (int)(CONNECT_ENVELOPE_HEAD + n);
}

int connect_envelope_single(const uint8_t *p, size_t len, size_t max, struct connect_frame *ret)
{
	struct connect_frame f;
	int n = connect_envelope_next(p, len, max, &f);
	if (n < 0)
		return n;
	if (n == 0 || (size_t)n != len || (f.flags & CONNECT_FLAG_END))
		return -EBADMSG;
	if (f.flags & CONNECT_FLAG_COMPRESSED)
		return -EOPNOTSUPP;
	*ret = f;
	return 0;
}

void connect_envelope_head(uint8_t head[CONNECT_ENVELOPE_HEAD], uint8_t flags, uint32_t len)
{
	head[0] = flags;
	head[1] = (uint8_t)(len >> 24);
	head[2] = (uint8_t)(len >> 16);
	head[3] = (uint8_t)(len >> 8);
	head[4] = (uint8_t)len;
}

/* The protocol's names and HTTP statuses (connectrpc.com/docs/protocol#error-codes). */
static const struct {
	const char *name;
	int status;
} codes[_CONNECT_CODE_MAX] = {
	[CONNECT_OK] = {"ok", 200},
	[CONNECT_CANCELED] = {"canceled", 499},
	[CONNECT_UNKNOWN] = {"unknown", 500},
	[CONNECT_INVALID_ARGUMENT] = {"invalid_argument", 400},
	[CONNECT_DEADLINE_EXCEEDED] = {"deadline_exceeded", 504},
	[CONNECT_NOT_FOUND] = {"not_found", 404},
	[CONNECT_ALREADY_EXISTS] = {"already_exists", 409},
	[CONNECT_PERMISSION_DENIED] = {"permission_denied", 403},
	[CONNECT_RESOURCE_EXHAUSTED] = {"resource_exhausted", 429},
	[CONNECT_FAILED_PRECONDITION] = {"failed_precondition", 400},
	[CONNECT_ABORTED] = {"aborted", 409},
	[CONNECT_OUT_OF_RANGE] = {"out_of_range", 400},
	[CONNECT_UNIMPLEMENTED] = {"unimplemented", 501},
	[CONNECT_INTERNAL] = {"internal", 500},
	[CONNECT_UNAVAILABLE] = {"unavailable", 503},
	[CONNECT_DATA_LOSS] = {"data_loss", 500},
	[CONNECT_UNAUTHENTICATED] = {"unauthenticated", 401},
};

const char *connect_code_name(enum connect_code c)
{
	return (unsigned)c < _CONNECT_CODE_MAX ? codes[c].name : "unknown";
}

int connect_code_status(enum connect_code c)
{
	return (unsigned)c < _CONNECT_CODE_MAX ? codes[c].status : 500;
}

/* Cordon's API errors as Connect codes: what E2B's SDK turns into its own error classes. */
static const struct {
	enum api_error e;
	enum connect_code c;
} from_api[] = {
	{API_ERR_BAD_REQUEST, CONNECT_INVALID_ARGUMENT},
	{API_ERR_INVALID_FIELD, CONNECT_INVALID_ARGUMENT},
	{API_ERR_UNKNOWN_FIELD, CONNECT_INVALID_ARGUMENT},
	{API_ERR_INVALID_PATH, CONNECT_INVALID_ARGUMENT},
	{API_ERR_UNSAFE_ARCHIVE, CONNECT_INVALID_ARGUMENT},
	{API_ERR_PAYLOAD_TOO_LARGE, CONNECT_RESOURCE_EXHAUSTED},
	{API_ERR_QUOTA_EXCEEDED, CONNECT_RESOURCE_EXHAUSTED},
	{API_ERR_NOT_FOUND, CONNECT_NOT_FOUND},
	{API_ERR_CONFLICT, CONNECT_FAILED_PRECONDITION},
	{API_ERR_NOT_A_DIRECTORY, CONNECT_FAILED_PRECONDITION},
	{API_ERR_IS_A_DIRECTORY, CONNECT_FAILED_PRECONDITION},
	{API_ERR_CROSS_DEVICE, CONNECT_FAILED_PRECONDITION},
	{API_ERR_NOT_A_TERMINAL, CONNECT_FAILED_PRECONDITION},
	{API_ERR_READ_ONLY, CONNECT_PERMISSION_DENIED},
	{API_ERR_FORBIDDEN, CONNECT_PERMISSION_DENIED},
	{API_ERR_UNAUTHORIZED, CONNECT_UNAUTHENTICATED},
	{API_ERR_NO_SPACE, CONNECT_RESOURCE_EXHAUSTED},
	{API_ERR_CAPACITY, CONNECT_UNAVAILABLE},
	{API_ERR_UNAVAILABLE, CONNECT_UNAVAILABLE},
	{API_ERR_AUDIT_UNAVAILABLE, CONNECT_UNAVAILABLE},
	{API_ERR_SANDBOX_PAUSED, CONNECT_UNAVAILABLE},
	{API_ERR_SANDBOX_BUSY, CONNECT_UNAVAILABLE},
	{API_ERR_TIMEOUT, CONNECT_DEADLINE_EXCEEDED},
};

enum connect_code connect_code_from_api(enum api_error e)
{
	for (size_t i = 0; i < ELEMENTSOF(from_api); i++)
		if (from_api[i].e == e)
			return from_api[i].c;
	return CONNECT_INTERNAL;
}

int connect_timeout_parse(const char *s, uint64_t *ret_ms)
{
	uint64_t v = 0;
	size_t n = s ? strlen(s) : 0;
	if (n == 0 || n > 10)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	*ret_ms = v;
	return 0;
}
