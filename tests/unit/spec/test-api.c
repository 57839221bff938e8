/* Unit tests of src/spec/api.c: request bodies -> validated structs, and the error table. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
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

#define MAX_TTL 3600

/* ---- helpers ------------------------------------------------------------------------------ */

enum which {
	CREATE,
	TIMEOUT,
	EXEC,
	START,
	STDIN,
	SIGNAL,
	NETWORK,
	MOVE,
	MKDIR,
	FILTER,
	BUILD,
	VOLUME,
};

/* Runs the parser for @w over @body and frees what it made; returns its result. */
static int run(enum which w, const char *body, size_t len, struct cordon_err *err)
{
	struct api_create *c = NULL;
	struct api_exec *e = NULL;
	struct api_network_req *n = NULL;
	struct api_move *mv = NULL;
	struct api_mkdir *mk = NULL;
	struct api_filter *f = NULL;
	struct api_build *bd = NULL;
	struct api_volume *v = NULL;
	struct api_stdin in = {};
	uint32_t t;
	int sig, r = -ENOSYS;

	switch (w) {
	case CREATE:
		r = api_create_parse(body, len, MAX_TTL, &c, err);
		break;
	case TIMEOUT:
		r = api_timeout_parse(body, len, MAX_TTL, &t, err);
		break;
	case EXEC:
		r = api_exec_parse(body, len, API_EXEC_RUN, &e, err);
		break;
	case START:
		r = api_exec_parse(body, len, API_EXEC_START, &e, err);
		break;
	case STDIN:
		r = api_stdin_parse(body, len, &in, err);
		break;
	case SIGNAL:
		r = api_signal_parse(body, len, &sig, err);
		break;
	case NETWORK:
		r = api_network_parse(body, len, &n, err);
		break;
	case MOVE:
		r = api_move_parse(body, len, &mv, err);
		break;
	case MKDIR:
		r = api_mkdir_parse(body, len, &mk, err);
		break;
	case FILTER:
		r = api_filter_parse(body, len, &f, err);
		break;
	case BUILD:
		r = api_build_parse(body, len, &bd, err);
		break;
	case VOLUME:
		r = api_volume_parse(body, len, &v, err);
		break;
	}
	api_volume_free(v);
	api_build_free(bd);
	api_create_free(c);
	api_exec_free(e);
	api_network_free(n);
	api_move_free(mv);
	api_mkdir_free(mk);
	api_filter_free(f);
	api_stdin_done(&in);
	return r;
}

static void expect_fail(enum which w, const char *body, size_t len, int code, const char *substr)
{
	struct cordon_err err = {};
	int r = run(w, body, len, &err);
	if (r != code || !strstr(err.msg, substr))
		print_error("body %.200s\n  got %d \"%s\"\n  want %d \"%s\"\n", body, r, err.msg,
			    code, substr);
	assert_int_equal(r, code);
	assert_int_equal(err.code, code);
	assert_non_null(strstr(err.msg, substr));
}

/* A string of @n copies of @c. */
static char *repeat(char c, size_t n)
{
	char *s = malloc(n + 1);
	assert_non_null(s);
	memset(s, c, n);
	s[n] = '\0';
	return s;
}

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...)
{
	va_list ap;
	char *s = NULL;
	va_start(ap, f);
	assert_true(vasprintf(&s, f, ap) >= 0);
	va_end(ap);
	return s;
}

/* {"<field>": {"k0": "v", ...}} with @n entries. */
static char *kv_body(const char *field, size_t n)
{
	size_t size = 64 + n * 32;
	char *s = malloc(size);
	assert_non_null(s);
	size_t o = (size_t)snprintf(s, size, "{\"%s\":{", field);
	for (size_t i = 0; i < n; i++)
		o += (size_t)snprintf(s + o, size - o, "%s\"K%zu\":\"v\"", i ? "," : "", i);
	snprintf(s + o, size - o, "}}");
	return s;
}

/* {"<field>": ["a", "a", ...]} with @n entries, prefixed by @prefix fields. */
static char *array_body(const char *prefix, const char *field, size_t n)
{
	size_t size = 128 + n * 8;
	char *s = malloc(size);
	assert_non_null(s);
	size_t o = (size_t)snprintf(s, size, "{%s\"%s\":[", prefix, field);
	for (size_t i = 0; i < n; i++)
		o += (size_t)snprintf(s + o, size - o, "%s\"a.b\"", i ? "," : "");
	snprintf(s + o, size - o, "]}");
	return s;
}

/* ---- the table of invalid bodies ------------------------------------------------------------ */

