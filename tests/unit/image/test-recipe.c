/* Unit tests of src/image/recipe.c: recipe text -> steps, the expansion of variables, every
 * error (with the line it names) and every limit. Needs nothing: the parser does no I/O. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "basic/cleanup.h"
#include "image/recipe.h"

#define SUPPORTED "(supported: FROM, RUN, COPY, ADD, ENV, ARG, WORKDIR, USER, START, READY)"

static void recipe_freep(struct recipe **r) { recipe_free(*r); }
#define _cleanup_recipe_ _cleanup_(recipe_freep)

/* ---- allocation failures ---------------------------------------------------------------- */

/* The test is linked with -Wl,--wrap for these: allocation number fail_at (counting from 0)
 * fails, the others go through. Those made inside jansson are not counted: it reports some of
 * its allocation failures as syntax errors, which is beyond the parser's control. */
static long fail_at = -1, n_allocs;

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
int __wrap_asprintf(char **ret, const char *fmt, ...);

static bool alloc_fails(void) { return fail_at >= 0 && n_allocs++ == fail_at; }

void *__wrap_malloc(size_t n) { return alloc_fails() ? NULL : __real_malloc(n); }

void *__wrap_calloc(size_t n, size_t size) { return alloc_fails() ? NULL : __real_calloc(n, size); }

void *__wrap_realloc(void *p, size_t n) { return alloc_fails() ? NULL : __real_realloc(p, n); }

char *__wrap_strdup(const char *s) { return alloc_fails() ? NULL : __real_strdup(s); }

char *__wrap_strndup(const char *s, size_t n)
{
	return alloc_fails() ? NULL : __real_strndup(s, n);
}

int __wrap_asprintf(char **ret, const char *fmt, ...)
{
	va_list ap;
	int r = -1;

	if (alloc_fails())
		return -1;
	va_start(ap, fmt);
	r = vasprintf(ret, fmt, ap);
	va_end(ap);
	return r;
}

/* ---- helpers ------------------------------------------------------------------------------ */

static struct recipe *parse_args(const char *text, const char *const *args)
{
	struct cordon_err err = {};
	struct recipe *r = NULL;
	int rc = recipe_parse(text, strlen(text), args, &r, &err);

	if (rc < 0)
		print_message("unexpected error %d: %s\n", rc, err.msg);
	assert_int_equal(rc, 0);
	assert_non_null(r);
	return r;
}

static struct recipe *parse(const char *text) { return parse_args(text, NULL); }

/* Expects @text to fail with @code and a message that contains @msg. */
static void bad_args(const char *text, const char *const *args, int code, const char *msg)
{
	struct cordon_err err = {};
	struct recipe *r = NULL;
	int rc = recipe_parse(text, strlen(text), args, &r, &err);

	if (rc != code || !strstr(err.msg, msg))
		print_message("text: %s\ngot %d: '%s'\nwanted %d: '%s'\n", text, rc, err.msg, code,
			      msg);
	assert_int_equal(rc, code);
	assert_int_equal(err.code, code);
	assert_non_null(strstr(err.msg, msg));
	assert_null(strchr(err.msg, '\n'));
	assert_null(r);
}

static void bad(const char *text, int code, const char *msg) { bad_args(text, NULL, code, msg); }

/* Checks @st->argv against the NULL-terminated @want. */
static void check_argv(const struct recipe_step *st, const char *const *want)
{
	size_t n = 0;

	while (want[n])
		n++;
	if (st->argc != n)
		print_message("argc %zu, wanted %zu (%s)\n", st->argc, n, st->text);
	assert_int_equal(st->argc, n);
	for (size_t i = 0; i < n; i++)
		assert_string_equal(st->argv[i], want[i]);
	assert_null(st->argv[n]);
}

#define ARGV(...) ((const char *const[]){__VA_ARGS__, NULL})

/* The last step of @text, which must be of @kind, has argv @want. */
static void check_last(const char *text, enum recipe_kind kind, const char *const *want)
{
	_cleanup_recipe_ struct recipe *r = parse(text);

	assert_true(r->n_steps > 0);
	assert_int_equal(r->steps[r->n_steps - 1].kind, kind);
	check_argv(&r->steps[r->n_steps - 1], want);
}

static void check_env(const struct recipe *r, const char *const *want)
{
	size_t n = 0;

	while (want[n])
		n++;
	assert_int_equal(r->n_build_env, n);
	for (size_t i = 0; i < n; i++)
		assert_string_equal(r->build_env[i], want[i]);
	assert_null(r->build_env[n]);
}

/* A string of @n copies of @piece, separated by nothing. */
static char *repeat(const char *prefix, const char *piece, size_t n, const char *suffix)
{
	size_t lp = strlen(prefix), l = strlen(piece), ls = strlen(suffix);
	char *s = malloc(lp + l * n + ls + 1);

	assert_non_null(s);
	memcpy(s, prefix, lp);
	for (size_t i = 0; i < n; i++)
		memcpy(s + lp + i * l, piece, l);
	memcpy(s + lp + l * n, suffix, ls + 1);
	return s;
}

