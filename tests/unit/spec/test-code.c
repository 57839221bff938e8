/* Unit tests of src/spec/code.c: the code interpreter's request bodies, and the lines of the
 * interpreter server (hostile bytes) -> events made anew. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "basic/cleanup.h"
#include "spec/api.h"

static int cell(const char *body, struct api_code **ret, struct cordon_err *err)
{
	return api_code_parse(body, strlen(body), ret, err);
}

static void test_cell(void **state)
{
	struct cordon_err err = {};
	struct api_code *c = NULL;
	assert_int_equal(cell("{\"code\":\"1+1\"}", &c, &err), 0);
	assert_string_equal(c->code, "1+1");
	assert_int_equal(c->code_len, 3);
	assert_int_equal(c->language, API_LANG_PYTHON);
	assert_null(c->context);
	assert_int_equal(c->timeout_s, 0);
	api_code_free(c);
	assert_int_equal(cell("{\"code\":\"x\",\"language\":\"python\",\"context\":\"cx-1_a\","
			      "\"timeout_s\":3600}", &c, &err), 0);
	assert_string_equal(c->context, "cx-1_a");
	assert_int_equal(c->timeout_s, 3600);
	assert_true(c->language_set);
	api_code_free(c);
	assert_int_equal(cell("{\"code\":\"1\",\"language\":\"r\"}", &c, &err), 0);
	assert_true(c->language == API_LANG_R && c->language_set);
	api_code_free(c);
	assert_int_equal(cell("{\"code\":\"1\"}", &c, &err), 0);
	assert_false(c->language_set);
	api_code_free(c);
	/* Each a 400 naming its field; unknown fields unknown_field. */
	static const struct {
		const char *body;
		int r;
		const char *field;
	} bad[] = {
		{"{}", -EINVAL, "code"},
		{"{\"code\":5}", -EINVAL, "code"},
		{"{\"code\":\"a\\u0000b\"}", -EINVAL, "code"},
		{"{\"code\":\"1\",\"language\":\"R\"}", -EINVAL, "language"},
		{"{\"code\":\"1\",\"language\":\"cobol\"}", -EINVAL, "language"},
		{"{\"code\":\"1\",\"context\":\"../x\"}", -EINVAL, "context"},
		{"{\"code\":\"1\",\"context\":\"\"}", -EINVAL, "context"},
		{"{\"code\":\"1\",\"timeout_s\":0}", -EINVAL, "timeout_s"},
		{"{\"code\":\"1\",\"timeout_s\":3601}", -EINVAL, "timeout_s"},
		{"{\"code\":\"1\",\"timeout_s\":1.5}", -EINVAL, "timeout_s"},
		{"{\"code\":\"1\",\"colour\":1}", -EBADRQC, "colour"},
		{"[]", -EBADMSG, "body"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		c = NULL;
		assert_int_equal(cell(bad[i].body, &c, &err), bad[i].r);
		assert_null(c);
		assert_non_null(strstr(err.msg, bad[i].field));
	}
}

static void test_context(void **state)
{
	struct cordon_err err = {};
	struct api_code_context *x = NULL;
	assert_int_equal(api_code_context_parse("", 0, &x, &err), 0); /* no body: the defaults */
	assert_null(x->cwd);
	api_code_context_free(x);
	assert_int_equal(api_code_context_parse("{\"cwd\":\"/tmp\"}", 14, &x, &err), 0);
	assert_string_equal(x->cwd, "/tmp");
	api_code_context_free(x);
	assert_int_equal(api_code_context_parse("{\"cwd\":\"tmp\"}", 13, &x, &err), -EINVAL);
	assert_int_equal(api_code_context_parse("{\"language\":\"go\"}", 17, &x, &err), -EINVAL);
	assert_int_equal(api_code_context_parse("{\"x\":1}", 7, &x, &err), -EBADRQC);
	assert_true(api_context_id_ok("default", 7));
	assert_false(api_context_id_ok("a/b", 3));
	assert_false(api_context_id_ok("a\0b", 3));
	assert_int_equal(api_code_context_parse("{\"language\":\"r\"}", 16, &x, &err), 0);
	assert_int_equal(x->language, API_LANG_R);
	api_code_context_free(x);
}