static const struct bad {
	enum which w;
	const char *body;
	int code;
	const char *substr;
} bad_bodies[] = {
    /* not an object at all */
    {CREATE, "not json", -EBADMSG, "invalid JSON"},
    {CREATE, "[]", -EBADMSG, "expected a JSON object"},
    {CREATE, "\"x\"", -EBADMSG, "invalid JSON"},
    {CREATE, "{} x", -EBADMSG, "invalid JSON"},
    {CREATE, "{\"template\":\"a\"", -EBADMSG, "invalid JSON"},
    {CREATE, "{\"metadata\":{\"a\":\"b\",\"a\":\"c\"}}", -EBADMSG, "duplicate"},
    {CREATE, "{\"timeout_s\":1,\"timeout_s\":2}", -EBADMSG, "duplicate"},
    {TIMEOUT, "", -EBADMSG, "expected a JSON object"},
    /* unknown fields, at every level */
    {CREATE, "{\"foo\":1}", -EBADRQC, "foo: unknown field"},
    {CREATE, "{\"limits\":{\"memory\":1}}", -EBADRQC, "limits.memory: unknown field"},
    {CREATE, "{\"network\":{\"policy\":\"deny\",\"rules\":[]}}", -EBADRQC,
     "network.rules: unknown field"},
    {CREATE, "{\"a\\u0000b\":1}", -EBADMSG, "NUL byte in object key"},
    {CREATE, "{\"\\n\":1}", -EBADRQC, "?: unknown field"},
    /* numbers */
    {CREATE, "{\"limits\":{\"memory_mb\":8}}", -EINVAL,
     "limits.memory_mb: must be an integer between 16 and 65536"},
    {CREATE, "{\"limits\":{\"memory_mb\":65537}}", -EINVAL, "limits.memory_mb: must be"},
    {CREATE, "{\"limits\":{\"memory_mb\":512.0}}", -EINVAL, "limits.memory_mb: must be an integer"},
    {CREATE, "{\"limits\":{\"memory_mb\":\"512\"}}", -EINVAL, "limits.memory_mb: must be"},
    {CREATE, "{\"limits\":{\"memory_mb\":true}}", -EINVAL, "limits.memory_mb: must be"},
    {CREATE, "{\"limits\":{\"pids\":99999999999}}", -EINVAL, "limits.pids: must be an integer"},
    {CREATE, "{\"limits\":{\"pids\":-1}}", -EINVAL, "limits.pids: must be"},
    {CREATE, "{\"limits\":{\"disk_mb\":1048577}}", -EINVAL, "limits.disk_mb: must be"},
    {CREATE, "{\"limits\":{\"disk_mb\":99999999999999999999999}}", -EBADMSG, "too big"},
    {CREATE, "{\"limits\":{\"cpus\":1e400}}", -EBADMSG, "overflow"},
    {CREATE, "{\"limits\":{\"cpus\":0.05}}", -EINVAL,
     "limits.cpus: must be a number between 0.1 and 64"},
    {CREATE, "{\"limits\":{\"cpus\":64.5}}", -EINVAL, "limits.cpus: must be a number"},
    {CREATE, "{\"limits\":{\"cpus\":\"2\"}}", -EINVAL, "limits.cpus: must be a number"},
    {CREATE, "{\"limits\":5}", -EINVAL, "limits: must be an object"},
    {CREATE, "{\"timeout_s\":0}", -EINVAL, "timeout_s: must be an integer between 1 and 3600"},
    {CREATE, "{\"timeout_s\":3601}", -EINVAL, "timeout_s: must be an integer between 1 and 3600"},
    {CREATE, "{\"timeout_s\":1.5}", -EINVAL, "timeout_s: must be an integer"},
    /* strings */
    {CREATE, "{\"template\":\"Host\"}", -EINVAL, "template: must match"},
    {CREATE, "{\"template\":\"\"}", -EINVAL, "template: must match"},
    {CREATE, "{\"template\":\".x\"}", -EINVAL, "template: must match"},
    {CREATE, "{\"template\":\"a/b\"}", -EINVAL, "template: must match"},
    {CREATE, "{\"template\":\"a\\u0000b\"}", -EINVAL, "template: must not contain NUL bytes"},
    {CREATE, "{\"template\":[\"host\"]}", -EINVAL, "template: must be a string"},
    {CREATE, "{\"runtime\":\"runc\"}", -EINVAL, "runtime: must be one of"},
    {CREATE, "{\"runtime\":\"Jail\"}", -EINVAL, "runtime: must be one of"},
    {CREATE, "{\"runtime\":\"jail\\u0000x\"}", -EINVAL, "runtime: must be one of"},
    /* network */
    {CREATE, "{\"network\":{\"policy\":\"open\"}}", -EINVAL, "network.policy: must be one of"},
    {CREATE, "{\"network\":{\"allow\":[\"a.com\"]}}", -EINVAL,
     "network.allow: only valid with policy \"allow\""},
    {CREATE, "{\"network\":{\"policy\":\"allow\",\"allow\":[\"a b\"]}}", -EINVAL,
     "network.allow[0]: must be a domain"},
    {CREATE, "{\"network\":{\"policy\":\"allow\",\"allow\":[\"a.com\",\"foo.*\"]}}", -EINVAL,
     "network.allow[1]: must be a domain"},
    {CREATE, "{\"network\":{\"policy\":\"allow\",\"allow\":[\"\"]}}", -EINVAL,
     "network.allow[0]: must be a domain"},
    {CREATE, "{\"network\":{\"policy\":\"allow\",\"allow\":\"a.com\"}}", -EINVAL,
     "network.allow: must be an array"},
    {CREATE, "{\"network\":{\"policy\":\"allow\",\"allow\":[7]}}", -EINVAL,
     "network.allow[0]: must be a string"},
    {CREATE, "{\"network\":\"deny\"}", -EINVAL, "network: must be an object"},
    /* env and metadata */
    {CREATE, "{\"env\":{\"1A\":\"x\"}}", -EINVAL, "env.1A: name must match"},
    {CREATE, "{\"env\":{\"A-B\":\"x\"}}", -EINVAL, "env.A-B: name must match"},
    {CREATE, "{\"env\":{\"\":\"x\"}}", -EINVAL, "env.: name must match"},
    {CREATE, "{\"env\":{\"A\":1}}", -EINVAL, "env.A: must be a string"},
    {CREATE, "{\"env\":{\"A\":\"x\\u0000y\"}}", -EINVAL, "env.A: must not contain NUL bytes"},
    {CREATE, "{\"env\":{\"A\\u0000B\":\"x\"}}", -EBADMSG, "NUL byte in object key"},
    {CREATE, "{\"env\":[\"A=B\"]}", -EINVAL, "env: must be an object of strings"},
    {CREATE, "{\"metadata\":{\"k\\n\":\"v\"}}", -EINVAL, "metadata.k?: name must be non-empty"},
    {CREATE, "{\"metadata\":{\"k\":{}}}", -EINVAL, "metadata.k: must be a string"},
    /* exec and start */
    {EXEC, "{}", -EINVAL, "argv: required (or cmd)"},
    {EXEC, "{\"argv\":[]}", -EINVAL, "argv: must have 1 to 4096 entries"},
    {EXEC, "{\"argv\":[\"\"]}", -EINVAL, "argv[0]: must not be empty"},
    {EXEC, "{\"argv\":[\"a\",1]}", -EINVAL, "argv[1]: must be a string"},
    {EXEC, "{\"argv\":[\"a\",\"b\\u0000\"]}", -EINVAL, "argv[1]: must not contain NUL bytes"},
    {EXEC, "{\"argv\":\"ls\"}", -EINVAL, "argv: must be an array"},
    {EXEC, "{\"argv\":[\"a\"],\"cmd\":\"x\"}", -EINVAL, "either argv or cmd"},
    {EXEC, "{\"cmd\":5}", -EINVAL, "cmd: must be a string"},
    {EXEC, "{\"cmd\":\"ls\",\"cwd\":\"tmp\"}", -EINVAL, "cwd: must be an absolute path"},
    {EXEC, "{\"cmd\":\"ls\",\"cwd\":\"\"}", -EINVAL, "cwd: must be an absolute path"},
    {EXEC, "{\"cmd\":\"ls\",\"cwd\":\"/t\\u0000\"}", -EINVAL, "cwd: must not contain NUL"},
    {EXEC, "{\"cmd\":\"ls\",\"user\":\"admin\"}", -EINVAL, "user: must be one of"},
    {EXEC, "{\"cmd\":\"ls\",\"timeout_s\":0}", -EINVAL,
     "timeout_s: must be an integer between 1 and 86400"},
    {EXEC, "{\"cmd\":\"ls\",\"timeout_s\":86401}", -EINVAL, "timeout_s: must be"},
    {EXEC, "{\"cmd\":\"ls\",\"timeout_s\":60.0}", -EINVAL, "timeout_s: must be an integer"},
    {EXEC, "{\"cmd\":\"ls\",\"tag\":\"\"}", -EINVAL, "tag: must be non-empty"},
    {EXEC, "{\"cmd\":\"ls\",\"tag\":\"a\\tb\"}", -EINVAL, "tag: must be non-empty"},
    {EXEC, "{\"cmd\":\"ls\",\"stdin\":5}", -EINVAL, "stdin: must be a string"},
    {EXEC, "{\"cmd\":\"ls\",\"env\":{\"A=B\":\"c\"}}", -EINVAL, "env.A=B: name must match"},
    {EXEC, "{\"cmd\":\"ls\",\"input\":\"x\"}", -EBADRQC, "input: unknown field"},
    {START, "{\"cmd\":\"ls\",\"stdin\":\"x\"}", -EBADRQC, "stdin: unknown field"},
    {START, "{\"cmd\":\"ls\",\"timeout_s\":-1}", -EINVAL,
     "timeout_s: must be an integer between 0 and 86400"},
    /* stdin */
    {STDIN, "{}", -EINVAL, "data: required"},
    {STDIN, "{\"data\":\"abc\"}", -EINVAL, "data: must be base64"},
    {STDIN, "{\"data\":\"ab=c\"}", -EINVAL, "data: must be base64"},
    {STDIN, "{\"data\":\"a===\"}", -EINVAL, "data: must be base64"},
    {STDIN, "{\"data\":\"aGk-\"}", -EINVAL, "data: must be base64"},
    {STDIN, "{\"data\":\"aGk=\\u0000\"}", -EINVAL, "data: must not contain NUL"},
    {STDIN, "{\"data\":5}", -EINVAL, "data: must be a string"},
    {STDIN, "{\"eof\":\"yes\"}", -EINVAL, "eof: must be true or false"},
    {STDIN, "{\"data\":\"aGk=\",\"close\":true}", -EBADRQC, "close: unknown field"},
    /* signal */
    {SIGNAL, "{}", -EINVAL, "signal: required"},
    {SIGNAL, "{\"signal\":\"SIGSEGV\"}", -EINVAL, "signal: must be an allowed signal"},
    {SIGNAL, "{\"signal\":11}", -EINVAL, "signal: must be an allowed signal"},
    {SIGNAL, "{\"signal\":0}", -EINVAL, "signal: must be an allowed signal"},
    {SIGNAL, "{\"signal\":15.0}", -EINVAL, "signal: must be an allowed signal"},
    {SIGNAL, "{\"signal\":\"sigterm\"}", -EINVAL, "signal: must be an allowed signal"},
    {SIGNAL, "{\"signal\":\"SIG\"}", -EINVAL, "signal: must be an allowed signal"},
    {SIGNAL, "{\"signal\":\"TERM\\u0000x\"}", -EINVAL, "signal: must be an allowed signal"},
    {SIGNAL, "{\"signal\":34}", -EINVAL, "signal: must be an allowed signal"},
    /* timeout */
    {TIMEOUT, "{}", -EINVAL, "timeout_s: required"},
    {TIMEOUT, "{\"timeout_s\":-1}", -EINVAL, "timeout_s: must be an integer between 1 and 3600"},
    {TIMEOUT, "{\"timeout_s\":\"60\"}", -EINVAL, "timeout_s: must be an integer"},
    {TIMEOUT, "{\"ttl\":60}", -EBADRQC, "ttl: unknown field"},
    /* network policy change */
    {NETWORK, "{}", -EINVAL, "policy: required"},
    {NETWORK, "{\"policy\":null}", -EINVAL, "policy: required"},
    {NETWORK, "{\"policy\":\"deny\",\"allow\":[\"a.com\"]}", -EINVAL, "allow: only valid"},
    {NETWORK, "{\"policy\":\"public\",\"extra\":1}", -EBADRQC, "extra: unknown field"},
    {NETWORK, "{\"policy\":\"allow\",\"approve\":{}}", -EINVAL, "approve: must be an array"},
    {NETWORK, "{\"policy\":\"allow\",\"approve\":[{\"methods\":[\"POST\"]}]}", -EINVAL,
     "approve[0].approve: required"},
    {NETWORK, "{\"policy\":\"allow\",\"approve\":[{\"approve\":\"a.com\",\"methods\":[\"post\"]}]}",
     -EINVAL, "approve[0].methods[0]: must be an HTTP method"},
    {NETWORK, "{\"policy\":\"allow\",\"approve\":[{\"approve\":\"a.com\",\"paths\":[\"v1\"]}]}",
     -EINVAL, "approve[0].paths[0]: must be a path"},
    {NETWORK, "{\"policy\":\"allow\",\"approve\":[{\"approve\":\"a.com\",\"paths\":[\"/a?b\"]}]}",
     -EINVAL, "approve[0].paths[0]: must be a path"},
    {NETWORK, "{\"policy\":\"allow\",\"approve\":[{\"approve\":\"a.com\",\"timeout_s\":0}]}", -EINVAL,
     "approve[0].timeout_s: must be an integer between 1 and 86400"},
    {NETWORK, "{\"policy\":\"allow\",\"approve\":[{\"approve\":\"a.com\",\"when\":1}]}", -EBADRQC,
     "approve[0].when: unknown field"},
    {NETWORK, "{\"profile\":\"Bad Name\"}", -EINVAL, "profile: must be a profile name"},
    {NETWORK, "{\"allow\":[\"a.com\"]}", -EINVAL, "policy: required"},
    /* files */
    {MOVE, "{\"from\":\"/a\"}", -EINVAL, "to: required"},
    {MOVE, "{\"to\":\"/a\"}", -EINVAL, "from: required"},
    {MOVE, "{\"from\":\"a\",\"to\":\"/b\"}", -EINVAL, "from: must be an absolute path"},
    {MOVE, "{\"from\":\"/a\",\"to\":[]}", -EINVAL, "to: must be a string"},
    {MOVE, "{\"from\":\"/a\",\"to\":\"/b\",\"force\":true}", -EBADRQC, "force: unknown field"},
    {MKDIR, "{\"parents\":true}", -EINVAL, "path: required"},
    {MKDIR, "{\"path\":\"/a\",\"parents\":1}", -EINVAL, "parents: must be true or false"},
    /* metadata filter (query strings) */
    {FILTER, "state=running", -EBADRQC, "state: unknown query parameter"},
    {FILTER, "metdata.a=b", -EBADRQC, "metdata.a: unknown query parameter"},
    {FILTER, "metadata.=x", -EINVAL, "key must be 1 to 128 bytes"},
    {FILTER, "metadata.a=1&metadata.a=2", -EINVAL, "metadata.a: given more than once"},
    {FILTER, "metadata.a=%zz", -EBADMSG, "bad %-escape"},
    {FILTER, "metadata.a=%4", -EBADMSG, "bad %-escape"},
    {FILTER, "metadata.a=%00", -EBADMSG, "bad %-escape or NUL"},
    {FILTER, "metadata.a%0a=1", -EINVAL, "key must be"},
    {FILTER, "metadata.a", -EINVAL, "metadata.a: needs a value"},
    {BUILD, "[]", -EBADMSG, "expected a JSON object"},
    {BUILD, "{\"recipe\": \"FROM tiny\"}", -EINVAL, "name: required"},
    {BUILD, "{\"name\": \"x\"}", -EINVAL, "recipe: required"},
    {BUILD, "{\"name\": \"host\", \"recipe\": \"FROM x\"}", -EINVAL, "not be 'host'"},
    {BUILD, "{\"name\": \"Bad\", \"recipe\": \"FROM x\"}", -EINVAL, "name: must match"},
    {BUILD, "{\"name\": \"x\", \"recipe\": \"\"}", -EINVAL, "recipe: must not be empty"},
    {BUILD, "{\"name\": \"x\", \"recipe\": \"FROM x\", \"build_args\": {\"1A\": \"b\"}}",
     -EINVAL, "build_args.1A: name must match"},
    {BUILD, "{\"name\": \"x\", \"recipe\": \"FROM x\", \"context\": \"not base64!\"}",
     -EINVAL, "context: must be a tar archive"},
    {BUILD, "{\"name\": \"x\", \"recipe\": \"FROM x\", \"Context\": \"\"}", -EBADRQC,
     "known: name, recipe, build_args, no_cache, context"},
};

