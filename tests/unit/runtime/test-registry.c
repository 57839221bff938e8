/* The runtime registry and the dispatcher (src/runtime/registry.c, runtime.c): what the real
 * registry lists and refuses, auto's choice among runtimes defined here, and the optional
 * verbs that answer -EOPNOTSUPP when a runtime leaves them out. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "basic/cleanup.h"
#include "runtime/runtime.h"
#include "policy/seccomp_filter.h"

static void test_registry_lists_the_known_runtimes(void **state)
{
	static const char *const names[] = {"microvm", "gvisor", "jail"};
	struct cordon_runtime_info info;
	for (size_t i = 0; i < ELEMENTSOF(names); i++) {
		assert_int_equal(cordon_runtime_get(i, &info), 0);
		assert_string_equal(info.name, names[i]);
		if (strcmp(names[i], "jail") == 0) {
			assert_true(info.available);
			assert_string_equal(info.reason, "");
			assert_true(info.caps & CORDON_RUNTIME_CAP_ONESHOT);
			assert_true(info.caps & CORDON_RUNTIME_CAP_AGENT);
			assert_true(info.caps & CORDON_RUNTIME_CAP_PAUSE);
			assert_true(info.caps & CORDON_RUNTIME_CAP_SNAPSHOT);
		} else if (strcmp(names[i], "gvisor") == 0) {
			/* Built; available where runsc is and a platform works (root only). */
			assert_true(info.caps & CORDON_RUNTIME_CAP_AGENT);
			assert_true(info.caps & CORDON_RUNTIME_CAP_PAUSE);
			assert_true(info.caps & CORDON_RUNTIME_CAP_SNAPSHOT);
			assert_true(info.available || info.reason[0]);
			assert_true(!info.available || !info.reason[0]);
		} else {
			/* Built; available where QEMU and the guest kernel are, then kvm or tcg. */
			assert_true(info.available || info.reason[0]);
			assert_true(!info.available || strcmp(info.mode, "kvm") == 0 ||
				    strcmp(info.mode, "tcg") == 0);
		}
	}
	assert_int_equal(cordon_runtime_get(ELEMENTSOF(names), &info), -ENOENT);
}

static void test_resolve(void **state)
{
	struct cordon_runtime_info gv, mv;
	assert_int_equal(cordon_runtime_get(1, &gv), 0);
	assert_int_equal(cordon_runtime_get(0, &mv), 0);
	/* auto takes microvm only under KVM (TCG is emulation: asked for by name). */
	const char *strongest = mv.available && strcmp(mv.mode, "kvm") == 0 ? "microvm"
				: gv.available			      ? "gvisor"
								      : "jail";
	const char *name = NULL;
	assert_int_equal(cordon_runtime_resolve("jail", &name, NULL), 0);
	assert_string_equal(name, "jail");
	assert_int_equal(cordon_runtime_resolve("auto", &name, NULL), 0);
	assert_string_equal(name, strongest);
	struct cordon_err err = {};
	char can[64];
	snprintf(can, sizeof(can), "this host can run: %s%s", mv.available ? "microvm, " : "",
		 gv.available ? "gvisor, jail" : "jail");
	name = "untouched";
	if (!gv.available) {
		assert_int_equal(cordon_runtime_resolve("gvisor", &name, &err), -EOPNOTSUPP);
		assert_true(strncmp(err.msg, "runtime 'gvisor': ", 18) == 0);
		assert_non_null(strstr(err.msg, can));
		assert_string_equal(name, "untouched");
	}
	char want[160];
	assert_int_equal(cordon_runtime_resolve("runc", &name, &err), -ENOENT);
	snprintf(want, sizeof(want), "runtime 'runc': no such runtime; %s", can);
	assert_string_equal(err.msg, want);
	/* Names are exact: no prefix, no case folding. */
	assert_int_equal(cordon_runtime_resolve("Jail", &name, NULL), -ENOENT);
	assert_int_equal(cordon_runtime_resolve("jai", &name, NULL), -ENOENT);
	assert_int_equal(cordon_runtime_resolve("", &name, NULL), -ENOENT);
}

