/* The CLI's option table and parser (opts.h). */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "basic/cleanup.h"
#include "basic/log.h"
#include "basic/parse.h"
#include "cli/opts.h"

#define F(x) offsetof(struct cli_values, x)

/* ---- value parsers: @field points into struct cli_values ---- */

static int cli_string(const struct cli_option *o, const char *arg, void *field)
{
	*(const char **)field = arg;
	return 0;
}

static int cli_flag(const struct cli_option *o, const char *arg, void *field)
{
	*(bool *)field = true;
	return 0;
}

static int cli_path(const struct cli_option *o, const char *arg, void *field)
{
	if (arg[0] != '/') {
		log_error("--%s '%s': expected an absolute path", o->name, arg);
		return -EINVAL;
	}
	return cli_string(o, arg, field);
}

/* One of the words of o->arg ("none|allow|public"). */
static int cli_choice(const struct cli_option *o, const char *arg, void *field)
{
	size_t n = strlen(arg);
	for (const char *w = o->arg; w; w = strchr(w, '|') ? strchr(w, '|') + 1 : NULL)
		if (strncmp(w, arg, n) == 0 && (w[n] == '|' || w[n] == 0))
			return cli_string(o, arg, field);
	log_error("--%s '%s': expected one of %s", o->name, arg, o->arg);
	return -EINVAL;
}

int cli_size(const struct cli_option *o, const char *arg, void *field)
{
	if (cordon_parse_size(arg, field) < 0) {
		log_error("--%s '%s': expected a size such as 512 (MiB), 256M or 2G", o->name, arg);
		return -EINVAL;
	}
	return 0;
}

int cli_duration(const struct cli_option *o, const char *arg, void *field)
{
	if (cordon_parse_duration_ms(arg, field) < 0) {
		log_error("--%s '%s': expected a duration such as 30s, 500ms or 5m", o->name, arg);
		return -EINVAL;
	}
	return 0;
}

int cli_cpus(const struct cli_option *o, const char *arg, void *field)
{
	char *end;
	errno = 0;
	double v = strtod(arg, &end);
	if (errno || end == arg || *end || !isfinite(v) || !(v >= 0.01 && v <= 1024)) {
		log_error("--%s '%s': expected a number of CPUs between 0.01 and 1024, such as 0.5 or 2",
			  o->name, arg);
		return -EINVAL;
	}
	*(uint64_t *)field = (uint64_t)(v * 1000 + 0.5);
	return 0;
}

static int parse_uint(const char *arg, uint64_t min, uint64_t max, uint64_t *ret)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(arg, &end, 10);
	if (errno || end == arg || *end || arg[0] == '-' || v < min || v > max)
		return -EINVAL;
	*ret = v;
	return 0;
}

/* A whole number from o->min to o->max. */
static int cli_uint(const struct cli_option *o, const char *arg, void *field)
{
	if (parse_uint(arg, o->min, o->max, field) < 0) {
		log_error("--%s '%s': expected a whole number from %llu to %llu", o->name, arg,
			  (unsigned long long)o->min, (unsigned long long)o->max);
		return -EINVAL;
	}
	return 0;
}

static int list_add(const struct cli_option *o, const char *arg, void *field)
{
	struct cli_list *l = field;
	if (l->n >= CLI_LIST_MAX) {
		log_error("--%s: at most %d", o->name, CLI_LIST_MAX);
		return -E2BIG;
	}
	l->v[l->n++] = arg;
	return 0;
}

static int cli_list(const struct cli_option *o, const char *arg, void *field)
{
	return list_add(o, arg, field);
}

static int cli_kv(const struct cli_option *o, const char *arg, void *field)
{
	const char *eq = strchr(arg, '=');
	if (!eq || eq == arg) {
		log_error("--%s '%s': expected KEY=VALUE", o->name, arg);
		return -EINVAL;
	}
	return list_add(o, arg, field);
}

