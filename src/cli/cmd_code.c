/* cordon code [OPTIONS] ID [-|FILE]: one cell in the sandbox's code interpreter (a Jupyter
 * kernel of the code-interpreter template), read from stdin or FILE, its output printed as it
 * comes: stdout and stderr to ours, each result as text, an image or PDF noted by type and
 * size (or written into --save-images DIR), an exception's traceback to stderr. --json
 * prints the raw events (NDJSON) instead. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include <cordon/cordon.h>

#include "basic/base64.h"
#include "basic/cleanup.h"
#include "basic/fileio.h"
#include "basic/log.h"
#include "cli/cli.h"
#include "cli/client.h"

#define MAX_CELL (1000 * 1000) /* the API's limit of a cell's code */

struct code_state {
	const char *save_dir;
	bool json, ended, raised;
	int truncated, timed_out; /* jansson's "b" fills an int */
	unsigned n_saved;
};

/* Binary MIME types: base64 in the event, saved or noted, never printed. */
static const struct {
	const char *mime, *ext;
} binaries[] = {
	{"image/png", "png"},
	{"image/jpeg", "jpg"},
	{"application/pdf", "pdf"},
};

static int save_image(struct code_state *st, const char *b64, const char *ext, size_t *ret_len)
{
	size_t len = strlen(b64);
	_cleanup_free_ char *buf = malloc(len / 4 * 3 + 3);
	char path[4200];
	ssize_t n = buf ? base64_decode_to(b64, len, buf) : -ENOMEM;
	if (n < 0)
		return (int)n;
	*ret_len = (size_t)n;
	if (!st->save_dir)
		return 0;
	snprintf(path, sizeof(path), "%s/result-%u.%s", st->save_dir, ++st->n_saved, ext);
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0 || write_all(fd, buf, (size_t)n) < 0) {
		log_error("code: cannot write %s: %m", path);
		return -errno;
	}
	printf("[%s written: %zd bytes]\n", path, n);
	return 1;
}

static int on_result(struct code_state *st, json_t *data)
{
	bool binary = false;
	for (size_t i = 0; i < ELEMENTSOF(binaries); i++) {
		const char *b64 = json_string_value(json_object_get(data, binaries[i].mime));
		size_t n = 0;
		if (!b64)
			continue;
		binary = true;
		int r = save_image(st, b64, binaries[i].ext, &n);
		if (r < 0)
			return r;
		if (r == 0)
			printf("[%s: %zu bytes]\n", binaries[i].mime, n);
	}
	const char *text = json_string_value(json_object_get(data, "text/plain"));
	if (text && !binary) /* a figure's text is "<Figure size ...>": the image said it */
		printf("%s\n", text);
	return 0;
}

static int on_error(struct code_state *st, json_t *ev)
{
	const char *name = NULL, *value = NULL, *tb = NULL;
	if (json_unpack(ev, "{s:s, s:s, s:s}", "name", &name, "value", &value, "traceback", &tb) < 0)
		return -EBADMSG;
	st->raised = true;
	fflush(stdout);
	if (*tb)
		fprintf(stderr, "%s\n", tb);
	else
		fprintf(stderr, "%s: %s\n", name, value);
	return 0;
}

static int on_stream(json_t *ev, FILE *f)
{
	const char *text = json_string_value(json_object_get(ev, "text"));
	if (!text)
		return -EBADMSG;
	fflush(f == stdout ? stderr : stdout); /* the order they came in */
	fputs(text, f);
	return 0;
}

static int on_event(char *line, size_t len, void *userdata)
{
	struct code_state *st = userdata;
	_cleanup_(json_decrefp) json_t *ev = json_loadb(line, len, 0, NULL);
	const char *type = ev ? json_string_value(json_object_get(ev, "type")) : NULL;
	if (!type)
		return -EBADMSG;
	if (st->json) {
		printf("%.*s\n", (int)len, line);
		fflush(stdout);
	}
	if (strcmp(type, "end") == 0) {
		st->ended = true;
		return json_unpack(ev, "{s:b, s:b}", "truncated", &st->truncated, "timed_out",
				   &st->timed_out) < 0 ? -EBADMSG : 0;
	}
	if (st->json)
		return 0;
	if (strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0)
		return on_stream(ev, type[3] == 'o' ? stdout : stderr);
	if (strcmp(type, "result") == 0)
		return on_result(st, json_object_get(ev, "data"));
	if (strcmp(type, "error") == 0)
		return on_error(st, ev);
	return 0; /* a newer daemon's */
}

