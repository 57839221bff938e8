/* Request bodies of cordond's API -> typed, validated structs. See api.h and
 * docs/api/openapi.yaml (the contract this file implements).
 *
 * Each JSON object is described by a table of fields; parse_object() walks the object, looks
 * every key up in the table (an unknown key is an error naming it) and hands the value to the
 * field's parser. Defaults are set before the walk, cross-field rules are checked after it.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "basic/base64.h"
#include "basic/cleanup.h"
#include "basic/parse.h"
#include "spec/api-int.h"
#include "spec/api.h"

#define PATH_BUF       256 /* a field's dotted path, as printed in messages */
#define NAME_MAX_PRINT 64

/* ---- messages ------------------------------------------------------------------------------ */

/* Copies at most NAME_MAX_PRINT bytes of an attacker-chosen name into @buf for a message,
 * replacing anything but printable ASCII, so that messages are safe to log and valid UTF-8. */
static void printable(char *buf, size_t size, const char *s, size_t len)
{
	size_t o = 0;
	for (size_t i = 0; i < len && o + 4 < size; i++) {
		if (i == NAME_MAX_PRINT) {
			memcpy(buf + o, "...", 3);
			o += 3;
			break;
		}
		unsigned char c = (unsigned char)s[i];
		buf[o++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
	}
	buf[o] = '\0';
}

static void path_join(char *buf, size_t size, const char *path, const char *key, size_t klen)
{
	char name[NAME_MAX_PRINT + 8];
	printable(name, sizeof(name), key, klen);
	snprintf(buf, size, "%s%s%s", path, *path ? "." : "", name);
}

static const char *where(const char *path) { return *path ? path : "request body"; }

static int invalid(struct cordon_err *err, const char *path, const char *what)
{
	return cordon_err_setf(err, -EINVAL, "%s: %s", where(path), what);
}

/* ---- scalar getters ------------------------------------------------------------------------ */

static int get_int(json_t *v, int64_t min, int64_t max, const char *path, int64_t *ret,
		   struct cordon_err *err)
{
	/* A real (1.0, 1e3) is not an integer: jansson keeps them apart, and so do we. */
	if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
		return cordon_err_setf(err, -EINVAL, "%s: must be an integer between %lld and %lld",
				       path, (long long)min, (long long)max);
	*ret = json_integer_value(v);
	return 0;
}

/* A JSON string without NUL bytes (jansson is told to let "\u0000" through so that this
 * message can name the field) of at most @max bytes. */
static int get_string(json_t *v, size_t max, const char *path, const char **ret, size_t *ret_len,
		      struct cordon_err *err)
{
	if (!json_is_string(v))
		return invalid(err, path, "must be a string");
	const char *s = json_string_value(v);
	size_t len = json_string_length(v);
	if (memchr(s, 0, len))
		return invalid(err, path, "must not contain NUL bytes");
	if (len > max)
		return cordon_err_setf(err, -EINVAL, "%s: longer than %zu bytes", path, max);
	*ret = s;
	if (ret_len)
		*ret_len = len;
	return 0;
}

/* ---- string classes ------------------------------------------------------------------------ */

static bool is_lower_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

static bool is_alpha_(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* [a-z0-9][a-z0-9._-]{0,63} */
static bool template_ok(const char *s, size_t len)
{
	if (len == 0 || len > API_MAX_TEMPLATE || !is_lower_alnum(s[0]))
		return false;
	for (size_t i = 1; i < len; i++)
		if (!is_lower_alnum(s[i]) && !strchr("._-", s[i]))
			return false;
	return true;
}

/* Non-empty, no control characters (metadata keys, tags: they end up in logs and URLs). */
static bool label_ok(const char *s, size_t len)
{
	if (len == 0)
		return false;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return false;
	return true;
}

/* The shape of a network rule: "example.com", "*.example.com:443", "10.1.2.0/24",
 * "[2001:db8::]/32". The policy compiler does the real parsing. */
static bool rule_ok(const char *s, size_t len)
{
	if (len == 0)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		if (c == '*') {
			if (i != 0 || len < 3 || s[1] != '.')
				return false;
			continue;
		}
		if (!is_alpha_(c) && !is_digit(c) && !strchr(".:/-[]", c))
			return false;
	}
	return true;
}

/* ---- field tables -------------------------------------------------------------------------- */

struct field;
/* @dst is the output object plus the field's offset. */
typedef int (*field_fn)(json_t *v, void *dst, const struct field *f, const char *path,
			struct cordon_err *err);

struct field {
	const char *name;
	field_fn parse;
	size_t offset;
	const void *aux;
};

struct objdef {
	const struct field *fields;
	size_t n;
};

struct range {
	int64_t min, max;
};

struct strdef {
	size_t max;
	bool (*ok)(const char *s, size_t len); /* NULL: any string */
	const char *what;		       /* what ok() wants, for the message */
};

struct enumval {
	const char *name;
	int value;
};

struct enumdef {
	const struct enumval *vals;
	size_t n;
	const char *what;
};

struct kvdef {
	bool (*key_ok)(const char *s, size_t len);
	const char *key_what;
};

static const struct field *find_field(const struct objdef *def, const char *key)
{
	for (size_t i = 0; i < def->n; i++)
		if (strcmp(def->fields[i].name, key) == 0)
			return &def->fields[i];
	return NULL;
}

static int unknown_field(const char *path, const struct objdef *def, struct cordon_err *err)
{
	char known[256] = "";
	size_t o = 0;
	for (size_t i = 0; i < def->n && o < sizeof(known); i++)
		o += snprintf(known + o, sizeof(known) - o, "%s%s", i ? ", " : "",
			      def->fields[i].name);
	return cordon_err_setf(err, -EBADRQC, "%s: unknown field (known: %s)", path, known);
}

/* null means "absent": the default stays. */
static int parse_object(json_t *obj, const struct objdef *def, void *out, const char *path,
			struct cordon_err *err)
{
	const char *key;
	size_t klen;
	json_t *v;

	if (!json_is_object(obj))
		return invalid(err, path, "must be an object");
	json_object_keylen_foreach(obj, key, klen, v)
	{
		char child[PATH_BUF];
		path_join(child, sizeof(child), path, key, klen);
		const struct field *f = strlen(key) == klen ? find_field(def, key) : NULL;
		if (!f)
			return unknown_field(child, def, err);
		if (json_is_null(v))
			continue;
		int r = f->parse(v, (char *)out + f->offset, f, child, err);
		if (r < 0)
			return r;
	}
	return 0;
}

static int fld_object(json_t *v, void *dst, const struct field *f, const char *path,
		      struct cordon_err *err)
{
	return parse_object(v, f->aux, dst, path, err);
}

static int fld_u32(json_t *v, void *dst, const struct field *f, const char *path,
		   struct cordon_err *err)
{
	const struct range *rg = f->aux;
	int64_t i = 0;
	int r = get_int(v, rg->min, rg->max, path, &i, err);
	if (r < 0)
		return r;
	*(uint32_t *)dst = (uint32_t)i;
	return 0;
}

static int fld_bool(json_t *v, void *dst, const struct field *f, const char *path,
		    struct cordon_err *err)
{
	if (!json_is_boolean(v))
		return invalid(err, path, "must be true or false");
	*(bool *)dst = json_is_true(v);
	return 0;
}

static int fld_string(json_t *v, void *dst, const struct field *f, const char *path,
		      struct cordon_err *err)
{
	const struct strdef *d = f->aux;
	const char *s;
	size_t len;
	int r = get_string(v, d->max, path, &s, &len, err);
	if (r < 0)
		return r;
	if (d->ok && !d->ok(s, len))
		return invalid(err, path, d->what);
	*(const char **)dst = s;
	return 0;
}

static int fld_path(json_t *v, void *dst, const struct field *f, const char *path,
		    struct cordon_err *err)
{
	const char *s;
	size_t len;
	int r = get_string(v, SIZE_MAX, path, &s, &len, err);
	if (r < 0)
		return r;
	r = api_path_check(s, len, path, err);
	if (r < 0)
		return r;
	*(const char **)dst = s;
	return 0;
}

/* Enums are written as int: every enum here has only small non-negative values. */
static int fld_enum(json_t *v, void *dst, const struct field *f, const char *path,
		    struct cordon_err *err)
{
	const struct enumdef *d = f->aux;
	if (json_is_string(v))
		for (size_t i = 0; i < d->n; i++)
			if (strcmp(json_string_value(v), d->vals[i].name) == 0 &&
			    strlen(d->vals[i].name) == json_string_length(v)) {
				*(int *)dst = d->vals[i].value;
				return 0;
			}
	return invalid(err, path, d->what);
}

/* An object of strings -> struct api_kvmap, at most API_MAX_KV entries. */
static int fld_kvmap(json_t *v, void *dst, const struct field *f, const char *path,
		     struct cordon_err *err)
{
	const struct kvdef *d = f->aux;
	struct api_kvmap *m = dst;
	const char *key;
	size_t klen;
	json_t *val;

	if (!json_is_object(v))
		return invalid(err, path, "must be an object of strings");
	if (json_object_size(v) > API_MAX_KV)
		return cordon_err_setf(err, -EINVAL, "%s: more than %d entries", path, API_MAX_KV);
	m->items = calloc(json_object_size(v) + 1, sizeof(*m->items));
	if (!m->items)
		return cordon_err_setf(err, -ENOMEM, "%s: out of memory", path);
	json_object_keylen_foreach(v, key, klen, val)
	{
		char child[PATH_BUF];
		path_join(child, sizeof(child), path, key, klen);
		if (strlen(key) != klen)
			return cordon_err_setf(err, -EINVAL, "%s: names must not contain NUL bytes",
					       path);
		if (klen > API_MAX_KEY)
			return cordon_err_setf(err, -EINVAL, "%s: name longer than %d bytes", child,
					       API_MAX_KEY);
		if (!d->key_ok(key, klen))
			return cordon_err_setf(err, -EINVAL, "%s: name %s", child, d->key_what);
		const char *s;
		int r = get_string(val, API_MAX_VALUE, child, &s, NULL, err);
		if (r < 0)
			return r;
		m->items[m->n++] = (struct api_kv){key, s};
	}
	return 0;
}

/* An array of strings, each checked by @ok, -> NULL-terminated vector. */
static int get_strv(json_t *v, size_t min, size_t max, const struct strdef *d, const char *path,
		    const char ***ret_strv, size_t *ret_n, struct cordon_err *err)
{
	if (!json_is_array(v))
		return invalid(err, path, "must be an array of strings");
	size_t n = json_array_size(v);
	if (n < min || n > max)
		return cordon_err_setf(err, -EINVAL, "%s: must have %zu to %zu entries", path, min,
				       max);
	_cleanup_free_ const char **strv = calloc(n + 1, sizeof(*strv));
	if (!strv)
		return cordon_err_setf(err, -ENOMEM, "%s: out of memory", path);
	for (size_t i = 0; i < n; i++) {
		char child[PATH_BUF];
		size_t len;
		snprintf(child, sizeof(child), "%s[%zu]", path, i);
		int r = get_string(json_array_get(v, i), d->max, child, &strv[i], &len, err);
		if (r < 0)
			return r;
		if (d->ok && !d->ok(strv[i], len))
			return invalid(err, child, d->what);
	}
	*ret_strv = TAKE_PTR(strv);
	*ret_n = n;
	return 0;
}

/* ---- bodies ------------------------------------------------------------------------------- */

/* Deepest nesting of objects and arrays, counted outside strings, before jansson (which
 * recurses up to 2048 levels) sees the bytes. Stops counting once over @max. */
static bool nested_deeper_than(const char *b, size_t len, unsigned max)
{
	unsigned depth = 0;
	bool in_str = false, esc = false;

	for (size_t i = 0; i < len; i++) {
		char c = b[i];
		if (in_str) {
			if (esc)
				esc = false;
			else if (c == '\\')
				esc = true;
			else if (c == '"')
				in_str = false;
			continue;
		}
		if (c == '"')
			in_str = true;
		else if (c == '{' || c == '[') {
			if (++depth > max)
				return true;
		} else if ((c == '}' || c == ']') && depth > 0)
			depth--;
	}
	return false;
}

/* Bytes -> a JSON object. @empty_ok: a zero-length body means {}. */
static int load_body_max(const char *body, size_t len, size_t max, bool empty_ok, json_t **ret,
			 struct cordon_err *err)
{
	json_error_t jerr;
	char text[JSON_ERROR_TEXT_LENGTH + 8];

	if (len > max)
		return cordon_err_setf(err, -EMSGSIZE, "request body: larger than %zu bytes", max);
	if (len == 0 && empty_ok) {
		*ret = json_object();
		return *ret ? 0 : cordon_err_setf(err, -ENOMEM, "request body: out of memory");
	}
	if (!body || len == 0)
		return cordon_err_setf(err, -EBADMSG, "request body: expected a JSON object");
	if (nested_deeper_than(body, len, API_MAX_DEPTH))
		return cordon_err_setf(err, -EBADMSG, "request body: nested deeper than %d levels",
				       API_MAX_DEPTH);
	/* JSON_ALLOW_NUL: get_string() rejects NUL itself, naming the field. Trailing bytes
	 * after the value are an error (no JSON_DISABLE_EOF_CHECK). */
	json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
	if (!root) {
		printable(text, sizeof(text), jerr.text, strnlen(jerr.text, sizeof(jerr.text)));
		return cordon_err_setf(err, -EBADMSG,
				       "request body: invalid JSON at line %d column %d: %s",
				       jerr.line, jerr.column, text);
	}
	if (!json_is_object(root)) {
		json_decref(root);
		return cordon_err_setf(err, -EBADMSG, "request body: expected a JSON object");
	}
	*ret = root;
	return 0;
}

static int load_body(const char *body, size_t len, bool empty_ok, json_t **ret,
		     struct cordon_err *err)
{
	return load_body_max(body, len, API_MAX_BODY, empty_ok, ret, err);
}

int api_body_load(const char *body, size_t len, json_t **ret, struct cordon_err *err)
{
	return load_body(body, len, false, ret, err);
}

static int missing(struct cordon_err *err, const char *name)
{
	return cordon_err_setf(err, -EINVAL, "%s: required", name);
}

/* env as "K=V" strings in one buffer. */
static int build_env_strv(const struct api_kvmap *env, const char ***ret_strv, char **ret_buf,
			  struct cordon_err *err)
{
	size_t total = 0;
	for (size_t i = 0; i < env->n; i++)
		total += strlen(env->items[i].key) + strlen(env->items[i].value) + 2;
	_cleanup_free_ const char **strv = calloc(env->n + 1, sizeof(*strv));
	_cleanup_free_ char *buf = malloc(total + 1);
	if (!strv || !buf)
		return cordon_err_setf(err, -ENOMEM, "env: out of memory");
	char *p = buf;
	for (size_t i = 0; i < env->n; i++) {
		strv[i] = p;
		p += sprintf(p, "%s=%s", env->items[i].key, env->items[i].value) + 1;
	}
	*ret_strv = TAKE_PTR(strv);
	*ret_buf = TAKE_PTR(buf);
	return 0;
}

/* ---- network ------------------------------------------------------------------------------ */

static const struct enumval net_policies[] = {
    {"deny", API_NET_DENY},
    {"allow", API_NET_ALLOW},
    {"public", API_NET_PUBLIC},
};
static const struct enumdef net_policy_def = {net_policies, ELEMENTSOF(net_policies),
					      "must be one of \"deny\", \"allow\", \"public\""};
static const struct strdef rule_def = {
    API_MAX_RULE,
    rule_ok,
    "must be a domain (optionally \"*.\"-prefixed), IP address or CIDR, with an optional :port",
};

static int fld_allow(json_t *v, void *dst, const struct field *f, const char *path,
		     struct cordon_err *err)
{
	struct api_network *n = dst;
	n->allow_given = true;
	return get_strv(v, 0, API_MAX_ALLOW, &rule_def, path, &n->allow, &n->n_allow, err);
}

static int fld_net_policy(json_t *v, void *dst, const struct field *f, const char *path,
			  struct cordon_err *err)
{
	struct api_network *n = dst;
	n->policy_given = true;
	return fld_enum(v, &n->policy, f, path, err);
}

/* A method token in capitals: "POST". */
static bool method_ok(const char *s, size_t len)
{
	if (len == 0)
		return false;
	for (size_t i = 0; i < len; i++)
		if (s[i] < 'A' || s[i] > 'Z')
			return false;
	return true;
}

/* "/v1/charges": printable, no space, query or fragment. */
static bool path_prefix_ok(const char *s, size_t len)
{
	if (len == 0 || s[0] != '/')
		return false;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)s[i] <= 0x20 || s[i] == 0x7f || s[i] == '?' || s[i] == '#')
			return false;
	return true;
}