/* ---- instructions ------------------------------------------------------------------------- */

static void test_from(void **state)
{
	_cleanup_recipe_ struct recipe *r = parse("FROM debian:bookworm\n");

	assert_int_equal(r->n_steps, 1);
	assert_int_equal(r->steps[0].kind, RECIPE_FROM);
	assert_int_equal(r->steps[0].line, 1);
	assert_string_equal(r->steps[0].text, "FROM debian:bookworm");
	check_argv(&r->steps[0], ARGV("debian:bookworm"));
	assert_int_equal(r->n_build_env, 0);
	assert_non_null(r->build_env);
	assert_null(r->build_env[0]);

	check_last("from scratch", RECIPE_FROM, ARGV("scratch"));
	check_last("  FrOm\toci-archive:/x.tar  ", RECIPE_FROM, ARGV("oci-archive:/x.tar"));
	check_last("ARG BASE=debian\nARG TAG\nFROM ${BASE}:${TAG:-bookworm}", RECIPE_FROM,
		   ARGV("debian:bookworm"));
}

static void test_from_build_args(void **state)
{
	const char *args[] = {"TAG=bookworm-slim", NULL};
	_cleanup_recipe_ struct recipe *r =
	    parse_args("ARG BASE=debian\nARG TAG\nFROM $BASE:${TAG:-bookworm}\nRUN true", args);

	check_argv(&r->steps[2], ARGV("debian:bookworm-slim"));
	check_env(r, ARGV("BASE=debian", "TAG=bookworm-slim"));
}

static void test_from_errors(void **state)
{
	bad("FROM a AS b", -EINVAL,
	    "line 1: FROM takes one image: multi-stage builds are not supported");
	bad("# c\nFROM --platform=linux/amd64 a", -EINVAL, "line 2: FROM takes one image");
	bad("FROM a\nRUN x\nFROM b", -EINVAL,
	    "line 3: a second FROM: multi-stage builds are not supported");
	bad("RUN x\nFROM a", -EINVAL, "line 1: RUN before FROM");
	bad("ARG A\nENV B=1\nFROM a", -EINVAL, "line 2: ENV before FROM");
	bad("", -EINVAL, "no FROM instruction");
	bad("# only a comment\n\n   \n", -EINVAL, "no FROM instruction");
	bad("ARG X=1\n", -EINVAL, "no FROM instruction");
	bad("FROM\n", -EINVAL, "line 1: FROM needs an argument");
	bad("\nFROM $UNSET", -EINVAL, "line 2: FROM names no image");

	struct cordon_err err = {};
	struct recipe *r = NULL;
	assert_int_equal(recipe_parse(NULL, 0, NULL, &r, &err), -EINVAL);
	assert_string_equal(err.msg, "no FROM instruction");
	assert_int_equal(recipe_parse("FROM a AS b", 11, NULL, &r, NULL), -EINVAL);
	assert_null(r);
}

static void test_run_forms(void **state)
{
	_cleanup_recipe_ struct recipe *r = parse("FROM x\n"
						  "ENV X=1\n"
						  "RUN apt-get install -y python3\n"
						  "RUN [\"echo\", \"a b\", \"$X\"]\n"
						  "START  [\"/srv/app\",\"--port\",\"80\"]\n"
						  "READY curl -f http://localhost/ && echo $X\n"
						  "run echo \"$X\" '$X'");

	assert_int_equal(r->n_steps, 7);
	check_argv(&r->steps[2], ARGV("/bin/sh", "-c", "apt-get install -y python3"));
	assert_int_equal(r->steps[2].kind, RECIPE_RUN);
	check_argv(&r->steps[3], ARGV("echo", "a b", "$X"));
	assert_int_equal(r->steps[4].kind, RECIPE_START);
	check_argv(&r->steps[4], ARGV("/srv/app", "--port", "80"));
	assert_int_equal(r->steps[5].kind, RECIPE_READY);
	check_argv(&r->steps[5], ARGV("/bin/sh", "-c", "curl -f http://localhost/ && echo $X"));
	check_argv(&r->steps[6], ARGV("/bin/sh", "-c", "echo \"$X\" '$X'"));
	assert_string_equal(r->steps[6].text, "run echo \"$X\" '$X'");
	assert_int_equal(r->steps[6].line, 7);
}

static void test_run_json_fallback(void **state)
{
	check_last("FROM x\nRUN [ \"a\", 1 ]", RECIPE_RUN, ARGV("/bin/sh", "-c", "[ \"a\", 1 ]"));
	check_last("FROM x\nRUN [not json", RECIPE_RUN, ARGV("/bin/sh", "-c", "[not json"));
	check_last("FROM x\nRUN [\"a\"] && b", RECIPE_RUN, ARGV("/bin/sh", "-c", "[\"a\"] && b"));
	check_last("FROM x\nRUN [\"a\", [\"b\"]]", RECIPE_RUN,
		   ARGV("/bin/sh", "-c", "[\"a\", [\"b\"]]"));
	check_last("FROM x\nRUN [ -f /x ] || true", RECIPE_RUN,
		   ARGV("/bin/sh", "-c", "[ -f /x ] || true"));
	check_last("FROM x\nSTART [\"a\\u0000b\"]", RECIPE_START,
		   ARGV("/bin/sh", "-c", "[\"a\\u0000b\"]"));
	bad("FROM x\nRUN []", -EINVAL, "line 2: RUN []: an empty command");
	bad("FROM x\n\nREADY [ ]", -EINVAL, "line 3: READY []");
}

