/* The CLI's one option parser (src/cli/opts.c): the same word means the same value in every
 * subcommand that takes it, options may follow positional words, `--` and the first word of
 * a command end them, and a subcommand refuses what its rows do not list. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cli/opts.h"

#define MIB (1ULL << 20)
#define N(a) ((int)(sizeof(a) / sizeof((a)[0])) - 1) /* argv arrays end with NULL */

struct parsed {
	struct cli_values v;
	struct cli_args a;
	int r;
};

/* argv[0] is the subcommand's name, as main() passes it. */
static void parse(struct parsed *p, enum cli_cmd cmd, int cmd_at, int argc, char **argv)
{
	cli_values_init(&p->v);
	p->r = cli_parse(cmd, argc, argv, cmd_at, &p->v, &p->a);
}

static void done(struct parsed *p)
{
	cli_args_done(&p->a);
}

static const enum cli_cmd sized[] = {CLI_RUN, CLI_CREATE, CLI_TEMPLATE_BUILD};

static void test_sizes_mean_mib_everywhere(void **state)
{
	static const struct {
		const char *in;
		uint64_t want;
	} c[] = {{"512", 512 * MIB}, {"256M", 256 * MIB}, {"2G", 2048 * MIB}, {"4096b", 4096},
		 {"64k", 64 * 1024}, {"1T", 1024 * 1024 * MIB}};
	for (size_t k = 0; k < sizeof(sized) / sizeof(sized[0]); k++)
		for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
			char *argv[] = {"x", "--memory", (char *)c[i].in, "--disk", (char *)c[i].in, NULL};
			struct parsed p;
			parse(&p, sized[k], CLI_NO_COMMAND, N(argv), argv);
			assert_int_equal(p.r, 0);
			assert_int_equal(p.v.memory_bytes, c[i].want);
			assert_int_equal(p.v.disk_bytes, c[i].want);
			done(&p);
		}
}

static void test_bad_sizes_are_refused(void **state)
{
	static const char *const bad[] = {"lots", "-1M", "12Q", "2.5G", "", "1 G"};
	for (size_t k = 0; k < sizeof(sized) / sizeof(sized[0]); k++)
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			char *argv[] = {"x", "--memory", (char *)bad[i], NULL};
			struct parsed p;
			parse(&p, sized[k], CLI_NO_COMMAND, N(argv), argv);
			if (p.r != -EINVAL)
				fail_msg("--memory '%s' for %s: r=%d", bad[i], cli_cmd_name(sized[k]), p.r);
			done(&p);
		}
}

static void test_cpus_one_parser(void **state)
{
	static const struct {
		const char *in;
		uint64_t want; /* 0: refused */
	} c[] = {{"0.5", 500}, {"2", 2000}, {"1.25", 1250}, {"0.01", 10}, {"1024", 1024000},
		 {"0.001", 0}, {"0", 0},       {"-1", 0},      {"many", 0},  {"1e9", 0},
		 {"nan", 0},   {"inf", 0},      {"2x", 0}};
	for (size_t k = 0; k < sizeof(sized) / sizeof(sized[0]); k++)
		for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
			char *argv[] = {"x", "--cpus", (char *)c[i].in, NULL};
			struct parsed p;
			parse(&p, sized[k], CLI_NO_COMMAND, N(argv), argv);
			if (c[i].want ? p.r != 0 || p.v.cpus_milli != c[i].want : p.r != -EINVAL)
				fail_msg("--cpus '%s': r=%d milli=%llu", c[i].in, p.r,
					 (unsigned long long)p.v.cpus_milli);
			done(&p);
		}
}

static void test_durations(void **state)
{
	static const enum cli_cmd timed[] = {CLI_RUN, CLI_CREATE, CLI_EXEC, CLI_TEMPLATE_BUILD};
	static const struct {
		const char *in;
		uint64_t want;
	} c[] = {{"5", 5000}, {"500ms", 500}, {"5m", 300000}, {"0", 0}, {"2h", 7200000}};
	for (size_t k = 0; k < sizeof(timed) / sizeof(timed[0]); k++)
		for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
			char *argv[] = {"x", "--timeout", (char *)c[i].in, NULL};
			struct parsed p;
			parse(&p, timed[k], CLI_NO_COMMAND, N(argv), argv);
			assert_int_equal(p.r, 0);
			assert_int_equal(p.v.timeout_ms, c[i].want);
			done(&p);
		}
	char *argv[] = {"x", "--timeout", "forever", NULL};
	struct parsed p;
	parse(&p, CLI_EXEC, 1, N(argv), argv);
	assert_int_equal(p.r, -EINVAL);
	done(&p);
}