static void test_bad_bodies(void **state)
{
	for (size_t i = 0; i < ELEMENTSOF(bad_bodies); i++) {
		const struct bad *b = &bad_bodies[i];
		expect_fail(b->w, b->body, strlen(b->body), b->code, b->substr);
	}
}

/* ---- valid bodies --------------------------------------------------------------------------- */

static void test_build(void **state)
{
	struct cordon_err err = {};
	struct api_build *b = NULL;
	const char *body = "{\"name\": \"web\", \"recipe\": \"FROM base\\nRUN true\\n\", "
			   "\"build_args\": {\"V\": \"2\"}, \"no_cache\": true, \"context\": \"aGk=\"}";
	assert_int_equal(api_build_parse(body, strlen(body), &b, &err), 0);
	assert_string_equal(b->name, "web");
	assert_string_equal(b->recipe, "FROM base\nRUN true\n");
	assert_int_equal(b->build_args.n, 1);
	assert_string_equal(b->build_args.items[0].key, "V");
	assert_true(b->no_cache);
	assert_int_equal(b->context_len, 2);
	assert_memory_equal(b->context, "hi", 2);
	api_build_free(b);
	/* a recipe over API_MAX_RECIPE is refused naming the limit */
	char *big = repeat('#', API_MAX_RECIPE + 1);
	char *doc = NULL;
	assert_true(asprintf(&doc, "{\"name\": \"x\", \"recipe\": \"%s\"}", big) > 0);
	expect_fail(BUILD, doc, strlen(doc), -EINVAL, "recipe: longer than 1048576 bytes");
	free(doc);
	free(big);
}