/* [a-z0-9][a-z0-9_-]{0,62} */
static bool profile_ok(const char *s, size_t len)
{
	if (len == 0 || len > API_MAX_PROFILE || !is_lower_alnum(s[0]))
		return false;
	for (size_t i = 1; i < len; i++)
		if (!is_lower_alnum(s[i]) && s[i] != '_' && s[i] != '-')
			return false;
	return true;
}

static const struct strdef method_def = {15, method_ok, "must be an HTTP method in capitals (\"POST\")"};
static const struct strdef prefix_def = {API_MAX_APPROVE_PATH, path_prefix_ok,
					 "must be a path starting with \"/\", without spaces, query or fragment"};
static const struct strdef profile_def = {API_MAX_PROFILE, profile_ok,
					  "must be a profile name ([a-z0-9][a-z0-9_-]*)"};
static const struct range approve_timeout_range = {1, API_MAX_APPROVE_TIMEOUT};

static int fld_methods(json_t *v, void *dst, const struct field *f, const char *path,
		       struct cordon_err *err)
{
	struct api_approve_rule *r = dst;
	return get_strv(v, 1, API_MAX_APPROVE_LIST, &method_def, path, &r->methods, &r->n_methods, err);
}

static int fld_paths(json_t *v, void *dst, const struct field *f, const char *path,
		     struct cordon_err *err)
{
	struct api_approve_rule *r = dst;
	return get_strv(v, 1, API_MAX_APPROVE_LIST, &prefix_def, path, &r->paths, &r->n_paths, err);
}

