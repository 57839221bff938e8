/* The code interpreter's request bodies (api.h, "the code interpreter"): a cell and a
 * context. Small enough for a table of their own: each field is a name and a parser over the
 * struct, and a field not in the table is unknown_field, as everywhere in the API. And the
 * lines of the interpreter server inside the sandbox, checked here as hostile bytes are. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "basic/cleanup.h"
#include "spec/api.h"
#include "spec/api-int.h"

static const struct {
	const char *name, *default_context;
} languages[] = {
	[API_LANG_PYTHON] = {"python", "default"},
	[API_LANG_R] = {"r", "default-r"},
};
_Static_assert(ELEMENTSOF(languages) == API_LANG_COUNT_, "every language is named");

const char *api_language_name(enum api_language l)
{
	return (size_t)l < ELEMENTSOF(languages) ? languages[l].name : "python";
}

const char *api_language_default_context(enum api_language l)
{
	return (size_t)l < ELEMENTSOF(languages) ? languages[l].default_context : "default";
}

bool api_default_context_language(const char *id, enum api_language *ret)
{
	for (size_t i = 0; i < ELEMENTSOF(languages); i++)
		if (strcmp(id, languages[i].default_context) == 0) {
			*ret = (enum api_language)i;
			return true;
		}
	return false;
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
		if (strcmp(json_string_value(v), languages[i].name) == 0 &&
		    json_string_length(v) == strlen(languages[i].name)) {
			*ret = (enum api_language)i;
			return 0;
		}
	return cordon_err_setf(err, -EINVAL, "language: expected python or r");
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
	c->language_set = true;
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

/* ---- a line of the interpreter server ---- */

static const char *const mimes[] = {
	"text/plain", "text/html", "text/markdown", "image/svg+xml", "image/png", "image/jpeg",
	"application/pdf", "text/latex", "application/json", "application/javascript",
};

static bool is_mime(const char *key)
{
	for (size_t i = 0; i < ELEMENTSOF(mimes); i++)
		if (strcmp(key, mimes[i]) == 0)
			return true;
	return false;
}

static json_t *ev_stream(json_t *m, const char *type)
{
	json_t *t = json_object_get(m, "text");
	return json_is_string(t) ? json_pack("{s:s, s:O}", "type", type, "text", t) : NULL;
}

/* ---- a result's chart: E2B's shape (docs/e2b.md, "Charts"), rebuilt from its known keys ---- */

enum shape {
	SH_TEXT,	 /* a string */
	SH_TEXT_OR_NULL, /* a string or null */
	SH_VALUE,	 /* a number, a string (a date, a category) or null (NaN) */
	SH_TEXTS,	 /* [SH_TEXT] */
	SH_VALUES,	 /* [SH_VALUE] */
	SH_POINTS,	 /* [[SH_VALUE, SH_VALUE]] */
};

struct chart_key {
	const char *name;
	enum shape shape;
};

static const struct chart_key chart_keys[] = {
	{"title", SH_TEXT_OR_NULL},	{"x_label", SH_TEXT_OR_NULL}, {"y_label", SH_TEXT_OR_NULL},
	{"x_unit", SH_TEXT_OR_NULL},	{"y_unit", SH_TEXT_OR_NULL},  {"x_ticks", SH_VALUES},
	{"y_ticks", SH_VALUES},		{"x_tick_labels", SH_TEXTS},  {"y_tick_labels", SH_TEXTS},
	{"x_scale", SH_TEXT},		{"y_scale", SH_TEXT},
};

static const struct chart_key element_keys[] = {
	{"label", SH_TEXT},	     {"group", SH_TEXT},	  {"value", SH_VALUE},
	{"angle", SH_VALUE},	     {"radius", SH_VALUE},	  {"min", SH_VALUE},
	{"first_quartile", SH_VALUE}, {"median", SH_VALUE},	  {"third_quartile", SH_VALUE},
	{"max", SH_VALUE},	     {"outliers", SH_VALUES},	  {"points", SH_POINTS},
};

static const char *const chart_types[] = {"line", "scatter", "bar", "pie", "box_and_whisker",
					  "superchart", "unknown"};

static bool shape_ok(json_t *v, enum shape shape);