/* POST /v1/volumes and "volumes" at create: names, sizes, mount paths, each once. */
static void test_volumes(void **state)
{
	struct api_volume *v = NULL;
	struct api_create *c = NULL;
	struct cordon_err err = {};
	const char *ok = "{\"name\": \"data.1_x-y\", \"size_mb\": 16}";
	assert_int_equal(api_volume_parse(ok, strlen(ok), &v, &err), 0);
	assert_string_equal(v->name, "data.1_x-y");
	assert_int_equal(v->size_mb, 16);
	api_volume_free(v);
	static const char *const bad_vol[] = {
	    "{\"name\": \"Data\", \"size_mb\": 16}", "{\"name\": \"-x\", \"size_mb\": 16}",
	    "{\"name\": \"a/b\", \"size_mb\": 16}", "{\"name\": \"x\", \"size_mb\": 15}",
	    "{\"name\": \"x\", \"size_mb\": 16777217}", "{\"name\": \"x\"}", "{\"size_mb\": 16}",
	};
	for (size_t i = 0; i < ELEMENTSOF(bad_vol); i++)
		expect_fail(VOLUME, bad_vol[i], strlen(bad_vol[i]), -EINVAL, "");
	char *long_name = repeat('a', API_MAX_VOLUME_NAME + 1), *doc = NULL;
	assert_true(asprintf(&doc, "{\"name\": \"%s\", \"size_mb\": 16}", long_name) > 0);
	expect_fail(VOLUME, doc, strlen(doc), -EINVAL, "name");
	free(doc);
	free(long_name);
	const char *mounts = "{\"volumes\": [{\"name\": \"a\", \"path\": \"/data\"},"
			     " {\"name\": \"b\", \"path\": \"/home/user/x\", \"read_only\": true}]}";
	assert_int_equal(api_create_parse(mounts, strlen(mounts), MAX_TTL, &c, &err), 0);
	assert_int_equal(c->n_volumes, 2);
	assert_string_equal(c->volumes[1].path, "/home/user/x");
	assert_true(c->volumes[1].read_only && !c->volumes[0].read_only);
	api_create_free(c);
	static const char *const bad_paths[] = {"data", "/", "/proc", "/proc/1", "/sys", "/dev/shm",
						"/a/../b", "/a/./b", "/a//b", "/a/", "/..", "/."};
	for (size_t i = 0; i < ELEMENTSOF(bad_paths); i++) {
		assert_true(asprintf(&doc, "{\"volumes\": [{\"name\": \"a\", \"path\": \"%s\"}]}",
				     bad_paths[i]) > 0);
		expect_fail(CREATE, doc, strlen(doc), -EINVAL, "volumes[0].path");
		free(doc);
	}
	const char *twice = "{\"volumes\": [{\"name\": \"a\", \"path\": \"/x\"},"
			    " {\"name\": \"a\", \"path\": \"/y\"}]}";
	expect_fail(CREATE, twice, strlen(twice), -EINVAL, "named twice");
	const char *noname = "{\"volumes\": [{\"path\": \"/x\"}]}";
	expect_fail(CREATE, noname, strlen(noname), -EINVAL, "required");
}

/* Every runtime name the API knows parses (the daemon, not the parser, refuses one this host
 * cannot run), and comes back as the same name. */
static void test_create_runtime_names(void **state)
{
	static const char *const names[] = {"jail", "auto", "gvisor", "microvm"};
	for (size_t i = 0; i < ELEMENTSOF(names); i++) {
		char body[64];
		struct api_create *c = NULL;
		struct cordon_err err = {};
		snprintf(body, sizeof(body), "{\"runtime\":\"%s\"}", names[i]);
		assert_int_equal(api_create_parse(body, strlen(body), MAX_TTL, &c, &err), 0);
		assert_string_equal(api_runtime_name(c->runtime), names[i]);
		api_create_free(c);
	}
}

static void test_create_defaults(void **state)
{
	static const char *const bodies[] = {"", "{}", " { } ", "{\"template\":null}"};
	for (size_t i = 0; i < ELEMENTSOF(bodies); i++) {
		struct api_create *c = NULL;
		struct cordon_err err = {};
		assert_int_equal(api_create_parse(bodies[i], strlen(bodies[i]), MAX_TTL, &c, &err),
				 0);
		assert_string_equal(c->template_name, "host");
		assert_int_equal(c->runtime, API_RUNTIME_JAIL);
		assert_int_equal(c->timeout_s, 300);
		assert_int_equal(c->limits.cpus_milli, 1000);
		assert_int_equal(c->limits.memory_mb, 512);
		assert_int_equal(c->limits.pids, 256);
		assert_int_equal(c->limits.disk_mb, 4096);
		assert_int_equal(c->network.policy, API_NET_DENY);
		assert_int_equal(c->network.n_allow, 0);
		assert_int_equal(c->env.n, 0);
		assert_int_equal(c->metadata.n, 0);
		assert_non_null(c->env_strv);
		assert_null(c->env_strv[0]);
		assert_null(api_create_free(c));
	}

	/* The default TTL never exceeds the server's maximum. */
	struct api_create *c = NULL;
	assert_int_equal(api_create_parse("{}", 2, 60, &c, NULL), 0);
	assert_int_equal(c->timeout_s, 60);
	api_create_free(c);
}

static void test_create_full(void **state)
{
	static const char body[] =
	    "{\"template\":\"python-3.11\",\"runtime\":\"auto\",\"timeout_s\":3600,"
	    "\"limits\":{\"cpus\":0.5,\"memory_mb\":2048,\"pids\":16,\"disk_mb\":1048576},"
	    "\"network\":{\"policy\":\"allow\",\"allow\":[\"pypi.org\",\"*.github.com:443\","
	    "\"10.0.0.0/8\",\"[2001:db8::]/32\"]},"
	    "\"env\":{\"FOO\":\"bar\",\"_X1\":\"\"},\"metadata\":{\"user "
	    "id\":\"42\",\"a.b/c\":\"\"}}";
	struct api_create *c = NULL;
	struct cordon_err err = {};
	assert_int_equal(api_create_parse(body, strlen(body), MAX_TTL, &c, &err), 0);
	assert_string_equal(c->template_name, "python-3.11");
	assert_int_equal(c->runtime, API_RUNTIME_AUTO);
	assert_string_equal(api_runtime_name(c->runtime), "auto");
	assert_int_equal(c->timeout_s, 3600);
	assert_int_equal(c->limits.cpus_milli, 500);
	assert_int_equal(c->limits.memory_mb, 2048);
	assert_int_equal(c->limits.pids, 16);
	assert_int_equal(c->limits.disk_mb, 1048576);
	assert_int_equal(c->network.policy, API_NET_ALLOW);
	assert_int_equal(c->network.n_allow, 4);
	assert_string_equal(c->network.allow[1], "*.github.com:443");
	assert_null(c->network.allow[4]);
	assert_int_equal(c->env.n, 2);
	assert_string_equal(c->env.items[0].key, "FOO");
	assert_string_equal(c->env.items[0].value, "bar");
	assert_string_equal(c->env_strv[0], "FOO=bar");
	assert_string_equal(c->env_strv[1], "_X1=");
	assert_null(c->env_strv[2]);
	assert_int_equal(c->metadata.n, 2);
	assert_string_equal(c->metadata.items[0].key, "user id");
	assert_string_equal(c->metadata.items[0].value, "42");

	struct cordon_spec spec = {.agent_fd = -1};
	api_create_to_spec(c, &spec);
	assert_int_equal(spec.memory_bytes, 2048ULL << 20);
	assert_int_equal(spec.cpus_milli, 500);
	assert_int_equal(spec.pids, 16);
	assert_int_equal(spec.disk_bytes, 1048576ULL << 20);
	assert_int_equal(spec.timeout_ms, 3600ULL * 1000);
	assert_int_equal(spec.n_env, 2);
	assert_string_equal(spec.env[0], "FOO=bar");
	assert_int_equal(spec.net, CORDON_NET_NONE);
	assert_null(spec.argv);
	api_create_free(c);

	/* cpus takes integers, and rounds to thousandths */
	const char *b = "{\"limits\":{\"cpus\":64}}";
	assert_int_equal(api_create_parse(b, strlen(b), MAX_TTL, &c, &err), 0);
	assert_int_equal(c->limits.cpus_milli, 64000);
	api_create_free(c);
	b = "{\"limits\":{\"cpus\":0.1}}";
	assert_int_equal(api_create_parse(b, strlen(b), MAX_TTL, &c, &err), 0);
	assert_int_equal(c->limits.cpus_milli, 100);
	api_create_free(c);
	b = "{\"network\":{\"policy\":\"public\"}}";
	assert_int_equal(api_create_parse(b, strlen(b), MAX_TTL, &c, &err), 0);
	assert_int_equal(c->network.policy, API_NET_PUBLIC);
	api_create_free(c);
}