static void test_whole_seconds(void **state)
{
	long long s = -1;
	assert_int_equal(cli_seconds("timeout", 5000, 1, &s), 0);
	assert_int_equal(s, 5);
	assert_int_equal(cli_seconds("timeout", 500, 0, &s), -EINVAL);
	assert_int_equal(cli_seconds("timeout", 0, 1, &s), -EINVAL);
	assert_int_equal(cli_seconds("timeout", 0, 0, &s), 0);
	assert_int_equal(s, 0);
	assert_int_equal(cli_seconds("timeout", CLI_UNSET, 0, &s), -ENOENT);
}

/* `cordon exec ID --timeout 5 -- cmd`: --timeout is exec's. */
static void test_options_after_the_id(void **state)
{
	char *argv[] = {"exec", "sb1", "--timeout", "5", "--env", "A=1", "--", "sleep", "9", NULL};
	struct parsed p;
	parse(&p, CLI_EXEC, 1, N(argv), argv);
	assert_int_equal(p.r, 0);
	assert_int_equal(p.a.n_pos, 1);
	assert_string_equal(p.a.pos[0], "sb1");
	assert_int_equal(p.v.timeout_ms, 5000);
	assert_int_equal(p.v.env.n, 1);
	assert_int_equal(p.a.n_rest, 2);
	assert_string_equal(p.a.rest[0], "sleep");
	assert_string_equal(p.a.rest[1], "9");
	assert_null(p.a.rest[2]);
	done(&p);
}

/* After the command's first word, everything is the command's. */
static void test_the_command_ends_the_options(void **state)
{
	char *argv[] = {"exec", "sb1", "echo", "--timeout", "1", "--", NULL};
	struct parsed p;
	parse(&p, CLI_EXEC, 1, N(argv), argv);
	assert_int_equal(p.r, 0);
	assert_int_equal(p.v.timeout_ms, CLI_UNSET);
	assert_int_equal(p.a.n_rest, 4);
	assert_string_equal(p.a.rest[1], "--timeout");
	done(&p);

	char *run[] = {"run", "--memory", "64", "sh", "-c", "--memory", NULL};
	parse(&p, CLI_RUN, 0, N(run), run);
	assert_int_equal(p.r, 0);
	assert_int_equal(p.v.memory_bytes, 64 * MIB);
	assert_int_equal(p.a.n_rest, 3);
	assert_string_equal(p.a.rest[0], "sh");
	done(&p);
}

static void test_double_dash(void **state)
{
	char *argv[] = {"run", "--", "--memory", "64", NULL};
	struct parsed p;
	parse(&p, CLI_RUN, 0, N(argv), argv);
	assert_int_equal(p.r, 0);
	assert_int_equal(p.v.memory_bytes, CLI_UNSET);
	assert_int_equal(p.a.n_rest, 2);
	assert_string_equal(p.a.rest[0], "--memory");
	done(&p);

	/* Without a command, words mix with options until `--`. */
	char *kill[] = {"kill", "a", "--socket", "/s", "b", "--", "--c", NULL};
	parse(&p, CLI_KILL, CLI_NO_COMMAND, N(kill), kill);
	assert_int_equal(p.r, 0);
	assert_int_equal(p.a.n_pos, 2);
	assert_string_equal(p.a.pos[1], "b");
	assert_string_equal(p.v.socket, "/s");
	assert_int_equal(p.a.n_rest, 1);
	assert_string_equal(p.a.rest[0], "--c");
	done(&p);
}

static void test_repeatable_in_order(void **state)
{
	char *argv[] = {"create", "--env", "A=1", "-e", "B=2", "--env=C=3", "-eD=4", "--allow",
			"x.org", "--allow", "y.org:443", "--meta", "k=v", NULL};
	struct parsed p;
	parse(&p, CLI_CREATE, CLI_NO_COMMAND, N(argv), argv);
	assert_int_equal(p.r, 0);
	assert_int_equal(p.v.env.n, 4);
	assert_string_equal(p.v.env.v[0], "A=1");
	assert_string_equal(p.v.env.v[2], "C=3");
	assert_string_equal(p.v.env.v[3], "D=4");
	assert_int_equal(p.v.allow.n, 2);
	assert_string_equal(p.v.allow.v[1], "y.org:443");
	assert_int_equal(p.v.meta.n, 1);
	done(&p);
}

