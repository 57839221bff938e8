/* The code interpreter's request bodies (api.h, "the code interpreter"): a cell and a
 * context. Small enough for a table of their own: each field is a name and a parser over the
 * struct, and a field not in the table is unknown_field, as everywhere in the API. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "basic/cleanup.h"
#include "spec/api.h"
#include "spec/api-int.h"

static const char *const languages[] = {[API_LANG_PYTHON] = "python"};

const char *api_language_name(enum api_language l)
{
	return (size_t)l < ELEMENTSOF(languages) ? languages[l] : "python";
}

bool api_context_id_ok(const char *s, size_t len)
{
	if (len == 0 || len > API_MAX_CONTEXT_ID)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-", s[i]) ||
		    !s[i])
			return false;
	return true;
}

static int want_string(json_t *v, const char *name, size_t max, struct cordon_err *err)
{
	if (!json_is_string(v))
		return cordon_err_setf(err, -EINVAL, "%s: must be a string", name);
	if (json_string_length(v) > max)
		return cordon_err_setf(err, -EINVAL, "%s: longer than %zu bytes", name, max);
	return 0;
}

static int language_parse(json_t *v, enum api_language *ret, struct cordon_err *err)
{
	if (!json_is_string(v))
		return cordon_err_setf(err, -EINVAL, "language: must be a string");
	for (size_t i = 0; i < ELEMENTSOF(languages); i++)
		if (strcmp(json_string_value(v), languages[i]) == 0 &&
		    json_string_length(v) == strlen(languages[i])) {
			*ret = (enum api_language)i;
			return 0;
		}
	return cordon_err_setf(err, -EINVAL, "language: expected python");
}

/* ---- a cell ---- */

static int code_code(json_t *v, struct api_code *c, struct cordon_err *err)
{
	int r = want_string(v, "code", API_MAX_CODE, err);
	if (r < 0)
		return r;
	if (memchr(json_string_value(v), 0, json_string_length(v)))
		return cordon_err_setf(err, -EINVAL, "code: must not contain NUL");
	c->code = json_string_value(v);
	c->code_len = json_string_length(v);
	return 0;
}

static int code_language(json_t *v, struct api_code *c, struct cordon_err *err)
{
	return language_parse(v, &c->language, err);
}

static int code_context(json_t *v, struct api_code *c, struct cordon_err *err)
{
	if (!json_is_string(v) || !api_context_id_ok(json_string_value(v), json_string_length(v)))
		return cordon_err_setf(err, -EINVAL, "context: must match [A-Za-z0-9_-]{1,%d}",
				       API_MAX_CONTEXT_ID);
	c->context = json_string_value(v);
	return 0;
}

static int code_timeout(json_t *v, struct api_code *c, struct cordon_err *err)
{
	json_int_t i = json_is_integer(v) ? json_integer_value(v) : 0;
	if (i < 1 || i > API_MAX_CODE_TIMEOUT)
		return cordon_err_setf(err, -EINVAL, "timeout_s: must be an integer between 1 and %d",
				       API_MAX_CODE_TIMEOUT);
	c->timeout_s = (uint32_t)i;
	return 0;
}

static const struct {
	const char *name;
	int (*parse)(json_t *v, struct api_code *c, struct cordon_err *err);
} code_fields[] = {
	{"code", code_code},
	{"language", code_language},
	{"context", code_context},
	{"timeout_s", code_timeout},
};

struct api_code *api_code_free(struct api_code *c)
{
	if (c)
		json_decref(c->root_);
	free(c);
	return NULL;
}
DEFINE_CLEANUP_FUNC(struct api_code *, api_code_free)

static int code_field(struct api_code *c, const char *key, json_t *v, struct cordon_err *err)
{
	for (size_t i = 0; i < ELEMENTSOF(code_fields); i++)
		if (strcmp(key, code_fields[i].name) == 0)
			return json_is_null(v) ? 0 : code_fields[i].parse(v, c, err);
	return cordon_err_setf(err, -EBADRQC,
			       "%.64s: unknown field (known: code, language, context, timeout_s)", key);
}

int api_code_parse(const char *body, size_t len, struct api_code **ret, struct cordon_err *err)
{
	_cleanup_(api_code_freep) struct api_code *c = calloc(1, sizeof(*c));
	const char *key;
	json_t *v;
	if (!c)
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	int r = api_body_load(body, len, &c->root_, err);
	if (r < 0)
		return r;
	json_object_foreach(c->root_, key, v)
		if ((r = code_field(c, key, v, err)) < 0)
			return r;
	if (!c->code)
		return cordon_err_setf(err, -EINVAL, "code: required");
	*ret = TAKE_PTR(c);
	return 0;
}

/* ---- a context ---- */

struct api_code_context *api_code_context_free(struct api_code_context *c)
{
	if (c)
		json_decref(c->root_);
	free(c);
	return NULL;
}
DEFINE_CLEANUP_FUNC(struct api_code_context *, api_code_context_free)

static int context_field(struct api_code_context *c, const char *key, json_t *v,
			 struct cordon_err *err)
{
	if (json_is_null(v))
		return 0;
	if (strcmp(key, "language") == 0)
		return language_parse(v, &c->language, err);
	if (strcmp(key, "cwd") != 0)
		return cordon_err_setf(err, -EBADRQC, "%.64s: unknown field (known: language, cwd)", key);
	int r = want_string(v, "cwd", API_MAX_PATH, err);
	if (r < 0 || (r = api_path_check(json_string_value(v), json_string_length(v), "cwd", err)) < 0)
		return r;
	if (json_string_value(v)[0] != '/')
		return cordon_err_setf(err, -EINVAL, "cwd: must be an absolute path");
	c->cwd = json_string_value(v);
	return 0;
}

int api_code_context_parse(const char *body, size_t len, struct api_code_context **ret,
			   struct cordon_err *err)
{
	_cleanup_(api_code_context_freep) struct api_code_context *c = calloc(1, sizeof(*c));
	const char *key;
	json_t *v;
	if (!c)
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	int r = len ? api_body_load(body, len, &c->root_, err) : 0;
	if (r < 0)
		return r;
	if (!len && !(c->root_ = json_object()))
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	json_object_foreach(c->root_, key, v)
		if ((r = context_field(c, key, v, err)) < 0)
			return r;
	*ret = TAKE_PTR(c);
	return 0;
}