static const struct field approve_fields[] = {
    {"approve", fld_string, offsetof(struct api_approve_rule, host), &rule_def},
    {"methods", fld_methods, 0, NULL},
    {"paths", fld_paths, 0, NULL},
    {"timeout_s", fld_u32, offsetof(struct api_approve_rule, timeout_s), &approve_timeout_range},
};
static const struct objdef approve_def = {approve_fields, ELEMENTSOF(approve_fields)};

static int fld_approve(json_t *v, void *dst, const struct field *f, const char *path,
		       struct cordon_err *err)
{
	struct api_network *n = dst;
	size_t size = json_array_size(v);
	if (!json_is_array(v) || size > API_MAX_APPROVE)
		return cordon_err_setf(err, -EINVAL, "%s: must be an array of at most %d rules", path,
				       API_MAX_APPROVE);
	n->approve = calloc(size + 1, sizeof(*n->approve));
	if (!n->approve)
		return cordon_err_setf(err, -ENOMEM, "%s: out of memory", path);
	for (size_t i = 0; i < size; i++) {
		char child[PATH_BUF];
		struct api_approve_rule *r = &n->approve[i];
		snprintf(child, sizeof(child), "%s[%zu]", path, i);
		r->timeout_s = API_DEFAULT_APPROVE_TIMEOUT;
		n->n_approve = i + 1; /* freed by network_done() from here on */
		int k = parse_object(json_array_get(v, i), &approve_def, r, child, err);
		if (k < 0)
			return k;
		if (!r->host)
			return cordon_err_setf(err, -EINVAL, "%s.approve: required (the host)", child);
	}
	return 0;
}

static const struct field network_fields[] = {
    {"policy", fld_net_policy, 0, &net_policy_def},
    {"allow", fld_allow, 0, NULL},
    {"approve", fld_approve, 0, NULL},
    {"profile", fld_string, offsetof(struct api_network, profile), &profile_def},
};
static const struct objdef network_def = {network_fields, ELEMENTSOF(network_fields)};

static int network_check(const struct api_network *n, const char *prefix, struct cordon_err *err)
{
	/* With a profile and no policy, the profile's policy applies (the daemon checks). */
	if (n->n_allow > 0 && n->policy != API_NET_ALLOW && (n->policy_given || !n->profile))
		return cordon_err_setf(err, -EINVAL, "%sallow: only valid with policy \"allow\"",
				       prefix);
	return 0;
}

static void network_done(struct api_network *n)
{
	free(n->allow);
	n->allow = NULL;
	for (size_t i = 0; i < n->n_approve; i++) {
		free(n->approve[i].methods);
		free(n->approve[i].paths);
	}
	free(n->approve);
	n->approve = NULL;
	n->n_approve = 0;
}

static json_t *strv_json(const char *const *v, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < n; i++)
		json_array_append_new(a, json_string(v[i]));
	return a;
}

json_t *api_approve_json(const struct api_approve_rule *rules, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < n; i++) {
		const struct api_approve_rule *r = &rules[i];
		json_t *o = json_pack("{s:s, s:i}", "approve", r->host, "timeout_s", (int)r->timeout_s);
		if (r->n_methods)
			json_object_set_new(o, "methods", strv_json(r->methods, r->n_methods));
		if (r->n_paths)
			json_object_set_new(o, "paths", strv_json(r->paths, r->n_paths));
		json_array_append_new(a, o);
	}
	return a;
}

/* ---- approval decisions ------------------------------------------------------------------- */

static const struct enumval decisions[] = {{"deny", 0}, {"allow", 1}};
static const struct enumdef decision_def = {decisions, ELEMENTSOF(decisions),
					    "must be \"allow\" or \"deny\""};

static bool reason_ok(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return false;
	return true;
}
static const struct strdef reason_def = {API_MAX_REASON, reason_ok, "must not contain control characters"};

struct decision_ctx {
	struct api_decision d;
	int decision;
};

static const struct field decision_fields[] = {
    {"decision", fld_enum, offsetof(struct decision_ctx, decision), &decision_def},
    {"reason", fld_string, offsetof(struct decision_ctx, d.reason), &reason_def},
};
static const struct objdef decisiondef = {decision_fields, ELEMENTSOF(decision_fields)};

struct api_decision *api_decision_free(struct api_decision *d)
{
	if (!d)
		return NULL;
	json_decref(d->root_);
	free(d); /* the first member of its struct decision_ctx */
	return NULL;
}

static void decision_ctx_freep(struct decision_ctx **p)
{
	if (*p)
		api_decision_free(&(*p)->d);
}

int api_decision_parse(const char *body, size_t len, struct api_decision **ret, struct cordon_err *err)
{
	_cleanup_(decision_ctx_freep) struct decision_ctx *ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	ctx->decision = -1;
	int r = load_body(body, len, false, &ctx->d.root_, err);
	if (r < 0)
		return r;
	r = parse_object(ctx->d.root_, &decisiondef, ctx, "", err);
	if (r < 0)
		return r;
	if (ctx->decision < 0)
		return missing(err, "decision");
	ctx->d.allow = ctx->decision == 1;
	*ret = &TAKE_PTR(ctx)->d;
	return 0;
}

bool api_approval_id_ok(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	if (n < 4 || n > 23 || strncmp(s, "ap-", 3) != 0)
		return false;
	for (size_t i = 3; i < n; i++)
		if (!strchr("0123456789abcdef", s[i]))
			return false;
	return true;
}

struct api_network_req *api_network_free(struct api_network_req *n)
{
	if (!n)
		return NULL;
	network_done(&n->network);
	json_decref(n->root_);
	free(n);
	return NULL;
}
DEFINE_CLEANUP_FUNC(struct api_network_req *, api_network_free)

int api_network_parse(const char *body, size_t len, struct api_network_req **ret_req,
		      struct cordon_err *err)
{
	_cleanup_(api_network_freep) struct api_network_req *n = calloc(1, sizeof(*n));
	if (!n)
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	int r = load_body(body, len, false, &n->root_, err);
	if (r < 0)
		return r;
	r = parse_object(n->root_, &network_def, &n->network, "", err);
	if (r < 0)
		return r;
	if (!n->network.policy_given && !n->network.profile)
		return missing(err, "policy");
	r = network_check(&n->network, "", err);
	if (r < 0)
		return r;
	*ret_req = TAKE_PTR(n);
	return 0;
}

/* ---- create ------------------------------------------------------------------------------- */

static const struct range cpus_range = {100, 64000};
static const struct range memory_range = {16, 65536};
static const struct range pids_range = {16, 65536};
static const struct range disk_range = {16, 1048576};

/* cpus is a number of CPUs, fractional allowed, kept in thousandths. */
static int fld_cpus(json_t *v, void *dst, const struct field *f, const char *path,
		    struct cordon_err *err)
{
	double d = json_is_number(v) ? json_number_value(v) : -1;
	if (!(d >= 0.1 && d <= 64))
		return invalid(err, path, "must be a number between 0.1 and 64");
	*(uint32_t *)dst = (uint32_t)(d * 1000 + 0.5);
	return 0;
}

static const struct field limits_fields[] = {
    {"cpus", fld_cpus, offsetof(struct api_limits, cpus_milli), &cpus_range},
    {"memory_mb", fld_u32, offsetof(struct api_limits, memory_mb), &memory_range},
    {"pids", fld_u32, offsetof(struct api_limits, pids), &pids_range},
    {"disk_mb", fld_u32, offsetof(struct api_limits, disk_mb), &disk_range},
};
static const struct objdef limits_def = {limits_fields, ELEMENTSOF(limits_fields)};

static const struct strdef template_def = {API_MAX_TEMPLATE, template_ok,
					   "must match [a-z0-9][a-z0-9._-]{0,63}"};
static const struct enumval runtimes[] = {
    {"jail", API_RUNTIME_JAIL},
    {"auto", API_RUNTIME_AUTO},
    {"gvisor", API_RUNTIME_GVISOR},
    {"microvm", API_RUNTIME_MICROVM},
};
static const struct enumdef runtime_def = {
    runtimes, ELEMENTSOF(runtimes), "must be one of \"jail\", \"auto\", \"gvisor\", \"microvm\""};

int api_runtime_from_name(const char *name, enum api_runtime *ret)
{
	for (size_t i = 0; name && i < ELEMENTSOF(runtimes); i++)
		if (strcmp(runtimes[i].name, name) == 0) {
			*ret = (enum api_runtime)runtimes[i].value;
			return 0;
		}
	return -ENOENT;
}

