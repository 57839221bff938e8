/* cordon mcp [OPTIONS]: a Model Context Protocol server for cordond (mcp.h). Its settings are
 * one table: each is a flag (--max-ttl 600) and a key of the --config JSON file
 * ({"max_ttl": 600}); flags win over the file. Without --listen it speaks JSON-RPC on
 * stdin/stdout, one message per line; logs go to stderr. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "basic/buf.h"
#include "basic/cleanup.h"
#include "basic/log.h"
#include "cli/cli.h"
#include "cli/mcp.h"
#include "cli/opts.h"

enum set_type { S_STR, S_INT, S_BOOL, S_LIST };

struct setting {
	const char *flag, *key; /* --flag, the config file's key */
	enum set_type type;
	size_t field;		/* offsetof(struct mcp_config, ...) */
	long long min, max;	/* S_INT's range */
	const char *arg, *help;
};

#define F(x) offsetof(struct mcp_config, x)
static const struct setting settings[] = {
	{"socket", "socket", S_STR, F(socket), 0, 0, "PATH", "cordond's unix socket (else $CORDON_URL, $CORDON_SOCKET)"},
	{"listen", "listen", S_STR, F(listen), 0, 0, "ADDR:PORT", "serve Streamable HTTP on POST /mcp (loopback only) instead of stdio"},
	{"owner", "owner", S_STR, F(owner), 0, 0, "NAME", "the value of the sandboxes' " MCP_OWNER_KEY " label (default \"default\")"},
	{"template", "template", S_STR, F(template), 0, 0, "NAME", "the template when the model names none"},
	{"runtime", "runtime", S_STR, F(runtime), 0, 0, "NAME", "the runtime when the model names none"},
	{"ttl", "ttl", S_INT, F(ttl_s), 1, 86400 * 7, "SECONDS", "a new sandbox's lifetime when the model asks none (300)"},
	{"max-ttl", "max_ttl", S_INT, F(max_ttl_s), 1, 86400 * 7, "SECONDS", "the longest lifetime a model may ask (3600)"},
	{"exec-timeout", "exec_timeout", S_INT, F(exec_timeout_s), 1, 86400, "SECONDS", "run_command/run_code's timeout when the model asks none (60)"},
	{"max-exec-timeout", "max_exec_timeout", S_INT, F(max_exec_s), 1, 86400, "SECONDS", "the longest a model may ask (600)"},
	{"memory", "memory_mb", S_INT, F(memory_mb), 0, 1 << 20, "MIB", "a new sandbox's memory (default: cordond's)"},
	{"max-memory", "max_memory_mb", S_INT, F(max_memory_mb), 0, 1 << 20, "MIB", "the most memory a model may ask (default: it may not ask)"},
	{"max-output", "max_output", S_INT, F(max_output), 1024, 16 << 20, "BYTES", "text in one tool result, then it is cut and says so (65536)"},
	{"max-file", "max_file", S_INT, F(max_file), 1, 1LL << 30, "BYTES", "the largest file read_file and the copies move (16 MiB)"},
	{"allow", "allow", S_LIST, F(allow), 0, 0, "HOST:PORT", "an egress rule a model may ask for (repeatable; none: no network ever)"},
	{"files-dir", "files_dir", S_STR, F(files_dir), 0, 0, "DIR", "the host directory upload_file/download_file work in (none: they are off)"},
	{"all-sandboxes", "all_sandboxes", S_BOOL, F(all_sandboxes), 0, 0, NULL, "manage every sandbox of the key, not only this server's"},
};
#undef F

static void defaults(struct mcp_config *c)
{
	*c = (struct mcp_config){.owner = "default", .ttl_s = 300, .max_ttl_s = 3600, .exec_timeout_s = 60,
				 .max_exec_s = 600, .max_output = 65536, .max_file = 16 << 20};
}

void mcp_config_done(struct mcp_config *cfg)
{
	json_decref(cfg->file_doc);
	cfg->file_doc = NULL;
}

static int set_int(const struct setting *st, void *field, long long v)
{
	if (v < st->min || v > st->max) {
		log_error("mcp: %s: %lld is out of range (%lld..%lld)", st->key, v, st->min, st->max);
		return -EINVAL;
	}
	*(long long *)field = v;
	return 0;
}