static void test_exec(void **state)
{
	struct api_exec *e = NULL;
	struct cordon_err err = {};
	const char *b =
	    "{\"argv\":[\"python3\",\"-c\",\"print(1)\"],\"cwd\":\"/tmp\",\"env\":{\"A\":\"1\"},"
	    "\"user\":\"root\",\"stdin\":\"hi\\n\",\"timeout_s\":5,\"tag\":\"job 1\"}";
	assert_int_equal(api_exec_parse(b, strlen(b), API_EXEC_RUN, &e, &err), 0);
	assert_int_equal(e->argc, 3);
	assert_string_equal(e->argv[0], "python3");
	assert_string_equal(e->argv[2], "print(1)");
	assert_null(e->argv[3]);
	assert_null(e->cmd);
	assert_string_equal(e->cwd, "/tmp");
	assert_string_equal(e->env_strv[0], "A=1");
	assert_int_equal(e->user, CORDON_USER_ROOT);
	assert_int_equal(e->stdin_len, 3);
	assert_memory_equal(e->stdin_data, "hi\n", 3);
	assert_int_equal(e->timeout_s, 5);
	assert_string_equal(e->tag, "job 1");
	api_exec_free(e);

	b = "{\"cmd\":\"echo hi | wc -c\"}";
	assert_int_equal(api_exec_parse(b, strlen(b), API_EXEC_RUN, &e, &err), 0);
	assert_int_equal(e->argc, 3);
	assert_string_equal(e->argv[0], "/bin/sh");
	assert_string_equal(e->argv[1], "-c");
	assert_string_equal(e->argv[2], "echo hi | wc -c");
	assert_null(e->argv[3]);
	assert_null(e->cwd);
	assert_int_equal(e->user, CORDON_USER_USER);
	assert_null(e->stdin_data);
	assert_int_equal(e->timeout_s, 60);
	assert_null(e->tag);
	assert_int_equal(e->env.n, 0);
	assert_null(e->env_strv[0]);
	api_exec_free(e);

	b = "{\"cmd\":\"sleep 1000\",\"timeout_s\":0,\"argv\":null}";
	assert_int_equal(api_exec_parse(b, strlen(b), API_EXEC_START, &e, &err), 0);
	assert_int_equal(e->timeout_s, 0);
	api_exec_free(e);
}

static void test_stdin_signal_timeout(void **state)
{
	struct api_stdin in = {};
	struct cordon_err err = {};
	const char *b = "{\"data\":\"aGVsbG8=\"}";
	assert_int_equal(api_stdin_parse(b, strlen(b), &in, &err), 0);
	assert_int_equal(in.len, 5);
	assert_memory_equal(in.data, "hello", 5);
	assert_false(in.eof);
	api_stdin_done(&in);
	b = "{\"data\":\"AP8A/w==\",\"eof\":true}";
	assert_int_equal(api_stdin_parse(b, strlen(b), &in, &err), 0);
	assert_int_equal(in.len, 4);
	assert_memory_equal(in.data, "\0\xff\0\xff", 4);
	assert_true(in.eof);
	api_stdin_done(&in);
	b = "{\"eof\":true}";
	assert_int_equal(api_stdin_parse(b, strlen(b), &in, &err), 0);
	assert_null(in.data);
	assert_int_equal(in.len, 0);
	assert_true(in.eof);
	api_stdin_done(&in);
	b = "{\"data\":\"aGk\"}"; /* unpadded: refused */
	assert_int_equal(api_stdin_parse(b, strlen(b), &in, &err), -EINVAL);

	static const struct {
		const char *body;
		int signo;
	} sigs[] = {
	    {"{\"signal\":\"SIGTERM\"}", SIGTERM}, {"{\"signal\":\"TERM\"}", SIGTERM},
	    {"{\"signal\":15}", SIGTERM},	   {"{\"signal\":\"KILL\"}", SIGKILL},
	    {"{\"signal\":9}", SIGKILL},	   {"{\"signal\":\"SIGINT\"}", SIGINT},
	    {"{\"signal\":\"WINCH\"}", SIGWINCH},
	};
	for (size_t i = 0; i < ELEMENTSOF(sigs); i++) {
		int signo = 0;
		assert_int_equal(api_signal_parse(sigs[i].body, strlen(sigs[i].body), &signo, &err),
				 0);
		assert_int_equal(signo, sigs[i].signo);
	}
	assert_string_equal(api_signal_name(SIGTERM), "SIGTERM");
	assert_null(api_signal_name(SIGSEGV));

	uint32_t t = 0;
	assert_int_equal(api_timeout_parse("{\"timeout_s\":3600}", 18, MAX_TTL, &t, &err), 0);
	assert_int_equal(t, 3600);
}

/* Approve rules, profiles, and the decision on a held request. */
static void test_approvals(void **state)
{
	(void)state;
	struct cordon_err err = {};
	struct api_network_req *n = NULL;
	const char *b = "{\"profile\":\"research\",\"allow\":[\"a.com\"],\"approve\":[{\"approve\":\"api.stripe.com\","
			"\"methods\":[\"POST\",\"PUT\"],\"paths\":[\"/v1/charges\"],\"timeout_s\":60},{\"approve\":\"*.x.com\"}]}";
	assert_int_equal(api_network_parse(b, strlen(b), &n, &err), 0);
	assert_string_equal(n->network.profile, "research");
	assert_false(n->network.policy_given);
	assert_true(n->network.allow_given);
	assert_int_equal(n->network.n_approve, 2);
	assert_string_equal(n->network.approve[0].methods[1], "PUT");
	assert_int_equal(n->network.approve[0].timeout_s, 60);
	assert_int_equal(n->network.approve[1].timeout_s, API_DEFAULT_APPROVE_TIMEOUT);
	json_t *j = api_approve_json(n->network.approve, n->network.n_approve);
	char *text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
	assert_string_equal(text, "[{\"approve\":\"api.stripe.com\",\"methods\":[\"POST\",\"PUT\"],\"paths\":"
				  "[\"/v1/charges\"],\"timeout_s\":60},{\"approve\":\"*.x.com\",\"timeout_s\":300}]");
	free(text);
	json_decref(j);
	api_network_free(n);

	struct api_decision *d = NULL;
	b = "{\"decision\":\"deny\",\"reason\":\"not today\"}";
	assert_int_equal(api_decision_parse(b, strlen(b), &d, &err), 0);
	assert_false(d->allow);
	assert_string_equal(d->reason, "not today");
	d = api_decision_free(d);
	b = "{\"decision\":\"allow\"}";
	assert_int_equal(api_decision_parse(b, strlen(b), &d, &err), 0);
	assert_true(d->allow);
	assert_null(d->reason);
	d = api_decision_free(d);
	static const struct {
		const char *body, *msg;
		int code;
	} bad[] = {
	    {"{}", "decision: required", -EINVAL},
	    {"{\"decision\":\"yes\"}", "decision: must be \"allow\" or \"deny\"", -EINVAL},
	    {"{\"decision\":\"allow\",\"reason\":\"a\\nb\"}", "reason: must not contain control", -EINVAL},
	    {"{\"decision\":\"allow\",\"by\":\"me\"}", "by: unknown field", -EBADRQC},
	    {"[]", "", -EBADMSG},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err = (struct cordon_err){};
		assert_int_equal(api_decision_parse(bad[i].body, strlen(bad[i].body), &d, &err), bad[i].code);
		assert_non_null(strstr(err.msg, bad[i].msg));
	}
	assert_true(api_approval_id_ok("ap-1a2b3"));
	assert_false(api_approval_id_ok("ap-"));
	assert_false(api_approval_id_ok("ap-XYZ"));
	assert_false(api_approval_id_ok("sb-1234"));
	assert_false(api_approval_id_ok("ap-0123456789abcdef01234"));
}