/* The cell: stdin ("-" or nothing) or a file, at most MAX_CELL bytes of UTF-8. */
static char *read_cell(const char *from)
{
	_cleanup_close_ int fd = !from || strcmp(from, "-") == 0 ? dup(STDIN_FILENO)
								: open(from, O_RDONLY | O_CLOEXEC);
	_cleanup_free_ char *buf = malloc(MAX_CELL + 2);
	size_t len = 0;
	ssize_t n = 0;
	if (fd < 0 || !buf) {
		log_error("code: cannot read %s: %m", from ? from : "stdin");
		return NULL;
	}
	while (len <= MAX_CELL && ((n = read(fd, buf + len, MAX_CELL + 1 - len)) > 0 ||
				   (n < 0 && errno == EINTR)))
		len += n > 0 ? (size_t)n : 0;
	if (n < 0 || len > MAX_CELL) {
		log_error(n < 0 ? "code: cannot read the cell: %m" : "code: the cell is over %d bytes",
			  MAX_CELL);
		return NULL;
	}
	buf[len] = 0;
	return TAKE_PTR(buf);
}

static json_t *code_request(const struct cli_values *v, const char *code)
{
	_cleanup_(json_decrefp) json_t *req = json_object();
	long long secs;
	int r = cli_seconds("timeout", v->timeout_ms, 1, &secs);
	if (!req || (r < 0 && r != -ENOENT) || cli_set_string(req, "code", code) < 0 ||
	    cli_set_string(req, "context", v->code_context) < 0 ||
	    cli_set_string(req, "language", v->code_language) < 0 ||
	    (r == 0 && json_object_set_new(req, "timeout_s", json_integer(secs)) < 0)) {
		log_error("code: the cell is not valid UTF-8, or a bad option");
		return NULL;
	}
	return TAKE_PTR(req);
}

static int code_stream(const char *socket, const char *path, json_t *req, struct code_state *st)
{
	struct client c;
	_cleanup_(client_conn_freep) struct client_conn *conn = NULL;
	_cleanup_(client_response_done) struct client_response res = {};
	_cleanup_free_ char *body = json_dumps(req, JSON_COMPACT);
	struct client_body b = {"application/json", body, body ? strlen(body) : 0, -1};
	struct client_lines lines = {.cb = on_event, .userdata = st};
	if (!body || client_init(&c, socket) < 0)
		return CORDON_EXIT_USAGE;
	int r = client_open(&c, "POST", path, &b, &res, &conn);
	if (r < 0)
		return client_fail(&c, r);
	if (res.status != 200) {
		r = client_read_body(&c, conn, &res);
		return r < 0 ? client_fail(&c, r) : client_api_error(&res);
	}
	r = client_drain(&c, conn, client_lines_sink, &lines, false);
	if (r >= 0)
		r = client_lines_finish(&lines);
	client_lines_done(&lines);
	fflush(stdout);
	if (r < 0 && !st->ended && r != -EBADMSG)
		return client_fail(&c, r);
	if (r == -EBADMSG)
		log_error("code: malformed event from cordond");
	return r == -EBADMSG ? CLI_EXIT_API : 0;
}

static int exit_status(const struct code_state *st)
{
	if (!st->ended) {
		log_error("code: the event stream ended before the cell did");
		return CLI_EXIT_API;
	}
	if (st->truncated)
		log_warning("code: the cell's output passed the server's bound and was cut");
	if (st->timed_out) {
		log_error("code: the cell timed out and was interrupted");
		return CORDON_EXIT_TIMEOUT;
	}
	return st->raised ? 1 : 0;
}

int cmd_code(int argc, char **argv)
{
	struct cli_values v;
	_cleanup_(cli_args_done) struct cli_args a = {};
	char path[256];
	char more[400];
	snprintf(more, sizeof(more),
		 "The cell is read from FILE, or from stdin with - or no FILE. The sandbox's template\n"
		 "must have the interpreter (code-interpreter). DURATION: whole seconds [300].\n\n"
		 "exit status: 0; 1 the cell raised an exception, or an API error; %d timed out;\n"
		 "2 usage, 3 cordond unreachable.\n", CORDON_EXIT_TIMEOUT);
	int r = cli_parse_cmd(CLI_CODE, "code [OPTIONS] ID [-|FILE]", more, argc, argv, CLI_ANY,
			      CLI_NO_COMMAND, &v, &a);
	if (r != CLI_GO_ON)
		return r;
	if (a.n_pos < 1 || a.n_pos > 2) {
		log_error("code: expected ID and at most one FILE (or -)");
		return CORDON_EXIT_USAGE;
	}
	if (cli_sandbox_path(path, sizeof(path), a.pos[0], "/code") < 0)
		return CORDON_EXIT_USAGE;
	_cleanup_free_ char *code = read_cell(a.n_pos == 2 ? a.pos[1] : NULL);
	_cleanup_(json_decrefp) json_t *req = code ? code_request(&v, code) : NULL;
	if (!req)
		return CORDON_EXIT_USAGE;
	struct code_state st = {.save_dir = v.save_images, .json = v.json};
	r = code_stream(v.socket, path, req, &st);
	return r ? r : exit_status(&st);
}