static int cli_env(const struct cli_option *o, const char *arg, void *field)
{
	const char *eq = strchr(arg, '=');
	if (!eq || !env_name_valid(arg, (size_t)(eq - arg))) {
		log_error("--%s '%s': expected NAME=VALUE with NAME made of letters, digits and _",
			  o->name, arg);
		return -EINVAL;
	}
	return list_add(o, arg, field);
}

static int cli_bind(const struct cli_option *o, const char *arg, void *field)
{
	const char *colon = strchr(arg, ':');
	if (!colon || colon == arg || !colon[1]) {
		log_error("--%s '%s': expected HOST:SANDBOX", o->name, arg);
		return -EINVAL;
	}
	if (arg[0] != '/') {
		log_error("--%s '%s': the host path must be absolute", o->name, arg);
		return -EINVAL;
	}
	return list_add(o, arg, field);
}

/* ---- the table ---- */

#define SANDBOX (CLI_RUN | CLI_CREATE)
#define PROCESS (CLI_RUN | CLI_EXEC)
#define LIMITS	(CLI_RUN | CLI_CREATE | CLI_TEMPLATE_BUILD)
#define JSON_CMDS                                                                                  \
	(CLI_CREATE | CLI_LS | CLI_INFO | CLI_TIMEOUT | CLI_NETWORK | CLI_LOGS |                    \
	 CLI_TEMPLATE_BUILD | CLI_TEMPLATE_IMPORT | CLI_TEMPLATE_LS | CLI_SNAPSHOT_CMDS | CLI_VOLUME | \
	 CLI_RUNTIMES | CLI_CODE | CLI_APPROVALS | CLI_DECIDE)

