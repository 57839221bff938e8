/* libFuzzer target over every request parser of src/spec/api.c.
 *
 * Input: one selector byte (which parser, modulo the table), then the body. A corpus file is
 * thus "c{...}" for create, "e{...}" for exec and so on (see parsers[]). Beyond "no crash, no
 * leak", it checks what the parsers promise: a result is fully validated, a failure always
 * carries a message that renders to valid JSON and an errno the error table knows.
 */
#include <assert.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <jansson.h>

#include "basic/cleanup.h"
#include "spec/api.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_kvmap(const struct api_kvmap *m, const char *const *strv)
{
	assert(m->n <= API_MAX_KV);
	for (size_t i = 0; i < m->n; i++) {
		assert(strlen(m->items[i].key) <= API_MAX_KEY);
		assert(strlen(m->items[i].value) <= API_MAX_VALUE);
		if (strv)
			assert(strncmp(strv[i], m->items[i].key, strlen(m->items[i].key)) == 0);
	}
	if (strv)
		assert(strv[m->n] == NULL);
}

/* A parsed secret holds what the proxy will take: bounded, no control byte in its value. */
static void check_secret(const struct api_secret *s)
{
	assert(s->value_len >= 1 && s->value_len <= API_MAX_SECRET_VALUE);
	for (size_t i = 0; i < s->value_len; i++)
		assert((unsigned char)s->value[i] >= 0x20 && s->value[i] != 0x7f);
	assert(s->n_hosts <= API_MAX_SECRET_HOSTS);
	for (size_t i = 0; i < s->n_hosts; i++)
		assert(strlen(s->hosts[i]) <= API_MAX_SECRET_HOST && !strchr(s->hosts[i], '*'));
	assert(s->in >= 1 && s->in <= 7);
}

/* An approve rule holds what the proxy will take: bounded lists, capital methods, paths from /. */
static void check_network(const struct api_network *n)
{
	assert(n->n_allow <= API_MAX_ALLOW && n->n_approve <= API_MAX_APPROVE);
	for (size_t i = 0; i < n->n_approve; i++) {
		const struct api_approve_rule *r = &n->approve[i];
		assert(r->host && r->timeout_s >= 1 && r->timeout_s <= API_MAX_APPROVE_TIMEOUT);
		assert(r->n_methods <= API_MAX_APPROVE_LIST && r->n_paths <= API_MAX_APPROVE_LIST);
		for (size_t k = 0; k < r->n_methods; k++)
			assert(r->methods[k][0] >= 'A' && r->methods[k][0] <= 'Z');
		for (size_t k = 0; k < r->n_paths; k++)
			assert(r->paths[k][0] == '/' && !strchr(r->paths[k], ' ') && !strchr(r->paths[k], '?'));
	}
	json_decref(api_approve_json(n->approve, n->n_approve));
}

static int do_create(const char *b, size_t n, struct cordon_err *err)
{
	struct api_create *c = NULL;
	int r = api_create_parse(b, n, 86400, &c, err);
	if (r < 0)
		return r;
	assert(c->timeout_s >= 1 && c->timeout_s <= 86400);
	assert(c->limits.cpus_milli >= 100 && c->limits.cpus_milli <= 64000);
	check_network(&c->network);
	check_kvmap(&c->env, c->env_strv);
	check_kvmap(&c->metadata, NULL);
	assert(c->secrets.n <= API_MAX_SECRETS);
	for (size_t i = 0; i < c->secrets.n; i++) {
		check_secret(&c->secrets.items[i]);
		assert(c->secrets.items[i].n_hosts >= 1);
		assert(api_secret_name_ok(c->secrets.items[i].name, strlen(c->secrets.items[i].name)));
	}
	struct cordon_spec spec = {.agent_fd = -1};
	api_create_to_spec(c, &spec);
	assert(spec.n_env == c->env.n);
	api_create_free(c);
	return 0;
}