static void test_bad_values(void **state)
{
	static const struct {
		enum cli_cmd cmd;
		const char *opt, *val;
	} c[] = {
		{CLI_RUN, "--env", "NOEQUALS"},	    {CLI_EXEC, "--env", "1A=x"},
		{CLI_CREATE, "--meta", "=v"},	    {CLI_RUN, "--user", "admin"},
		{CLI_EXEC, "--user", "roo"},	    {CLI_CREATE, "--net", "host-wide-open"},
		{CLI_RUN, "--net", "non"},	    {CLI_RUN, "--pids", "abc"},
		{CLI_RUN, "--pids", "1"},	    {CLI_CREATE, "--pids", "-5"},
		{CLI_RUN, "--json-result", "fd"},   {CLI_RUN, "--ro-bind", "rel:/x"},
		{CLI_RUN, "--ro-bind", "/x"},	    {CLI_EXEC, "--cwd", "tmp"},
		{CLI_RUN, "--workdir", "tmp"},	    {CLI_RUN, "--rootfs", "r"},
		{CLI_TEMPLATE_BUILD, "--build-arg", "NOEQ"},
	};
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		char *argv[] = {"x", (char *)c[i].opt, (char *)c[i].val, NULL};
		struct parsed p;
		parse(&p, c[i].cmd, CLI_NO_COMMAND, N(argv), argv);
		if (p.r != -EINVAL)
			fail_msg("%s %s '%s': r=%d", cli_cmd_name(c[i].cmd), c[i].opt, c[i].val, p.r);
		done(&p);
	}
}

/* Each subcommand accepts its rows only; a name may mean different things in two. */
static void test_which_subcommand_accepts_it(void **state)
{
	static const struct {
		enum cli_cmd cmd;
		const char *opt;
	} refused[] = {{CLI_RUN, "--tag"},	   {CLI_CREATE, "--ro-bind"}, {CLI_EXEC, "--memory"},
		       {CLI_RUN, "--socket"},	   {CLI_LS, "--follow"},      {CLI_TEMPLATE_LS, "--replace"},
		       {CLI_EXEC, "--secret"},     {CLI_KILL, "--json"},	     {CLI_RUN, "--bogus"},
		       {CLI_RUN, "-x"}};
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		char *argv[] = {"x", (char *)refused[i].opt, "v", NULL};
		struct parsed p;
		parse(&p, refused[i].cmd, CLI_NO_COMMAND, N(argv), argv);
		if (p.r != -EINVAL)
			fail_msg("%s accepted %s", cli_cmd_name(refused[i].cmd), refused[i].opt);
		done(&p);
	}
	/* logs --net is a flag; create --net takes a policy. */
	char *logs[] = {"logs", "--net", "sb1", NULL};
	struct parsed p;
	parse(&p, CLI_LOGS, CLI_NO_COMMAND, N(logs), logs);
	assert_int_equal(p.r, 0);
	assert_true(p.v.net_only);
	assert_null(p.v.net);
	assert_string_equal(p.a.pos[0], "sb1");
	done(&p);
	char *create[] = {"create", "--net", "public", NULL};
	parse(&p, CLI_CREATE, CLI_NO_COMMAND, N(create), create);
	assert_int_equal(p.r, 0);
	assert_string_equal(p.v.net, "public");
	assert_false(p.v.net_only);
	done(&p);
}

static void test_flags_and_missing_values(void **state)
{
	char *flag_val[] = {"x", "--json=1", NULL};
	char *missing[] = {"x", "--memory", NULL};
	char *help[] = {"x", "--memory", "1G", "--help", NULL};
	char *short_help[] = {"x", "-h", NULL};
	struct parsed p;

	parse(&p, CLI_CREATE, CLI_NO_COMMAND, N(flag_val), flag_val);
	assert_int_equal(p.r, -EINVAL);
	done(&p);
	parse(&p, CLI_RUN, 0, N(missing), missing);
	assert_int_equal(p.r, -EINVAL);
	done(&p);
	parse(&p, CLI_CREATE, CLI_NO_COMMAND, N(help), help);
	assert_int_equal(p.r, 1);
	done(&p);
	parse(&p, CLI_EXEC, 1, N(short_help), short_help);
	assert_int_equal(p.r, 1);
	done(&p);
}

static void test_template_build_vocabulary(void **state)
{
	char *argv[] = {"build", "web", "-f", "Recipe", "--memory", "1G", "--cpus", "1.5",
			"--timeout", "10m", "--build-arg", "V=1", "--no-cache", "--json", NULL};
	struct parsed p;
	parse(&p, CLI_TEMPLATE_BUILD, CLI_NO_COMMAND, N(argv), argv);
	assert_int_equal(p.r, 0);
	assert_string_equal(p.a.pos[0], "web");
	assert_string_equal(p.v.file, "Recipe");
	assert_int_equal(p.v.memory_bytes, 1024 * MIB);
	assert_int_equal(p.v.cpus_milli, 1500);
	assert_int_equal(p.v.timeout_ms, 600000);
	assert_int_equal(p.v.build_arg.n, 1);
	assert_true(p.v.no_cache && p.v.json);
	done(&p);
	char *joined[] = {"build", "-fRecipe", "web", NULL};
	parse(&p, CLI_TEMPLATE_BUILD, CLI_NO_COMMAND, N(joined), joined);
	assert_int_equal(p.r, 0);
	assert_string_equal(p.v.file, "Recipe");
	done(&p);
}