static void test_continuations(void **state)
{
	_cleanup_recipe_ struct recipe *r = parse("# syntax=docker/dockerfile:1\n"
						  "FROM x\n"
						  "RUN apt-get update && \\\n"
						  "    # a comment inside\n"
						  "\n"
						  "  \t# another\n"
						  "    apt-get install -y \\   \n"
						  "  python3\n"
						  "   # trailing comment\n"
						  "USER app \\\n");

	assert_int_equal(r->n_steps, 3);
	assert_int_equal(r->steps[1].line, 3);
	assert_string_equal(r->steps[1].text, "RUN apt-get update && apt-get install -y python3");
	check_argv(&r->steps[1],
		   ARGV("/bin/sh", "-c", "apt-get update && apt-get install -y python3"));
	assert_int_equal(r->steps[2].line, 10);
	assert_string_equal(r->steps[2].text, "USER app");

	/* CRLF line ends */
	_cleanup_recipe_ struct recipe *c =
	    parse("FROM x\r\nRUN a \\\r\n b\r\n\r\nENV A=1 \\\r\n  B=2\r\n");
	assert_int_equal(c->n_steps, 3);
	assert_string_equal(c->steps[1].text, "RUN a b");
	check_argv(&c->steps[2], ARGV("A=1", "B=2"));
	assert_int_equal(c->steps[2].line, 5);

	/* a continued ENV value in quotes, and an error naming the continued line's first line */
	check_last("FROM x\nENV A=\"x \\\n   y\"", RECIPE_ENV, ARGV("A=x y"));
	bad("FROM x\nRUN a \\\n\n# c\nCMD b\nCMD c", -EINVAL, "line 6: CMD is not supported");
	bad("FROM x\n\nRUN \\\n# c\n", -EINVAL, "line 3: RUN needs an argument");
}

static void test_unsupported(void **state)
{
	static const char *const kws[] = {
	    "CMD",     "ENTRYPOINT",  "LABEL",	    "EXPOSE",	  "VOLUME", "SHELL",
	    "ONBUILD", "HEALTHCHECK", "STOPSIGNAL", "MAINTAINER", "junk",   "FROMX",
	};
	char text[128], msg[256];

	for (size_t i = 0; i < ELEMENTSOF(kws); i++) {
		snprintf(text, sizeof(text), "FROM x\n\n%s foo bar", kws[i]);
		snprintf(msg, sizeof(msg), "line 3: %s is not supported " SUPPORTED, kws[i]);
		struct cordon_err err = {};
		struct recipe *r = NULL;
		assert_int_equal(recipe_parse(text, strlen(text), NULL, &r, &err), -EINVAL);
		assert_string_equal(err.msg, msg);
	}
	bad("cmd [\"x\"]\nFROM x", -EINVAL, "line 1: cmd is not supported " SUPPORTED);
	bad("FROM x\nCMD", -EINVAL, "line 2: CMD is not supported");
}

static void test_needs_argument(void **state)
{
	static const char *const kws[] = {"RUN",  "COPY",    "ADD",   "ENV",  "ARG",
					  "USER", "WORKDIR", "START", "READY"};
	char text[64], msg[64];

	for (size_t i = 0; i < ELEMENTSOF(kws); i++) {
		snprintf(text, sizeof(text), "FROM x\n%s  \t", kws[i]);
		snprintf(msg, sizeof(msg), "line 2: %s needs an argument", kws[i]);
		bad(text, -EINVAL, msg);
	}
	bad("from x\nrun", -EINVAL, "line 2: RUN needs an argument");
}

static void test_copy(void **state)
{
	_cleanup_recipe_ struct recipe *r =
	    parse("ARG U=1000\nFROM x\nENV D=/srv\n"
		  "COPY a b /dst/\n"
		  "ADD --chown=1000:1000 --chmod=0755 x.tar /opt/\n"
		  "COPY [\"a b\", \"$D/c\", \"/d\"]\n"
		  "copy --chmod=644 [\"a\",\"b\"]\n"
		  "COPY --chown=$U:${G:-users} app \"${D}/my app\"\n"
		  "COPY /abs/src ../rel https://example.com/f dst\n");

	assert_int_equal(r->n_steps, 9);
	const struct recipe_step *st = &r->steps[3];
	assert_int_equal(st->kind, RECIPE_COPY);
	check_argv(st, ARGV("a", "b", "/dst/"));
	assert_false(st->add);
	assert_null(st->chown);
	assert_null(st->chmod);

	st = &r->steps[4];
	assert_int_equal(st->kind, RECIPE_COPY);
	assert_true(st->add);
	assert_string_equal(st->chown, "1000:1000");
	assert_string_equal(st->chmod, "0755");
	check_argv(st, ARGV("x.tar", "/opt/"));

	check_argv(&r->steps[5], ARGV("a b", "/srv/c", "/d"));
	check_argv(&r->steps[6], ARGV("a", "b"));
	assert_string_equal(r->steps[6].chmod, "644");
	check_argv(&r->steps[7], ARGV("app", "/srv/my app"));
	assert_string_equal(r->steps[7].chown, "1000:users");
	check_argv(&r->steps[8], ARGV("/abs/src", "../rel", "https://example.com/f", "dst"));
	assert_false(r->steps[8].add);
}