static void test_network_files(void **state)
{
	struct api_network_req *n = NULL;
	struct cordon_err err = {};
	const char *b = "{\"policy\":\"allow\",\"allow\":[\"example.com:443\"]}";
	assert_int_equal(api_network_parse(b, strlen(b), &n, &err), 0);
	assert_int_equal(n->network.policy, API_NET_ALLOW);
	assert_int_equal(n->network.n_allow, 1);
	assert_string_equal(n->network.allow[0], "example.com:443");
	api_network_free(n);
	b = "{\"policy\":\"deny\"}";
	assert_int_equal(api_network_parse(b, strlen(b), &n, &err), 0);
	assert_int_equal(n->network.policy, API_NET_DENY);
	assert_int_equal(n->network.n_allow, 0);
	api_network_free(n);

	struct api_move *mv = NULL;
	b = "{\"from\":\"/a/b\",\"to\":\"/c\"}";
	assert_int_equal(api_move_parse(b, strlen(b), &mv, &err), 0);
	assert_string_equal(mv->from, "/a/b");
	assert_string_equal(mv->to, "/c");
	api_move_free(mv);

	struct api_mkdir *mk = NULL;
	b = "{\"path\":\"/a/b\"}";
	assert_int_equal(api_mkdir_parse(b, strlen(b), &mk, &err), 0);
	assert_string_equal(mk->path, "/a/b");
	assert_false(mk->parents);
	api_mkdir_free(mk);
	b = "{\"path\":\"/a/b\",\"parents\":true}";
	assert_int_equal(api_mkdir_parse(b, strlen(b), &mk, &err), 0);
	assert_true(mk->parents);
	api_mkdir_free(mk);

	/* a path that is not UTF-8, as base64 of its bytes: "/caf\xe9" */
	b = "{\"path_b64\":\"L2NhZuk=\"}";
	assert_int_equal(api_mkdir_parse(b, strlen(b), &mk, &err), 0);
	assert_string_equal(mk->path, "/caf\xe9");
	api_mkdir_free(mk);
	b = "{\"from_b64\":\"L2NhZuk=\",\"to\":\"/c\"}";
	assert_int_equal(api_move_parse(b, strlen(b), &mv, &err), 0);
	assert_string_equal(mv->from, "/caf\xe9");
	assert_string_equal(mv->to, "/c");
	api_move_free(mv);
	mv = NULL;
	b = "{\"from\":\"/a\",\"from_b64\":\"L2NhZuk=\",\"to\":\"/c\"}";
	assert_int_equal(api_move_parse(b, strlen(b), &mv, &err), -EINVAL);
	assert_string_equal(err.msg, "from: give from or from_b64, not both");
	b = "{\"path_b64\":\"Y2Fm\"}"; /* "caf": relative */
	assert_int_equal(api_mkdir_parse(b, strlen(b), &mk, &err), -EINVAL);
	b = "{\"path_b64\":\"L2EAYg==\"}"; /* "/a\0b" */
	assert_int_equal(api_mkdir_parse(b, strlen(b), &mk, &err), -EINVAL);
	b = "{\"path_b64\":\"not base64\"}";
	assert_int_equal(api_mkdir_parse(b, strlen(b), &mk, &err), -EINVAL);
	b = "{\"to\":\"/c\"}";
	assert_int_equal(api_move_parse(b, strlen(b), &mv, &err), -EINVAL);
	assert_string_equal(err.msg, "from: required");

	assert_int_equal(api_path_check("/home/user/x", 12, "path", &err), 0);
	assert_int_equal(api_path_check(NULL, 0, "path", &err), -EINVAL);
	assert_string_equal(err.msg, "path: required");
	assert_int_equal(api_path_check("x", 1, "path", &err), -EINVAL);
	assert_int_equal(api_path_check("/a\0b", 4, "path", &err), -EINVAL);
	assert_non_null(strstr(err.msg, "NUL"));
	_cleanup_free_ char *p = repeat('a', API_MAX_PATH + 1);
	p[0] = '/';
	assert_int_equal(api_path_check(p, API_MAX_PATH, "path", &err), 0);
	assert_int_equal(api_path_check(p, API_MAX_PATH + 1, "path", &err), -EINVAL);
	assert_string_equal(err.msg, "path: longer than 4096 bytes");

	unsigned d = 0;
	assert_int_equal(api_depth_parse(NULL, &d, &err), 0);
	assert_int_equal(d, 1);
	assert_int_equal(api_depth_parse("32", &d, &err), 0);
	assert_int_equal(d, 32);
	static const char *const bad_depths[] = {"0", "33", "-1", "1x", "99999999999999999999",
						 " 1"};
	for (size_t i = 0; i < ELEMENTSOF(bad_depths); i++) {
		assert_int_equal(api_depth_parse(bad_depths[i], &d, &err), -EINVAL);
		assert_non_null(strstr(err.msg, "depth: must be an integer between 1 and 32"));
	}

	bool v = true;
	assert_int_equal(api_query_bool_parse(NULL, "follow", &v, &err), 0);
	assert_false(v);
	assert_int_equal(api_query_bool_parse("1", "follow", &v, &err), 0);
	assert_true(v);
	assert_int_equal(api_query_bool_parse("yes", "follow", &v, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "follow: must be one of"));
}

static void test_filter(void **state)
{
	struct api_filter *f = NULL;
	struct cordon_err err = {};
	const char *q = "metadata.user=alice&&metadata.job%20id=a+b%2Fc&metadata.empty=";
	assert_int_equal(api_filter_parse(q, strlen(q), &f, &err), 0);
	assert_int_equal(f->n, 3);
	assert_string_equal(f->items[0].key, "user");
	assert_string_equal(f->items[0].value, "alice");
	assert_string_equal(f->items[1].key, "job id");
	assert_string_equal(f->items[1].value, "a b/c");
	assert_string_equal(f->items[2].key, "empty");
	assert_string_equal(f->items[2].value, "");

	struct api_kv kv[] = {{"empty", ""}, {"user", "alice"}, {"job id", "a b/c"}, {"x", "y"}};
	struct api_kvmap m = {kv, 4};
	assert_true(api_filter_match(f, &m));
	kv[1].value = "bob";
	assert_false(api_filter_match(f, &m));
	m.n = 0;
	assert_false(api_filter_match(f, &m));
	api_filter_free(f);

	assert_int_equal(api_filter_parse(NULL, 0, &f, &err), 0);
	assert_int_equal(f->n, 0);
	assert_true(api_filter_match(f, &m));
	api_filter_free(f);

	/* limits: 64 filters, keys of 128 bytes, values of 4096 */
	_cleanup_free_ char *many = malloc(65 * 32);
	size_t o = 0;
	for (int i = 0; i < 65; i++)
		o += (size_t)sprintf(many + o, "%smetadata.k%d=v", i ? "&" : "", i);
	size_t len64 = (size_t)(strstr(many, "&metadata.k64") - many);
	assert_int_equal(api_filter_parse(many, len64, &f, &err), 0);
	assert_int_equal(f->n, 64);
	api_filter_free(f);
	expect_fail(FILTER, many, o, -EINVAL, "metadata: more than 64 filters");

	_cleanup_free_ char *k = repeat('k', 129);
	_cleanup_free_ char *q1 = fmt("metadata.%s=v", k);
	expect_fail(FILTER, q1, strlen(q1), -EINVAL, "key must be 1 to 128 bytes");
	_cleanup_free_ char *v = repeat('v', 4097);
	_cleanup_free_ char *q2 = fmt("metadata.k=%s", v);
	expect_fail(FILTER, q2, strlen(q2), -EINVAL,
		    "metadata.k: needs a value of at most 4096 bytes");
	assert_int_equal(api_filter_parse(q2, strlen(q2) - 1, &f, &err), 0);
	api_filter_free(f);
}

/* ---- limits --------------------------------------------------------------------------------- */

static void test_body_size(void **state)
{
	/* Exactly API_MAX_BODY bytes is read; one more is refused before parsing. */
	_cleanup_free_ char *b = repeat(' ', API_MAX_BODY + 1);
	b[0] = '{';
	b[API_MAX_BODY - 1] = '}';
	struct cordon_err err = {};
	assert_int_equal(run(CREATE, b, API_MAX_BODY, &err), 0);
	expect_fail(CREATE, b, API_MAX_BODY + 1, -EMSGSIZE, "larger than 1048576 bytes");
	expect_fail(EXEC, b, API_MAX_BODY + 1, -EMSGSIZE, "larger than");
	expect_fail(FILTER, b, API_MAX_BODY + 1, -EMSGSIZE, "longer than");
}

