/* The secrets of a sandbox, at create and PUT /v1/sandboxes/{id}/secrets/{name} (api.h). A
 * secret's value is never named in a message, only its field. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "basic/cleanup.h"
#include "spec/api-int.h"
#include "spec/api.h"

static const char *const in_names[] = {"header", "query", "body"};

bool api_secret_name_ok(const char *s, size_t n)
{
	if (n == 0 || n > API_MAX_SECRET_NAME || (s[0] >= '0' && s[0] <= '9'))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!(s[i] == '_' || (s[i] >= '0' && s[i] <= '9') || ((s[i] | 0x20) >= 'a' && (s[i] | 0x20) <= 'z')))
			return false;
	return true;
}

static bool label_ok(const char *s, size_t n)
{
	if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] | 0x20) >= 'a' && (s[i] | 0x20) <= 'z') && !(s[i] >= '0' && s[i] <= '9') && s[i] != '-')
			return false;
	return true;
}

/* A DNS name of letters, digits and hyphens whose last label is not all digits (an IPv4
 * literal is not a name the proxy resolves); no wildcard: a secret names its hosts. */
static bool host_ok(const char *s, size_t n)
{
	size_t start = 0;
	bool digits = true;
	if (n == 0 || n > API_MAX_SECRET_HOST)
		return false;
	for (size_t i = 0; i <= n; i++) {
		if (i < n && s[i] != '.')
			continue;
		if (!label_ok(s + start, i - start))
			return false;
		digits = strspn(s + start, "0123456789") >= i - start;
		start = i + 1;
	}
	return !digits;
}

/* 1 to API_MAX_SECRET_VALUE bytes, none that could end a header line. */
static int value_check(json_t *v, const char *path, struct api_secret *s, struct cordon_err *err)
{
	if (!json_is_string(v))
		return cordon_err_setf(err, -EINVAL, "%s.value: must be a string", path);
	size_t n = json_string_length(v);
	const char *p = json_string_value(v);
	if (n == 0 || n > API_MAX_SECRET_VALUE)
		return cordon_err_setf(err, -EINVAL, "%s.value: must be 1 to %d bytes", path, API_MAX_SECRET_VALUE);
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f)
			return cordon_err_setf(err, -EINVAL, "%s.value: must not contain control characters", path);
	s->value = p;
	s->value_len = n;
	return 0;
}

static int hosts_check(json_t *v, const char *path, struct api_secret *s, struct cordon_err *err)
{
	size_t n = json_array_size(v);
	if (!json_is_array(v) || n == 0 || n > API_MAX_SECRET_HOSTS)
		return cordon_err_setf(err, -EINVAL, "%s.hosts: must be an array of 1 to %d DNS names", path,
				       API_MAX_SECRET_HOSTS);
	for (size_t i = 0; i < n; i++) {
		json_t *h = json_array_get(v, i);
		if (!json_is_string(h) || !host_ok(json_string_value(h), json_string_length(h)))
			return cordon_err_setf(err, -EINVAL,
					       "%s.hosts[%zu]: must be a DNS name (no IP address, no wildcard)", path, i);
		s->hosts[i] = json_string_value(h);
	}
	s->n_hosts = n;
	return 0;
}

static int in_check(json_t *v, const char *path, struct api_secret *s, struct cordon_err *err)
{
	size_t n = json_array_size(v);
	unsigned in = 0;
	if (!json_is_array(v) || n == 0)
		return cordon_err_setf(err, -EINVAL, "%s.in: must be an array of \"header\", \"query\", \"body\"", path);
	for (size_t i = 0; i < n; i++) {
		const char *w = json_string_value(json_array_get(v, i));
		size_t k = 0;
		while (w && k < ELEMENTSOF(in_names) && strcmp(w, in_names[k]) != 0)
			k++;
		if (!w || k == ELEMENTSOF(in_names))
			return cordon_err_setf(err, -EINVAL, "%s.in[%zu]: must be \"header\", \"query\" or \"body\"",
					       path, i);
		in |= 1u << k;
	}
	s->in = in;
	return 0;
}

