/* cordon ls [--meta K=V]... [--json]: the sandboxes, as a table or JSON. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include <cordon/cordon.h>

#include "basic/cleanup.h"
#include "basic/log.h"
#include "cli/cli.h"
#include "cli/util.h"
#include "cli/client.h"

#define PATH_MAX_API 16384

/* "?metadata.K=V&metadata.K2=V2" for --meta K=V... into @query. */
static int ls_query(char *query, size_t size, const struct cli_list *meta)
{
	for (size_t i = 0; i < meta->n; i++) {
		const char *a = meta->v[i], *eq = strchr(a, '=');
		_cleanup_free_ char *key = strndup(a, (size_t)(eq - a));
		size_t n = strlen(query);
		if (!key || n + 12 >= size)
			return -E2BIG;
		strcat(query, n ? "&metadata." : "?metadata.");
		if (client_urlencode(query, size, key) < 0 || strlen(query) + 2 >= size ||
		    !strcat(query, "=") || client_urlencode(query, size, eq + 1) < 0) {
			log_error("--meta: the filters are too long");
			return -E2BIG;
		}
	}
	return 0;
}

#define LS_COLS 6

struct ls_row {
	char *cell[LS_COLS];
};

static void ls_row_fill(struct ls_row *row, json_t *sb, bool tty)
{
	static const char *const keys[] = {"id", "template", "state"};
	char t[64];

	for (size_t i = 0; i < ELEMENTSOF(keys); i++)
		row->cell[i] = strdup(json_string_value(json_object_get(sb, keys[i])) ?: "-");
	for (int i = 0; i < 2; i++) {
		const char *iso = json_string_value(json_object_get(sb, i ? "expires_at" : "created_at"));
		if (tty)
			cli_relative_time(iso, t, sizeof(t));
		row->cell[3 + i] = strdup(tty ? t : iso ?: "-");
	}
	row->cell[5] = cli_metadata_string(json_object_get(sb, "metadata"));
}

static void ls_print(struct ls_row *rows, size_t n, bool tty)
{
	size_t w[LS_COLS] = {};
	for (size_t r = 0; r < n; r++)
		for (int i = 0; i < LS_COLS; i++)
			if (rows[r].cell[i] && strlen(rows[r].cell[i]) > w[i])
				w[i] = strlen(rows[r].cell[i]);
	for (size_t r = 0; r < n; r++) {
		for (int i = 0; i < LS_COLS; i++) {
			const char *s = rows[r].cell[i] ?: "";
			if (i == LS_COLS - 1)
				printf("%s\n", s);
			else if (tty)
				printf("%-*s   ", (int)w[i], s);
			else
				printf("%s\t", s);
		}
	}
}

static int ls_table(json_t *list, bool tty)
{
	size_t n = json_array_size(list) + 1;
	_cleanup_free_ struct ls_row *rows = calloc(n, sizeof(*rows));
	static const char *const head[LS_COLS] = {"ID", "TEMPLATE", "STATE", "CREATED", "EXPIRES",
						  "METADATA"};
	size_t i;
	json_t *sb;

	if (!rows)
		return 1;
	for (int k = 0; k < LS_COLS; k++)
		rows[0].cell[k] = strdup(head[k]);
	json_array_foreach(list, i, sb)
		ls_row_fill(&rows[i + 1], sb, tty);
	ls_print(rows, n, tty);
	for (i = 0; i < n; i++)
		for (int k = 0; k < LS_COLS; k++)
			free(rows[i].cell[k]);
	return 0;
}

int cmd_ls(int argc, char **argv)
{
	struct cli_values v;
	_cleanup_(client_response_done) struct client_response res = {};
	_cleanup_(cli_args_done) struct cli_args a = {};
	char query[PATH_MAX_API] = "", path[PATH_MAX_API + 16];

	int r = cli_parse_cmd(CLI_LS, "ls [OPTIONS]", NULL, argc, argv, 0, CLI_NO_COMMAND, &v, &a);
	if (r != CLI_GO_ON)
		return r;
	if (ls_query(query, sizeof(query), &v.meta) < 0)
		return CORDON_EXIT_USAGE;
	snprintf(path, sizeof(path), "/v1/sandboxes%s", query);
	r = cli_call(v.socket, "GET", path, NULL, &res);
	if (r)
		return r;
	json_t *list = json_object_get(res.json, "sandboxes");
	if (!json_is_array(list)) {
		log_error("ls: the answer carries no sandbox list");
		return 1;
	}
	if (v.json) {
		cli_print_json(list);
		return 0;
	}
	return ls_table(list, isatty(STDOUT_FILENO));
}