const char *api_runtime_name(enum api_runtime r)
{
	for (size_t i = 0; i < ELEMENTSOF(runtimes); i++)
		if (runtimes[i].value == (int)r)
			return runtimes[i].name;
	return "jail";
}
static const struct kvdef env_def = {env_name_valid, "must match [A-Za-z_][A-Za-z0-9_]*"};
static const struct kvdef metadata_def = {label_ok,
					  "must be non-empty and without control characters"};

/* The server's maximum is known only at run time, so timeout_s has its own parser. */
struct create_ctx {
	struct api_create c;
	uint32_t max_timeout_s;
};

static int fld_create_timeout(json_t *v, void *dst, const struct field *f, const char *path,
			      struct cordon_err *err)
{
	struct create_ctx *ctx = dst;
	int64_t i = 0;
	int r = get_int(v, 1, ctx->max_timeout_s, path, &i, err);
	if (r < 0)
		return r;
	ctx->c.timeout_s = (uint32_t)i;
	return 0;
}

/* "sn-" and 20 characters of base32, as cordond names snapshots. */
static bool snapshot_id_ok(const char *s, size_t len)
{
	if (len != API_SNAPSHOT_ID_LEN || strncmp(s, "sn-", 3) != 0)
		return false;
	return strspn(s + 3, "abcdefghijklmnopqrstuvwxyz234567") == len - 3;
}

bool api_snapshot_id_ok(const char *s)
{
	return s && snapshot_id_ok(s, strlen(s));
}

static const struct strdef snapshot_def = {API_SNAPSHOT_ID_LEN, snapshot_id_ok,
					   "must be a snapshot id (sn-...)"};

/* The fields a create from a snapshot takes from it unless the body gives them. */
#define CREATE_SET(parser, member, flag)                                                    \
	static int parser##_set(json_t *v, void *dst, const struct field *f, const char *path,    \
				struct cordon_err *err)                                            \
	{                                                                                          \
		struct api_create *c = dst;                                                        \
		c->flag = true;                                                                    \
		return parser(v, &c->member, f, path, err);                                        \
	}
CREATE_SET(fld_string, template_name, template_set)
CREATE_SET(fld_enum, runtime, runtime_set)

static int fld_secrets(json_t *v, void *dst, const struct field *f, const char *path,
		       struct cordon_err *err)
{
	return api_secrets_from_json(v, dst, path, err);
}

bool api_volume_name_ok(const char *s, size_t len)
{
	return len <= API_MAX_VOLUME_NAME && template_ok(s, len);
}

/* Where a volume may be mounted: what cordon manages (/proc, /sys, /dev) and `/` are not. */
static bool mount_path_ok(const char *s, size_t len)
{
	static const char *const managed[] = {"/proc", "/sys", "/dev"};
	if (len < 2 || s[0] != '/' || s[len - 1] == '/' || strstr(s, "//"))
		return false;
	for (const char *p = s; (p = strstr(p, "/.")); p++)
		if (p[2] == '/' || p[2] == '\0' || (p[2] == '.' && (p[3] == '/' || p[3] == '\0')))
			return false;
	for (size_t i = 0; i < ELEMENTSOF(managed); i++) {
		size_t n = strlen(managed[i]);
		if (strncmp(s, managed[i], n) == 0 && (s[n] == '\0' || s[n] == '/'))
			return false;
	}
	return true;
}

static bool volume_name_okl(const char *s, size_t len)
{
	return api_volume_name_ok(s, len);
}

static const struct strdef volume_name_def = {API_MAX_VOLUME_NAME, volume_name_okl,
					      "must match [a-z0-9][a-z0-9._-]{0,62}"};
static const struct strdef mount_path_def = {
    API_MAX_PATH, mount_path_ok,
    "must be an absolute path without '.', '..' or empty components, not '/' and not in "
    "/proc, /sys or /dev"};

static const struct field volume_mount_fields[] = {
    {"name", fld_string, offsetof(struct api_volume_mount, name), &volume_name_def},
    {"path", fld_string, offsetof(struct api_volume_mount, path), &mount_path_def},
    {"read_only", fld_bool, offsetof(struct api_volume_mount, read_only), NULL},
};
static const struct objdef volume_mount_def = {volume_mount_fields, ELEMENTSOF(volume_mount_fields)};

/* "volumes": [{name, path, read_only}], each name and path once. */
static int fld_volumes(json_t *v, void *dst, const struct field *f, const char *path,
		       struct cordon_err *err)
{
	struct api_create *c = dst;
	if (!json_is_array(v) || json_array_size(v) > API_MAX_VOLUMES)
		return cordon_err_setf(err, -EINVAL, "%s: must be an array of at most %d objects",
				       path, API_MAX_VOLUMES);
	for (size_t i = 0; i < json_array_size(v); i++) {
		char child[PATH_BUF];
		struct api_volume_mount *m = &c->volumes[i];
		snprintf(child, sizeof(child), "%s[%zu]", path, i);
		*m = (struct api_volume_mount){0};
		int r = parse_object(json_array_get(v, i), &volume_mount_def, m, child, err);
		if (r < 0)
			return r;
		if (!m->name || !m->path)
			return cordon_err_setf(err, -EINVAL, "%s: name and path are required", child);
		for (size_t k = 0; k < i; k++)
			if (strcmp(c->volumes[k].name, m->name) == 0 || strcmp(c->volumes[k].path, m->path) == 0)
				return cordon_err_setf(err, -EINVAL, "%s: a volume or path named twice", child);
	}
	c->n_volumes = json_array_size(v);
	return 0;
}

static const struct field create_fields[] = {
    {"template", fld_string_set, 0, &template_def},
    {"runtime", fld_enum_set, 0, &runtime_def},
    {"timeout_s", fld_create_timeout, 0, NULL},
    {"limits", fld_object, offsetof(struct api_create, limits), &limits_def},
    {"snapshot", fld_string, offsetof(struct api_create, snapshot), &snapshot_def},
    {"network", fld_object, offsetof(struct api_create, network), &network_def},
    {"env", fld_kvmap, offsetof(struct api_create, env), &env_def},
    {"metadata", fld_kvmap, offsetof(struct api_create, metadata), &metadata_def},
    {"secrets", fld_secrets, offsetof(struct api_create, secrets), NULL},
    {"volumes", fld_volumes, 0, NULL},
};
static const struct objdef create_def = {create_fields, ELEMENTSOF(create_fields)};

struct api_create *api_create_free(struct api_create *c)
{
	if (!c)
		return NULL;
	network_done(&c->network);
	free(c->env.items);
	free(c->metadata.items);
	free(c->secrets.items);
	free(c->env_strv);
	free(c->env_buf_);
	json_decref(c->root_);
	/* c is the first member of a struct create_ctx (api_create_parse()). */
	free(c);
	return NULL;
}

static void create_ctx_freep(struct create_ctx **p)
{
	if (*p)
		api_create_free(&(*p)->c);
}

int api_create_parse(const char *body, size_t len, uint32_t max_timeout_s,
		     struct api_create **ret_create, struct cordon_err *err)
{
	_cleanup_(create_ctx_freep) struct create_ctx *ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	if (max_timeout_s < 1)
		max_timeout_s = 1;
	struct api_create *c = &ctx->c;
	ctx->max_timeout_s = max_timeout_s;
	c->template_name = API_DEFAULT_TEMPLATE;
	c->runtime = API_RUNTIME_JAIL;
	c->timeout_s =
	    API_DEFAULT_TIMEOUT_S < max_timeout_s ? API_DEFAULT_TIMEOUT_S : max_timeout_s;
	c->limits =
	    (struct api_limits){.cpus_milli = API_DEFAULT_CPUS_MILLI,
			     .memory_mb = API_DEFAULT_MEMORY_MB, .pids = 256,
			     .disk_mb = API_DEFAULT_DISK_MB};
	c->network.policy = API_NET_DENY;

	int r = load_body(body, len, true, &c->root_, err);
	if (r < 0)
		return r;
	r = parse_object(c->root_, &create_def, ctx, "", err);
	if (r < 0)
		return r;
	r = network_check(&c->network, "network.", err);
	if (r < 0)
		return r;
	static const char *const limit_keys[] = {"cpus", "memory_mb", "pids", "disk_mb"};
	json_t *lim = json_object_get(c->root_, "limits");
	for (size_t i = 0; i < ELEMENTSOF(limit_keys); i++)
		if (json_is_object(lim) && json_object_get(lim, limit_keys[i]) &&
		    !json_is_null(json_object_get(lim, limit_keys[i])))
			c->limits_set |= 1u << i;
	r = build_env_strv(&c->env, &c->env_strv, &c->env_buf_, err);
	if (r < 0)
		return r;
	*ret_create = &TAKE_PTR(ctx)->c;
	return 0;
}

int api_limits_check(const struct api_limits *l, const struct api_host_max *max,
		     struct cordon_err *err)
{
	if (max->cpus_milli && l->cpus_milli > max->cpus_milli)
		return cordon_err_setf(err, -EINVAL, "limits.cpus: must be at most %g, this host's CPUs",
				       max->cpus_milli / 1000.0);
	if (max->memory_mb && l->memory_mb > max->memory_mb)
		return cordon_err_setf(err, -EINVAL,
				       "limits.memory_mb: must be at most %u, this host's memory in MiB",
				       max->memory_mb);
	return 0;
}