static void test_copy_errors(void **state)
{
	bad("FROM x\nCOPY a", -EINVAL, "line 2: COPY needs at least one source and a destination");
	bad("FROM x\nADD [\"a\"]", -EINVAL,
	    "line 2: ADD needs at least one source and a destination");
	bad("FROM x\nCOPY --chown=a", -EINVAL, "line 2: COPY needs at least one source");
	bad("FROM x\nCOPY --from=build a b", -EINVAL, "line 2: COPY --from is not supported");
	bad("FROM x\nADD --checksum=sha256:00 a b", -EINVAL,
	    "line 2: ADD --checksum is not supported");
	bad("FROM x\nCOPY --link a b", -EINVAL, "line 2: COPY --link is not supported");
	bad("FROM x\nCOPY --chown a b", -EINVAL,
	    "line 2: COPY --chown needs a value (--chown=VALUE)");
	bad("FROM x\nADD --chmod a b", -EINVAL, "line 2: ADD --chmod needs a value");
	bad("FROM x\nCOPY --chmod=0888 a b", -EINVAL, "line 2: --chmod=0888: not an octal mode");
	bad("FROM x\nCOPY --chmod=17777 a b", -EINVAL, "line 2: --chmod=17777");
	bad("FROM x\nCOPY --chmod=00000000000000000000000000017777 a b", -EINVAL,
	    "line 2: --chmod");
	bad("FROM x\nCOPY --chmod= a b", -EINVAL,
	    "line 2: COPY --chmod needs a value (--chmod=VALUE)");
	bad("FROM x\nCOPY --chown=$UNSET a b", -EINVAL, "line 2: COPY --chown needs a value");
	bad("FROM x\nCOPY --chownx=1 a b", -EINVAL, "line 2: COPY --chownx is not supported");
	bad("FROM x\nCOPY --chmod=u+x a b", -EINVAL, "line 2: --chmod=u+x");
	bad("FROM x\nCOPY --chmod=644 --chmod=600 a b", -EINVAL,
	    "line 2: COPY --chmod given twice");
	bad("FROM x\nADD https://example.com/x.tar /x", -EINVAL,
	    "line 2: ADD https://example.com/x.tar: remote URLs are not supported");
	bad("FROM x\nADD a git://h/r /x", -EINVAL, "remote URLs are not supported");
	bad("FROM x\nCOPY \"\" /d", -EINVAL, "line 2: COPY: an empty path");
	bad("FROM x\nCOPY $UNSET /d", -EINVAL, "line 2: COPY: an empty path");
	check_last("FROM x\nCOPY --chmod=7777 a b", RECIPE_COPY, ARGV("a", "b"));
	check_last("FROM x\nCOPY --chmod=0 a b", RECIPE_COPY, ARGV("a", "b"));
}

static void test_env(void **state)
{
	_cleanup_recipe_ struct recipe *r =
	    parse("FROM x\n"
		  "ENV A=1 B=\"two words\" C='single $A' D=\\$A E=x\\ y F=\"q\\\"u\\\\o\\te\" G=\n"
		  "ENV H=$A I=${A}2 J=\"$B\"\n"
		  "ENV PATH /usr/local/bin:$PATH\n"
		  "ENV MSG   hello   \"big\"  world  \n"
		  "ENV A=2 K=$A\n"
		  "env L=$A");

	check_argv(&r->steps[1], ARGV("A=1", "B=two words", "C=single $A", "D=$A", "E=x y",
				      "F=q\"u\\o\\te", "G="));
	check_argv(&r->steps[2], ARGV("H=1", "I=12", "J=two words"));
	check_argv(&r->steps[3], ARGV("PATH=/usr/local/bin:"));
	check_argv(&r->steps[4], ARGV("MSG=hello   big  world"));
	/* the values of one ENV see the scope before it, as in Docker */
	check_argv(&r->steps[5], ARGV("A=2", "K=1"));
	check_argv(&r->steps[6], ARGV("L=2"));
	assert_int_equal(r->n_build_env, 0);
}