const struct cli_option cli_options[] = {
	{"template", 0, "NAME", cli_string, F(template), SANDBOX, "template to start from [host]"},
	{"snapshot", 0, "ID", cli_string, F(snapshot), CLI_CREATE,
	 "start from a snapshot (its template and limits unless given)"},
	{"runtime", 0, "NAME", cli_string, F(runtime), SANDBOX,
	 "jail, gvisor, microvm, or auto: the strongest runtime that works there [run: jail; create: the server's default]"},
	{"rootfs", 0, "DIR", cli_path, F(rootfs), CLI_RUN,
	 "a directory holding a root filesystem, read-only"},
	{"memory", 0, "SIZE", cli_size, F(memory_bytes), LIMITS, "memory limit: MiB, or 256M, 2G [512]"},
	{"cpus", 0, "N", cli_cpus, F(cpus_milli), LIMITS,
	 "CPU limit, fractions allowed, at most the host's [1]"},
	{"pids", 0, "N", cli_uint, F(pids), SANDBOX, "process limit [256]", 2, 1 << 22},
	{"disk", 0, "SIZE", cli_size, F(disk_bytes), LIMITS,
	 "the sandbox's disk (/, /tmp, /home/user): MiB, or 2G [4G]"},
	{"timeout", 0, "DURATION", cli_duration, F(timeout_ms), SANDBOX,
	 "wall-clock limit of the sandbox [300s]"},
	{"timeout", 0, "DURATION", cli_duration, F(timeout_ms), CLI_EXEC,
	 "kill the process after this long; 0: as long as the sandbox [60s]"},
	{"timeout", 0, "DURATION", cli_duration, F(timeout_ms), CLI_FORK,
	 "the children's TTL, whole seconds [the parent's]"},
	{"timeout", 0, "DURATION", cli_duration, F(timeout_ms), CLI_CODE,
	 "interrupt the cell after this long, whole seconds [300s]"},
	{"context", 0, "ID", cli_string, F(code_context), CLI_CODE,
	 "the code context to run in [the language's default]"},
	{"language", 0, "NAME", cli_string, F(code_language), CLI_CODE,
	 "python or r, in the language's default context [the context's, else python]"},
	{"save-images", 0, "DIR", cli_string, F(save_images), CLI_CODE,
	 "write images and PDFs into DIR as result-N.png, .jpg, .pdf (else noted by type and size)"},
	{"count", 'n', "N", cli_uint, F(count), CLI_FORK, "children to start, 1 to 100 [1]", 1, 100},
	{"timeout", 0, "DURATION", cli_duration, F(timeout_ms), CLI_TEMPLATE_BUILD,
	 "wall-clock limit of each RUN step"},
	{"env", 'e', "K=V", cli_env, F(env), SANDBOX | CLI_EXEC, "set a variable (repeatable)"},
	{"workdir", 0, "DIR", cli_path, F(workdir), PROCESS, "working directory [the user's home]"},
	{"cwd", 0, "DIR", cli_path, F(workdir), PROCESS, "the same as --workdir"},
	{"user", 0, "user|root", cli_choice, F(user), PROCESS,
	 "who runs inside: uid 1000 or uid 0 [user]"},
	{"tag", 0, "TAG", cli_string, F(tag), CLI_EXEC, "a label to find the process by"},
	{"tty", 't', NULL, cli_flag, F(tty), CLI_EXEC | CLI_RUN,
	 "on a terminal: ours in raw mode, its size and TERM passed on, SIGWINCH as resize (exec: no --timeout unless given)"},
	{"listen", 0, "ADDR:PORT", cli_string, F(listen), CLI_PORT_FORWARD,
	 "where to accept connections [127.0.0.1:PORT]"},
	{"ro-bind", 0, "HOST:SANDBOX", cli_bind, F(ro_bind), CLI_RUN,
	 "share a file or directory read-only (repeatable)"},
	{"volume", 0, "NAME:PATH[:ro]", cli_list, F(volume), SANDBOX,
	 "mount a persistent volume (repeatable; cordon run: root)"},
	{"size", 0, "SIZE", cli_size, F(size_bytes), CLI_VOLUME,
	 "create: the volume's size, its quota: MiB, or 10G [1G]"},
	{"recursive", 'r', NULL, cli_flag, F(recursive), CLI_CP,
	 "a directory's contents, into or out of the sandbox"},
	{"meta", 0, "K=V", cli_kv, F(meta), CLI_CREATE, "a metadata label to find it by (repeatable)"},
	{"meta", 0, "K=V", cli_kv, F(meta), CLI_LS, "only sandboxes with this metadata (repeatable)"},
	{"net", 0, "none|allow|public", cli_choice, F(net), SANDBOX | CLI_NETWORK,
	 "network: loopback only, --allow rules, or the internet [none]"},
	{"net", 0, NULL, cli_flag, F(net_only), CLI_LOGS,
	 "only network decisions (net.decision records)"},
	{"allow", 0, "RULE", cli_list, F(allow), SANDBOX | CLI_NETWORK,
	 "reach a name, *.wildcard, IP or CIDR [:port[-port]] (repeatable; replaces the rules)"},
	{"add", 0, "RULE", cli_list, F(add), CLI_NETWORK, "add a rule to those in force (repeatable)"},
	{"remove", 0, "RULE", cli_list, F(remove), CLI_NETWORK,
	 "remove a rule from those in force (repeatable)"},
	{"secret", 0, "NAME=VALUE@HOST[,HOST]", cli_list, F(secret), SANDBOX,
	 "NAME holds a placeholder; the proxy puts VALUE in requests to HOST (repeatable)"},
	{"secret-in", 0, "NAME=header,query,body", cli_list, F(secret_in), CLI_RUN,
	 "where the proxy may put NAME's value [header]"},
	{"json-result", 0, "FD", cli_uint, F(json_result_fd), CLI_RUN,
	 "write a JSON record of the run to FD", 0, 1 << 20},
	{"follow", 0, NULL, cli_flag, F(follow), CLI_LOGS, "keep printing new records as they happen"},
	{"follow", 0, NULL, cli_flag, F(follow), CLI_APPROVALS,
	 "then keep printing approvals as they come and go"},
	{"reason", 0, "TEXT", cli_string, F(reason), CLI_DECIDE,
	 "why, for the audit log (and, denied, the sandbox's 403)"},
	{"file", 'f', "FILE", cli_string, F(file), CLI_TEMPLATE_BUILD, "the recipe"},
	{"context", 0, "DIR", cli_string, F(context), CLI_TEMPLATE_BUILD, "what COPY and ADD read [.]"},
	{"context-tar", 0, "FILE.tar", cli_string, F(context_tar), CLI_TEMPLATE_BUILD,
	 "the context as a tar archive"},
	{"source", 0, "TEXT", cli_string, F(source), CLI_TEMPLATE_BUILD,
	 "what template.json names as the recipe [its path]"},
	{"build-arg", 0, "K=V", cli_kv, F(build_arg), CLI_TEMPLATE_BUILD, "an ARG's value (repeatable)"},
	{"no-cache", 0, NULL, cli_flag, F(no_cache), CLI_TEMPLATE_BUILD, "run every step again"},
	{"confine", 0, NULL, cli_flag, F(confine), CLI_TEMPLATE_BUILD,
	 "host paths (FROM oci-archive:) only beneath the context"},
	{"replace", 0, NULL, cli_flag, F(replace), CLI_TEMPLATE_IMPORT, "replace a template of that name"},
	{"local", 0, NULL, cli_flag, F(local), CLI_RUNTIMES,
	 "probe this host as cordon run does, not cordond [when no cordond answers]"},
	{"json", 0, NULL, cli_flag, F(json), JSON_CMDS, "print JSON"},
	{"socket", 0, "PATH", cli_string, F(socket), CLI_CLIENT_CMDS,
	 "cordond's socket [$CORDON_SOCKET or /run/cordon/cordon.sock]"},
};
const size_t cli_n_options = ELEMENTSOF(cli_options);