static void test_depth(void **state)
{
	/* {"metadata": [[[...]]]}: the object is level 1. */
	for (int depth = 31; depth <= 33; depth++) {
		_cleanup_free_ char *open = repeat('[', (size_t)depth - 1);
		_cleanup_free_ char *close = repeat(']', (size_t)depth - 1);
		_cleanup_free_ char *b = fmt("{\"metadata\":%s%s}", open, close);
		if (depth <= 32)
			expect_fail(CREATE, b, strlen(b), -EINVAL, "metadata: must be an object");
		else
			expect_fail(CREATE, b, strlen(b), -EBADMSG, "nested deeper than 32 levels");
	}
	/* Brackets inside strings, escaped quotes included, are not nesting. */
	_cleanup_free_ char *s = repeat('[', 100);
	_cleanup_free_ char *b = fmt("{\"metadata\":{\"k\":\"\\\"%s\"}}", s);
	assert_int_equal(run(CREATE, b, strlen(b), NULL), 0);
	/* Deep nesting far past jansson's own limit is refused cheaply. */
	_cleanup_free_ char *deep = repeat('[', 100000);
	expect_fail(EXEC, deep, 100000, -EBADMSG, "nested deeper than 32 levels");
}

static void test_counts(void **state)
{
	_cleanup_free_ char *env64 = kv_body("env", 64);
	_cleanup_free_ char *env65 = kv_body("env", 65);
	_cleanup_free_ char *md65 = kv_body("metadata", 65);
	assert_int_equal(run(CREATE, env64, strlen(env64), NULL), 0);
	expect_fail(CREATE, env65, strlen(env65), -EINVAL, "env: more than 64 entries");
	expect_fail(CREATE, md65, strlen(md65), -EINVAL, "metadata: more than 64 entries");
	expect_fail(EXEC, env65, strlen(env65), -EINVAL, "env: more than 64 entries");

	_cleanup_free_ char *k128 = repeat('K', 128), *k129 = repeat('K', 129);
	_cleanup_free_ char *v4096 = repeat('v', 4096), *v4097 = repeat('v', 4097);
	_cleanup_free_ char *ok = fmt("{\"env\":{\"%s\":\"%s\"}}", k128, v4096);
	_cleanup_free_ char *longkey = fmt("{\"env\":{\"%s\":\"v\"}}", k129);
	_cleanup_free_ char *longval = fmt("{\"metadata\":{\"k\":\"%s\"}}", v4097);
	assert_int_equal(run(CREATE, ok, strlen(ok), NULL), 0);
	expect_fail(CREATE, longkey, strlen(longkey), -EINVAL, "name longer than 128 bytes");
	expect_fail(CREATE, longval, strlen(longval), -EINVAL,
		    "metadata.k: longer than 4096 bytes");

	_cleanup_free_ char *argv4096 = array_body("", "argv", 4096);
	_cleanup_free_ char *argv4097 = array_body("", "argv", 4097);
	assert_int_equal(run(EXEC, argv4096, strlen(argv4096), NULL), 0);
	expect_fail(EXEC, argv4097, strlen(argv4097), -EINVAL, "argv: must have 1 to 4096 entries");
	_cleanup_free_ char *allow256 = array_body("\"policy\":\"allow\",", "allow", 256);
	_cleanup_free_ char *allow257 = array_body("\"policy\":\"allow\",", "allow", 257);
	assert_int_equal(run(NETWORK, allow256, strlen(allow256), NULL), 0);
	expect_fail(NETWORK, allow257, strlen(allow257), -EINVAL,
		    "allow: must have 0 to 256 entries");

	_cleanup_free_ char *arg = repeat('a', API_MAX_ARG + 1);
	_cleanup_free_ char *longarg = fmt("{\"argv\":[\"%s\"]}", arg);
	_cleanup_free_ char *longcmd = fmt("{\"cmd\":\"%s\"}", arg);
	expect_fail(EXEC, longarg, strlen(longarg), -EINVAL, "argv[0]: longer than 131071 bytes");
	expect_fail(EXEC, longcmd, strlen(longcmd), -EINVAL, "cmd: longer than 131071 bytes");

	_cleanup_free_ char *name = repeat('x', 300);
	_cleanup_free_ char *unk = fmt("{\"%s\":1}", name);
	expect_fail(CREATE, unk, strlen(unk), -EBADRQC, "...: unknown field");
	_cleanup_free_ char *t65 = repeat('t', 65);
	_cleanup_free_ char *tag = fmt("{\"cmd\":\"x\",\"tag\":\"%s\"}", t65);
	expect_fail(START, tag, strlen(tag), -EINVAL, "tag: longer than 64 bytes");
	_cleanup_free_ char *tpl = fmt("{\"template\":\"%s\"}", t65);
	expect_fail(CREATE, tpl, strlen(tpl), -EINVAL, "template: longer than 64 bytes");
}

static void test_raw_nul(void **state)
{
	/* A NUL byte in the body itself (not \u0000): invalid JSON, whatever follows it. */
	static const char b[] = "{\"template\":\"ho\0st\"}";
	expect_fail(CREATE, b, sizeof(b) - 1, -EBADMSG, "invalid JSON");
	static const char b2[] = "{}\0";
	expect_fail(CREATE, b2, sizeof(b2) - 1, -EBADMSG, "invalid JSON");
}

/* ---- errors --------------------------------------------------------------------------------- */

static void test_fork(void **state)
{
	struct api_fork f;
	struct cordon_err err = {};
	assert_int_equal(api_fork_parse("{\"count\": 3}", 12, 600, &f, &err), 0);
	assert_int_equal(f.count, 3);
	assert_int_equal(f.timeout_s, 0);
	const char *ok = "{\"count\": 100, \"timeout_s\": 600}";
	assert_int_equal(api_fork_parse(ok, strlen(ok), 600, &f, &err), 0);
	assert_int_equal(f.timeout_s, 600);
	static const char *const bad[] = {"{\"count\": 0}", "{\"count\": 101}", "{}", "",
					  "{\"count\": 1, \"timeout_s\": 601}", "{\"count\": \"1\"}"};
	for (size_t i = 0; i < ELEMENTSOF(bad); i++)
		assert_int_equal(api_error_from_errno(api_fork_parse(bad[i], strlen(bad[i]), 600, &f, &err)),
				 i == 3 ? API_ERR_BAD_REQUEST : API_ERR_INVALID_FIELD);
	const char *unk = "{\"count\": 1, \"x\": 1}";
	assert_int_equal(api_fork_parse(unk, strlen(unk), 600, &f, &err), -EBADRQC);
	assert_true(api_snapshot_id_ok("sn-abcdefghijklmnopqrst"));
	assert_false(api_snapshot_id_ok("sn-abcdefghijklmnopqrs1"));
	assert_false(api_snapshot_id_ok("sb-abcdefghijklmnopqrst"));
}