static void test_env_errors(void **state)
{
	bad("FROM x\nENV 1A=x", -EINVAL, "line 2: ENV: '1A' is not a valid variable name");
	bad("FROM x\nENV A-B=x", -EINVAL, "line 2: ENV: 'A-B' is not a valid variable name");
	bad("FROM x\nENV =x", -EINVAL, "line 2: ENV: '' is not a valid variable name");
	bad("FROM x\nENV A=1 B", -EINVAL, "line 2: ENV: no '=' in 'B'");
	bad("FROM x\nENV A", -EINVAL, "line 2: ENV A needs a value");
	bad("FROM x\nENV A-B x", -EINVAL, "line 2: ENV: 'A-B' is not a valid variable name");
	bad("FROM x\nENV A=\"open", -EINVAL, "line 2: unterminated double quote");
	bad("FROM x\nENV A='open", -EINVAL, "line 2: unterminated single quote");
	bad("FROM x\nENV A=\"a\\\"", -EINVAL, "line 2: unterminated double quote");
}

static void test_expansion(void **state)
{
	_cleanup_recipe_ struct recipe *r =
	    parse("FROM x\n"
		  "ENV A=a E=\n"
		  "ENV R1=$A R2=${A} R3=${A:-d} R4=${U:-d} R5=${E:-d} R6=${A:+p} R7=${U:+p} "
		  "R8=${E:+p}\n"
		  "ENV S1=\\$A S2=\"\\$A\" S3='${A}' S4=\"${A}\" S5=$ S6=a$ S7=$1 S8=${U:-${A}x} "
		  "S9=${U:-'$A'} S10=$A$A S11=${A}_b S12=$A_b S13=${U:-a b}\n");

	check_argv(&r->steps[2],
		   ARGV("R1=a", "R2=a", "R3=a", "R4=d", "R5=d", "R6=p", "R7=", "R8="));
	check_argv(&r->steps[3], ARGV("S1=$A", "S2=$A", "S3=${A}", "S4=a", "S5=$", "S6=a$", "S7=$1",
				      "S8=ax", "S9=$A", "S10=aa", "S11=a_b", "S12=", "S13=a b"));

	check_last("ARG V=1\nFROM x\nWORKDIR /$V", RECIPE_WORKDIR, ARGV("/1"));
	check_last("FROM x\nUSER ${U:-nobody}", RECIPE_USER, ARGV("nobody"));

	bad("FROM x\nENV A=${B", -EINVAL, "line 2: unterminated ${");
	bad("FROM x\nENV A=${", -EINVAL, "line 2: unterminated ${");
	bad("FROM x\nENV A=${B:", -EINVAL, "line 2: unterminated ${");
	bad("FROM x\n\nCOPY ${B:-x /d", -EINVAL, "line 3: unterminated ${");
	bad("FROM x\nENV A=\"${B\"", -EINVAL, "line 2: bad substitution ${B\"...}");
	bad("FROM x\nENV A=${B:?x}", -EINVAL, "line 2: bad substitution ${B:?...}");
	bad("FROM x\nENV A=${B#x}", -EINVAL, "line 2: bad substitution ${B#...}");
	bad("FROM x\nENV A=${}", -EINVAL, "line 2: bad substitution");
	bad("FROM x\nUSER ${-x}", -EINVAL, "line 2: bad substitution");
	bad("FROM ${X", -EINVAL, "line 1: unterminated ${");

	char *deep = repeat("FROM x\nENV A=", "${U:-", 40, "x");
	bad(deep, -EINVAL, "line 2: ${...} nested more than 32 deep");
	free(deep);
	char *ok = repeat("FROM x\nENV A=", "${U:-", 31, "x}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}");
	check_last(ok, RECIPE_ENV, ARGV("A=x"));
	free(ok);
}

static void test_arg(void **state)
{
	_cleanup_recipe_ struct recipe *r = parse("ARG A\nARG B=2\nFROM x\nARG C=${B}3\nRUN y");

	check_argv(&r->steps[0], ARGV("A"));
	check_argv(&r->steps[1], ARGV("B=2"));
	check_argv(&r->steps[3], ARGV("C=23"));
	assert_int_equal(r->steps[3].kind, RECIPE_ARG);
	check_env(r, ARGV("B=2", "C=23"));

	const char *args[] = {"A=1", "B=9", "C=", NULL};
	_cleanup_recipe_ struct recipe *g =
	    parse_args("ARG A\nARG B=2\nFROM x\nARG C=${B}3\nRUN y", args);
	check_argv(&g->steps[1], ARGV("B=2"));
	check_argv(&g->steps[3], ARGV("C=93"));
	check_env(g, ARGV("A=1", "B=9", "C="));

	/* the last of two given wins; a value may hold '=' */
	const char *twice[] = {"A=1", "A=x=y", NULL};
	_cleanup_recipe_ struct recipe *t = parse_args("FROM x\nARG A\nUSER $A", twice);
	check_argv(&t->steps[2], ARGV("x=y"));
	check_env(t, ARGV("A=x=y"));

	/* unset ARG expands to nothing; an ARG redeclared without a value keeps it */
	check_last("ARG U\nFROM x\nWORKDIR /x$U", RECIPE_WORKDIR, ARGV("/x"));
	_cleanup_recipe_ struct recipe *k = parse("ARG V=1\nFROM x\nARG V\nARG W='a b'\nUSER $V");
	check_argv(&k->steps[2], ARGV("V"));
	check_argv(&k->steps[3], ARGV("W=a b"));
	check_argv(&k->steps[4], ARGV("1"));
	check_env(k, ARGV("V=1", "W=a b"));

	/* ENV beats ARG of the same name whatever the order */
	check_last("ARG V=a\nFROM x\nENV V=b\nWORKDIR /$V", RECIPE_WORKDIR, ARGV("/b"));
	check_last("FROM x\nENV V=e\nARG V=a\nUSER $V", RECIPE_USER, ARGV("e"));
}