/* The table itself: no subcommand has two rows of one name or one short letter; each row has
 * a parser, a help text and at least one subcommand. */
static void test_the_table(void **state)
{
	for (size_t i = 0; i < cli_n_options; i++) {
		const struct cli_option *o = &cli_options[i];
		assert_non_null(o->parse);
		assert_non_null(o->help);
		assert_true(o->cmds != 0);
		assert_true(o->field + 1 <= sizeof(struct cli_values));
		for (size_t k = i + 1; k < cli_n_options; k++) {
			const struct cli_option *q = &cli_options[k];
			if ((o->cmds & q->cmds) &&
			    (strcmp(o->name, q->name) == 0 || (o->short_name && o->short_name == q->short_name)))
				fail_msg("--%s and --%s collide in %s", o->name, q->name,
					 cli_cmd_name(o->cmds & q->cmds & -(o->cmds & q->cmds)));
		}
	}
}

static void test_usage_lists_the_rows(void **state)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	assert_non_null(f);
	cli_print_usage(f, CLI_RUN, "run [OPTIONS] -- CMD");
	fclose(f);
	assert_non_null(strstr(buf, "usage: cordon run [OPTIONS] -- CMD"));
	assert_non_null(strstr(buf, "--memory SIZE"));
	assert_non_null(strstr(buf, "-e, --env K=V"));
	assert_null(strstr(buf, "--tag"));
	assert_null(strstr(buf, "--socket"));
	free(buf);
}

/* The whole parse of a subcommand: go on, 0 after --help, 2 on a word too many or missing. */
static void test_parse_cmd(void **state)
{
	static const struct {
		enum cli_cmd cmd;
		int n_pos, cmd_at;
		const char *argv[6];
		int want;
	} c[] = {
		{CLI_INFO, 1, CLI_NO_COMMAND, {"info", "sb1", "--json"}, CLI_GO_ON},
		{CLI_INFO, 1, CLI_NO_COMMAND, {"info"}, CLI_EXIT_USAGE},
		{CLI_INFO, 1, CLI_NO_COMMAND, {"info", "a", "b"}, CLI_EXIT_USAGE},
		{CLI_INFO, 1, CLI_NO_COMMAND, {"info", "a", "--", "b"}, CLI_EXIT_USAGE},
		{CLI_INFO, 1, CLI_NO_COMMAND, {"info", "--help"}, 0},
		{CLI_INFO, 1, CLI_NO_COMMAND, {"info", "--bogus", "a"}, CLI_EXIT_USAGE},
		{CLI_EXEC, 1, 1, {"exec", "sb1", "--timeout", "5", "true"}, CLI_GO_ON},
		{CLI_EXEC, 1, 1, {"exec", "sb1"}, CLI_EXIT_USAGE},
		{CLI_EXEC, 1, 1, {"exec", "sb1", "--"}, CLI_EXIT_USAGE},
		{CLI_EXEC, 1, 1, {"exec", "--", "sh"}, CLI_EXIT_USAGE},
		{CLI_KILL, CLI_ANY, CLI_NO_COMMAND, {"kill", "a", "b", "c"}, CLI_GO_ON},
	};
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		struct cli_values v;
		struct cli_args a = {};
		int argc = 0;
		while (c[i].argv[argc])
			argc++;
		int r = cli_parse_cmd(c[i].cmd, "X", NULL, argc, (char **)c[i].argv, c[i].n_pos,
				      c[i].cmd_at, &v, &a);
		if (r != c[i].want)
			fail_msg("case %zu (%s %s): r=%d, want %d", i, c[i].argv[0],
				 c[i].argv[1] ?: "", r, c[i].want);
		cli_args_done(&a);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sizes_mean_mib_everywhere),
		cmocka_unit_test(test_bad_sizes_are_refused),
		cmocka_unit_test(test_cpus_one_parser),
		cmocka_unit_test(test_durations),
		cmocka_unit_test(test_whole_seconds),
		cmocka_unit_test(test_options_after_the_id),
		cmocka_unit_test(test_the_command_ends_the_options),
		cmocka_unit_test(test_double_dash),
		cmocka_unit_test(test_repeatable_in_order),
		cmocka_unit_test(test_bad_values),
		cmocka_unit_test(test_which_subcommand_accepts_it),
		cmocka_unit_test(test_flags_and_missing_values),
		cmocka_unit_test(test_template_build_vocabulary),
		cmocka_unit_test(test_the_table),
		cmocka_unit_test(test_usage_lists_the_rows),
		cmocka_unit_test(test_parse_cmd),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
