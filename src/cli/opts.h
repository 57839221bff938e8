/* The CLI's one option parser and vocabulary: every option of every subcommand is one row of
 * cli_options[] (opts.c): its name, short letter, argument, value parser, the field of struct
 * cli_values it fills, and the subcommands that accept it. A value means the same wherever it
 * is accepted: SIZE is a bare number of MiB or a binary suffix (512, 256M, 2G, 4096b),
 * DURATION is 30s, 500ms, 5m or a bare number of seconds, N CPUs may be a fraction.
 *
 *     struct cli_values v;
 *     _cleanup_(cli_args_done) struct cli_args a = {};
 *     cli_values_init(&v);
 *     r = cli_parse(CLI_EXEC, argc, argv, 1, &v, &a);  // 1: the command follows ID
 *     if (r == 1) ... --help: cli_print_usage(stdout, CLI_EXEC, "exec [OPTIONS] ID -- CMD")
 *     if (r < 0) return CORDON_EXIT_USAGE;              // the parser said why, in one line
 *     ... v.timeout_ms, v.env.v[0..n), a.pos[0], a.rest ...
 *
 * Options and positional words mix: `exec ID --timeout 5 -- CMD` is exec's --timeout. `--`
 * ends the options; with @cmd_at >= 0 so does the first plain word after @cmd_at positional
 * ones (run's CMD at 0, exec's at 1). The subcommand then checks what only it knows (run: the
 * jail's minimum and the host's maxima; create: whole MiB and seconds). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* The subcommands, as bits of cli_option.cmds. */
enum cli_cmd {
	CLI_RUN = 1u << 0,
	CLI_CREATE = 1u << 1,
	CLI_EXEC = 1u << 2,
	CLI_LS = 1u << 3,
	CLI_INFO = 1u << 4,
	CLI_KILL = 1u << 5,
	CLI_TIMEOUT = 1u << 6,
	CLI_NETWORK = 1u << 7,
	CLI_LOGS = 1u << 8,
	CLI_CP = 1u << 9,
	CLI_TEMPLATE_BUILD = 1u << 10,
	CLI_TEMPLATE_IMPORT = 1u << 11,
	CLI_TEMPLATE_LS = 1u << 12,
	CLI_TEMPLATE_INSPECT = 1u << 13,
	CLI_TEMPLATE_RM = 1u << 14,
	CLI_TEMPLATE_GC = 1u << 15,
	CLI_PAUSE = 1u << 16,
	CLI_RESUME = 1u << 17,
	CLI_SNAPSHOT = 1u << 18,
	CLI_SNAPSHOT_LS = 1u << 19,
	CLI_SNAPSHOT_RM = 1u << 20,
	CLI_FORK = 1u << 21,
	CLI_VOLUME = 1u << 22,
	CLI_RUNTIMES = 1u << 23,
	CLI_CODE = 1u << 24,
	CLI_APPROVALS = 1u << 25,
	CLI_DECIDE = 1u << 26, /* approve, deny */
	CLI_PORT_FORWARD = 1u << 27,
};
#define CLI_SNAPSHOT_CMDS (CLI_PAUSE | CLI_RESUME | CLI_SNAPSHOT | CLI_SNAPSHOT_LS | \
			   CLI_SNAPSHOT_RM | CLI_FORK)
#define CLI_CLIENT_CMDS (CLI_CREATE | CLI_EXEC | CLI_LS | CLI_INFO | CLI_KILL | CLI_TIMEOUT | \
			 CLI_NETWORK | CLI_LOGS | CLI_CP | CLI_SNAPSHOT_CMDS | CLI_VOLUME | \
			 CLI_RUNTIMES | CLI_CODE | CLI_APPROVALS | CLI_DECIDE | CLI_PORT_FORWARD)

#define CLI_UNSET     UINT64_MAX /* a number no option gave */
#define CLI_LIST_MAX  256	 /* values of one repeatable option */
#define CLI_NO_COMMAND (-1)	 /* cli_parse(@cmd_at): no command words */

/* A repeatable option's values, in the order given (pointers into argv). */
struct cli_list {
	const char *v[CLI_LIST_MAX];
	size_t n;
};

