/* What a sandbox with secrets gets (secretenv.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "basic/cleanup.h"
#include "basic/fileio.h"
#include "net/secretenv.h"
#include "policy/egress.h"

#define SANDBOX_BUNDLE "/etc/ssl/certs/ca-certificates.crt"
#define SANDBOX_BUNDLE_ALWAYS "/run/cordon/ca-bundle.crt" /* for an image without the above */
#define HOST_BUNDLE "/etc/ssl/certs/ca-certificates.crt"

const char *const secretenv_ca_vars[SECRETENV_CA_VARS_N] = {"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE",
							   "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"};
const char *const secretenv_in_names[3] = {"header", "query", "body"};

int secretenv_placeholder(char *buf, size_t size)
{
	uint8_t b[16];
	if (size < SECRETENV_PH_SIZE || getrandom(b, sizeof(b), 0) != sizeof(b))
		return -EIO;
	int n = snprintf(buf, size, "cordon-secret-");
	for (size_t i = 0; i < sizeof(b); i++)
		n += snprintf(buf + n, size - (size_t)n, "%02x", b[i]);
	explicit_bzero(b, sizeof(b));
	return 0;
}

bool secretenv_name_ok(const char *s, size_t n)
{
	if (n == 0 || n >= SECRETENV_NAME_MAX || (s[0] >= '0' && s[0] <= '9'))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!(s[i] == '_' || (s[i] >= '0' && s[i] <= '9') || ((s[i] | 0x20) >= 'a' && (s[i] | 0x20) <= 'z')))
			return false;
	return true;
}

bool secretenv_host_ok(const char *s, size_t n)
{
	return n > 0 && n < 256 && !memchr(s, '*', n) && egress_name_valid(s, n, false) &&
	       !egress_name_is_ip_literal(s, n);
}

static int add_host(struct secret_desc *d, const char *h, size_t n)
{
	if (d->n_hosts >= SECRETENV_HOSTS_MAX || !secretenv_host_ok(h, n))
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		d->hosts[d->n_hosts][i] = (char)(h[i] >= 'A' && h[i] <= 'Z' ? h[i] | 0x20 : h[i]);
	d->hosts[d->n_hosts++][n] = '\0';
	return 0;
}

int secretenv_parse_hosts(struct secret_desc *d, const char *list)
{
	for (const char *p = list; *p;) {
		size_t n = strcspn(p, ",");
		if (add_host(d, p, n) < 0)
			return -EINVAL;
		p += n + (p[n] == ',');
	}
	return d->n_hosts ? 0 : -EINVAL;
}

int secretenv_parse_arg(struct secret_desc *d, char *arg, char **ret_value, size_t *ret_len)
{
	char *at = strrchr(arg, '@'), *eq = strchr(arg, '=');
	if (eq && at && eq > at)
		eq = NULL;
	size_t nlen = eq ? (size_t)(eq - arg) : at ? (size_t)(at - arg) : 0;
	if (!at || !secretenv_name_ok(arg, nlen) || secretenv_parse_hosts(d, at + 1) < 0)
		return -EINVAL;
	memcpy(d->name, arg, nlen);
	d->name[nlen] = '\0';
	*ret_value = eq ? eq + 1 : NULL;
	*ret_len = eq ? (size_t)(at - eq - 1) : 0;
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

int secretenv_bundle_write(const char *path, const char *ca_dir)
{
	char tmp[4200], ca[4200];
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	snprintf(ca, sizeof(ca), "%s/ca.crt", ca_dir);
	(void)unlink(tmp);
	_cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	(void)append_file(fd, HOST_BUNDLE); /* a host without one: the sandbox trusts our CA only */
	int r = append_file(fd, ca);
	if (r >= 0 && (fchmod(fd, 0644) < 0 || rename(tmp, path) < 0))
		r = -errno;
	if (r < 0)
		(void)unlink(tmp);
	return r;
}

const char *secretenv_bundle_dst(const char *rootfs)
{
	char path[4200];
	struct stat st;
	snprintf(path, sizeof(path), "%s%s", rootfs ? rootfs : "", SANDBOX_BUNDLE);
	return lstat(path, &st) == 0 && S_ISREG(st.st_mode) ? SANDBOX_BUNDLE : SANDBOX_BUNDLE_ALWAYS;
}

static json_t *hosts_in(const struct secret_desc *d, json_t **ret_in)
{
	json_t *hosts = json_array(), *in = json_array();
	for (size_t k = 0; hosts && k < d->n_hosts; k++)
		json_array_append_new(hosts, json_string(d->hosts[k]));
	for (size_t k = 0; in && k < ELEMENTSOF(secretenv_in_names); k++)
		if ((d->in ? d->in : SECRETENV_IN_HEADER) & (1u << k))
			json_array_append_new(in, json_string(secretenv_in_names[k]));
	*ret_in = in;
	return hosts;
}

json_t *secretenv_json(const struct secret_desc *d)
{
	json_t *in, *hosts = hosts_in(d, &in);
	return json_pack("{s:s, s:s, s:s%, s:o, s:o}", "name", d->name, "placeholder", d->placeholder,
			 "value", d->value, d->value_len, "hosts", hosts, "in", in);
}

json_t *secretenv_public_json(const struct secret_desc *d)
{
	json_t *in, *hosts = hosts_in(d, &in);
	return json_pack("{s:s, s:o, s:o}", "name", d->name, "hosts", hosts, "in", in);
}