void api_create_to_spec(const struct api_create *c, struct cordon_spec *spec)
{
	spec->memory_bytes = (uint64_t)c->limits.memory_mb << 20;
	spec->cpus_milli = c->limits.cpus_milli;
	spec->pids = c->limits.pids;
	spec->disk_bytes = (uint64_t)c->limits.disk_mb << 20;
	spec->timeout_ms = (uint64_t)c->timeout_s * 1000;
	spec->env = c->env_strv;
	spec->n_env = c->env.n;
	spec->net = CORDON_NET_NONE;
}

/* ---- fork --------------------------------------------------------------------------------- */

static const struct range fork_range = {1, API_MAX_FORK};

/* The server's maximum TTL is known at run time: the request's own parser has it. */
struct fork_ctx {
	struct api_fork f;
	uint32_t max_timeout_s;
};

static int fld_fork_timeout(json_t *v, void *dst, const struct field *f, const char *path,
			    struct cordon_err *err)
{
	struct fork_ctx *ctx = dst;
	int64_t i = 0;
	int r = get_int(v, 1, ctx->max_timeout_s, path, &i, err);
	if (r < 0)
		return r;
	ctx->f.timeout_s = (uint32_t)i;
	return 0;
}

static const struct field fork_fields[] = {
    {"count", fld_u32, offsetof(struct fork_ctx, f.count), &fork_range},
    {"timeout_s", fld_fork_timeout, 0, NULL},
};
static const struct objdef fork_def = {fork_fields, ELEMENTSOF(fork_fields)};

int api_fork_parse(const char *body, size_t len, uint32_t max_timeout_s, struct api_fork *ret,
		   struct cordon_err *err)
{
	struct fork_ctx ctx = {.max_timeout_s = max_timeout_s < 1 ? 1 : max_timeout_s};
	json_t *root = NULL;
	int r = load_body(body, len, false, &root, err);
	if (r < 0)
		return r;
	r = parse_object(root, &fork_def, &ctx, "", err);
	json_decref(root);
	if (r < 0)
		return r;
	if (ctx.f.count == 0)
		return missing(err, "count");
	*ret = ctx.f;
	return 0;
}

/* ---- volumes ------------------------------------------------------------------------------ */

static const struct range volume_size_range = {API_MIN_VOLUME_MB, API_MAX_VOLUME_MB};

static const struct field volume_fields[] = {
    {"name", fld_string, offsetof(struct api_volume, name), &volume_name_def},
    {"size_mb", fld_u32, offsetof(struct api_volume, size_mb), &volume_size_range},
};
static const struct objdef volume_def = {volume_fields, ELEMENTSOF(volume_fields)};

struct api_volume *api_volume_free(struct api_volume *v)
{
	if (v)
		json_decref(v->root_);
	free(v);
	return NULL;
}
DEFINE_CLEANUP_FUNC(struct api_volume *, api_volume_free)

int api_volume_parse(const char *body, size_t len, struct api_volume **ret_volume,
		     struct cordon_err *err)
{
	_cleanup_(api_volume_freep) struct api_volume *v = calloc(1, sizeof(*v));
	if (!v)
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	int r = load_body(body, len, false, &v->root_, err);
	if (r < 0 || (r = parse_object(v->root_, &volume_def, v, "", err)) < 0)
		return r;
	if (!v->name)
		return missing(err, "name");
	if (!v->size_mb)
		return missing(err, "size_mb");
	*ret_volume = TAKE_PTR(v);
	return 0;
}

/* ---- timeout ------------------------------------------------------------------------------ */

struct timeout_req {
	uint32_t timeout_s;
	uint32_t max;
};

static int fld_timeout(json_t *v, void *dst, const struct field *f, const char *path,
		       struct cordon_err *err)
{
	struct timeout_req *t = dst;
	int64_t i = 0;
	int r = get_int(v, 1, t->max, path, &i, err);
	if (r < 0)
		return r;
	t->timeout_s = (uint32_t)i;
	return 0;
}

static const struct field timeout_fields[] = {
    {"timeout_s", fld_timeout, 0, NULL},
};
static const struct objdef timeout_def = {timeout_fields, ELEMENTSOF(timeout_fields)};

int api_timeout_parse(const char *body, size_t len, uint32_t max_timeout_s, uint32_t *ret_timeout_s,
		      struct cordon_err *err)
{
	struct timeout_req t = {0, max_timeout_s < 1 ? 1 : max_timeout_s};
	json_t *root = NULL;
	int r = load_body(body, len, false, &root, err);
	if (r < 0)
		return r;
	r = parse_object(root, &timeout_def, &t, "", err);
	json_decref(root);
	if (r < 0)
		return r;
	if (t.timeout_s == 0)
		return missing(err, "timeout_s");
	*ret_timeout_s = t.timeout_s;
	return 0;
}

/* ---- exec and process start ---------------------------------------------------------------- */

static const struct strdef arg_def = {API_MAX_ARG, NULL, NULL};
static const struct strdef tag_def = {API_MAX_TAG, label_ok,
				      "must be non-empty and without control characters"};
static const struct enumval users[] = {
    {"user", CORDON_USER_USER},
    {"root", CORDON_USER_ROOT},
};
static const struct enumdef user_def = {users, ELEMENTSOF(users),
					"must be one of \"user\", \"root\""};
static const struct enumval encodings[] = {
    {"utf-8", API_ENCODING_UTF8},
    {"base64", API_ENCODING_BASE64},
};
static const struct enumdef encoding_def = {encodings, ELEMENTSOF(encodings),
					    "must be one of \"utf-8\", \"base64\""};
static const struct range run_timeout_range = {1, API_MAX_EXEC_TIMEOUT};
static const struct range start_timeout_range = {0, API_MAX_EXEC_TIMEOUT};

static int fld_argv(json_t *v, void *dst, const struct field *f, const char *path,
		    struct cordon_err *err)
{
	struct api_exec *e = dst;
	free(e->argv); /* argv given twice is a duplicate key, but stay leak-free regardless */
	e->argv = NULL;
	int r = get_strv(v, 1, API_MAX_ARGV, &arg_def, path, &e->argv, &e->argc, err);
	if (r < 0)
		return r;
	if (e->argv[0][0] == '\0')
		return cordon_err_setf(err, -EINVAL, "%s[0]: must not be empty", path);
	return 0;
}

static int fld_stdin(json_t *v, void *dst, const struct field *f, const char *path,
		     struct cordon_err *err)
{
	struct api_exec *e = dst;
	return get_string(v, API_MAX_BODY, path, &e->stdin_data, &e->stdin_len, err);
}

static const struct range pty_range = {1, API_MAX_PTY_DIM};
static const struct field winsize_fields[] = {
    {"cols", fld_u32, offsetof(struct api_winsize, cols), &pty_range},
    {"rows", fld_u32, offsetof(struct api_winsize, rows), &pty_range},
};
static const struct objdef winsize_def = {winsize_fields, ELEMENTSOF(winsize_fields)};

/* The two tables differ in stdin, pty and the range of timeout_s. */
static const struct field run_fields[] = {
    {"argv", fld_argv, 0, NULL},
    {"cmd", fld_string, offsetof(struct api_exec, cmd), &arg_def},
    {"cwd", fld_path, offsetof(struct api_exec, cwd), NULL},
    {"env", fld_kvmap, offsetof(struct api_exec, env), &env_def},
    {"user", fld_enum, offsetof(struct api_exec, user), &user_def},
    {"tag", fld_string, offsetof(struct api_exec, tag), &tag_def},
    {"stdin", fld_stdin, 0, NULL},
    {"timeout_s", fld_u32, offsetof(struct api_exec, timeout_s), &run_timeout_range},
    {"encoding", fld_enum, offsetof(struct api_exec, encoding), &encoding_def},
};
static const struct field start_fields[] = {
    {"argv", fld_argv, 0, NULL},
    {"cmd", fld_string, offsetof(struct api_exec, cmd), &arg_def},
    {"cwd", fld_path, offsetof(struct api_exec, cwd), NULL},
    {"env", fld_kvmap, offsetof(struct api_exec, env), &env_def},
    {"user", fld_enum, offsetof(struct api_exec, user), &user_def},
    {"tag", fld_string, offsetof(struct api_exec, tag), &tag_def},
    {"timeout_s", fld_u32, offsetof(struct api_exec, timeout_s), &start_timeout_range},
    {"pty", fld_object, offsetof(struct api_exec, pty), &winsize_def},
};
static const struct objdef exec_defs[] = {
    [API_EXEC_RUN] = {run_fields, ELEMENTSOF(run_fields)},
    [API_EXEC_START] = {start_fields, ELEMENTSOF(start_fields)},
};

struct api_exec *api_exec_free(struct api_exec *e)
{
	if (!e)
		return NULL;
	free(e->argv);
	free(e->env.items);
	free(e->env_strv);
	free(e->env_buf_);
	json_decref(e->root_);
	free(e);
	return NULL;
}
DEFINE_CLEANUP_FUNC(struct api_exec *, api_exec_free)