static int line(const char *s, struct api_code_line *l, struct cordon_err *err)
{
	return api_code_line_parse(s, strlen(s), l, err);
}

static void test_lines_made_anew(void **state)
{
	struct cordon_err err = {};
	struct api_code_line l;
	assert_int_equal(line("{\"type\":\"ready\"}", &l, &err), 0);
	assert_int_equal(l.kind, API_LINE_READY);
	assert_int_equal(line("{\"type\":\"ack\",\"bytes\":120}", &l, &err), 0);
	assert_true(l.kind == API_LINE_ACK && l.bytes == 120);
	assert_int_equal(line("{\"type\":\"ack\",\"bytes\":0}", &l, &err), -EPROTO);
	assert_int_equal(line("{\"type\":\"ack\"}", &l, &err), -EPROTO);
	/* Unknown fields and MIME types are dropped: the event is ours, not the server's. */
	assert_int_equal(line("{\"id\":7,\"type\":\"result\",\"is_main\":true,\"evil\":1,"
			      "\"data\":{\"text/plain\":\"42\",\"x/evil\":\"y\"}}", &l, &err), 0);
	assert_int_equal(l.kind, API_LINE_EVENT);
	assert_int_equal(l.id, 7);
	_cleanup_free_ char *s = json_dumps(l.event, JSON_COMPACT | JSON_SORT_KEYS);
	assert_string_equal(s, "{\"data\":{\"text/plain\":\"42\"},\"is_main\":true,\"type\":\"result\"}");
	json_decref(l.event);
	assert_int_equal(line("{\"id\":1,\"type\":\"stdout\",\"text\":\"hi\",\"pid\":3}", &l, &err), 0);
	assert_int_equal(json_object_size(l.event), 2);
	json_decref(l.event);
	assert_int_equal(line("{\"id\":2,\"type\":\"end\",\"execution_count\":3,\"truncated\":true,"
			      "\"timed_out\":false}", &l, &err), 0);
	assert_true(l.kind == API_LINE_END && l.execution_count == 3 && l.truncated && !l.timed_out);
	assert_true(api_code_line_for_cell(l.kind));
	assert_int_equal(line("{\"id\":2,\"type\":\"fail\",\"message\":\"no\"}", &l, &err), 0);
	assert_true(l.kind == API_LINE_FAIL && !api_code_line_for_cell(l.kind));
	assert_string_equal(l.message, "no");
}

static void test_bad_lines(void **state)
{
	static const char *const bad[] = {
		"", "garbage", "\xff{", "[1]", "{\"type\":5}", "{\"id\":1}",
		"{\"id\":1,\"type\":\"nope\"}", "{\"id\":0,\"type\":\"ok\"}", "{\"id\":-3,\"type\":\"ok\"}",
		"{\"id\":\"1\",\"type\":\"ok\"}", "{\"id\":1,\"type\":\"stdout\",\"text\":5}",
		"{\"id\":1,\"type\":\"stdout\"}", "{\"id\":1,\"type\":\"stdout\",\"text\":\"a\\u0000\"}",
		"{\"id\":1,\"type\":\"result\",\"is_main\":\"yes\",\"data\":{}}",
		"{\"id\":1,\"type\":\"result\",\"is_main\":true,\"data\":{\"text/plain\":[\"a\"]}}",
		"{\"id\":1,\"type\":\"error\",\"name\":\"E\",\"value\":\"v\"}",
		"{\"id\":1,\"type\":\"end\",\"execution_count\":-1,\"truncated\":false,\"timed_out\":false}",
		"{\"id\":1,\"type\":\"end\",\"execution_count\":1}", "{\"id\":1,\"type\":\"fail\"}",
		"{\"id\":1,\"id\":2,\"type\":\"ok\"}", "{\"id\":1,\"type\":\"ok\"} trailing",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct cordon_err err = {};
		struct api_code_line l = {.event = NULL};
		assert_int_equal(line(bad[i], &l, &err), -EPROTO);
		assert_null(l.event);
		assert_true(err.msg[0] != 0);
	}
	/* Longer than the bound: refused before it is parsed. */
	size_t n = API_MAX_CODE_LINE + 1;
	_cleanup_free_ char *big = malloc(n);
	assert_non_null(big);
	memset(big, ' ', n);
	struct cordon_err err = {};
	struct api_code_line l;
	assert_int_equal(api_code_line_parse(big, n, &l, &err), -EPROTO);
}