static bool all_ok(json_t *v, enum shape each, size_t n)
{
	size_t i;
	json_t *e;
	if (!json_is_array(v))
		return false;
	json_array_foreach(v, i, e)
		if (!shape_ok(e, each) || (n && json_array_size(e) != n))
			return false;
	return true;
}

static bool shape_ok(json_t *v, enum shape shape)
{
	switch (shape) {
	case SH_TEXT:
		return json_is_string(v);
	case SH_TEXT_OR_NULL:
		return json_is_string(v) || json_is_null(v);
	case SH_VALUE:
		return json_is_number(v) || json_is_string(v) || json_is_null(v);
	case SH_TEXTS:
		return all_ok(v, SH_TEXT, 0);
	case SH_VALUES:
		return all_ok(v, SH_VALUE, 0);
	case SH_POINTS: /* each a pair: an array of two values */
		return all_ok(v, SH_VALUES, 2);
	}
	return false;
}

/* @in's keys of @keys, checked, into @out (other keys are dropped); -1 for one of a wrong type. */
static int copy_known(json_t *in, const struct chart_key *keys, size_t n, json_t *out)
{
	for (size_t i = 0; i < n; i++) {
		json_t *v = json_object_get(in, keys[i].name);
		if (v && (!shape_ok(v, keys[i].shape) || json_object_set(out, keys[i].name, v) < 0))
			return -1;
	}
	return 0;
}

static bool chart_type_ok(const char *t, bool inner)
{
	for (size_t i = 0; i < ELEMENTSOF(chart_types); i++)
		if (strcmp(t, chart_types[i]) == 0)
			return !inner || strcmp(t, "superchart") != 0; /* one level of charts in one */
	return false;
}

/* A chart rebuilt: NULL for one that is not of the shape. */
static json_t *chart_rebuild(json_t *in, bool inner)
{
	json_t *type = json_object_get(in, "type"), *elements = json_object_get(in, "elements"), *e;
	size_t i;
	if (!json_is_object(in) || !json_is_string(type) ||
	    !chart_type_ok(json_string_value(type), inner) || (elements && !json_is_array(elements)))
		return NULL;
	bool charts = strcmp(json_string_value(type), "superchart") == 0;
	_cleanup_(json_decrefp) json_t *out = json_pack("{s:O, s:[]}", "type", type, "elements");
	json_t *list = json_object_get(out, "elements");
	if (!out || copy_known(in, chart_keys, ELEMENTSOF(chart_keys), out) < 0)
		return NULL;
	json_array_foreach(elements, i, e) {
		json_t *el = charts ? chart_rebuild(e, true) : json_is_object(e) ? json_object() : NULL;
		if (!el || (!charts && copy_known(e, element_keys, ELEMENTSOF(element_keys), el) < 0)) {
			json_decref(el);
			return NULL;
		}
		if (json_array_append_new(list, el) < 0) /* (which takes @el either way) */
			return NULL;
	}
	return TAKE_PTR(out);
}

static json_t *ev_result(json_t *m, const char *type)
{
	json_t *data = json_object_get(m, "data"), *main = json_object_get(m, "is_main"), *v;
	const char *key;
	if (!json_is_object(data) || !json_is_boolean(main))
		return NULL;
	_cleanup_(json_decrefp) json_t *out = json_object();
	json_object_foreach(data, key, v) {
		if (!json_is_string(v) || !out)
			return NULL;
		if (is_mime(key) && json_object_set(out, key, v) < 0)
			return NULL;
	}
	json_t *chart = json_object_get(m, "chart"), *ev;
	_cleanup_(json_decrefp) json_t *c = chart ? chart_rebuild(chart, false) : NULL;
	if (chart && !c)
		return NULL;
	ev = json_pack("{s:s, s:b, s:O}", "type", type, "is_main", json_is_true(main), "data", out);
	if (ev && c && json_object_set(ev, "chart", c) < 0) {
		json_decref(ev);
		return NULL;
	}
	return ev;
}

static json_t *ev_error(json_t *m, const char *type)
{
	json_t *name = json_object_get(m, "name"), *value = json_object_get(m, "value");
	json_t *tb = json_object_get(m, "traceback");
	if (!json_is_string(name) || !json_is_string(value) || !json_is_string(tb))
		return NULL;
	return json_pack("{s:s, s:O, s:O, s:O}", "type", type, "name", name, "value", value,
			 "traceback", tb);
}