static int exec_argv_from_cmd(struct api_exec *e, struct cordon_err *err)
{
	if (e->argv && e->cmd)
		return invalid(err, "argv", "give either argv or cmd, not both");
	if (e->argv)
		return 0;
	if (!e->cmd)
		return invalid(err, "argv", "required (or cmd)");
	e->argv = calloc(4, sizeof(*e->argv));
	if (!e->argv)
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	e->argv[0] = "/bin/sh";
	e->argv[1] = "-c";
	e->argv[2] = e->cmd;
	e->argc = 3;
	return 0;
}

int api_exec_parse(const char *body, size_t len, enum api_exec_kind kind,
		   struct api_exec **ret_exec, struct cordon_err *err)
{
	if ((unsigned)kind >= ELEMENTSOF(exec_defs))
		return cordon_err_setf(err, -EINVAL, "bad exec kind");
	_cleanup_(api_exec_freep) struct api_exec *e = calloc(1, sizeof(*e));
	if (!e)
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	e->user = CORDON_USER_USER;
	e->timeout_s = API_DEFAULT_EXEC_TIMEOUT_S;

	int r = load_body(body, len, false, &e->root_, err);
	if (r < 0)
		return r;
	r = parse_object(e->root_, &exec_defs[kind], e, "", err);
	if (r < 0)
		return r;
	e->user_given = json_object_get(e->root_, "user") != NULL;
	json_t *pty = json_object_get(e->root_, "pty");
	e->pty_set = pty && !json_is_null(pty);
	if (e->pty_set) {
		e->pty.cols = e->pty.cols ? e->pty.cols : 80;
		e->pty.rows = e->pty.rows ? e->pty.rows : 24;
	}
	r = exec_argv_from_cmd(e, err);
	if (r < 0)
		return r;
	r = build_env_strv(&e->env, &e->env_strv, &e->env_buf_, err);
	if (r < 0)
		return r;
	*ret_exec = TAKE_PTR(e);
	return 0;
}

/* ---- stdin -------------------------------------------------------------------------------- */

struct stdin_req {
	const char *data;
	size_t len;
	bool eof;
};

static int fld_b64(json_t *v, void *dst, const struct field *f, const char *path,
		   struct cordon_err *err)
{
	struct stdin_req *s = dst;
	return get_string(v, API_MAX_BODY, path, &s->data, &s->len, err);
}

static const struct field stdin_fields[] = {
    {"data", fld_b64, 0, NULL},
    {"eof", fld_bool, offsetof(struct stdin_req, eof), NULL},
};
static const struct objdef stdin_def = {stdin_fields, ELEMENTSOF(stdin_fields)};

void api_stdin_done(struct api_stdin *s)
{
	if (!s)
		return;
	free(s->data);
	*s = (struct api_stdin){};
}

int api_stdin_parse(const char *body, size_t len, struct api_stdin *ret_stdin,
		    struct cordon_err *err)
{
	struct stdin_req req = {};
	json_t *root = NULL;
	int r = load_body(body, len, false, &root, err);
	if (r < 0)
		return r;
	r = parse_object(root, &stdin_def, &req, "", err);
	if (r >= 0 && !req.data && !json_is_boolean(json_object_get(root, "eof")))
		r = missing(err, "data");
	struct api_stdin out = {.eof = req.eof};
	if (r >= 0 && req.len > 0) {
		r = base64_decode(req.data, req.len, &out.data, &out.len);
		if (r == -EINVAL)
			invalid(err, "data", "must be base64 (RFC 4648, with padding)");
		else if (r < 0)
			cordon_err_setf(err, r, "data: out of memory");
	}
	json_decref(root);
	if (r < 0)
		return r;
	if (out.len == 0) {
		free(out.data);
		out.data = NULL;
	}
	*ret_stdin = out;
	return 0;
}

/* ---- signal ------------------------------------------------------------------------------- */

/* The signals a client may send. Not the real-time ones, not the ones that mean a fault
 * (SEGV, BUS, ...), which a process should only get from the kernel. */
static const struct enumval signals[] = {
    {"SIGHUP", SIGHUP},	  {"SIGINT", SIGINT},	{"SIGQUIT", SIGQUIT}, {"SIGABRT", SIGABRT},
    {"SIGKILL", SIGKILL}, {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}, {"SIGPIPE", SIGPIPE},
    {"SIGALRM", SIGALRM}, {"SIGTERM", SIGTERM}, {"SIGCONT", SIGCONT}, {"SIGSTOP", SIGSTOP},
    {"SIGTSTP", SIGTSTP}, {"SIGTTIN", SIGTTIN}, {"SIGTTOU", SIGTTOU}, {"SIGWINCH", SIGWINCH},
};

const char *api_signal_name(int signo)
{
	for (size_t i = 0; i < ELEMENTSOF(signals); i++)
		if (signals[i].value == signo)
			return signals[i].name;
	return NULL;
}

static int fld_signal(json_t *v, void *dst, const struct field *f, const char *path,
		      struct cordon_err *err)
{
	for (size_t i = 0; i < ELEMENTSOF(signals); i++) {
		const char *name = signals[i].name;
		bool hit = json_is_integer(v)
			       ? json_integer_value(v) == signals[i].value
			       : json_is_string(v) &&
				     (strcmp(json_string_value(v), name) == 0 ||
				      strcmp(json_string_value(v), name + 3) == 0) &&
				     strlen(json_string_value(v)) == json_string_length(v);
		if (hit) {
			*(int *)dst = signals[i].value;
			return 0;
		}
	}
	return invalid(
	    err, path,
	    "must be an allowed signal: a name (\"SIGTERM\" or \"TERM\") or number "
	    "of HUP INT QUIT ABRT KILL USR1 USR2 PIPE ALRM TERM CONT STOP TSTP TTIN TTOU WINCH");
}

static const struct field signal_fields[] = {
    {"signal", fld_signal, 0, NULL},
};
static const struct objdef signal_def = {signal_fields, ELEMENTSOF(signal_fields)};

int api_signal_parse(const char *body, size_t len, int *ret_signo, struct cordon_err *err)
{
	int signo = 0;
	json_t *root = NULL;
	int r = load_body(body, len, false, &root, err);
	if (r < 0)
		return r;
	r = parse_object(root, &signal_def, &signo, "", err);
	json_decref(root);
	if (r < 0)
		return r;
	if (signo == 0)
		return missing(err, "signal");
	*ret_signo = signo;
	return 0;
}

/* ---- resize ------------------------------------------------------------------------------- */

int api_resize_parse(const char *body, size_t len, struct api_winsize *ret, struct cordon_err *err)
{
	struct api_winsize w = {};
	json_t *root = NULL;
	int r = load_body(body, len, false, &root, err);
	if (r < 0)
		return r;
	r = parse_object(root, &winsize_def, &w, "", err);
	json_decref(root);
	if (r < 0)
		return r;
	if (w.cols == 0)
		return missing(err, "cols");
	if (w.rows == 0)
		return missing(err, "rows");
	*ret = w;
	return 0;
}

/* ---- files -------------------------------------------------------------------------------- */

int api_path_check(const char *path, size_t len, const char *field, struct cordon_err *err)
{
	if (!path)
		return missing(err, field);
	if (memchr(path, 0, len))
		return invalid(err, field, "must not contain NUL bytes");
	if (len > API_MAX_PATH)
		return cordon_err_setf(err, -EINVAL, "%s: longer than %d bytes", field,
				       API_MAX_PATH);
	if (len == 0 || path[0] != '/')
		return invalid(err, field, "must be an absolute path");
	return 0;
}

int api_depth_parse(const char *s, unsigned *ret_depth, struct cordon_err *err)
{
	unsigned d = 0;
	if (!s || !*s) {
		*ret_depth = 1;
		return 0;
	}
	for (const char *p = s; *p; p++) {
		if (!is_digit(*p) || d > API_MAX_LIST_DEPTH)
			return cordon_err_setf(err, -EINVAL,
					       "depth: must be an integer between 1 and %d",
					       API_MAX_LIST_DEPTH);
		d = d * 10 + (unsigned)(*p - '0');
	}
	if (d < 1 || d > API_MAX_LIST_DEPTH)
		return cordon_err_setf(err, -EINVAL, "depth: must be an integer between 1 and %d",
				       API_MAX_LIST_DEPTH);
	*ret_depth = d;
	return 0;
}

int api_query_bool_parse(const char *s, const char *field, bool *ret, struct cordon_err *err)
{
	static const struct enumval bools[] = {
	    {"", 0}, {"0", 0}, {"false", 0}, {"1", 1}, {"true", 1},
	};
	for (size_t i = 0; i < ELEMENTSOF(bools); i++)
		if (strcmp(s ? s : "", bools[i].name) == 0) {
			*ret = bools[i].value;
			return 0;
		}
	return invalid(err, field, "must be one of 0, 1, false, true");
}