static void test_arg_errors(void **state)
{
	const char *undeclared[] = {"A=1", "NOPE=1", NULL};
	bad_args("ARG A\nFROM x", undeclared, -EINVAL,
		 "build argument 'NOPE' is not declared by an ARG");
	const char *bare[] = {"A", NULL};
	bad_args("ARG A\nFROM x", bare, -EINVAL, "build argument 'A' is not NAME=VALUE");
	const char *env[] = {"E=1", NULL};
	bad_args("FROM x\nENV E=2", env, -EINVAL, "build argument 'E' is not declared by an ARG");

	bad("FROM x\nARG 9x", -EINVAL, "line 2: ARG: '9x' is not a valid variable name");
	bad("FROM x\nARG A=1 B=2", -EINVAL, "line 2: ARG takes one NAME[=DEFAULT]");
	bad("FROM x\nARG A B", -EINVAL, "line 2: ARG takes one NAME[=DEFAULT]");
	bad("FROM x\nARG A=\"x", -EINVAL, "line 2: unterminated double quote");
	bad("FROM x\nARG A=${", -EINVAL, "line 2: unterminated ${");
}

static void test_workdir(void **state)
{
	_cleanup_recipe_ struct recipe *r = parse("FROM x\n"
						  "ENV D=/srv R=rel\n"
						  "WORKDIR /a//b/./c/\n"
						  "WORKDIR d/../e\n"
						  "WORKDIR ../../../../..\n"
						  "WORKDIR .\n"
						  "WORKDIR $D\n"
						  "WORKDIR $R//x/.\n"
						  "WORKDIR /x/..\n"
						  "WORKDIR /my dir\n"
						  "WORKDIR ...\n"
						  "WORKDIR \"/q/ r\"/..s\n"
						  "WORKDIR /\n");
	static const char *const want[] = {"/a/b/c",	  "/a/b/c/e",	"/", "/",
					   "/srv",	  "/srv/rel/x", "/", "/my dir",
					   "/my dir/...", "/q/ r/..s",	"/"};

	assert_int_equal(r->n_steps, 2 + ELEMENTSOF(want));
	for (size_t i = 0; i < ELEMENTSOF(want); i++) {
		assert_int_equal(r->steps[2 + i].kind, RECIPE_WORKDIR);
		check_argv(&r->steps[2 + i], ARGV(want[i]));
	}
	bad("FROM x\nWORKDIR $UNSET", -EINVAL, "line 2: WORKDIR names no directory");
	bad("FROM x\nWORKDIR \"\"", -EINVAL, "line 2: WORKDIR names no directory");
}

static void test_user(void **state)
{
	check_last("FROM x\nUSER 1000:1000", RECIPE_USER, ARGV("1000:1000"));
	check_last("ARG U=app\nFROM x\nUSER $U:${G:-$U}", RECIPE_USER, ARGV("app:app"));
	check_last("FROM x\nuser root", RECIPE_USER, ARGV("root"));
	bad("FROM x\nUSER a b", -EINVAL, "line 2: USER takes one word");
	bad("FROM x\nUSER $UNSET", -EINVAL, "line 2: USER takes one word");
}

/* ---- limits ------------------------------------------------------------------------------- */

static void test_limit_bytes(void **state)
{
	size_t len = RECIPE_MAX_BYTES + 1;
	char *text = malloc(len);
	assert_non_null(text);
	memset(text, '#', len);
	memcpy(text, "FROM x\n", 7);

	struct cordon_err err = {};
	struct recipe *r = NULL;
	assert_int_equal(recipe_parse(text, len, NULL, &r, &err), -E2BIG);
	assert_non_null(strstr(err.msg, "larger than"));
	/* one byte less is fine: the rest is one long comment */
	assert_int_equal(recipe_parse(text, len - 1, NULL, &r, &err), 0);
	r = recipe_free(r);
	free(text);
}

static void test_nul(void **state)
{
	static const char text[] = "FROM x\n# c\nRUN a\0b";
	struct cordon_err err = {};
	struct recipe *r = NULL;

	assert_int_equal(recipe_parse(text, sizeof(text) - 1, NULL, &r, &err), -EINVAL);
	assert_string_equal(err.msg, "line 3: a NUL byte");
	assert_null(r);
	/* the length is what counts: bytes after it are not read */
	assert_int_equal(recipe_parse(text, 6, NULL, &r, &err), 0);
	check_argv(&r->steps[0], ARGV("x"));
	recipe_free(r);
}

