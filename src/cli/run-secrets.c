/* cordon run's secrets (run-secrets.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "basic/cleanup.h"
#include "basic/fileio.h"
#include "basic/log.h"
#include "cli/run-secrets.h"
#include "policy/egress.h"

#define SANDBOX_BUNDLE "/etc/ssl/certs/ca-certificates.crt"
#define SANDBOX_BUNDLE_ALWAYS "/run/cordon/ca-bundle.crt" /* for an image without the above */
#define HOST_BUNDLE "/etc/ssl/certs/ca-certificates.crt"

static bool env_name_ok(const char *s, size_t n)
{
	if (n == 0 || n >= 64 || (s[0] >= '0' && s[0] <= '9'))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!(s[i] == '_' || (s[i] >= '0' && s[i] <= '9') || ((s[i] | 0x20) >= 'a' && (s[i] | 0x20) <= 'z')))
			return false;
	return true;
}

static int parse_hosts(struct run_secret *sec, const char *list)
{
	_cleanup_free_ char *copy = strdup(list);
	if (!copy)
		return -ENOMEM;
	char *save = NULL;
	for (char *h = strtok_r(copy, ",", &save); h; h = strtok_r(NULL, ",", &save)) {
		size_t n = strlen(h);
		if (sec->n_hosts >= RUN_SECRET_HOSTS_MAX || n >= sizeof(sec->hosts[0]) ||
		    !egress_name_valid(h, n, false) || egress_name_is_ip_literal(h, n))
			return -EINVAL;
		for (size_t i = 0; i < n; i++)
			sec->hosts[sec->n_hosts][i] = (char)(h[i] >= 'A' && h[i] <= 'Z' ? h[i] | 0x20 : h[i]);
		sec->n_hosts++;
	}
	return sec->n_hosts ? 0 : -EINVAL;
}

/* The variable leaves our environment, so that nothing we start inherits it (cordon-egress
 * included), and its bytes are overwritten where they are: /proc/self/environ shows the
 * original environment block, whatever unsetenv() does to the array. */
static void scrub_env(const char *name, char *value, size_t len)
{
	memset(value, '*', len);
	unsetenv(name);
}

int run_secret_add(struct run_secrets *rs, char *arg)
{
	char *at = strrchr(arg, '@'), *eq = strchr(arg, '=');
	if (eq && at && eq > at)
		eq = NULL;
	size_t nlen = eq ? (size_t)(eq - arg) : at ? (size_t)(at - arg) : 0;
	if (rs->n >= RUN_SECRETS_MAX) {
		log_error("--secret: at most %d", RUN_SECRETS_MAX);
		return -E2BIG;
	}
	struct run_secret *sec = &rs->s[rs->n];
	if (!at || !env_name_ok(arg, nlen) || parse_hosts(sec, at + 1) < 0) {
		*sec = (struct run_secret){0};
		log_error("--secret: expected NAME=VALUE@HOST[,HOST...] or NAME@HOST[,HOST...] (the value in "
			  "cordon run's variable NAME), with DNS names as hosts (at most %d)", RUN_SECRET_HOSTS_MAX);
		return -EINVAL;
	}
	memcpy(sec->name, arg, nlen);
	const char *v = eq ? eq + 1 : getenv(sec->name);
	size_t vlen = eq ? (size_t)(at - eq - 1) : v ? strlen(v) : 0;
	if (!v || vlen == 0 || vlen > 4096) {
		log_error("--secret %s: no value (give NAME=VALUE@HOST, or set %s in cordon run's environment); at most 4096 bytes",
			  sec->name, sec->name);
		*sec = (struct run_secret){0};
		return -EINVAL;
	}
	for (size_t i = 0; i < rs->n; i++)
		if (strcmp(rs->s[i].name, sec->name) == 0) {
			log_error("--secret %s: given twice", sec->name);
			*sec = (struct run_secret){0};
			return -EINVAL;
		}
	sec->value = malloc(vlen + 1);
	if (!sec->value)
		return -ENOMEM;
	(void)mlock(sec->value, vlen + 1);
	memcpy(sec->value, v, vlen);
	sec->value[vlen] = '\0';
	sec->value_len = vlen;
	if (eq)
		memset(eq + 1, '*', vlen); /* out of /proc/self/cmdline from now on */
	else
		scrub_env(sec->name, (char *)v, vlen);
	rs->n++;
	return 0;
}