static int do_exec(const char *b, size_t n, enum api_exec_kind kind, struct cordon_err *err)
{
	struct api_exec *e = NULL;
	int r = api_exec_parse(b, n, kind, &e, err);
	if (r < 0)
		return r;
	assert(e->argc >= 1 && e->argc <= API_MAX_ARGV && e->argv[e->argc] == NULL);
	assert(e->argv[0][0] != '\0');
	assert(!e->cwd || e->cwd[0] == '/');
	assert(e->timeout_s <= API_MAX_EXEC_TIMEOUT);
	check_kvmap(&e->env, e->env_strv);
	api_exec_free(e);
	return 0;
}

static int p_create(const char *b, size_t n, struct cordon_err *err)
{
	return do_create(b, n, err);
}

static int p_run(const char *b, size_t n, struct cordon_err *err)
{
	return do_exec(b, n, API_EXEC_RUN, err);
}

static int p_start(const char *b, size_t n, struct cordon_err *err)
{
	return do_exec(b, n, API_EXEC_START, err);
}

static int p_timeout(const char *b, size_t n, struct cordon_err *err)
{
	uint32_t t = 0;
	int r = api_timeout_parse(b, n, 3600, &t, err);
	assert(r < 0 || (t >= 1 && t <= 3600));
	return r;
}

static int p_stdin(const char *b, size_t n, struct cordon_err *err)
{
	struct api_stdin in = {};
	int r = api_stdin_parse(b, n, &in, err);
	assert(r < 0 || (in.len == 0) == (in.data == NULL));
	api_stdin_done(&in);
	return r;
}

static int p_signal(const char *b, size_t n, struct cordon_err *err)
{
	int signo = 0;
	int r = api_signal_parse(b, n, &signo, err);
	assert(r < 0 || api_signal_name(signo));
	return r;
}

static int p_network(const char *b, size_t n, struct cordon_err *err)
{
	struct api_network_req *req = NULL;
	int r = api_network_parse(b, n, &req, err);
	if (r >= 0)
		check_network(&req->network);
	api_network_free(req);
	return r;
}

static int p_move(const char *b, size_t n, struct cordon_err *err)
{
	struct api_move *m = NULL;
	int r = api_move_parse(b, n, &m, err);
	assert(r < 0 || (m->from[0] == '/' && m->to[0] == '/'));
	api_move_free(m);
	return r;
}

static int p_mkdir(const char *b, size_t n, struct cordon_err *err)
{
	struct api_mkdir *m = NULL;
	int r = api_mkdir_parse(b, n, &m, err);
	assert(r < 0 || m->path[0] == '/');
	api_mkdir_free(m);
	return r;
}

static int p_filter(const char *b, size_t n, struct cordon_err *err)
{
	struct api_filter *f = NULL;
	int r = api_filter_parse(b, n, &f, err);
	if (r >= 0) {
		assert(f->n <= API_MAX_KV);
		struct api_kvmap m = {f->items, f->n};
		assert(api_filter_match(f, &m));
	}
	api_filter_free(f);
	return r;
}

/* Query values are NUL-terminated by the daemon (after URL-decoding, which may leave a NUL
 * inside: api_path_check() gets the decoded length). */
static int p_query(const char *b, size_t n, struct cordon_err *err)
{
	_cleanup_free_ char *s = strndup(b, n);
	unsigned d;
	bool v;
	if (!s)
		return 0;
	int r = api_path_check(b, n, "path", err);
	if (api_depth_parse(s, &d, err) >= 0)
		assert(d >= 1 && d <= API_MAX_LIST_DEPTH);
	(void)api_query_bool_parse(s, "follow", &v, err);
	return r;
}

/* PUT .../secrets/{name}: the body, for a fixed name. */
static int p_secret(const char *b, size_t n, struct cordon_err *err)
{
	struct api_secret_put *p = NULL;
	int r = api_secret_put_parse("API_KEY", b, n, &p, err);
	if (r >= 0)
		check_secret(&p->secret);
	api_secret_put_free(p);
	return r;
}