static void test_limit_steps(void **state)
{
	char *ok = repeat("FROM x", "\nRUN y", RECIPE_MAX_STEPS - 1, "\n");
	_cleanup_recipe_ struct recipe *r = parse(ok);
	assert_int_equal(r->n_steps, RECIPE_MAX_STEPS);
	assert_int_equal(r->steps[RECIPE_MAX_STEPS - 1].line, RECIPE_MAX_STEPS);
	free(ok);

	char *over = repeat("FROM x", "\nRUN y", RECIPE_MAX_STEPS, "");
	bad(over, -E2BIG, "line 513: more than 512 instructions");
	free(over);
}

static void test_limit_args(void **state)
{
	char *ok = repeat("FROM x\nCOPY", " a", RECIPE_MAX_ARGS - 1, " /d");
	_cleanup_recipe_ struct recipe *r = parse(ok);
	assert_int_equal(r->steps[1].argc, RECIPE_MAX_ARGS);
	free(ok);

	char *over = repeat("FROM x\nCOPY", " a", RECIPE_MAX_ARGS, " /d");
	bad(over, -E2BIG, "line 2: more than 4096 words in one instruction");
	free(over);

	char *json = repeat("FROM x\nRUN [\"a\"", ",\"b\"", RECIPE_MAX_ARGS, "]");
	bad(json, -E2BIG, "line 2: more than 4096 words");
	free(json);

	char *env = repeat("FROM x\nENV", " A=1", RECIPE_MAX_ARGS + 1, "");
	bad(env, -E2BIG, "line 2: more than 4096 words");
	free(env);

	char *from = repeat("FROM x", " y", RECIPE_MAX_ARGS, "");
	bad(from, -E2BIG, "line 1: more than 4096 words");
	free(from);
}

static void test_limit_vars(void **state)
{
	char text[16384];
	size_t n = (size_t)snprintf(text, sizeof(text), "FROM x\nENV");

	for (unsigned i = 0; i < RECIPE_MAX_VARS; i++)
		n += (size_t)snprintf(text + n, sizeof(text) - n, " V%u=%u", i, i);
	_cleanup_recipe_ struct recipe *r = parse(text);
	assert_int_equal(r->steps[1].argc, RECIPE_MAX_VARS);

	/* redefining one is no new variable */
	snprintf(text + n, sizeof(text) - n, "\nENV V0=x");
	_cleanup_recipe_ struct recipe *again = parse(text);
	assert_int_equal(again->n_steps, 3);

	snprintf(text + n, sizeof(text) - n, "\nARG V0");
	bad(text, -E2BIG, "line 3: more than 256 variables");
	snprintf(text + n, sizeof(text) - n, "\n\nENV NEW=1");
	bad(text, -E2BIG, "line 4: more than 256 variables");
}

static void test_limit_expansion(void **state)
{
	/* each step doubles A: 1 KiB << 10 is past the 1 MiB that references may add */
	char *text = repeat("FROM x\nENV A=", "x", 1024, "");
	char *more = repeat(text, "\nENV A=$A$A", 11, "");
	bad(more, -E2BIG, "line 12: variables expand to more than 1048576 bytes");
	free(more);
	more = repeat(text, "\nENV A=$A$A", 9, "");
	recipe_free(parse(more));
	free(more);
	free(text);

	/* also through ${X:-word} */
	char *refs =
	    repeat("FROM x\nENV A=xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\nENV B=", "${U:-$A}", 40000, "");
	bad(refs, -E2BIG, "line 3: variables expand to more than");
	free(refs);
}

/* Makes each allocation fail in turn: every one gives -ENOMEM and "out of memory" (LSan, in
 * the sanitizer build, checks that nothing leaks on any of those paths). */
static void test_enomem(void **state)
{
	static const char text[] =
	    "ARG BASE=debian\n"
	    "ARG TAG\n"
	    "FROM $BASE:${TAG:-bookworm}\n"
	    "ENV A=1 B=\"two $BASE\" C='x' \\\n"
	    "  D=${A:+yes}${U:-no}\n"
	    "ENV LEGACY rest of \"it\"\n"
	    "ARG E=$A\n"
	    "RUN apt-get update && \\\n"
	    "# comment\n"
	    "   apt-get install -y x\n"
	    "RUN [\"echo\", \"a\", \"b\", \"c\", \"d\", \"e\", \"f\", \"g\", \"h\", \"i\"]\n"
	    "WORKDIR /srv//app/../x\n"
	    "WORKDIR sub\n"
	    "COPY --chown=$A --chmod=0644 a b c d e f g h i j /dst/\n"
	    "ADD [\"$A\", \"/x\"]\n"
	    "USER ${U:-app}\n"
	    "START [\"x\"]\n"
	    "READY true\n"
	    "RUN 1\nRUN 2\nRUN 3\nRUN 4\nRUN 5\nRUN 6\nRUN 7\nRUN 8\n";
	const char *args[] = {"TAG=bookworm-slim", NULL};
	long i;

	for (i = 0;; i++) {
		struct cordon_err err = {};
		struct recipe *r = NULL;
		n_allocs = 0;
		fail_at = i;
		int rc = recipe_parse(text, sizeof(text) - 1, args, &r, &err);
		fail_at = -1;
		if (n_allocs <= i) { /* allocation i was never made */
			assert_int_equal(rc, 0);
			assert_int_equal(r->n_steps, 23);
			recipe_free(r);
			break;
		}
		if (rc != -ENOMEM)
			print_message("allocation %ld: %d '%s'\n", i, rc, err.msg);
		assert_int_equal(rc, -ENOMEM);
		assert_non_null(strstr(err.msg, "out of memory"));
		assert_null(r);
	}
	assert_true(i > 100);
}