/* "<field>_b64": a path as the base64 of its exact bytes, for names that are not UTF-8 and so
 * cannot be a JSON string. Decoded into a NUL-terminated buffer stored at @dst (owned by the
 * request struct), with the same checks as a path. */
static int fld_path_b64(json_t *v, void *dst, const struct field *f, const char *path,
			struct cordon_err *err)
{
	const char *s;
	size_t len, n;
	_cleanup_free_ uint8_t *raw = NULL;
	int r = get_string(v, 4 * (API_MAX_PATH / 3 + 1), path, &s, &len, err);
	if (r < 0)
		return r;
	if (base64_decode(s, len, &raw, &n) < 0)
		return invalid(err, path, "must be base64 (RFC 4648, with padding)");
	r = api_path_check((const char *)raw, n, path, err);
	if (r < 0)
		return r;
	char *out = malloc(n + 1);
	if (!out)
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	memcpy(out, raw, n);
	out[n] = '\0';
	free(*(char **)dst);
	*(char **)dst = out;
	return 0;
}

/* One of @name and @name_b64 (@b64 decoded); the path in @ret. */
static int one_path(const char *text, char *b64, const char *name, const char **ret,
		    struct cordon_err *err)
{
	if (text && b64)
		return cordon_err_setf(err, -EINVAL, "%s: give %s or %s_b64, not both", name, name,
				       name);
	if (!text && !b64)
		return missing(err, name);
	*ret = text ? text : b64;
	return 0;
}

struct api_move *api_move_free(struct api_move *m)
{
	if (m) {
		json_decref(m->root_);
		free(m->from_b64_);
		free(m->to_b64_);
		free(m);
	}
	return NULL;
}
DEFINE_CLEANUP_FUNC(struct api_move *, api_move_free)

static const struct field move_fields[] = {
    {"from", fld_path, offsetof(struct api_move, from), NULL},
    {"to", fld_path, offsetof(struct api_move, to), NULL},
    {"from_b64", fld_path_b64, offsetof(struct api_move, from_b64_), NULL},
    {"to_b64", fld_path_b64, offsetof(struct api_move, to_b64_), NULL},
};
static const struct objdef move_def = {move_fields, ELEMENTSOF(move_fields)};

int api_move_parse(const char *body, size_t len, struct api_move **ret_move, struct cordon_err *err)
{
	_cleanup_(api_move_freep) struct api_move *m = calloc(1, sizeof(*m));
	if (!m)
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	int r = load_body(body, len, false, &m->root_, err);
	if (r < 0)
		return r;
	r = parse_object(m->root_, &move_def, m, "", err);
	if (r < 0)
		return r;
	r = one_path(m->from, m->from_b64_, "from", &m->from, err);
	if (r < 0)
		return r;
	r = one_path(m->to, m->to_b64_, "to", &m->to, err);
	if (r < 0)
		return r;
	*ret_move = TAKE_PTR(m);
	return 0;
}

struct api_mkdir *api_mkdir_free(struct api_mkdir *m)
{
	if (m) {
		json_decref(m->root_);
		free(m->path_b64_);
		free(m);
	}
	return NULL;
}
DEFINE_CLEANUP_FUNC(struct api_mkdir *, api_mkdir_free)

static const struct field mkdir_fields[] = {
    {"path", fld_path, offsetof(struct api_mkdir, path), NULL},
    {"parents", fld_bool, offsetof(struct api_mkdir, parents), NULL},
    {"path_b64", fld_path_b64, offsetof(struct api_mkdir, path_b64_), NULL},
};
static const struct objdef mkdir_def = {mkdir_fields, ELEMENTSOF(mkdir_fields)};

int api_mkdir_parse(const char *body, size_t len, struct api_mkdir **ret_mkdir,
		    struct cordon_err *err)
{
	_cleanup_(api_mkdir_freep) struct api_mkdir *m = calloc(1, sizeof(*m));
	if (!m)
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	int r = load_body(body, len, false, &m->root_, err);
	if (r < 0)
		return r;
	r = parse_object(m->root_, &mkdir_def, m, "", err);
	if (r < 0)
		return r;
	r = one_path(m->path, m->path_b64_, "path", &m->path, err);
	if (r < 0)
		return r;
	*ret_mkdir = TAKE_PTR(m);
	return 0;
}

/* ---- template builds -------------------------------------------------------------------- */

/* A template name that is not the built-in "host". */
static bool build_name_ok(const char *s, size_t len)
{
	return template_ok(s, len) && strcmp(s, API_DEFAULT_TEMPLATE) != 0;
}

static bool nonempty(const char *s, size_t len)
{
	return len > 0;
}

static const struct strdef build_name_def = {API_MAX_TEMPLATE, build_name_ok,
					     "must match ^[a-z0-9][a-z0-9._-]{0,63}$ and not be 'host'"};
static const struct strdef recipe_def = {API_MAX_RECIPE, nonempty, "must not be empty"};

/* A tar archive in base64, decoded here: at most API_MAX_CONTEXT bytes. */
static int fld_context(json_t *v, void *dst, const struct field *f, const char *path,
		       struct cordon_err *err)
{
	struct api_build *b = dst;
	const char *s;
	size_t len;
	int r = get_string(v, API_MAX_BUILD_BODY, path, &s, &len, err);
	if (r < 0)
		return r;
	r = base64_decode(s, len, &b->context, &b->context_len);
	if (r == -EINVAL)
		return invalid(err, path, "must be a tar archive (optionally gzipped) in base64 "
			       "(RFC 4648, padded)");
	if (r < 0)
		return cordon_err_setf(err, r, "%s: out of memory", path);
	if (b->context_len > API_MAX_CONTEXT)
		return cordon_err_setf(err, -EINVAL, "%s: larger than %u bytes", path, API_MAX_CONTEXT);
	return 0;
}

static const struct field build_fields[] = {
    {"name", fld_string, offsetof(struct api_build, name), &build_name_def},
    {"recipe", fld_string, offsetof(struct api_build, recipe), &recipe_def},
    {"build_args", fld_kvmap, offsetof(struct api_build, build_args), &env_def},
    {"no_cache", fld_bool, offsetof(struct api_build, no_cache), NULL},
    {"context", fld_context, 0, NULL},
};
static const struct objdef build_def = {build_fields, ELEMENTSOF(build_fields)};

struct api_build *api_build_free(struct api_build *b)
{
	if (!b)
		return NULL;
	free(b->build_args.items);
	free(b->context);
	json_decref(b->root_);
	free(b);
	return NULL;
}
DEFINE_CLEANUP_FUNC(struct api_build *, api_build_free)

int api_build_parse(const char *body, size_t len, struct api_build **ret_build,
		    struct cordon_err *err)
{
	_cleanup_(api_build_freep) struct api_build *b = calloc(1, sizeof(*b));
	if (!b)
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	int r = load_body_max(body, len, API_MAX_BUILD_BODY, false, &b->root_, err);
	if (r < 0)
		return r;
	r = parse_object(b->root_, &build_def, b, "", err);
	if (r < 0)
		return r;
	if (!b->name)
		return missing(err, "name");
	if (!b->recipe)
		return missing(err, "recipe");
	*ret_build = TAKE_PTR(b);
	return 0;
}

/* ---- metadata filter ----------------------------------------------------------------------- */

#define FILTER_PREFIX "metadata."

static int hexval(char c)
{
	if (is_digit(c))
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* application/x-www-form-urlencoded: '+' is a space, %XX a byte. NUL and bad escapes fail. */
static char *url_decode(const char *s, size_t len, size_t *ret_len)
{
	_cleanup_free_ char *out = malloc(len + 1);
	if (!out)
		return NULL;
	size_t o = 0;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		if (c == '%') {
			int hi = i + 2 < len ? hexval(s[i + 1]) : -1;
			int lo = hi >= 0 ? hexval(s[i + 2]) : -1;
			if (lo < 0 || (hi | lo) == 0)
				return NULL;
			c = (char)(hi << 4 | lo);
			i += 2;
		} else if (c == '+')
			c = ' ';
		else if (c == '\0')
			return NULL;
		out[o++] = c;
	}
	out[o] = '\0';
	*ret_len = o;
	return TAKE_PTR(out);
}

struct api_filter *api_filter_free(struct api_filter *f)
{
	if (!f)
		return NULL;
	for (size_t i = 0; i < f->n; i++) {
		free((char *)f->items[i].key);
		free((char *)f->items[i].value);
	}
	free(f->items);
	free(f);
	return NULL;
}
DEFINE_CLEANUP_FUNC(struct api_filter *, api_filter_free)

