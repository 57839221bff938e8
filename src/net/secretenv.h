/* What a sandbox with secrets gets, for both controllers of cordon-egress (cordon run's
 * --secret, cordond's "secrets" at create): a placeholder per secret, the trust bundle (the
 * host's CA bundle plus the Cordon egress CA) and where it is bound in the sandbox, the CA
 * variables pointing at it, the parse of a --secret argument, and a secret's entry in the
 * proxy's set request. The values themselves stay with the caller, who holds them in locked
 * memory (basic/secmem.h) and wipes them.
 *
 *     struct secret_desc d = {0};
 *     secretenv_placeholder(d.placeholder, sizeof(d.placeholder));
 *     secretenv_bundle_write("/run/x/ca-certificates.crt", ca_dir);
 *     bind it at secretenv_bundle_dst(rootfs), set secretenv_ca_vars[i]=that path
 *     json_array_append_new(secrets, secretenv_json(&d));    // for egressctl_set_line_secrets
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#define SECRETENV_MAX 16        /* secrets of a sandbox (the proxy's bound) */
#define SECRETENV_HOSTS_MAX 8   /* hosts of a secret */
#define SECRETENV_NAME_MAX 64   /* bytes of a name, NUL included */
#define SECRETENV_VALUE_MAX 4096
#define SECRETENV_PH_SIZE 48    /* "cordon-secret-" and 32 hex digits, NUL included */

enum { SECRETENV_IN_HEADER = 1, SECRETENV_IN_QUERY = 2, SECRETENV_IN_BODY = 4 };

struct secret_desc {
	char name[SECRETENV_NAME_MAX];
	char placeholder[SECRETENV_PH_SIZE];
	char *value; /* the caller's (locked memory, wiped by it) */
	size_t value_len;
	char hosts[SECRETENV_HOSTS_MAX][256];
	size_t n_hosts;
	unsigned in; /* SECRETENV_IN_*; 0: header */
};

/* SSL_CERT_FILE, REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, NODE_EXTRA_CA_CERTS */
#define SECRETENV_CA_VARS_N 4
extern const char *const secretenv_ca_vars[SECRETENV_CA_VARS_N];
/* "header", "query", "body": bit i of secret_desc.in */
extern const char *const secretenv_in_names[3];

/* A fresh random placeholder into @buf (SECRETENV_PH_SIZE bytes); -EIO without randomness. */
int secretenv_placeholder(char *buf, size_t size);
/* [A-Za-z_][A-Za-z0-9_]* and shorter than SECRETENV_NAME_MAX. */
bool secretenv_name_ok(const char *s, size_t n);
/* A DNS name the proxy can intercept: no IP literal, no wildcard. Lower-cased into @out. */
bool secretenv_host_ok(const char *s, size_t n);
/* "a.example,b.example" -> @d's hosts (lower case); -EINVAL on a bad or missing one. */
int secretenv_parse_hosts(struct secret_desc *d, const char *list);
/* Splits --secret's NAME=VALUE@HOST[,HOST] (or NAME@HOST..., @ret_value NULL then): the name
 * and hosts into @d, the value's place in @arg into @ret_value and @ret_len. -EINVAL if it
 * does not parse. */
int secretenv_parse_arg(struct secret_desc *d, char *arg, char **ret_value, size_t *ret_len);
/* The host's CA bundle and @ca_dir/ca.crt into @path (replaced atomically, mode 0644). */
int secretenv_bundle_write(const char *path, const char *ca_dir);
/* Where the bundle goes in a sandbox of @rootfs (NULL: the host template): over the image's
 * /etc/ssl/certs/ca-certificates.crt, or /run/cordon/ca-bundle.crt where it has none. */
const char *secretenv_bundle_dst(const char *rootfs);
/* {"name","placeholder","value","hosts","in"}: the proxy's form of @d; holds the value. */
json_t *secretenv_json(const struct secret_desc *d);
/* {"name","hosts","in"}: what may be shown of @d (never the value or the placeholder). */
json_t *secretenv_public_json(const struct secret_desc *d);