static const char *const in_names[] = {"header", "query", "body"};

int run_secret_in(struct run_secrets *rs, const char *arg)
{
	const char *eq = strchr(arg, '=');
	struct run_secret *sec = NULL;
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
		while (k < ELEMENTSOF(in_names) && strcmp(w, in_names[k]) != 0)
			k++;
		if (k == ELEMENTSOF(in_names)) {
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

static int placeholder(char *buf, size_t size)
{
	uint8_t b[16];
	if (getrandom(b, sizeof(b), 0) != sizeof(b))
		return -EIO;
	int n = snprintf(buf, size, "cordon-secret-");
	for (size_t i = 0; i < sizeof(b) && (size_t)n + 2 < size; i++)
		n += snprintf(buf + n, size - (size_t)n, "%02x", b[i]);
	return 0;
}

/* Appends the file @path to @fd. */
static int append_file(int fd, const char *path)
{
	_cleanup_close_ int in = open(path, O_RDONLY | O_CLOEXEC);
	char buf[65536];
	ssize_t n;
	if (in < 0)
		return -errno;
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (write_all(fd, buf, (size_t)n) < 0)
			return -EIO;
	return n < 0 ? -errno : write_all(fd, "\n", 1);
}

/* The host's bundle and the CA in one file, in a directory of its own the sandbox can read. */
static int write_bundle(struct run_secrets *rs, const char *ca_dir)
{
	char path[4200];
	snprintf(rs->trust_dir, sizeof(rs->trust_dir), "/tmp/cordon-trust-XXXXXX");
	if (!mkdtemp(rs->trust_dir)) {
		rs->trust_dir[0] = '\0';
		return -errno;
	}
	if (chmod(rs->trust_dir, 0755) < 0)
		return -errno;
	snprintf(rs->bundle, sizeof(rs->bundle), "%s/ca-certificates.crt", rs->trust_dir);
	snprintf(path, sizeof(path), "%s/ca.crt", ca_dir);
	_cleanup_close_ int fd = open(rs->bundle, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	(void)append_file(fd, HOST_BUNDLE); /* a host without one: the sandbox trusts our CA only */
	return append_file(fd, path);
}

static bool image_has_bundle(const char *rootfs)
{
	char path[4200];
	struct stat st;
	snprintf(path, sizeof(path), "%s%s", rootfs ? rootfs : "", SANDBOX_BUNDLE);
	return lstat(path, &st) == 0 && S_ISREG(st.st_mode);
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
	static const char *const ca_vars[] = {"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
					      "NODE_EXTRA_CA_CERTS"};
	size_t k = 0;
	int r = write_bundle(rs, ca_dir);
	if (r < 0) {
		log_error("--secret: cannot make the sandbox's CA bundle from %s/ca.crt", ca_dir);
		return r;
	}
	bool std = image_has_bundle(rootfs);
	const char *where = std ? SANDBOX_BUNDLE : SANDBOX_BUNDLE_ALWAYS;
	if ((r = add_bind(spec, bind_buf, rs->bundle, where)) < 0)
		return r;
	for (size_t i = 0; r >= 0 && i < ELEMENTSOF(ca_vars); i++)
		r = add_env(rs, &k, spec, env, ca_vars[i], where);
	for (size_t i = 0; r >= 0 && i < rs->n; i++)
		if ((r = placeholder(rs->s[i].placeholder, sizeof(rs->s[i].placeholder))) >= 0)
			r = add_env(rs, &k, spec, env, rs->s[i].name, rs->s[i].placeholder);
	if (r < 0)
		log_error("--secret: too many variables or binds");
	return r;
}

json_t *run_secrets_json(const struct run_secrets *rs)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < rs->n; i++) {
		const struct run_secret *sec = &rs->s[i];
		json_t *hosts = json_array();
		for (size_t k = 0; hosts && k < sec->n_hosts; k++)
			json_array_append_new(hosts, json_string(sec->hosts[k]));
		json_t *in = json_array();
		for (size_t k = 0; in && k < ELEMENTSOF(in_names); k++)
			if ((sec->in ? sec->in : 1u) & (1u << k))
				json_array_append_new(in, json_string(in_names[k]));
		json_t *o = json_pack("{s:s, s:s, s:s%, s:o, s:o}", "name", sec->name, "placeholder",
				      sec->placeholder, "value", sec->value, sec->value_len, "hosts", hosts, "in", in);
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