/* One "name=value" parameter of the query, appended to @f. */
static int filter_add(struct api_filter *f, const char *p, size_t len, struct cordon_err *err)
{
	const char *eq = memchr(p, '=', len);
	size_t nlen = eq ? (size_t)(eq - p) : len, klen = 0, vlen = 0;
	_cleanup_free_ char *name = url_decode(p, nlen, &klen);
	_cleanup_free_ char *value = eq ? url_decode(eq + 1, len - nlen - 1, &vlen) : NULL;
	char shown[PATH_BUF];

	printable(shown, sizeof(shown), p, nlen);
	if (!name || (eq && !value))
		return cordon_err_setf(err, -EBADMSG, "%s: bad %%-escape or NUL in query parameter",
				       shown);
	if (strncmp(name, FILTER_PREFIX, strlen(FILTER_PREFIX)) != 0)
		return cordon_err_setf(
		    err, -EBADRQC, "%s: unknown query parameter (known: metadata.<key>)", shown);
	const char *key = name + strlen(FILTER_PREFIX);
	klen -= strlen(FILTER_PREFIX);
	if (klen > API_MAX_KEY || !label_ok(key, klen))
		return cordon_err_setf(err, -EINVAL,
				       "%s: key must be 1 to %d bytes without control characters",
				       shown, API_MAX_KEY);
	if (!value || vlen > API_MAX_VALUE)
		return cordon_err_setf(err, -EINVAL, "%s: needs a value of at most %d bytes", shown,
				       API_MAX_VALUE);
	for (size_t i = 0; i < f->n; i++)
		if (strcmp(f->items[i].key, key) == 0)
			return cordon_err_setf(err, -EINVAL, "%s: given more than once", shown);
	if (f->n >= API_MAX_KV)
		return cordon_err_setf(err, -EINVAL, "metadata: more than %d filters", API_MAX_KV);
	char *k = strdup(key);
	if (!k)
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	f->items[f->n++] = (struct api_kv){k, TAKE_PTR(value)};
	return 0;
}

int api_filter_parse(const char *query, size_t len, struct api_filter **ret_filter,
		     struct cordon_err *err)
{
	_cleanup_(api_filter_freep) struct api_filter *f = calloc(1, sizeof(*f));
	if (!f || !(f->items = calloc(API_MAX_KV, sizeof(*f->items))))
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	if (len > API_MAX_BODY)
		return cordon_err_setf(err, -EMSGSIZE, "query: longer than %d bytes", API_MAX_BODY);
	for (size_t i = 0; query && i < len;) {
		const char *amp = memchr(query + i, '&', len - i);
		size_t plen = amp ? (size_t)(amp - (query + i)) : len - i;
		if (plen > 0) {
			int r = filter_add(f, query + i, plen, err);
			if (r < 0)
				return r;
		}
		i += plen + 1;
	}
	*ret_filter = TAKE_PTR(f);
	return 0;
}

bool api_filter_match(const struct api_filter *f, const struct api_kvmap *metadata)
{
	for (size_t i = 0; f && i < f->n; i++) {
		bool found = false;
		for (size_t j = 0; metadata && j < metadata->n && !found; j++)
			found = strcmp(metadata->items[j].key, f->items[i].key) == 0 &&
				strcmp(metadata->items[j].value, f->items[i].value) == 0;
		if (!found)
			return false;
	}
	return true;
}

/* ---- errors ------------------------------------------------------------------------------- */

static const struct {
	const char *code;
	int status;
} error_defs[_API_ERR_MAX] = {
    [API_ERR_BAD_REQUEST] = {"bad_request", 400},
    [API_ERR_INVALID_FIELD] = {"invalid_field", 400},
    [API_ERR_UNKNOWN_FIELD] = {"unknown_field", 400},
    [API_ERR_PAYLOAD_TOO_LARGE] = {"payload_too_large", 413},
    [API_ERR_NOT_FOUND] = {"not_found", 404},
    [API_ERR_CONFLICT] = {"conflict", 409},
    [API_ERR_QUOTA_EXCEEDED] = {"quota_exceeded", 429},
    [API_ERR_CAPACITY] = {"capacity", 503},
    [API_ERR_UNAUTHORIZED] = {"unauthorized", 401},
    [API_ERR_FORBIDDEN] = {"forbidden", 403},
    [API_ERR_INTERNAL] = {"internal", 500},
    [API_ERR_UNAVAILABLE] = {"unavailable", 503},
    [API_ERR_TIMEOUT] = {"timeout", 504},
    [API_ERR_READ_ONLY] = {"read_only", 409},
    [API_ERR_INVALID_PATH] = {"invalid_path", 400},
    [API_ERR_NO_SPACE] = {"no_space", 409},
    [API_ERR_NOT_A_DIRECTORY] = {"not_a_directory", 409},
    [API_ERR_IS_A_DIRECTORY] = {"is_a_directory", 409},
    [API_ERR_CROSS_DEVICE] = {"cross_device", 409},
    [API_ERR_AUDIT_UNAVAILABLE] = {"audit_unavailable", 503},
    [API_ERR_UNSUPPORTED_RUNTIME] = {"unsupported_runtime", 400},
    [API_ERR_SANDBOX_PAUSED] = {"sandbox_paused", 409},
    [API_ERR_SNAPSHOT_LIMIT] = {"snapshot_limit", 507},
    [API_ERR_VOLUME_IN_USE] = {"volume_in_use", 409},
    [API_ERR_VOLUME_EXISTS] = {"volume_exists", 409},
    [API_ERR_INSUFFICIENT_STORAGE] = {"insufficient_storage", 507},
    [API_ERR_UNSAFE_ARCHIVE] = {"unsafe_archive", 400},
    [API_ERR_NO_INTERPRETER] = {"no_interpreter", 409},
    [API_ERR_NOT_A_TERMINAL] = {"not_a_terminal", 409},
    [API_ERR_PORT_UNREACHABLE] = {"port_unreachable", 502},
    [API_ERR_SANDBOX_BUSY] = {"sandbox_busy", 409},
};

/* The one errno -> API error table (STYLE.md: "One table maps errno to HTTP status"). */
static const struct {
	int errnum;
	enum api_error e;
} errno_map[] = {
    {EBADMSG, API_ERR_BAD_REQUEST},
    {EPROTO, API_ERR_BAD_REQUEST},
    {EINVAL, API_ERR_INVALID_FIELD},
    {EOPNOTSUPP, API_ERR_INVALID_FIELD},
    {ERANGE, API_ERR_INVALID_FIELD},
    {EBADRQC, API_ERR_UNKNOWN_FIELD},
    {EMSGSIZE, API_ERR_PAYLOAD_TOO_LARGE},
    {E2BIG, API_ERR_PAYLOAD_TOO_LARGE},
    {ENOENT, API_ERR_NOT_FOUND},
    {ESRCH, API_ERR_NOT_FOUND},
    {EEXIST, API_ERR_CONFLICT},
    {EBUSY, API_ERR_CONFLICT},
    {ENOTEMPTY, API_ERR_CONFLICT},
    {ETXTBSY, API_ERR_CONFLICT},
    {EISDIR, API_ERR_IS_A_DIRECTORY},
    {ENOTDIR, API_ERR_NOT_A_DIRECTORY},
    {EROFS, API_ERR_READ_ONLY},
    {ELOOP, API_ERR_INVALID_PATH},
    {ENAMETOOLONG, API_ERR_INVALID_PATH},
    {EXDEV, API_ERR_CROSS_DEVICE},
    {EFBIG, API_ERR_PAYLOAD_TOO_LARGE},
    {EMFILE, API_ERR_CAPACITY},
    {ENFILE, API_ERR_CAPACITY},
    {EDQUOT, API_ERR_QUOTA_EXCEEDED},
    {EUSERS, API_ERR_QUOTA_EXCEEDED},
    {EAGAIN, API_ERR_CAPACITY},
    {ENOSPC, API_ERR_CAPACITY},
    {ENOKEY, API_ERR_UNAUTHORIZED},
    {EKEYREJECTED, API_ERR_UNAUTHORIZED},
    {EPERM, API_ERR_FORBIDDEN},
    {EACCES, API_ERR_FORBIDDEN},
    {ECONNREFUSED, API_ERR_UNAVAILABLE},
    {ENOTCONN, API_ERR_UNAVAILABLE},
    {EPIPE, API_ERR_UNAVAILABLE},
    {ESHUTDOWN, API_ERR_UNAVAILABLE},
    {ETIMEDOUT, API_ERR_TIMEOUT},
};

const char *api_error_code(enum api_error e)
{
	return (unsigned)e < _API_ERR_MAX ? error_defs[e].code : "internal";
}

int api_error_status(enum api_error e)
{
	return (unsigned)e < _API_ERR_MAX ? error_defs[e].status : 500;
}

enum api_error api_error_from_errno(int code)
{
	for (size_t i = 0; i < ELEMENTSOF(errno_map); i++)
		if (errno_map[i].errnum == -code)
			return errno_map[i].e;
	return API_ERR_INTERNAL;
}

char *api_error_render(enum api_error e, const char *message)
{
	const char *m = message ? message : "";
	json_t *j = json_pack("{s:{s:s,s:s%}}", "error", "code", api_error_code(e), "message", m,
			      strlen(m));
	if (!j) {
		/* json_pack refuses invalid UTF-8; say so rather than pass it on. */
		j = json_pack("{s:{s:s,s:s}}", "error", "code", api_error_code(e), "message",
			      "(message not valid UTF-8)");
		if (!j)
			return NULL;
	}
	char *s = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	return s;
}