static int yes(struct cordon_err *err) { return 0; }
static int no(struct cordon_err *err) { return cordon_err_setf(err, -ENODEV, "no KVM"); }

#define BOTH (CORDON_RUNTIME_CAP_ONESHOT | CORDON_RUNTIME_CAP_AGENT | CORDON_RUNTIME_CAP_EGRESS)
static const struct runtime_ops weak = {.name = "weak", .strength = 5, .caps = BOTH, .available = yes};
static const struct runtime_ops strong_off = {.name = "strong", .strength = 50, .caps = BOTH, .available = no};
static const struct runtime_ops middle = {.name = "middle", .strength = 20, .caps = BOTH, .available = yes};
/* Available but without both modes and a network: never auto's pick. */
static const struct runtime_ops partial = {.name = "partial", .strength = 40, .available = yes};

static void test_auto_picks_the_strongest_available(void **state)
{
	/* Whatever the order of the list. */
	const struct runtime_ops *const orders[][4] = {
	    {&weak, &strong_off, &middle, &partial}, {&middle, &partial, &weak, &strong_off},
	    {&partial, &strong_off, &middle, &weak},
	};
	for (size_t i = 0; i < ELEMENTSOF(orders); i++) {
		const struct runtime_ops *got = NULL;
		assert_int_equal(runtime_pick(orders[i], 4, "auto", &got, NULL), 0);
		assert_ptr_equal(got, &middle);
		assert_int_equal(runtime_pick(orders[i], 4, NULL, &got, NULL), 0);
		assert_ptr_equal(got, &middle);
	}
	const struct runtime_ops *list[] = {&weak, &strong_off, &middle}, *got = NULL;
	struct cordon_err err = {};
	assert_int_equal(runtime_pick(list, 3, "weak", &got, NULL), 0);
	assert_ptr_equal(got, &weak);
	/* The runtime's own reason, and what can run instead. */
	assert_int_equal(runtime_pick(list, 3, "strong", &got, &err), -EOPNOTSUPP);
	assert_string_equal(err.msg, "runtime 'strong': no KVM; this host can run: weak, middle");

	const struct runtime_ops *none[] = {&strong_off};
	got = NULL;
	assert_int_equal(runtime_pick(none, 1, "auto", &got, &err), -EOPNOTSUPP);
	assert_null(got);
	assert_string_equal(err.msg, "runtime 'auto': no runtime can run here; this host can run: none");
}

/* A runtime with the verbs every runtime has and none of the optional ones. */
static int n_started, n_freed;
static int fake_start(struct cordon_sandbox *sb, const struct cordon_spec *spec,
		      struct cordon_err *err)
{
	n_started++;
	return 0;
}
static int fake_fd(const struct cordon_sandbox *sb) { return -1; }
static int fake_finish(struct cordon_sandbox *sb, struct cordon_err *err) { return 0; }
static void fake_setup_close(struct cordon_sandbox *sb) {}
static int fake_signal(struct cordon_sandbox *sb, int sig) { return 0; }
static int fake_kill(struct cordon_sandbox *sb) { return 0; }
static int fake_reap(struct cordon_sandbox *sb, struct cordon_result *ret) { return 0; }
static void fake_free(struct cordon_sandbox *sb) { n_freed++; }

static const struct runtime_ops fake = {
    .name = "fake", .strength = 1, .caps = CORDON_RUNTIME_CAP_AGENT,
    .size = sizeof(struct cordon_sandbox), .available = yes,
    .start = fake_start, .setup_fd = fake_fd, .finish = fake_finish,
    .setup_close = fake_setup_close, .agent_fd = fake_fd,
    .exit_fd = fake_fd, .signal = fake_signal, .kill = fake_kill, .reap = fake_reap,
    .free = fake_free,
};

