/* The E2B-compatible surface (docs/e2b.md): E2B's own SDKs, pointed at cordond with
 * E2B_API_URL and E2B_SANDBOX_URL (or E2B_DOMAIN), work unchanged. One listener
 * (--e2b-listen) serves both of E2B's planes:
 *
 *   e2b_api.c   the control plane (REST/JSON, X-API-KEY): /sandboxes, /v2/sandboxes, ...
 *   e2b_envd.c  what E2B's in-sandbox daemon (envd) serves, here by cordond over the agent:
 *               Connect-RPC process.Process and filesystem.Filesystem (connect.c), and the
 *               /files REST upload and download (multipart.c), for the sandbox the
 *               E2b-Sandbox-Id header (or a <port>-<id>.<domain> Host) names.
 *
 * Both are route tables over the service layer (service.h), like v1.c. This header holds what
 * they share: ids, access tokens, the create body. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include <cordon/err.h>

#include "spec/api.h"

struct sbx;
struct ctx;

/* The envd version advertised: the lowest whose features E2B's SDK uses are all here
 * (0.5.7: octet-stream and gzip uploads, stdin that can be closed, a default user; PTYs and
 * recursive watches, which the SDK asks of 0.1.4 and later). */
#define E2B_ENVD_VERSION "0.5.7"
#define E2B_ENVD_PORT	 49983
#define E2B_CODE_PORT	 49999 /* @e2b/code-interpreter's server (e2b_code.c) */
#define E2B_ID_LEN	 20 /* Cordon's id without "sb-": [a-z2-7] */
#define E2B_TOKEN_LEN	 64 /* hex of an HMAC-SHA256 */
/* Reserved metadata key: present ("false") on a sandbox made with secure: false, whose envd
 * then needs no access token. Not shown to E2B clients. */
#define E2B_META_INSECURE "e2b.secure"

/* ---- the create body (e2b_create.c: pure, over src/spec) ---- */

/* E2B's NewSandbox {templateID, timeout, metadata, envVars, secure, allow_internet_access,
 * autoPause, mcp, network, ...} as Cordon's create request, parsed and checked by
 * api_create_parse(). What Cordon does not do is accepted and ignored (docs/e2b.md);
 * @aliases (@n of them) map E2B's template names (its SDKs' defaults: "base",
 * "code-interpreter-v1") onto Cordon templates, any other name is Cordon's; @have_network:
 * whether the server can give sandboxes a network (allow_internet_access asks for "public"
 * only then). */
struct e2b_create {
	struct api_create *req;
	bool secure;
};
struct e2b_alias {
	const char *e2b, *cordon;
};
int e2b_create_parse(const char *body, size_t len, uint32_t max_timeout_s,
		     const struct e2b_alias *aliases, size_t n, bool have_network,
		     struct e2b_create *ret, struct cordon_err *err);
void e2b_create_done(struct e2b_create *c);

/* ---- shared by both planes (e2b_api.c) ---- */

/* "sb-" + @e2b_id into @ret; false when @e2b_id cannot be one of ours. */
bool e2b_sbx_id(const char *e2b_id, size_t len, char ret[E2B_ID_LEN + 4]);
/* The access token of envd for sandbox @id (Cordon's): HMAC of the server's key; false
 * without a key. */
bool e2b_access_token(const char *id, char ret[E2B_TOKEN_LEN + 1]);
/* The token of the sandbox's other ports (E2B-Traffic-Access-Token): what
 * @e2b/code-interpreter sends to port 49999 on every call (its contexts' calls carry no
 * X-Access-Token); another HMAC, so that it opens no envd call. */
bool e2b_traffic_token(const char *id, char ret[E2B_TOKEN_LEN + 1]);
bool e2b_secure(const struct sbx *s);
/* A sandbox of the service's JSON (sbx_json) as E2B's Sandbox, SandboxDetail or
 * ListedSandbox: @detail adds what GET /sandboxes/{id} has, @token the access token. */
json_t *e2b_sandbox_json(const json_t *v1, bool detail, bool token, bool secure);

/* E2B's error body {"code": <HTTP status>, "message"}: both planes' renderer. */
char *e2b_render_error(enum api_error e, const char *message);