static void test_kind_name(void **state)
{
	static const char *const names[] = {"FROM",    "RUN",  "COPY",	"ENV",	"ARG",
					    "WORKDIR", "USER", "START", "READY"};

	for (size_t i = 0; i < ELEMENTSOF(names); i++)
		assert_string_equal(recipe_kind_name((enum recipe_kind)i), names[i]);
	assert_null(recipe_kind_name((enum recipe_kind)99));
	assert_null(recipe_kind_name((enum recipe_kind) - 1));
	assert_null(recipe_free(NULL));
}

static void test_full(void **state)
{
	const char *args[] = {"PY=3.11", NULL};
	_cleanup_recipe_ struct recipe *r =
	    parse_args("# syntax=docker/dockerfile:1\n"
		       "ARG PY=3\n"
		       "FROM debian:bookworm-slim\n"
		       "ENV DEBIAN_FRONTEND=noninteractive \\\n"
		       "    APP=/srv/app\n"
		       "RUN apt-get update \\\n"
		       " && apt-get install -y python${PY} \\\n"
		       " && rm -rf /var/lib/apt/lists/*\n"
		       "WORKDIR $APP\n"
		       "COPY --chown=app:app requirements.txt ./\n"
		       "ADD vendor.tar.gz vendor/\n"
		       "USER app\n"
		       "START [\"python3\", \"-m\", \"http.server\", \"8000\"]\n"
		       "READY curl -fsS http://127.0.0.1:8000/\n",
		       args);
	static const enum recipe_kind kinds[] = {
	    RECIPE_ARG,	 RECIPE_FROM, RECIPE_ENV,  RECIPE_RUN,	 RECIPE_WORKDIR,
	    RECIPE_COPY, RECIPE_COPY, RECIPE_USER, RECIPE_START, RECIPE_READY};
	static const unsigned lines[] = {2, 3, 4, 6, 9, 10, 11, 12, 13, 14};

	assert_int_equal(r->n_steps, ELEMENTSOF(kinds));
	for (size_t i = 0; i < ELEMENTSOF(kinds); i++) {
		assert_int_equal(r->steps[i].kind, kinds[i]);
		assert_int_equal(r->steps[i].line, lines[i]);
	}
	check_argv(&r->steps[2], ARGV("DEBIAN_FRONTEND=noninteractive", "APP=/srv/app"));
	check_argv(&r->steps[3], ARGV("/bin/sh", "-c",
				      "apt-get update && apt-get install -y python${PY} && rm -rf "
				      "/var/lib/apt/lists/*"));
	check_argv(&r->steps[4], ARGV("/srv/app"));
	check_argv(&r->steps[5], ARGV("requirements.txt", "./"));
	assert_true(r->steps[6].add);
	check_env(r, ARGV("PY=3.11"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_from),
	    cmocka_unit_test(test_from_build_args),
	    cmocka_unit_test(test_from_errors),
	    cmocka_unit_test(test_run_forms),
	    cmocka_unit_test(test_run_json_fallback),
	    cmocka_unit_test(test_continuations),
	    cmocka_unit_test(test_unsupported),
	    cmocka_unit_test(test_needs_argument),
	    cmocka_unit_test(test_copy),
	    cmocka_unit_test(test_copy_errors),
	    cmocka_unit_test(test_env),
	    cmocka_unit_test(test_env_errors),
	    cmocka_unit_test(test_expansion),
	    cmocka_unit_test(test_arg),
	    cmocka_unit_test(test_arg_errors),
	    cmocka_unit_test(test_workdir),
	    cmocka_unit_test(test_user),
	    cmocka_unit_test(test_limit_bytes),
	    cmocka_unit_test(test_nul),
	    cmocka_unit_test(test_limit_steps),
	    cmocka_unit_test(test_limit_args),
	    cmocka_unit_test(test_limit_vars),
	    cmocka_unit_test(test_limit_expansion),
	    cmocka_unit_test(test_enomem),
	    cmocka_unit_test(test_kind_name),
	    cmocka_unit_test(test_full),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
