/* cordon run's secrets (run-secrets.h); what cordond shares with it is net/secretenv.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "basic/cleanup.h"
#include "basic/log.h"
#include "cli/run-secrets.h"

/* The variable leaves our environment, so that nothing we start inherits it (cordon-egress
 * included), and its bytes are overwritten where they are: /proc/self/environ shows the
 * original environment block, whatever unsetenv() does to the array. */
static void scrub_env(const char *name, char *value, size_t len)
{
	memset(value, '*', len);
	unsetenv(name);
}

static int refuse(struct secret_desc *sec, int r)
{
	*sec = (struct secret_desc){0};
	return r;
}

int run_secret_add(struct run_secrets *rs, char *arg)
{
	if (rs->n >= RUN_SECRETS_MAX) {
		log_error("--secret: at most %d", RUN_SECRETS_MAX);
		return -E2BIG;
	}
	struct secret_desc *sec = &rs->s[rs->n];
	char *v;
	size_t vlen;
	if (secretenv_parse_arg(sec, arg, &v, &vlen) < 0) {
		log_error("--secret: expected NAME=VALUE@HOST[,HOST...] or NAME@HOST[,HOST...] (the value in "
			  "cordon run's variable NAME), with DNS names as hosts (at most %d)", RUN_SECRET_HOSTS_MAX);
		return refuse(sec, -EINVAL);
	}
	bool inline_value = v != NULL;
	if (!inline_value && (v = getenv(sec->name)))
		vlen = strlen(v);
	if (!v || vlen == 0 || vlen > SECRETENV_VALUE_MAX) {
		log_error("--secret %s: no value (give NAME=VALUE@HOST, or set %s in cordon run's environment); at most 4096 bytes",
			  sec->name, sec->name);
		return refuse(sec, -EINVAL);
	}
	for (size_t i = 0; i < rs->n; i++)
		if (strcmp(rs->s[i].name, sec->name) == 0) {
			log_error("--secret %s: given twice", sec->name);
			return refuse(sec, -EINVAL);
		}
	sec->value = malloc(vlen + 1);
	if (!sec->value)
		return -ENOMEM;
	(void)mlock(sec->value, vlen + 1);
	memcpy(sec->value, v, vlen);
	sec->value[vlen] = '\0';
	sec->value_len = vlen;
	if (inline_value)
		memset(v, '*', vlen); /* out of /proc/self/cmdline from now on */
	else
		scrub_env(sec->name, v, vlen);
	rs->n++;
	return 0;
}

int run_secret_in(struct run_secrets *rs, const char *arg)
{
	const char *eq = strchr(arg, '=');
	struct secret_desc *sec = NULL;
	for (size_t i = 0; eq && i < rs->n; i++)
		if (strlen(rs->s[i].name) == (size_t)(eq - arg) && strncmp(rs->s[i].name, arg, (size_t)(eq - arg)) == 0)
			sec = &rs->s[i];
	if (!sec) {
		log_error("--secret-in '%s': expected NAME=header,query,body after --secret NAME...", arg);
		return -EINVAL;
	}
	_cleanup_free_ char *copy = strdup(eq + 1);
	char *save = NULL;
	unsigned in = 0;
	for (char *w = copy ? strtok_r(copy, ",", &save) : NULL; w; w = strtok_r(NULL, ",", &save)) {
		size_t k = 0;
		while (k < ELEMENTSOF(secretenv_in_names) && strcmp(w, secretenv_in_names[k]) != 0)
			k++;
		if (k == ELEMENTSOF(secretenv_in_names)) {
			log_error("--secret-in %s: '%s' is not header, query or body", sec->name, w);
			return -EINVAL;
		}
		in |= 1u << k;
	}
	if (!in) {
		log_error("--secret-in %s: name at least one of header, query, body", sec->name);
		return -EINVAL;
	}
	sec->in = in;
	return 0;
}

const char *const *run_secrets_rules(struct run_secrets *rs, size_t *ret_n)
{
	static const char *ptrs[RUN_SECRETS_MAX * RUN_SECRET_HOSTS_MAX];
	rs->n_rules = 0;
	for (size_t i = 0; i < rs->n; i++)
		for (size_t k = 0; k < rs->s[i].n_hosts; k++) {
			snprintf(rs->rules[rs->n_rules], sizeof(rs->rules[0]), "%s:443", rs->s[i].hosts[k]);
			ptrs[rs->n_rules] = rs->rules[rs->n_rules];
			rs->n_rules++;
		}
	*ret_n = rs->n_rules;
	return ptrs;
}