static int add_allow(struct mcp_config *c, const char *rule)
{
	if (c->n_allow >= MCP_ALLOW_MAX || !*rule || strlen(rule) > 1024) {
		log_error("mcp: allow: at most %d rules of HOST:PORT", MCP_ALLOW_MAX);
		return -EINVAL;
	}
	c->allow[c->n_allow++] = rule;
	return 0;
}

static int int_of_json(const struct setting *st, void *field, json_t *j)
{
	if (!json_is_integer(j)) {
		log_error("mcp: %s: expected an integer", st->key);
		return -EINVAL;
	}
	return set_int(st, field, json_integer_value(j));
}

static int int_of_arg(const struct setting *st, void *field, const char *arg)
{
	char *end;
	errno = 0;
	long long v = strtoll(arg, &end, 10);
	if (errno || end == arg || *end) {
		log_error("mcp: --%s '%s': expected an integer", st->flag, arg);
		return -EINVAL;
	}
	return set_int(st, field, v);
}

static int list_of_json(struct mcp_config *c, json_t *j, const struct setting *st)
{
	size_t i;
	json_t *v;
	if (!json_is_array(j)) {
		log_error("mcp: %s: expected an array of strings", st->key);
		return -EINVAL;
	}
	json_array_foreach(j, i, v)
		if (!json_is_string(v) || add_allow(c, json_string_value(v)) < 0)
			return -EINVAL;
	return 0;
}

/* @arg (a flag's) or @j (the file's) into @st's field. */
static int apply(struct mcp_config *c, const struct setting *st, const char *arg, json_t *j)
{
	void *field = (char *)c + st->field;
	switch (st->type) {
	case S_STR:
		if (j && !json_is_string(j))
			break;
		*(const char **)field = j ? json_string_value(j) : arg;
		return 0;
	case S_BOOL:
		if (j && !json_is_boolean(j))
			break;
		*(bool *)field = j ? json_is_true(j) : true;
		return 0;
	case S_INT:
		return j ? int_of_json(st, field, j) : int_of_arg(st, field, arg);
	case S_LIST:
		return j ? list_of_json(c, j, st) : add_allow(c, arg);
	}
	log_error("mcp: %s: wrong type in the configuration file", st->key);
	return -EINVAL;
}

static int load_file(struct mcp_config *c, const char *path)
{
	json_error_t e;
	const char *k;
	json_t *v;
	c->file_doc = json_load_file(path, JSON_REJECT_DUPLICATES, &e);
	if (!json_is_object(c->file_doc)) {
		log_error("mcp: --config %s: %s (line %d)", path, c->file_doc ? "not a JSON object" : e.text, e.line);
		return -EINVAL;
	}
	json_object_foreach(c->file_doc, k, v) {
		const struct setting *st = NULL;
		for (size_t i = 0; i < ELEMENTSOF(settings); i++)
			if (strcmp(settings[i].key, k) == 0)
				st = &settings[i];
		if (!st) {
			log_error("mcp: --config %s: unknown key '%s'", path, k);
			return -EINVAL;
		}
		if (apply(c, st, NULL, v) < 0)
			return -EINVAL;
	}
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: cordon mcp [OPTIONS]\n\n"
		   "A Model Context Protocol server for cordond: JSON-RPC on stdin/stdout, or\n"
		   "Streamable HTTP with --listen. The configuration, not the model, sets the maxima.\n\n"
		   "  --config FILE            a JSON object of the settings below (keys: max_ttl, allow, ...)\n");
	for (size_t i = 0; i < ELEMENTSOF(settings); i++) {
		char left[64];
		snprintf(left, sizeof(left), "--%s%s%s", settings[i].flag, settings[i].arg ? " " : "",
			 settings[i].arg ?: "");
		fprintf(f, "  %-24s %s\n", left, settings[i].help);
	}
}