static int line_end(json_t *m, struct api_code_line *l)
{
	json_t *n = json_object_get(m, "execution_count");
	json_t *tr = json_object_get(m, "truncated"), *to = json_object_get(m, "timed_out");
	if (!json_is_integer(n) || json_integer_value(n) < 0 || !json_is_boolean(tr) ||
	    !json_is_boolean(to))
		return -EPROTO;
	l->execution_count = json_integer_value(n);
	l->truncated = json_is_true(tr);
	l->timed_out = json_is_true(to);
	return 0;
}

static int line_fail(json_t *m, struct api_code_line *l)
{
	json_t *msg = json_object_get(m, "message");
	if (!json_is_string(msg))
		return -EPROTO;
	size_t n = json_string_length(msg);
	n = n < API_MAX_CODE_MESSAGE ? n : API_MAX_CODE_MESSAGE;
	memcpy(l->message, json_string_value(msg), n); /* jansson's strings hold no NUL */
	l->message[n] = 0;
	return 0;
}

static const struct {
	const char *type;
	enum api_code_line_kind kind;
	json_t *(*event)(json_t *m, const char *type); /* EVENT: the event made anew */
	int (*fields)(json_t *m, struct api_code_line *l); /* the others': NULL, none */
} line_types[] = {
	{"stdout", API_LINE_EVENT, ev_stream, NULL}, {"stderr", API_LINE_EVENT, ev_stream, NULL},
	{"result", API_LINE_EVENT, ev_result, NULL}, {"error", API_LINE_EVENT, ev_error, NULL},
	{"end", API_LINE_END, NULL, line_end},	      {"ok", API_LINE_OK, NULL, NULL},
	{"fail", API_LINE_FAIL, NULL, line_fail},
};

bool api_code_line_for_cell(enum api_code_line_kind kind)
{
	return kind == API_LINE_EVENT || kind == API_LINE_END;
}

static int line_typed(json_t *m, const char *type, struct api_code_line *l, struct cordon_err *err)
{
	for (size_t i = 0; i < ELEMENTSOF(line_types); i++) {
		if (strcmp(type, line_types[i].type) != 0)
			continue;
		l->kind = line_types[i].kind;
		if (line_types[i].event && !(l->event = line_types[i].event(m, type)))
			return cordon_err_setf(err, -EPROTO, "a %s line without its fields", type);
		if (line_types[i].fields && line_types[i].fields(m, l) < 0)
			return cordon_err_setf(err, -EPROTO, "a %s line without its fields", type);
		return 0;
	}
	return cordon_err_setf(err, -EPROTO, "a line of an unknown type");
}

int api_code_line_parse(const char *line, size_t len, struct api_code_line *ret,
			struct cordon_err *err)
{
	json_error_t jerr;
	struct api_code_line l = {.kind = API_LINE_READY};
	if (len > API_MAX_CODE_LINE)
		return cordon_err_setf(err, -EPROTO, "a line longer than %u bytes", API_MAX_CODE_LINE);
	_cleanup_(json_decrefp) json_t *m = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
	json_t *type = json_object_get(m, "type"), *id = json_object_get(m, "id");
	if (!json_is_object(m) || !json_is_string(type))
		return cordon_err_setf(err, -EPROTO, "a line that is not a JSON object with a type");
	if (!id && strcmp(json_string_value(type), "ready") == 0) {
		*ret = l;
		return 0;
	}
	if (!id && strcmp(json_string_value(type), "ack") == 0) {
		json_t *n = json_object_get(m, "bytes");
		if (!json_is_integer(n) || json_integer_value(n) < 1)
			return cordon_err_setf(err, -EPROTO, "an ack without its bytes");
		l.kind = API_LINE_ACK;
		l.bytes = (uint64_t)json_integer_value(n);
		*ret = l;
		return 0;
	}
	if (!json_is_integer(id) || json_integer_value(id) < 1)
		return cordon_err_setf(err, -EPROTO, "a line without the id of a request");
	l.id = (uint64_t)json_integer_value(id);
	int r = line_typed(m, json_string_value(type), &l, err);
	if (r < 0)
		return r;
	*ret = l;
	return 0;
}
