/* cordon network ID [--net P] [--allow R]... [--add R]... [--remove R]...: shows, replaces or
 * edits a sandbox's network policy. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <cordon/cordon.h>

#include "basic/cleanup.h"
#include "basic/log.h"
#include "cli/cli.h"
#include "cli/client.h"

/* What cordon network was asked; @add and @remove are NULL without --add, --remove. */
struct network_ctx {
	const char *socket;
	bool json;
	json_t *network, *add, *remove;
};

static ssize_t rule_index(json_t *rules, const char *rule)
{
	size_t i;
	json_t *r;
	json_array_foreach(rules, i, r)
		if (json_is_string(r) && strcmp(json_string_value(r), rule) == 0)
			return (ssize_t)i;
	return -1;
}

/* The rules in force (@cur's), less --remove's, plus --add's not there yet. */
static json_t *edited_rules(const struct network_ctx *c, json_t *cur)
{
	_cleanup_(json_decrefp) json_t *rules = json_deep_copy(json_object_get(cur, "allow"));
	size_t i;
	json_t *r;

	if (!json_is_array(rules) && !(rules = json_array()))
		return NULL;
	json_array_foreach(c->remove, i, r) {
		ssize_t k = rule_index(rules, json_string_value(r));
		if (k < 0) {
			log_error("network: --remove '%s': no such rule in force (see 'cordon network ID')",
				  json_string_value(r));
			return NULL;
		}
		json_array_remove(rules, (size_t)k);
	}
	json_array_foreach(c->add, i, r)
		if (rule_index(rules, json_string_value(r)) < 0 && json_array_append(rules, r) < 0)
			return NULL;
	return TAKE_PTR(rules);
}

/* --add and --remove: reads the policy in force (GET), edits it into c->network, which the
 * caller PUTs. Not atomic: a change another client makes between the two is lost. */
static int network_edit(struct network_ctx *c, const char *id)
{
	_cleanup_(client_response_done) struct client_response res = {};
	char path[256];

	if (cli_sandbox_path(path, sizeof(path), id, "") < 0)
		return CORDON_EXIT_USAGE;
	int r = cli_call(c->socket, "GET", path, NULL, &res);
	if (r)
		return r;
	json_t *cur = json_object_get(res.json, "network");
	/* A copy: setting c->network's policy below frees the string --net put there. */
	char given[16];
	snprintf(given, sizeof(given), "%s",
		 json_string_value(json_object_get(c->network, "policy")) ?:
			 json_string_value(json_object_get(cur, "policy")) ?: "deny");
	const char *policy = given;
	_cleanup_(json_decrefp) json_t *rules = edited_rules(c, cur);
	if (!rules)
		return CLI_EXIT_API;
	if (json_array_size(rules) && strcmp(policy, "deny") == 0 &&
	    !json_object_get(c->network, "policy"))
		policy = "allow"; /* --add to a sandbox without a network: as --allow */
	if (json_array_size(rules) && strcmp(policy, "allow") != 0) {
		log_error("network: policy '%s' takes no rules (--net allow restricts the sandbox to them)",
			  strcmp(policy, "deny") ? policy : "none");
		return CLI_EXIT_API;
	}
	/* Only "allow" has rules: for the others the list is empty, as the API wants it. */
	if (json_object_set_new(c->network, "policy", json_string(policy)) < 0 ||
	    json_object_set(c->network, "allow", rules) < 0)
		return CLI_EXIT_API;
	return 0;
}

static void network_print(const struct network_ctx *c, json_t *pol)
{
	if (c->json) {
		cli_print_json(pol);
		return;
	}
	printf("policy: %s\n", json_string_value(json_object_get(pol, "policy")) ?: "?");
	size_t i;
	json_t *rule;
	json_array_foreach(json_object_get(pol, "allow"), i, rule)
		printf("allow:  %s\n", json_string_value(rule));
}

/* cordon network ID [--net P] [--allow R]... [--add R]... [--remove R]...: shows the policy
 * without options; --net and --allow replace it; --add and --remove edit the rules in force. */
int cmd_network(int argc, char **argv)
{
	struct cli_values v;
	_cleanup_(client_response_done) struct client_response res = {};
	_cleanup_(cli_args_done) struct cli_args a = {};
	char path[256];

	int r = cli_parse_cmd(CLI_NETWORK, "network [OPTIONS] ID",
			      "Without options it shows the policy. --net and --allow replace it; --add and\n"
			      "--remove read the rules in force, edit them and write them back (a change\n"
			      "another client makes in between is lost); removing a rule not in force fails.\n",
			      argc, argv, 1, CLI_NO_COMMAND, &v, &a);
	if (r != CLI_GO_ON)
		return r;
	_cleanup_(json_decrefp) json_t *net = cli_network_json(&v);
	_cleanup_(json_decrefp) json_t *add = v.add.n ? cli_list_json(&v.add, "add") : NULL;
	_cleanup_(json_decrefp) json_t *remove = v.remove.n ? cli_list_json(&v.remove, "remove") : NULL;
	struct network_ctx c = {v.socket, v.json, net, add, remove};
	if ((v.add.n && !add) || (v.remove.n && !remove))
		return CORDON_EXIT_USAGE;
	if (!net)
		return CORDON_EXIT_USAGE;
	if ((add || remove) && json_object_get(net, "allow")) {
		log_error("network: --allow replaces the rules, --add and --remove edit them: not both");
		return CORDON_EXIT_USAGE;
	}
	if ((add || remove) && (r = network_edit(&c, a.pos[0])) != 0)
		return r;
	bool change = json_object_size(net) > 0;
	if (cli_sandbox_path(path, sizeof(path), a.pos[0], change ? "/network" : "") < 0)
		return CORDON_EXIT_USAGE;
	r = cli_call(c.socket, change ? "PUT" : "GET", path, change ? net : NULL, &res);
	if (r)
		return r;
	network_print(&c, change ? res.json : json_object_get(res.json, "network"));
	return 0;
}