int mcp_config_parse(int argc, char **argv, struct mcp_config *cfg)
{
	struct option longopts[ELEMENTSOF(settings) + 3] = {};
	size_t n = 0;
	for (; n < ELEMENTSOF(settings); n++)
		longopts[n] = (struct option){settings[n].flag, settings[n].type == S_BOOL ? no_argument : required_argument, NULL, (int)n};
	longopts[n++] = (struct option){"config", required_argument, NULL, 'c'};
	longopts[n++] = (struct option){"help", no_argument, NULL, 'h'};
	defaults(cfg);
	/* the file first, so that flags win whatever their order */
	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], "--config") == 0 && load_file(cfg, argv[i + 1]) < 0)
			return CLI_EXIT_USAGE;
	optind = 1;
	opterr = 0;
	for (int ch; (ch = getopt_long(argc, argv, "+h", longopts, NULL)) != -1;) {
		if (ch == 'h')
			return usage(stdout), 0;
		if (ch == 'c')
			continue;
		if (ch == '?' || ch == ':') {
			log_error("mcp: unknown option or missing value: '%s' (cordon mcp --help)", argv[optind - 1]);
			return CLI_EXIT_USAGE;
		}
		if (apply(cfg, &settings[ch], optarg, NULL) < 0)
			return CLI_EXIT_USAGE;
	}
	if (optind < argc) {
		log_error("mcp: unexpected argument '%s'", argv[optind]);
		return CLI_EXIT_USAGE;
	}
	/* the defaults never exceed the maxima */
	if (cfg->ttl_s > cfg->max_ttl_s)
		cfg->ttl_s = cfg->max_ttl_s;
	if (cfg->exec_timeout_s > cfg->max_exec_s)
		cfg->exec_timeout_s = cfg->max_exec_s;
	return CLI_GO_ON;
}

/* ---- stdio: one message per line ---- */

static int send_line(json_t *msg)
{
	_cleanup_free_ char *s = json_dumps(msg, JSON_COMPACT);
	if (!s)
		return -ENOMEM;
	if (fputs(s, stdout) < 0 || fputc('\n', stdout) < 0 || fflush(stdout) != 0)
		return -EPIPE;
	return 0;
}

/* The next line of fd 0 into @b (without its newline): 1, 0 at the end of input, or -E2BIG
 * for a line over MCP_LINE_MAX (skipped up to its newline, never held whole). */
static int read_line(struct buf *in, struct buf *line)
{
	bool skipping = false;
	buf_done(line);
	for (;;) {
		char *p = in->len ? memchr(in->p + in->head, '\n', in->len) : NULL;
		size_t take = p ? (size_t)(p - (in->p + in->head)) : in->len;
		if (!skipping && line->len + take > MCP_LINE_MAX) {
			skipping = true;
			buf_done(line);
		}
		if (!skipping && buf_add(line, in->p + in->head, take) < 0)
			return -ENOMEM;
		buf_consume(in, take + (p ? 1 : 0));
		if (p)
			return skipping ? -E2BIG : 1;
		if (buf_reserve(in, 65536) < 0)
			return -ENOMEM;
		ssize_t n = read(STDIN_FILENO, buf_tail(in), 65536);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return line->len && !skipping ? 1 : 0;
		in->len += (size_t)n;
	}
}

int mcp_serve_stdio(struct mcp_server *s)
{
	_cleanup_(buf_done) struct buf in = {}, line = {};
	for (;;) {
		int r = read_line(&in, &line);
		if (r == 0 || r == -ENOMEM)
			return r == 0 ? 0 : 1; /* end of input: the client is gone */
		_cleanup_(json_decrefp) json_t *ans = NULL;
		if (r == -E2BIG)
			ans = mcp_rpc_error(NULL, -32600, "the message is too long");
		else if (strspn(line.p + line.head, " \t\r") == line.len)
			continue;
		else
			ans = mcp_handle_text(s, line.p + line.head, line.len);
		if (ans && send_line(ans) < 0)
			return 0;
	}
}

int cmd_mcp(int argc, char **argv)
{
	struct mcp_server s = {};
	int r = mcp_config_parse(argc, argv, &s.cfg);
	if (r != CLI_GO_ON) {
		mcp_config_done(&s.cfg);
		return r;
	}
	if (client_init(&s.c, s.cfg.socket) < 0) {
		mcp_config_done(&s.cfg);
		return CLI_EXIT_USAGE;
	}
	r = s.cfg.listen ? mcp_serve_http(&s, s.cfg.listen) : mcp_serve_stdio(&s);
	mcp_config_done(&s.cfg);
	return r;
}
