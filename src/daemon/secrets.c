/* A sandbox's secrets in cordond: the real values in locked, undumped pages (basic/secmem.h),
 * a placeholder per secret in the sandbox's environment, the proxy's form of them (sent by
 * network.c over cordon-egress's control socket) and what may be shown (names, hosts and
 * where they go; never a value or a placeholder). Nothing here is written anywhere: not the
 * state database, not the audit log, not a message; a daemon that restarts has none (its
 * sandboxes died with it). A leaf: it calls no other file of the daemon. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "basic/secmem.h"
#include "daemon/daemon.h"
#include "daemon/service.h"
#include "net/secretenv.h"

struct sbx_secrets {
	size_t n;
	struct secret_desc s[SECRETENV_MAX];
};

static char bundle[4200]; /* the trust bundle sandboxes with secrets get; "" without a CA */

int secrets_setup(const char *ca_dir)
{
	char path[sizeof(bundle)];
	snprintf(path, sizeof(path), "%s/trust-bundle.crt", D.cfg.state_dir);
	int r = secretenv_bundle_write(path, ca_dir);
	if (r >= 0)
		snprintf(bundle, sizeof(bundle), "%s", path);
	return r;
}

const char *secrets_bundle(void)
{
	return bundle[0] ? bundle : NULL;
}

static void desc_clear(struct secret_desc *d)
{
	secmem_free(d->value, SECMEM_PAGE);
	explicit_bzero(d, sizeof(*d));
}

struct sbx_secrets *secrets_free(struct sbx_secrets *ss)
{
	for (size_t i = 0; ss && i < ss->n; i++)
		desc_clear(&ss->s[i]);
	free(ss);
	return NULL;
}

static struct secret_desc *find(struct sbx_secrets *ss, const char *name)
{
	for (size_t i = 0; ss && i < ss->n; i++)
		if (strcmp(ss->s[i].name, name) == 0)
			return &ss->s[i];
	return NULL;
}

/* The value into @d's locked page (made the first time). */
static int set_value(struct secret_desc *d, const char *v, size_t n)
{
	if (n > SECMEM_PAGE)
		return -EINVAL;
	if (!d->value && !(d->value = secmem_new(SECMEM_PAGE)))
		return -ENOMEM;
	explicit_bzero(d->value, SECMEM_PAGE);
	memcpy(d->value, v, n);
	d->value_len = n;
	return 0;
}

/* Hosts (checked again, as the proxy will) and "in" of @a into @d. */
static int set_hosts(struct secret_desc *d, const struct api_secret *a)
{
	d->n_hosts = 0;
	for (size_t k = 0; k < a->n_hosts; k++) {
		size_t n = strlen(a->hosts[k]);
		if (!secretenv_host_ok(a->hosts[k], n))
			return -EINVAL;
		for (size_t i = 0; i <= n; i++)
			d->hosts[k][i] = (char)(a->hosts[k][i] >= 'A' && a->hosts[k][i] <= 'Z' ? a->hosts[k][i] | 0x20
											: a->hosts[k][i]);
		d->n_hosts++;
	}
	return 0;
}

int secrets_new(const struct api_secrets *req, struct sbx_secrets **ret, struct svc_err *err)
{
	struct sbx_secrets *ss = calloc(1, sizeof(*ss));
	if (!ss)
		return svc_fail(err, API_ERR_INTERNAL, "secrets: out of memory");
	for (size_t i = 0; i < req->n && i < SECRETENV_MAX; i++) {
		const struct api_secret *a = &req->items[i];
		struct secret_desc *d = &ss->s[ss->n++];
		snprintf(d->name, sizeof(d->name), "%s", a->name);
		d->in = a->in;
		int r = set_hosts(d, a);
		if (r < 0) {
			secrets_free(ss);
			return svc_fail(err, API_ERR_INVALID_FIELD, "secrets.%s.hosts: a host the proxy cannot intercept",
					a->name);
		}
		if ((r = secretenv_placeholder(d->placeholder, sizeof(d->placeholder))) < 0 ||
		    (r = set_value(d, a->value, a->value_len)) < 0) {
			secrets_free(ss);
			return svc_fail(err, API_ERR_INTERNAL, "secrets: cannot hold the values in locked memory");
		}
	}
	*ret = ss;
	return 0;
}

