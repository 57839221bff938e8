/* E2B's create body (NewSandbox) as Cordon's create request (e2b.h). Pure over src/spec:
 * the E2B fields are read here, written as Cordon's request and checked by
 * api_create_parse(), so that one parser decides what a sandbox may be. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "basic/cleanup.h"
#include "daemon/e2b.h"

/* The E2B fields that become Cordon's, by type; every other field is accepted and ignored
 * (autoPause, autoResume, mcp, network, iam, volumeMounts: docs/e2b.md says which). */
static int check_type(json_t *body, const char *name, json_type t, struct cordon_err *err)
{
	json_t *v = json_object_get(body, name);
	bool ok = !v || json_is_null(v) || json_typeof(v) == t ||
		  (t == JSON_TRUE && json_is_boolean(v));
	return ok ? 0 : cordon_err_setf(err, -EINVAL, "%s: wrong type", name);
}

static int check_types(json_t *body, struct cordon_err *err)
{
	static const struct {
		const char *name;
		json_type t;
	} fields[] = {
		{"templateID", JSON_STRING}, {"timeout", JSON_INTEGER}, {"metadata", JSON_OBJECT},
		{"envVars", JSON_OBJECT}, {"secure", JSON_TRUE}, {"allow_internet_access", JSON_TRUE},
	};
	for (size_t i = 0; i < ELEMENTSOF(fields); i++)
		if (check_type(body, fields[i].name, fields[i].t, err) < 0)
			return -EINVAL;
	return 0;
}

/* Cordon's request for @body. */
static json_t *translate(json_t *body, const struct e2b_alias *aliases, size_t n,
			 bool have_network, bool secure)
{
	const char *tpl = json_string_value(json_object_get(body, "templateID"));
	tpl = tpl ? tpl : "base";
	for (size_t i = 0; i < n; i++)
		if (strcmp(tpl, aliases[i].e2b) == 0) {
			tpl = aliases[i].cordon;
			break;
		}
	json_t *timeout = json_object_get(body, "timeout");
	json_t *net = json_object_get(body, "allow_internet_access");
	bool internet = have_network && (!net || json_is_null(net) || json_is_true(net));
	json_t *md = json_object_get(body, "metadata"), *env = json_object_get(body, "envVars");
	json_t *req = json_pack("{s:s, s:{s:s}, s:o, s:o}", "template", tpl, "network",
				"policy", internet ? "public" : "deny", "metadata",
				json_is_object(md) ? json_deep_copy(md) : json_object(), "env",
				json_is_object(env) ? json_deep_copy(env) : json_object());
	if (req && json_is_integer(timeout))
		json_object_set(req, "timeout_s", timeout);
	if (req && !secure)
		json_object_set_new(json_object_get(req, "metadata"), E2B_META_INSECURE,
				    json_string("false"));
	return req;
}

/* A message of Cordon's parser names Cordon's field: say E2B's. */
static void e2b_field_names(struct cordon_err *err)
{
	static const struct {
		const char *cordon, *e2b;
	} names[] = {{"timeout_s", "timeout"}, {"template", "templateID"}, {"env", "envVars"},
		     {"network", "allow_internet_access"}};
	char msg[sizeof(err->msg)];
	for (size_t i = 0; i < ELEMENTSOF(names); i++) {
		size_t n = strlen(names[i].cordon);
		if (strncmp(err->msg, names[i].cordon, n) != 0 || strchr(".:[", err->msg[n]) == NULL ||
		    !err->msg[n])
			continue;
		snprintf(msg, sizeof(msg), "%s%s", names[i].e2b, err->msg + n);
		snprintf(err->msg, sizeof(err->msg), "%s", msg);
		return;
	}
}

int e2b_create_parse(const char *body, size_t len, uint32_t max_timeout_s,
		     const struct e2b_alias *aliases, size_t n, bool have_network,
		     struct e2b_create *ret, struct cordon_err *err)
{
	json_error_t je;
	if (len > API_MAX_BODY)
		return cordon_err_setf(err, -EMSGSIZE, "the body is over %d bytes", API_MAX_BODY);
	_cleanup_(json_decrefp) json_t *b =
		len ? json_loadb(body, len, JSON_REJECT_DUPLICATES, &je) : json_object();
	if (!json_is_object(b))
		return cordon_err_setf(err, -EBADMSG, "the body is not a JSON object");
	if (check_types(b, err) < 0)
		return -EINVAL;
	json_t *md = json_object_get(b, "metadata");
	if (json_is_object(md) && json_object_get(md, E2B_META_INSECURE))
		return cordon_err_setf(err, -EINVAL, "metadata: %s is reserved", E2B_META_INSECURE);
	json_t *sec = json_object_get(b, "secure");
	bool secure = !json_is_false(sec);
	_cleanup_(json_decrefp) json_t *req = translate(b, aliases, n, have_network, secure);
	_cleanup_free_ char *s = req ? json_dumps(req, JSON_COMPACT) : NULL;
	if (!s)
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	struct api_create *c = NULL;
	int r = api_create_parse(s, strlen(s), max_timeout_s, &c, err);
	explicit_bzero(s, strlen(s)); /* envVars may hold secrets */
	if (r < 0) {
		if (err)
			e2b_field_names(err);
		return r;
	}
	*ret = (struct e2b_create){.req = c, .secure = secure};
	return 0;
}

void e2b_create_done(struct e2b_create *c)
{
	c->req = api_create_free(c->req);
}