static const char *const cmd_names[] = {
	"run", "create", "exec", "ls", "info", "kill", "timeout", "network", "logs", "cp",
	"template build", "template import", "template ls", "template inspect", "template rm",
	"template gc", "pause", "resume", "snapshot", "snapshot ls", "snapshot rm", "fork",
	"volume", "runtimes", "code", "approvals", "approve|deny", "port-forward",
};

const char *cli_cmd_name(enum cli_cmd cmd)
{
	for (size_t i = 0; i < ELEMENTSOF(cmd_names); i++)
		if (cmd == 1u << i)
			return cmd_names[i];
	return "?";
}

void cli_values_init(struct cli_values *v)
{
	*v = (struct cli_values){
		.memory_bytes = CLI_UNSET,
		.disk_bytes = CLI_UNSET,
		.timeout_ms = CLI_UNSET,
		.cpus_milli = CLI_UNSET,
		.pids = CLI_UNSET,
		.json_result_fd = CLI_UNSET,
		.count = CLI_UNSET,
		.size_bytes = CLI_UNSET,
	};
}

/* ---- the parser ---- */

static const struct cli_option *find_long(enum cli_cmd cmd, const char *name, size_t len)
{
	for (size_t k = 0; k < cli_n_options; k++)
		if ((cli_options[k].cmds & cmd) && strlen(cli_options[k].name) == len &&
		    strncmp(cli_options[k].name, name, len) == 0)
			return &cli_options[k];
	return NULL;
}

static const struct cli_option *find_short(enum cli_cmd cmd, char c)
{
	for (size_t k = 0; k < cli_n_options; k++)
		if ((cli_options[k].cmds & cmd) && cli_options[k].short_name == c)
			return &cli_options[k];
	return NULL;
}

static int unknown(enum cli_cmd cmd, const char *a)
{
	const char *name = cli_cmd_name(cmd);
	log_error("%s: unknown option '%s' (see 'cordon %s --help')", name, a, name);
	return -EINVAL;
}

