/* cordon run --secret NAME=VALUE@HOST[,HOST] (or NAME@HOST..., the value then taken from
 * cordon run's own environment variable NAME): the sandbox gets NAME=<a placeholder made for
 * this run>, the value goes to cordon-egress over its control socket only, and the sandbox
 * trusts the Cordon egress CA that intercepts those hosts. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include <cordon/cordon.h>

#include "net/secretenv.h"

#define RUN_SECRETS_MAX SECRETENV_MAX
#define RUN_SECRET_HOSTS_MAX SECRETENV_HOSTS_MAX

struct run_secrets {
	struct secret_desc s[RUN_SECRETS_MAX]; /* values: malloc'd, locked, wiped by run_secrets_done() */
	size_t n;
	char env[RUN_SECRETS_MAX + SECRETENV_CA_VARS_N][320];
	char rules[RUN_SECRETS_MAX * RUN_SECRET_HOSTS_MAX][270];
	size_t n_rules;
	char trust_dir[64]; /* the bundle the sandbox trusts, removed at the end */
	char bundle[96];
};

/* One --secret; @arg is cordon run's own argv: an inline value is overwritten there, so that
 * `ps` shows it no longer (it did for the moment between exec and here). */
int run_secret_add(struct run_secrets *rs, char *arg);
/* --secret-in NAME=header,query,body: where in a request the proxy may substitute NAME's
 * placeholder (default: headers only). */
int run_secret_in(struct run_secrets *rs, const char *arg);
/* The allow rules (HOST:443) the secrets imply when no --net was given. */
const char *const *run_secrets_rules(struct run_secrets *rs, size_t *ret_n);
/* After the proxy made or loaded the CA in @ca_dir: placeholders, the sandbox's variables
 * (NAME, SSL_CERT_FILE, REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, NODE_EXTRA_CA_CERTS) added to
 * @spec's env array @env, and the CA bundle bound in (@rootfs NULL: the host template). */
int run_secrets_prepare(struct run_secrets *rs, const char *ca_dir, const char *rootfs,
			struct cordon_spec *spec, const char **env, char **bind_buf);
/* [{"name","placeholder","value","hosts"}] for the proxy's set request. */
json_t *run_secrets_json(const struct run_secrets *rs);
/* One event of the proxy: a secret.misuse is told on stderr. */
void run_secrets_event(json_t *ev, void *data);
void run_secrets_done(struct run_secrets *rs);