/* What the options said. Numbers are CLI_UNSET and strings NULL unless given. */
struct cli_values {
	const char *template, *runtime, *rootfs, *user, *workdir, *net, *tag, *socket, *snapshot;
	uint64_t memory_bytes, disk_bytes; /* SIZE */
	uint64_t timeout_ms;		   /* DURATION */
	uint64_t cpus_milli;		   /* N CPUs, 0.01..1024 */
	uint64_t pids;			   /* 2..4194304 */
	uint64_t json_result_fd;
	uint64_t count;			   /* fork: 1..100 */
	uint64_t size_bytes;		   /* volume create: SIZE */
	struct cli_list env;   /* NAME=VALUE, NAME a valid variable name */
	struct cli_list meta;  /* KEY=VALUE */
	struct cli_list allow, add, remove, secret, secret_in, build_arg;
	struct cli_list ro_bind; /* /HOST:SANDBOX */
	struct cli_list volume;	 /* NAME:PATH[:ro] */
	const char *file, *context, *context_tar, *source; /* template build */
	const char *code_context, *code_language, *save_images; /* code */
	const char *reason;				   /* approve, deny */
	const char *listen;				   /* port-forward: ADDR:PORT */
	bool json, follow, net_only, no_cache, confine, replace, recursive, local;
	bool tty; /* exec, run: the command on a terminal, ours in raw mode */
};

struct cli_option {
	const char *name;
	char short_name; /* 0: none */
	const char *arg; /* NULL: a flag; "a|b|c": the choices of cli_choice */
	int (*parse)(const struct cli_option *o, const char *arg, void *field);
	size_t field;	 /* offsetof(struct cli_values, ...) */
	unsigned cmds;	 /* enum cli_cmd bits */
	const char *help;
	uint64_t min, max; /* cli_uint's bounds */
};

extern const struct cli_option cli_options[];
extern const size_t cli_n_options;

/* The value parsers of the table; each prints one line naming the option when it refuses. */
int cli_size(const struct cli_option *o, const char *arg, void *field);
int cli_duration(const struct cli_option *o, const char *arg, void *field);
int cli_cpus(const struct cli_option *o, const char *arg, void *field);

struct cli_args {
	char **pos; /* positional words (pointers into argv) */
	int n_pos;
	char **rest; /* the command: after `--` or from its first word (see @cmd_at) */
	int n_rest;
};

void cli_values_init(struct cli_values *v);

/* Parses argv[1..] for @cmd. Returns 0, 1 for --help/-h, or -EINVAL after printing why. */
int cli_parse(enum cli_cmd cmd, int argc, char **argv, int cmd_at, struct cli_values *v,
	      struct cli_args *ret);
static inline void cli_args_done(struct cli_args *a)
{
	free(a->pos);
	a->pos = NULL;
}

/* A subcommand's whole parse: cli_parse(), --help answered (cli_print_usage(stdout, @cmd,
 * @synopsis), then @more unless NULL), exactly @n_pos positional words (CLI_ANY: any
 * number), and a command (at least one word) if and only if @cmd_at >= 0. Returns CLI_GO_ON,
 * else the exit status to return now: 0 after --help, CLI_EXIT_USAGE after a usage error
 * (said in one line). */
#define CLI_GO_ON      (-1)
#define CLI_ANY	       (-1)
#define CLI_EXIT_USAGE 2 /* CORDON_EXIT_USAGE */
int cli_parse_cmd(enum cli_cmd cmd, const char *synopsis, const char *more, int argc,
		  char **argv, int n_pos, int cmd_at, struct cli_values *v, struct cli_args *a);

/* "usage: cordon SYNOPSIS" and the options @cmd accepts. */
void cli_print_usage(FILE *f, enum cli_cmd cmd, const char *synopsis);

/* The subcommand's name in messages: "exec", "template build". */
const char *cli_cmd_name(enum cli_cmd cmd);

/* Whole seconds, at least @min, of a DURATION @ms that --@name gave (CLI_UNSET: -ENOENT). */
int cli_seconds(const char *name, uint64_t ms, long long min, long long *ret);