int secrets_update(struct sbx_secrets *ss, const struct api_secret_put *p, struct svc_err *err)
{
	struct secret_desc *d = find(ss, p->secret.name);
	struct secret_desc next;
	if (!d)
		return svc_fail(err, API_ERR_NOT_FOUND, "no secret '%s' in this sandbox (secrets are named at create)",
				p->secret.name);
	memcpy(&next, d, sizeof(next));
	if (p->hosts_given && set_hosts(&next, &p->secret) < 0) {
		explicit_bzero(&next, sizeof(next));
		return svc_fail(err, API_ERR_INVALID_FIELD, "hosts: a host the proxy cannot intercept");
	}
	if (p->in_given)
		next.in = p->secret.in;
	memcpy(d->hosts, next.hosts, sizeof(d->hosts));
	d->n_hosts = next.n_hosts;
	d->in = next.in;
	explicit_bzero(&next, sizeof(next));
	if (set_value(d, p->secret.value, p->secret.value_len) < 0)
		return svc_fail(err, API_ERR_INTERNAL, "cannot hold the value in locked memory");
	return 0;
}

int secrets_revoke(struct sbx_secrets *ss, const char *name, struct svc_err *err)
{
	struct secret_desc *d = find(ss, name);
	if (!d)
		return svc_fail(err, API_ERR_NOT_FOUND, "no secret '%s' in this sandbox", name);
	desc_clear(d);
	size_t i = (size_t)(d - ss->s);
	memmove(d, d + 1, (ss->n - i - 1) * sizeof(*d));
	explicit_bzero(&ss->s[--ss->n], sizeof(ss->s[0]));
	return 0;
}

/* NAME=placeholder for each secret, and the CA variables pointing at @bundle_dst. */
int secrets_env(const struct sbx_secrets *ss, const char *bundle_dst, char ***env, size_t *n_env)
{
	size_t n = ss ? ss->n : 0, add = n + SECRETENV_CA_VARS_N;
	char **v = realloc(*env, (*n_env + add + 1) * sizeof(char *));
	if (!v)
		return -ENOMEM;
	*env = v;
	for (size_t i = 0; i < add; i++) {
		const char *k = i < n ? ss->s[i].name : secretenv_ca_vars[i - n];
		const char *val = i < n ? ss->s[i].placeholder : bundle_dst;
		if (asprintf(&v[*n_env], "%s=%s", k, val) < 0)
			return -ENOMEM;
		(*n_env)++;
	}
	v[*n_env] = NULL;
	return 0;
}

/* HOST:443 for each host of each secret, for a create that gave no network. */
size_t secrets_rules(const struct sbx_secrets *ss, char (*rules)[270], size_t max)
{
	size_t n = 0;
	for (size_t i = 0; i < ss->n; i++)
		for (size_t k = 0; k < ss->s[i].n_hosts && n < max; k++)
			snprintf(rules[n++], 270, "%s:443", ss->s[i].hosts[k]);
	return n;
}

static json_t *as_json(const struct sbx_secrets *ss, json_t *(*one)(const struct secret_desc *))
{
	json_t *a = json_array();
	for (size_t i = 0; a && ss && i < ss->n; i++)
		if (json_array_append_new(a, one(&ss->s[i])) < 0) {
			json_decref(a);
			return NULL;
		}
	return a;
}

json_t *secrets_proxy_json(const struct sbx_secrets *ss)
{
	return as_json(ss, secretenv_json);
}

json_t *secrets_public_json(const struct sbx_secrets *ss)
{
	return as_json(ss, secretenv_public_json);
}

json_t *secrets_one_json(const struct sbx_secrets *ss, const char *name)
{
	const struct secret_desc *d = find((struct sbx_secrets *)ss, name);
	return d ? secretenv_public_json(d) : NULL;
}