/* argv[*i] is an option ("--name", "--name=V", "-x", "-xV"); its value may be the next word. */
static int parse_one(enum cli_cmd cmd, int argc, char **argv, int *i, struct cli_values *v)
{
	const char *a = argv[*i], *val = NULL;
	const struct cli_option *o;
	bool inline_val;

	if (a[1] == '-') {
		const char *eq = strchr(a + 2, '=');
		o = find_long(cmd, a + 2, eq ? (size_t)(eq - a - 2) : strlen(a + 2));
		inline_val = eq;
		val = eq ? eq + 1 : NULL;
	} else {
		o = find_short(cmd, a[1]);
		inline_val = a[2];
		val = a[2] ? a + 2 : NULL;
	}
	if (!o)
		return unknown(cmd, a);
	if (!o->arg) {
		if (inline_val) {
			log_error("%s: --%s takes no value", cli_cmd_name(cmd), o->name);
			return -EINVAL;
		}
		return o->parse(o, NULL, (char *)v + o->field);
	}
	if (!inline_val)
		val = *i + 1 < argc ? argv[++*i] : NULL;
	if (!val) {
		log_error("%s: --%s needs a value (%s)", cli_cmd_name(cmd), o->name, o->arg);
		return -EINVAL;
	}
	return o->parse(o, val, (char *)v + o->field);
}

static void take_rest(struct cli_args *ret, int argc, char **argv, int from)
{
	ret->rest = argv + from;
	ret->n_rest = argc - from;
}

int cli_parse(enum cli_cmd cmd, int argc, char **argv, int cmd_at, struct cli_values *v,
	      struct cli_args *ret)
{
	*ret = (struct cli_args){.pos = calloc((size_t)argc + 1, sizeof(char *))};
	if (!ret->pos)
		return -ENOMEM;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		bool option = a[0] == '-' && a[1];
		if (strcmp(a, "--") == 0) {
			take_rest(ret, argc, argv, i + 1);
			return 0;
		}
		if (!option && cmd_at >= 0 && ret->n_pos == cmd_at) {
			take_rest(ret, argc, argv, i);
			return 0;
		}
		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
			return 1;
		if (!option)
			ret->pos[ret->n_pos++] = argv[i];
		else if (parse_one(cmd, argc, argv, &i, v) < 0)
			return -EINVAL;
	}
	return 0;
}

void cli_print_usage(FILE *f, enum cli_cmd cmd, const char *synopsis)
{
	bool any = false;
	fprintf(f, "usage: cordon %s\n", synopsis);
	for (size_t i = 0; i < cli_n_options; i++) {
		const struct cli_option *o = &cli_options[i];
		char left[64];
		if (!(o->cmds & cmd))
			continue;
		if (!any)
			fprintf(f, "\noptions:\n");
		any = true;
		if (o->short_name)
			snprintf(left, sizeof(left), "-%c, --%s%s%s", o->short_name, o->name,
				 o->arg ? " " : "", o->arg ?: "");
		else
			snprintf(left, sizeof(left), "    --%s%s%s", o->name, o->arg ? " " : "",
				 o->arg ?: "");
		fprintf(f, "  %-30s %s\n", left, o->help);
	}
}

int cli_parse_cmd(enum cli_cmd cmd, const char *synopsis, const char *more, int argc,
		  char **argv, int n_pos, int cmd_at, struct cli_values *v, struct cli_args *a)
{
	cli_values_init(v);
	int r = cli_parse(cmd, argc, argv, cmd_at, v, a);
	if (r == 1) {
		cli_print_usage(stdout, cmd, synopsis);
		if (more)
			printf("\n%s", more);
		return 0;
	}
	if (r < 0)
		return CLI_EXIT_USAGE;
	if ((n_pos != CLI_ANY && a->n_pos != n_pos) || (cmd_at >= 0) != (a->n_rest > 0)) {
		log_error("%s: usage: cordon %s", cli_cmd_name(cmd), synopsis);
		return CLI_EXIT_USAGE;
	}
	return CLI_GO_ON;
}

int cli_seconds(const char *name, uint64_t ms, long long min, long long *ret)
{
	if (ms == CLI_UNSET)
		return -ENOENT;
	if (ms % 1000 || ms / 1000 < (uint64_t)min || ms / 1000 > 1000000000) {
		log_error("--%s: expected whole seconds (at least %lld), such as 300, 90s or 5m", name,
			  min);
		return -EINVAL;
	}
	*ret = (long long)(ms / 1000);
	return 0;
}