/* secrets at create and PUT .../secrets/{name}: bounds, and no message names a value. */
static void test_secrets(void **state)
{
	struct cordon_err err = {};
	struct api_create *c = NULL;
	const char *ok = "{\"secrets\": {\"API_KEY\": {\"value\": \"sk-1\", \"hosts\": [\"Api.Example.com\", \"b.test\"],"
			 " \"in\": [\"header\", \"body\"]}}}";
	assert_int_equal(api_create_parse(ok, strlen(ok), MAX_TTL, &c, &err), 0);
	assert_int_equal(c->secrets.n, 1);
	assert_string_equal(c->secrets.items[0].name, "API_KEY");
	assert_int_equal(c->secrets.items[0].value_len, 4);
	assert_int_equal(c->secrets.items[0].n_hosts, 2);
	assert_int_equal(c->secrets.items[0].in, API_SECRET_IN_HEADER | API_SECRET_IN_BODY);
	api_create_free(c);
	static const struct {
		const char *body;
		int code;
	} bad[] = {
	    {"{\"secrets\": {\"K\": {\"value\": \"SEKRIT\\r\\n\", \"hosts\": [\"a.test\"]}}}", -EINVAL},
	    {"{\"secrets\": {\"K\": {\"value\": \"SEKRIT\", \"hosts\": [\"1.2.3.4\"]}}}", -EINVAL},
	    {"{\"secrets\": {\"K\": {\"value\": \"SEKRIT\", \"hosts\": [\"-a.test\"]}}}", -EINVAL},
	    {"{\"secrets\": {\"K\": {\"value\": \"SEKRIT\", \"hosts\": [\"a..test\"]}}}", -EINVAL},
	    {"{\"secrets\": {\"K\": {\"value\": \"SEKRIT\"}}}", -EINVAL},
	    {"{\"secrets\": {\"K-1\": {\"value\": \"SEKRIT\", \"hosts\": [\"a.test\"]}}}", -EINVAL},
	    {"{\"secrets\": {\"K\": {\"value\": \"SEKRIT\", \"hosts\": [\"a.test\"], \"x\": 1}}}", -EBADRQC},
	    {"{\"secrets\": {\"K\": {\"value\": \"SEKRIT\", \"hosts\": [\"a.test\"], \"in\": []}}}", -EINVAL},
	};
	for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
		err = (struct cordon_err){0};
		assert_int_equal(api_create_parse(bad[i].body, strlen(bad[i].body), MAX_TTL, &c, &err), bad[i].code);
		assert_null(strstr(err.msg, "SEKRIT"));
	}
	struct api_secret_put *p = NULL;
	assert_int_equal(api_secret_put_parse("K", "{\"value\": \"v2\"}", 15, &p, &err), 0);
	assert_false(p->hosts_given);
	assert_false(p->in_given);
	assert_int_equal(p->secret.value_len, 2);
	api_secret_put_free(p);
	assert_int_equal(api_secret_put_parse("K", "{}", 2, &p, &err), -EINVAL);
	assert_int_equal(api_secret_put_parse("1K", "{\"value\": \"v\"}", 14, &p, &err), -EINVAL);
}

static void test_errors(void **state)
{
	static const struct {
		enum api_error e;
		const char *code;
		int status;
	} table[] = {
	    {API_ERR_BAD_REQUEST, "bad_request", 400},
	    {API_ERR_INVALID_FIELD, "invalid_field", 400},
	    {API_ERR_UNKNOWN_FIELD, "unknown_field", 400},
	    {API_ERR_PAYLOAD_TOO_LARGE, "payload_too_large", 413},
	    {API_ERR_NOT_FOUND, "not_found", 404},
	    {API_ERR_CONFLICT, "conflict", 409},
	    {API_ERR_QUOTA_EXCEEDED, "quota_exceeded", 429},
	    {API_ERR_CAPACITY, "capacity", 503},
	    {API_ERR_UNAUTHORIZED, "unauthorized", 401},
	    {API_ERR_FORBIDDEN, "forbidden", 403},
	    {API_ERR_INTERNAL, "internal", 500},
	    {API_ERR_UNAVAILABLE, "unavailable", 503},
	    {API_ERR_TIMEOUT, "timeout", 504},
	    {API_ERR_READ_ONLY, "read_only", 409},
	    {API_ERR_INVALID_PATH, "invalid_path", 400},
	    {API_ERR_NO_SPACE, "no_space", 409},
	    {API_ERR_NOT_A_DIRECTORY, "not_a_directory", 409},
	    {API_ERR_IS_A_DIRECTORY, "is_a_directory", 409},
	    {API_ERR_CROSS_DEVICE, "cross_device", 409},
	    {API_ERR_AUDIT_UNAVAILABLE, "audit_unavailable", 503},
	    {API_ERR_UNSUPPORTED_RUNTIME, "unsupported_runtime", 400},
	    {API_ERR_SANDBOX_PAUSED, "sandbox_paused", 409},
	    {API_ERR_SNAPSHOT_LIMIT, "snapshot_limit", 507},
	    {API_ERR_VOLUME_IN_USE, "volume_in_use", 409},
	    {API_ERR_VOLUME_EXISTS, "volume_exists", 409},
	    {API_ERR_INSUFFICIENT_STORAGE, "insufficient_storage", 507},
	    {API_ERR_UNSAFE_ARCHIVE, "unsafe_archive", 400},
	    {API_ERR_NO_INTERPRETER, "no_interpreter", 409},
	    {API_ERR_NOT_A_TERMINAL, "not_a_terminal", 409},
	    {API_ERR_PORT_UNREACHABLE, "port_unreachable", 502},
	    {API_ERR_SANDBOX_BUSY, "sandbox_busy", 409},
	};
	assert_int_equal(ELEMENTSOF(table), _API_ERR_MAX);
	for (size_t i = 0; i < ELEMENTSOF(table); i++) {
		assert_string_equal(api_error_code(table[i].e), table[i].code);
		assert_int_equal(api_error_status(table[i].e), table[i].status);
	}
	assert_string_equal(api_error_code(_API_ERR_MAX), "internal");
	assert_int_equal(api_error_status((enum api_error) - 1), 500);

	/* What the parsers return maps to the documented codes. */
	assert_int_equal(api_error_from_errno(-EBADMSG), API_ERR_BAD_REQUEST);
	assert_int_equal(api_error_from_errno(-EINVAL), API_ERR_INVALID_FIELD);
	assert_int_equal(api_error_from_errno(-EBADRQC), API_ERR_UNKNOWN_FIELD);
	assert_int_equal(api_error_from_errno(-EMSGSIZE), API_ERR_PAYLOAD_TOO_LARGE);
	assert_int_equal(api_error_from_errno(-ENOENT), API_ERR_NOT_FOUND);
	assert_int_equal(api_error_from_errno(-ETIMEDOUT), API_ERR_TIMEOUT);
	/* what a file operation in a sandbox runs into */
	assert_int_equal(api_error_from_errno(-EROFS), API_ERR_READ_ONLY);
	assert_int_equal(api_error_from_errno(-ELOOP), API_ERR_INVALID_PATH);
	assert_int_equal(api_error_from_errno(-ENOTDIR), API_ERR_NOT_A_DIRECTORY);
	assert_int_equal(api_error_from_errno(-EISDIR), API_ERR_IS_A_DIRECTORY);
	assert_int_equal(api_error_from_errno(-EXDEV), API_ERR_CROSS_DEVICE);
	assert_int_equal(api_error_from_errno(-ENOMEM), API_ERR_INTERNAL);
	assert_int_equal(api_error_from_errno(0), API_ERR_INTERNAL);

	_cleanup_free_ char *s = api_error_render(API_ERR_NOT_FOUND, "sandbox \"x\"\n not found");
	assert_string_equal(
	    s,
	    "{\"error\":{\"code\":\"not_found\",\"message\":\"sandbox \\\"x\\\"\\n not found\"}}");
	_cleanup_free_ char *s2 = api_error_render(API_ERR_INTERNAL, "bad \xff utf8");
	assert_non_null(strstr(s2, "not valid UTF-8"));
	_cleanup_free_ char *s3 = api_error_render(API_ERR_TIMEOUT, NULL);
	assert_string_equal(s3, "{\"error\":{\"code\":\"timeout\",\"message\":\"\"}}");

	/* Every parser message renders to valid JSON whatever the input's bytes were. */
	struct cordon_err err = {};
	static const char b[] = "{\"\xff\x01\\u0000\":1}";
	assert_int_equal(run(CREATE, b, sizeof(b) - 1, &err), -EBADMSG); /* not UTF-8 */
	_cleanup_free_ char *s4 = api_error_render(API_ERR_BAD_REQUEST, err.msg);
	json_t *j = json_loads(s4, 0, NULL);
	assert_non_null(j);
	json_decref(j);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_bad_bodies),
	    cmocka_unit_test(test_create_defaults),
	    cmocka_unit_test(test_create_runtime_names),
	    cmocka_unit_test(test_create_full),
	    cmocka_unit_test(test_secrets),
	    cmocka_unit_test(test_exec),
	    cmocka_unit_test(test_stdin_signal_timeout),
	    cmocka_unit_test(test_network_files),
	    cmocka_unit_test(test_approvals),
	    cmocka_unit_test(test_filter),
	    cmocka_unit_test(test_body_size),
	    cmocka_unit_test(test_depth),
	    cmocka_unit_test(test_counts),
	    cmocka_unit_test(test_raw_nul),
	    cmocka_unit_test(test_errors),
	    cmocka_unit_test(test_fork),
	    cmocka_unit_test(test_build),
	    cmocka_unit_test(test_volumes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