/* A cell (POST .../code): bounded code with no NUL, a context id the API takes. */
static int p_code(const char *b, size_t n, struct cordon_err *err)
{
	struct api_code *c = NULL;
	int r = api_code_parse(b, n, &c, err);
	if (r >= 0) {
		assert(c->code && c->code_len <= API_MAX_CODE && !memchr(c->code, 0, c->code_len));
		assert(!c->context || api_context_id_ok(c->context, strlen(c->context)));
		assert(c->timeout_s <= API_MAX_CODE_TIMEOUT);
	}
	api_code_free(c);
	return r;
}

static int p_context(const char *b, size_t n, struct cordon_err *err)
{
	struct api_code_context *c = NULL;
	int r = api_code_context_parse(b, n, &c, err);
	if (r >= 0)
		assert(!c->cwd || c->cwd[0] == '/');
	api_code_context_free(c);
	return r;
}

/* A line of the interpreter server: what it makes is an event of a known type and shape. */
static int p_code_line(const char *b, size_t n, struct cordon_err *err)
{
	struct api_code_line l;
	int r = api_code_line_parse(b, n, &l, err);
	if (r < 0)
		return r;
	assert((l.kind == API_LINE_EVENT) == (l.event != NULL));
	bool no_id = l.kind == API_LINE_READY || l.kind == API_LINE_ACK;
	assert(no_id ? l.id == 0 : l.id >= 1);
	assert(l.kind != API_LINE_ACK || l.bytes >= 1);
	assert(strlen(l.message) <= API_MAX_CODE_MESSAGE);
	if (l.event) {
		const char *t = json_string_value(json_object_get(l.event, "type"));
		assert(t && json_object_size(l.event) >= 2);
		_cleanup_free_ char *out = json_dumps(l.event, JSON_COMPACT);
		assert(out);
		json_decref(l.event);
	}
	return 0;
}

/* POST /v1/approvals/{id}: the decision, and the id's check over the same bytes. */
static int p_decision(const char *b, size_t n, struct cordon_err *err)
{
	struct api_decision *d = NULL;
	_cleanup_free_ char *id = strndup(b, n);
	if (id && api_approval_id_ok(id))
		assert(strncmp(id, "ap-", 3) == 0 && strlen(id) <= 23);
	int r = api_decision_parse(b, n, &d, err);
	if (r >= 0 && d->reason) {
		assert(strlen(d->reason) <= API_MAX_REASON);
		for (const char *c = d->reason; *c; c++)
			assert((unsigned char)*c >= 0x20 && *c != 0x7f);
	}
	api_decision_free(d);
	return r;
}

static const struct {
	char selector;
	int (*parse)(const char *b, size_t n, struct cordon_err *err);
} parsers[] = {
    {'c', p_create}, {'e', p_run},    {'p', p_start},	{'t', p_timeout},
    {'i', p_stdin},  {'s', p_signal}, {'n', p_network}, {'m', p_move},
    {'d', p_mkdir},  {'f', p_filter}, {'q', p_query},  {'k', p_secret},
    {'x', p_code},   {'y', p_context}, {'l', p_code_line}, {'a', p_decision},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t which = data[0] % ELEMENTSOF(parsers);
	for (size_t i = 0; i < ELEMENTSOF(parsers); i++)
		if (parsers[i].selector == (char)data[0])
			which = i;

	struct cordon_err err = {};
	int r = parsers[which].parse((const char *)data + 1, size - 1, &err);
	if (r >= 0)
		return 0;
	assert(err.code == r);
	assert(memchr(err.msg, '\0', sizeof(err.msg)));
	enum api_error e = api_error_from_errno(r);
	assert(api_error_status(e) >= 400);
	char *s = api_error_render(e, err.msg);
	assert(s);
	json_t *j = json_loads(s, 0, NULL);
	assert(j);
	json_decref(j);
	free(s);
	return 0;
}
