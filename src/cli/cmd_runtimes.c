/* cordon runtimes [--local] [--json]: the runtimes, whether each can run and why not, its
 * capabilities and how it runs (microvm: kvm or tcg). cordond's GET /v1/runtimes when a
 * daemon answers; this host's own probe (the one `cordon run` makes) with --local or when no
 * daemon can be reached. Both have the shape of runtime/listing.h, plus "source". */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include <cordon/cordon.h>

#include "basic/cleanup.h"
#include "basic/log.h"
#include "cli/cli.h"
#include "cli/client.h"
#include "runtime/listing.h"

/* What cordond says: 0 with *ret set, 1 when no daemon could be reached (@where then names
 * where it was looked for), else the exit status after printing why. */
static int ask_daemon(const char *socket, json_t **ret, char *where, size_t size)
{
	_cleanup_(client_response_done) struct client_response res = {};
	struct client c;
	if (client_init(&c, socket) < 0)
		return CORDON_EXIT_USAGE;
	int r = client_json(&c, "GET", "/v1/runtimes", NULL, &res);
	if (r < 0 && c.stage == CLIENT_CONNECT) {
		snprintf(where, size, "%s", c.where);
		return 1;
	}
	if (r < 0)
		return client_fail(&c, r);
	if (res.status >= 300)
		return client_api_error(&res);
	if (!json_is_array(json_object_get(res.json, "runtimes"))) {
		log_error("cordond at %s: malformed response: no runtimes", c.where);
		return CLI_EXIT_API;
	}
	*ret = json_incref(res.json);
	return 0;
}

static void print_caps(json_t *caps)
{
	size_t i;
	json_t *c;
	json_array_foreach(caps, i, c)
		printf("%s%s", i ? "," : "", json_string_value(c) ?: "?");
}

/* NAME AVAILABLE MODE CAPABILITIES, then why not (or why this mode) on the same line. */
static void print_table(json_t *list, const char *from)
{
	size_t i;
	json_t *rt;
	printf("%-8s %-9s %-5s %s\n", "NAME", "AVAILABLE", "MODE", "CAPABILITIES");
	json_array_foreach(json_object_get(list, "runtimes"), i, rt) {
		json_t *mode = json_object_get(rt, "mode");
		const char *why = json_string_value(json_object_get(rt, "reason"))
				      ?: json_string_value(json_object_get(mode, "reason"));
		printf("%-8s %-9s %-5s ", json_string_value(json_object_get(rt, "name")) ?: "?",
		       json_is_true(json_object_get(rt, "available")) ? "yes" : "no",
		       json_string_value(json_object_get(mode, "name")) ?: "-");
		print_caps(json_object_get(rt, "capabilities"));
		printf(why ? "  (%s)\n" : "\n", why);
	}
	printf("\ndefault: %s; auto: %s; %s\n",
	       json_string_value(json_object_get(list, "default")) ?: "-",
	       json_string_value(json_object_get(list, "auto")) ?: "none",
	       from);
}

int cmd_runtimes(int argc, char **argv)
{
	struct cli_values v;
	_cleanup_(cli_args_done) struct cli_args a = {};
	_cleanup_(json_decrefp) json_t *list = NULL;
	char where[320] = "", from[400];

	int r = cli_parse_cmd(CLI_RUNTIMES, "runtimes [OPTIONS]",
			      "Without a reachable cordond (or with --local), this host is probed as\n"
			      "`cordon run` probes it; its default is then `cordon run`'s, jail.\n",
			      argc, argv, 0, CLI_NO_COMMAND, &v, &a);
	if (r != CLI_GO_ON)
		return r;
	r = v.local ? 1 : ask_daemon(v.socket, &list, where, sizeof(where));
	if (r > 1 || r < 0)
		return r;
	if (r == 0)
		snprintf(from, sizeof(from), "from cordond");
	else {
		snprintf(from, sizeof(from), "probed on this host%s%s%s", v.local ? "" : " (no cordond at ",
			 v.local ? "" : where, v.local ? "" : ")");
		list = runtime_list_json("jail");
	}
	if (!list || json_object_set_new(list, "source", json_string(r == 0 ? "cordond" : "local")) < 0) {
		log_error("out of memory");
		return 1;
	}
	if (v.json)
		cli_print_json(list);
	else
		print_table(list, from);
	return 0;
}