static void test_optional_verbs_answer_eopnotsupp(void **state)
{
	struct cordon_spec spec;
	struct cordon_sandbox *sb = NULL;
	struct cordon_err err = {};
	struct cordon_stats st;
	cordon_spec_init(&spec);
	n_started = n_freed = 0;
	assert_int_equal(runtime_start(&fake, &spec, &sb, &err), 0);
	assert_int_equal(n_started, 1);
	assert_string_equal(cordon_sandbox_runtime(sb), "fake");
	assert_int_equal(cordon_sandbox_pause(sb), -EOPNOTSUPP);
	assert_int_equal(cordon_sandbox_resume(sb), -EOPNOTSUPP);
	struct cordon_snapshot_info info;
	assert_int_equal(cordon_sandbox_snapshot(sb, -1, &info, &err), -EOPNOTSUPP);
	assert_string_equal(err.msg, "runtime 'fake': cannot snapshot");
	assert_int_equal(cordon_sandbox_stats(sb, &st), -EOPNOTSUPP);
	assert_int_equal(cordon_sandbox_set_limits(sb, 64 << 20, 1000, 64), -EOPNOTSUPP);
	assert_int_equal(cordon_sandbox_attach_net(sb, NULL, NULL, &err), -EOPNOTSUPP);
	assert_null(cordon_sandbox_free(sb));
	assert_int_equal(n_freed, 1);
}

static void test_spec_is_checked_before_the_runtime_runs(void **state)
{
	static char *const argv[] = {"true", NULL};
	struct cordon_spec spec;
	struct cordon_sandbox *sb = NULL;
	struct cordon_err err = {};
	n_started = n_freed = 0;

	/* A one-shot command on a runtime without one-shot mode. */
	cordon_spec_init(&spec);
	spec.argv = argv;
	assert_int_equal(runtime_start(&fake, &spec, &sb, &err), -EOPNOTSUPP);
	assert_string_equal(err.msg, "runtime 'fake': has no one-shot commands");
	/* No seccomp program: fail closed. */
	cordon_spec_init(&spec);
	spec.seccomp = NULL;
	assert_int_equal(runtime_start(&fake, &spec, &sb, &err), -EINVAL);
	assert_string_equal(err.msg, "seccomp: no filter");
	cordon_spec_init(&spec);
	spec.memory_bytes = 1 << 20;
	assert_int_equal(runtime_start(&fake, &spec, &sb, &err), -EINVAL);
	assert_null(sb);
	assert_int_equal(n_started, 0);
	assert_int_equal(n_freed, 0);
}

static void test_spec_defaults(void **state)
{
	struct cordon_spec spec;
	cordon_spec_init(&spec);
	assert_null(spec.runtime);
	for (int i = 0; i < 3; i++)
		assert_int_equal(spec.stdio[i], -1); /* nothing inherited */
	assert_ptr_equal(spec.seccomp, &cordon_seccomp_sandbox);
	assert_true(cordon_seccomp_sandbox.len > 0);
}

static void test_cap_names(void **state)
{
	assert_string_equal(cordon_runtime_cap_name(CORDON_RUNTIME_CAP_ONESHOT), "oneshot");
	assert_string_equal(cordon_runtime_cap_name(CORDON_RUNTIME_CAP_SNAPSHOT), "snapshot");
	for (int i = 0; i < _CORDON_RUNTIME_CAP_COUNT; i++)
		assert_non_null(cordon_runtime_cap_name(1u << i));
	assert_null(cordon_runtime_cap_name(1u << _CORDON_RUNTIME_CAP_COUNT));
	assert_null(cordon_runtime_cap_name(3));
	assert_null(cordon_runtime_cap_name(0));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_registry_lists_the_known_runtimes),
	    cmocka_unit_test(test_resolve),
	    cmocka_unit_test(test_auto_picks_the_strongest_available),
	    cmocka_unit_test(test_optional_verbs_answer_eopnotsupp),
	    cmocka_unit_test(test_spec_is_checked_before_the_runtime_runs),
	    cmocka_unit_test(test_spec_defaults),
	    cmocka_unit_test(test_cap_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