/* Each language's default context, made on first use, and no other. */
static void test_default_contexts(void **state)
{
	enum api_language l = API_LANG_COUNT_;
	assert_string_equal(api_language_default_context(API_LANG_PYTHON), "default");
	assert_string_equal(api_language_default_context(API_LANG_R), "default-r");
	assert_true(api_default_context_language("default-r", &l) && l == API_LANG_R);
	assert_true(api_default_context_language("default", &l) && l == API_LANG_PYTHON);
	assert_false(api_default_context_language("default-go", &l));
	assert_false(api_default_context_language("cx-1", &l));
	assert_string_equal(api_language_name(API_LANG_R), "r");
}

/* A result's chart: its known keys of the right types rebuilt, others dropped; a wrong type,
 * an unknown chart type or a chart in a chart in a chart is a bad line. */
static void test_chart(void **state)
{
	struct cordon_err err = {};
	struct api_code_line l;
	assert_int_equal(line("{\"id\":1,\"type\":\"result\",\"is_main\":false,\"data\":{},"
			      "\"chart\":{\"type\":\"line\",\"title\":null,\"x_label\":\"t (s)\",\"evil\":1,"
			      "\"x_ticks\":[0,\"2024-01-01\"],\"elements\":[{\"label\":\"a\",\"x\":2,"
			      "\"points\":[[1,2.5],[\"b\",null]]}]}}", &l, &err), 0);
	_cleanup_free_ char *s = json_dumps(json_object_get(l.event, "chart"), JSON_COMPACT | JSON_SORT_KEYS);
	assert_string_equal(s, "{\"elements\":[{\"label\":\"a\",\"points\":[[1,2.5],[\"b\",null]]}],"
			       "\"title\":null,\"type\":\"line\",\"x_label\":\"t (s)\","
			       "\"x_ticks\":[0,\"2024-01-01\"]}");
	json_decref(l.event);
	assert_int_equal(line("{\"id\":1,\"type\":\"result\",\"is_main\":false,\"data\":{},"
			      "\"chart\":{\"type\":\"superchart\",\"elements\":[{\"type\":\"bar\","
			      "\"elements\":[{\"label\":\"x\",\"group\":\"g\",\"value\":3}]}]}}", &l, &err), 0);
	json_t *bar = json_array_get(json_object_get(json_object_get(l.event, "chart"), "elements"), 0);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(json_object_get(bar, "elements"), 0),
							    "value")), 3);
	json_decref(l.event);
	static const char *const bad[] = {
		"5", "{}", "{\"type\":\"radar\"}", "{\"type\":\"line\",\"title\":3}",
		"{\"type\":\"line\",\"elements\":{}}", "{\"type\":\"line\",\"elements\":[5]}",
		"{\"type\":\"line\",\"elements\":[{\"points\":[[1]]}]}",
		"{\"type\":\"line\",\"elements\":[{\"points\":[[1,[2]]]}]}",
		"{\"type\":\"bar\",\"x_tick_labels\":[1]}",
		"{\"type\":\"superchart\",\"elements\":[{\"type\":\"superchart\"}]}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char buf[512];
		snprintf(buf, sizeof(buf), "{\"id\":1,\"type\":\"result\",\"is_main\":false,\"data\":{},"
			 "\"chart\":%s}", bad[i]);
		l.event = NULL;
		assert_int_equal(line(buf, &l, &err), -EPROTO);
		assert_null(l.event);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_cell),
	    cmocka_unit_test(test_context),
	    cmocka_unit_test(test_lines_made_anew),
	    cmocka_unit_test(test_bad_lines),
	    cmocka_unit_test(test_default_contexts),
	    cmocka_unit_test(test_chart),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
