/* CORDON_TASK_TOKEN: a per-sandbox token that lets an operator's own services tell which task
 * a call came from. A JWT (RFC 7519) signed with HMAC-SHA256 (HS256):
 *
 *     base64url({"alg":"HS256","typ":"JWT"}) . base64url(claims) . base64url(HMAC(key, a.b))
 *     claims: {"iss":"cordond","sub":<sandbox id>,"template":<name>,"metadata":{..},
 *              "iat":<created, s>,"exp":<the sandbox's deadline, s>}
 *
 * The key (32 random bytes) is <state-dir>/task-token.key, made at the first start (0600) and
 * held in locked memory; GET /v1/task-token-key gives it on the unix socket only. The token
 * is re-issued when the deadline moves (POST .../timeout): processes started after that get
 * the new one. A leaf: it calls no other file of the daemon. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "basic/base64.h"
#include "basic/cleanup.h"
#include "basic/log.h"
#include "basic/secmem.h"
#include "daemon/daemon.h"

#define KEY_LEN 32
#define ENV_NAME "CORDON_TASK_TOKEN="

static uint8_t *key; /* KEY_LEN bytes in a locked page; NULL: no tokens */

int token_start(void)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/task-token.key", D.cfg.state_dir);
	if (!(key = secmem_new(SECMEM_PAGE)))
		return -ENOMEM;
	int r = secmem_key_file(path, key, KEY_LEN);
	if (r < 0) {
		log_error("task tokens: %s: %s", path, r == -EINVAL ? "not a key of 32 bytes" : strerror(-r));
		key = (secmem_free(key, SECMEM_PAGE), NULL);
	}
	return r;
}

/* base64url(@a) "." base64url(@b) "." base64url(HMAC-SHA256(key, first two)). */
static char *sign(const char *a, const char *b)
{
	uint8_t mac[EVP_MAX_MD_SIZE];
	unsigned mlen = 0;
	_cleanup_free_ char *ha = base64url_encode(a, strlen(a)), *hb = base64url_encode(b, strlen(b));
	_cleanup_free_ char *input = NULL, *sig = NULL;
	if (!ha || !hb || asprintf(&input, "%s.%s", ha, hb) < 0) {
		input = NULL;
		return NULL;
	}
	if (!HMAC(EVP_sha256(), key, KEY_LEN, (const uint8_t *)input, strlen(input), mac, &mlen))
		return NULL;
	if (!(sig = base64url_encode(mac, mlen)))
		return NULL;
	char *out = NULL;
	return asprintf(&out, "%s.%s", input, sig) < 0 ? NULL : out;
}

bool token_derive(const char *label, const char *msg, char ret[65])
{
	uint8_t mac[EVP_MAX_MD_SIZE];
	unsigned mlen = 0;
	_cleanup_free_ char *input = NULL;
	if (!key || asprintf(&input, "%s:%s", label, msg) < 0) {
		input = NULL;
		return false;
	}
	if (!HMAC(EVP_sha256(), key, KEY_LEN, (const uint8_t *)input, strlen(input), mac, &mlen) ||
	    mlen != 32)
		return false;
	for (unsigned i = 0; i < mlen; i++)
		snprintf(ret + 2 * i, 3, "%02x", mac[i]);
	return true;
}

char *token_issue(const struct sbx *s)
{
	if (!key)
		return NULL;
	_cleanup_(json_decrefp) json_t *claims = json_pack(
		"{s:s, s:s, s:s, s:O, s:I, s:I}", "iss", "cordond", "sub", s->id, "template",
		s->template_name[0] ? s->template_name : "host", "metadata", s->metadata, "iat",
		(json_int_t)(s->created_ms / 1000), "exp", (json_int_t)(s->deadline_ms / 1000));
	_cleanup_free_ char *body = claims ? json_dumps(claims, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	return body ? sign("{\"alg\":\"HS256\",\"typ\":\"JWT\"}", body) : NULL;
}

int token_env(struct sbx *s)
{
	_cleanup_free_ char *t = token_issue(s);
	char *entry = NULL;
	if (!key)
		return 0; /* no key: no tokens (logged at start) */
	if (!t || asprintf(&entry, ENV_NAME "%s", t) < 0)
		return -ENOMEM;
	for (size_t i = 0; i < s->n_env; i++)
		if (strncmp(s->env[i], ENV_NAME, strlen(ENV_NAME)) == 0) {
			free(s->env[i]);
			s->env[i] = entry;
			return 0;
		}
	char **v = realloc(s->env, (s->n_env + 2) * sizeof(char *));
	if (!v) {
		free(entry);
		return -ENOMEM;
	}
	s->env = v;
	s->env[s->n_env++] = entry;
	s->env[s->n_env] = NULL;
	return 0;
}

json_t *token_key_json(void)
{
	_cleanup_free_ char *k = key ? base64url_encode(key, KEY_LEN) : NULL;
	json_t *o = k ? json_pack("{s:s, s:s, s:s}", "alg", "HS256", "format", "JWT", "key", k) : NULL;
	if (k)
		explicit_bzero(k, strlen(k));
	return o;
}
