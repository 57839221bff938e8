/* libFuzzer target for recipe_parse(): the input is the recipe text, parsed twice, without
 * build arguments and with VERSION=3.12 (declared by `ARG VERSION` in some seeds, an error
 * otherwise). Beyond "no crash, no leak", it checks what the header promises: one FROM with
 * only ARGs before it, lines in order, argv NULL-terminated within the limits, WORKDIR
 * normalised, --chmod octal, ENV/ARG/build_env names valid; a failure is -EINVAL, -E2BIG or
 * -ENOMEM with a one-line message and no result. */
#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "image/recipe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool valid_name(const char *s, size_t n)
{
	if (n == 0 ||
	    !(s[0] == '_' || (s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z')))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!(s[i] == '_' || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z') ||
		      (s[i] >= '0' && s[i] <= '9')))
			return false;
	return true;
}

/* "K=V" with a valid K. */
static void check_assignment(const char *kv)
{
	const char *eq = strchr(kv, '=');
	assert(eq && valid_name(kv, eq - kv));
}

static void check_workdir(const char *d)
{
	assert(d[0] == '/');
	assert(!strstr(d, "//") && !strstr(d, "/./") && !strstr(d, "/../"));
	size_t n = strlen(d);
	if (n > 1) {
		assert(d[n - 1] != '/');
		assert(strcmp(d + n - 2, "/.") != 0);
		assert(n < 3 || strcmp(d + n - 3, "/..") != 0);
	}
}

static void check_chmod(const char *m)
{
	char *end;
	assert(m[0] >= '0' && m[0] <= '7');
	assert(strspn(m, "01234567") == strlen(m));
	assert(strtoul(m, &end, 8) <= 07777 && *end == '\0');
}

static void check_kind(const struct recipe_step *st)
{
	switch (st->kind) {
	case RECIPE_FROM:
	case RECIPE_USER:
		assert(st->argc == 1 && st->argv[0][0]);
		break;
	case RECIPE_RUN:
	case RECIPE_START:
	case RECIPE_READY:
		assert(st->argc >= 1);
		break;
	case RECIPE_COPY:
		assert(st->argc >= 2);
		for (size_t i = 0; i < st->argc; i++)
			assert(st->argv[i][0]);
		assert(!st->chown || st->chown[0]);
		if (st->chmod)
			check_chmod(st->chmod);
		break;
	case RECIPE_ENV:
		for (size_t i = 0; i < st->argc; i++)
			check_assignment(st->argv[i]);
		break;
	case RECIPE_ARG:
		assert(st->argc == 1);
		assert(valid_name(st->argv[0], strcspn(st->argv[0], "=")));
		break;
	case RECIPE_WORKDIR:
		assert(st->argc == 1);
		check_workdir(st->argv[0]);
		break;
	default:
		assert(!"unknown step kind");
	}
	if (st->kind != RECIPE_COPY)
		assert(!st->chown && !st->chmod && !st->add);
}

static void check_recipe(const struct recipe *r)
{
	size_t froms = 0;
	unsigned line = 0;

	assert(r->n_steps >= 1 && r->n_steps <= RECIPE_MAX_STEPS);
	for (size_t i = 0; i < r->n_steps; i++) {
		const struct recipe_step *st = &r->steps[i];
		assert(st->line > line);
		line = st->line;
		assert(st->text && st->text[0] && !strchr(st->text, '\n'));
		assert(recipe_kind_name(st->kind));
		assert(st->argv && st->argc <= RECIPE_MAX_ARGS && !st->argv[st->argc]);
		for (size_t j = 0; j < st->argc; j++)
			assert(st->argv[j]);
		check_kind(st);
		if (st->kind == RECIPE_FROM)
			froms++;
		else if (froms == 0)
			assert(st->kind == RECIPE_ARG);
	}
	assert(froms == 1);
	assert(r->n_build_env <= RECIPE_MAX_VARS);
	assert(r->build_env && !r->build_env[r->n_build_env]);
	for (size_t i = 0; i < r->n_build_env; i++)
		check_assignment(r->build_env[i]);
}

static void run(const char *text, size_t len, const char *const *args)
{
	struct cordon_err err = {0};
	struct recipe *r = NULL;
	int rc = recipe_parse(text, len, args, &r, &err);

	if (rc < 0) {
		assert(rc == -EINVAL || rc == -E2BIG || rc == -ENOMEM);
		assert(err.code == rc && err.msg[0] && !strchr(err.msg, '\n'));
		assert(!r);
		return;
	}
	assert(rc == 0 && r);
	check_recipe(r);
	recipe_free(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const args[] = {"VERSION=3.12", NULL};

	run((const char *)data, size, NULL);
	run((const char *)data, size, args);
	return 0;
}
