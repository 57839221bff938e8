/* E2B's create body as Cordon's create request (src/daemon/e2b_create.c): which Cordon
 * template an E2B templateID names, E2B's SDKs' defaults mapped by the alias table. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/e2b.h"

static const struct e2b_alias aliases[] = {{"base", "host"}, {"code-interpreter-v1", "code-interpreter"}};

/* The Cordon template of @body. */
static void expect_template(const char *body, const char *want)
{
	struct cordon_err err = {};
	struct e2b_create c = {};
	assert_int_equal(e2b_create_parse(body, strlen(body), 3600, aliases, 2, false, &c, &err), 0);
	assert_string_equal(c.req->template_name, want);
	e2b_create_done(&c);
}

static void test_aliases(void **state)
{
	expect_template("{}", "host");                          /* the e2b SDK's default: base */
	expect_template("{\"templateID\": \"base\"}", "host");
	expect_template("{\"templateID\": \"code-interpreter-v1\"}", "code-interpreter");
	expect_template("{\"templateID\": \"mine\"}", "mine");   /* any other: Cordon's own */
	expect_template("{\"templateID\": \"code-interpreter\"}", "code-interpreter");
}

static void test_no_alias_matches_a_prefix(void **state)
{
	expect_template("{\"templateID\": \"base2\"}", "base2");
	struct cordon_err err = {};
	struct e2b_create c = {};
	assert_int_equal(e2b_create_parse("{\"templateID\": 7}", 17, 3600, aliases, 2, false, &c, &err),
			 -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_aliases),
		cmocka_unit_test(test_no_alias_matches_a_prefix),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