/* {"value", "hosts", "in"} at @path; @need_hosts: hosts is required (at create). */
static int secret_parse(json_t *o, const char *path, bool need_hosts, struct api_secret *s,
			struct cordon_err *err)
{
	static const char *const known[] = {"value", "hosts", "in"};
	const char *key;
	json_t *v;
	if (!json_is_object(o))
		return cordon_err_setf(err, -EINVAL, "%s: must be an object {value, hosts, in}", path);
	json_object_foreach(o, key, v) {
		size_t k = 0;
		while (k < ELEMENTSOF(known) && strcmp(key, known[k]) != 0)
			k++;
		if (k == ELEMENTSOF(known))
			return cordon_err_setf(err, -EBADRQC, "%s: unknown field (known: value, hosts, in)", path);
	}
	int r = value_check(json_object_get(o, "value"), path, s, err);
	if (r >= 0 && (need_hosts || json_object_get(o, "hosts")))
		r = hosts_check(json_object_get(o, "hosts"), path, s, err);
	s->in = API_SECRET_IN_HEADER;
	if (r >= 0 && json_object_get(o, "in"))
		r = in_check(json_object_get(o, "in"), path, s, err);
	return r;
}

int api_secrets_from_json(json_t *v, void *dst, const char *path, struct cordon_err *err)
{
	struct api_secrets *ss = dst;
	const char *key;
	json_t *o;
	if (!json_is_object(v))
		return cordon_err_setf(err, -EINVAL, "%s: must be an object of secrets by name", path);
	if (json_object_size(v) > API_MAX_SECRETS)
		return cordon_err_setf(err, -EINVAL, "%s: at most %d secrets", path, API_MAX_SECRETS);
	ss->items = calloc(json_object_size(v) + 1, sizeof(*ss->items));
	if (!ss->items)
		return cordon_err_setf(err, -ENOMEM, "%s: out of memory", path);
	json_object_foreach(v, key, o) {
		char child[API_MAX_SECRET_NAME + 16];
		if (!api_secret_name_ok(key, strlen(key)))
			return cordon_err_setf(err, -EINVAL, "%s: a name must match [A-Za-z_][A-Za-z0-9_]{0,%d}", path,
					       API_MAX_SECRET_NAME - 1);
		snprintf(child, sizeof(child), "%s.%s", path, key);
		struct api_secret *s = &ss->items[ss->n];
		s->name = key;
		int r = secret_parse(o, child, true, s, err);
		if (r < 0)
			return r;
		ss->n++;
	}
	return 0;
}

struct api_secret_put *api_secret_put_free(struct api_secret_put *p)
{
	if (p) {
		json_decref(p->root_);
		free(p);
	}
	return NULL;
}
DEFINE_CLEANUP_FUNC(struct api_secret_put *, api_secret_put_free)

int api_secret_put_parse(const char *name, const char *body, size_t len, struct api_secret_put **ret,
			 struct cordon_err *err)
{
	_cleanup_(api_secret_put_freep) struct api_secret_put *p = calloc(1, sizeof(*p));
	if (!p)
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	if (!name || !api_secret_name_ok(name, strlen(name)))
		return cordon_err_setf(err, -EINVAL, "name: must match [A-Za-z_][A-Za-z0-9_]{0,%d}",
				       API_MAX_SECRET_NAME - 1);
	int r = api_body_load(body, len, &p->root_, err);
	if (r < 0)
		return r;
	if (!json_object_get(p->root_, "value"))
		return cordon_err_setf(err, -EINVAL, "value: required");
	if ((r = secret_parse(p->root_, "secret", false, &p->secret, err)) < 0)
		return r;
	p->secret.name = name;
	p->hosts_given = p->secret.n_hosts > 0;
	p->in_given = json_object_get(p->root_, "in") != NULL;
	*ret = TAKE_PTR(p);
	return 0;
}