/* The host's bundle and the CA in one file, in a directory of its own the sandbox can read. */
static int write_bundle(struct run_secrets *rs, const char *ca_dir)
{
	snprintf(rs->trust_dir, sizeof(rs->trust_dir), "/tmp/cordon-trust-XXXXXX");
	if (!mkdtemp(rs->trust_dir)) {
		rs->trust_dir[0] = '\0';
		return -errno;
	}
	if (chmod(rs->trust_dir, 0755) < 0)
		return -errno;
	snprintf(rs->bundle, sizeof(rs->bundle), "%s/ca-certificates.crt", rs->trust_dir);
	return secretenv_bundle_write(rs->bundle, ca_dir);
}

static int add_bind(struct cordon_spec *spec, char **bind_buf, const char *host, const char *dst)
{
	if (spec->n_binds >= CORDON_MAX_BINDS)
		return -E2BIG;
	char *h = strdup(host);
	if (!h)
		return -ENOMEM;
	bind_buf[spec->n_binds] = h;
	spec->binds[spec->n_binds++] = (struct cordon_bind){h, (char *)dst};
	return 0;
}

static int add_env(struct run_secrets *rs, size_t *k, struct cordon_spec *spec, const char **env,
		   const char *name, const char *value)
{
	if (spec->n_env >= CORDON_MAX_ENV || *k >= ELEMENTSOF(rs->env))
		return -E2BIG;
	snprintf(rs->env[*k], sizeof(rs->env[0]), "%s=%s", name, value);
	env[spec->n_env++] = rs->env[(*k)++];
	return 0;
}

int run_secrets_prepare(struct run_secrets *rs, const char *ca_dir, const char *rootfs,
			struct cordon_spec *spec, const char **env, char **bind_buf)
{
	size_t k = 0;
	int r = write_bundle(rs, ca_dir);
	if (r < 0) {
		log_error("--secret: cannot make the sandbox's CA bundle from %s/ca.crt", ca_dir);
		return r;
	}
	const char *where = secretenv_bundle_dst(rootfs);
	if ((r = add_bind(spec, bind_buf, rs->bundle, where)) < 0)
		return r;
	for (size_t i = 0; r >= 0 && i < SECRETENV_CA_VARS_N; i++)
		r = add_env(rs, &k, spec, env, secretenv_ca_vars[i], where);
	for (size_t i = 0; r >= 0 && i < rs->n; i++)
		if ((r = secretenv_placeholder(rs->s[i].placeholder, sizeof(rs->s[i].placeholder))) >= 0)
			r = add_env(rs, &k, spec, env, rs->s[i].name, rs->s[i].placeholder);
	if (r < 0)
		log_error("--secret: too many variables or binds");
	return r;
}

json_t *run_secrets_json(const struct run_secrets *rs)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < rs->n; i++) {
		json_t *o = secretenv_json(&rs->s[i]);
		if (!o || json_array_append_new(a, o) < 0) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

void run_secrets_done(struct run_secrets *rs)
{
	for (size_t i = 0; i < rs->n; i++) {
		if (rs->s[i].value) {
			explicit_bzero(rs->s[i].value, rs->s[i].value_len);
			free(rs->s[i].value);
		}
	}
	if (rs->bundle[0])
		(void)unlink(rs->bundle);
	if (rs->trust_dir[0])
		(void)rmdir(rs->trust_dir);
	explicit_bzero(rs, sizeof(*rs));
}

void run_secrets_event(json_t *ev, void *data)
{
	(void)data;
	const char *kind = json_string_value(json_object_get(ev, "kind"));
	if (!kind || strcmp(kind, "secret.misuse") != 0)
		return;
	const char *name = json_string_value(json_object_get(ev, "name"));
	log_warning("secret.misuse: %s (%s %s%s%s port %d): refused",
		    json_string_value(json_object_get(ev, "reason")) ?: "?",
		    json_string_value(json_object_get(ev, "proto")) ?: "?", name ? name : "",
		    name ? " " : "", json_string_value(json_object_get(ev, "dst")) ?: "",
		    (int)json_integer_value(json_object_get(ev, "port")));
}
