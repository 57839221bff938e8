/* caps and rlimits, each in a forked child (they cannot be undone). Dropping the bounding
 * set needs CAP_SETPCAP. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>
#include <linux/capability.h>

#include <cmocka.h>

#include "basic/fileio.h"
#include "lib/caps.h"
#include "child.h"

static bool have_setpcap(void)
{
	uint64_t eff = 0;
	char buf[4096];
	if (read_file_at(AT_FDCWD, "/proc/self/status", buf, sizeof(buf)) > 0) {
		const char *p = strstr(buf, "CapEff:");
		if (p)
			eff = strtoull(p + 7, NULL, 16);
	}
	return eff & CAP_BIT(CAP_SETPCAP);
}

/* One capability set line of /proc/self/status, or UINT64_MAX if absent. */
static uint64_t status_caps(const char *key)
{
	char buf[4096];
	if (read_file_at(AT_FDCWD, "/proc/self/status", buf, sizeof(buf)) <= 0)
		return UINT64_MAX;
	const char *p = strstr(buf, key);
	return p ? strtoull(p + strlen(key), NULL, 16) : UINT64_MAX;
}

static void drop_all(int fd)
{
	struct cordon_err e = {};
	CHILD_CHECK(fd, caps_drop_bounding(0, &e) == 0);
	CHILD_CHECK(fd, caps_set(0, &e) == 0);
	CHILD_CHECK(fd, status_caps("CapBnd:") == 0);
	CHILD_CHECK(fd, status_caps("CapEff:") == 0);
	CHILD_CHECK(fd, status_caps("CapPrm:") == 0);
	CHILD_CHECK(fd, status_caps("CapInh:") == 0);
	CHILD_CHECK(fd, status_caps("CapAmb:") == 0);
	/* and it shows: still uid 0, but no longer privileged */
	CHILD_CHECK(fd, prctl(PR_CAPBSET_READ, CAP_SYS_ADMIN, 0, 0, 0) == 0);
	CHILD_CHECK(fd, sethostname("x", 1) < 0 && errno == EPERM);
	struct rlimit rl;
	CHILD_CHECK(fd, getrlimit(RLIMIT_NOFILE, &rl) == 0);
	rl.rlim_max = rl.rlim_max == RLIM_INFINITY ? rl.rlim_max : rl.rlim_max + 1;
	CHILD_CHECK(fd, rl.rlim_max == RLIM_INFINITY || (setrlimit(RLIMIT_NOFILE, &rl) < 0 && errno == EPERM));
}

static void test_drop_all(void **state)
{
	if (!have_setpcap()) {
		print_message("skip: dropping the bounding set needs CAP_SETPCAP\n");
		skip();
	}
	run_in_child(drop_all);
}

static void keep_some(int fd)
{
	uint64_t keep = CAP_BIT(CAP_NET_BIND_SERVICE) | CAP_BIT(CAP_CHOWN);
	CHILD_CHECK(fd, caps_drop_bounding(keep, NULL) == 0);
	CHILD_CHECK(fd, caps_set(keep, NULL) == 0);
	CHILD_CHECK(fd, status_caps("CapBnd:") == keep);
	CHILD_CHECK(fd, status_caps("CapEff:") == keep);
	CHILD_CHECK(fd, status_caps("CapPrm:") == keep);
	CHILD_CHECK(fd, status_caps("CapInh:") == 0);
	/* what is no longer permitted cannot come back */
	struct cordon_err e = {};
	CHILD_CHECK(fd, caps_set(keep | CAP_BIT(CAP_SYS_ADMIN), &e) == -EPERM);
	CHILD_CHECK(fd, e.code == -EPERM && strstr(e.msg, "capset"));
	CHILD_CHECK(fd, caps_set(CAP_BIT(CAP_CHOWN), NULL) == 0);
	CHILD_CHECK(fd, status_caps("CapEff:") == CAP_BIT(CAP_CHOWN));
}

static void test_keep_some(void **state)
{
	if (!have_setpcap()) {
		print_message("skip: dropping the bounding set needs CAP_SETPCAP\n");
		skip();
	}
	run_in_child(keep_some);
}

static const struct rlimit_spec spec = {
	.nofile = 64,
	.nproc = 100,
	.fsize = 1 << 20,
	.core = 0,
	.memlock = 64 << 10,
	.msgqueue = 8192,
	.sigpending = 50,
};

static void rlimits(int fd)
{
	static const struct {
		int resource;
		uint64_t want;
	} table[] = {
		{RLIMIT_NOFILE, 64},	 {RLIMIT_NPROC, 100},	{RLIMIT_FSIZE, 1 << 20},
		{RLIMIT_CORE, 0},	 {RLIMIT_MEMLOCK, 64 << 10}, {RLIMIT_MSGQUEUE, 8192},
		{RLIMIT_SIGPENDING, 50},
	};
	struct cordon_err e = {};
	CHILD_CHECK(fd, rlimits_apply(&spec, &e) == 0);
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		struct rlimit rl;
		CHILD_CHECK(fd, getrlimit(table[i].resource, &rl) == 0);
		if (rl.rlim_cur != table[i].want || rl.rlim_max != table[i].want) {
			dprintf(fd, "resource %d: %llu/%llu, want %llu", table[i].resource,
				(unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max,
				(unsigned long long)table[i].want);
			_exit(1);
		}
	}
	/* they hold: fd 64 cannot be opened, a file cannot grow past 1 MiB */
	CHILD_CHECK(fd, fcntl(0, F_DUPFD, 64) < 0 && errno == EINVAL);
	signal(SIGXFSZ, SIG_IGN);
	char path[] = "/tmp/cordon-test-rlimit-XXXXXX";
	int f = mkostemp(path, O_CLOEXEC);
	CHILD_CHECK(fd, f >= 0);
	unlink(path);
	CHILD_CHECK(fd, ftruncate(f, 1 << 20) == 0);
	CHILD_CHECK(fd, ftruncate(f, (1 << 20) + 1) < 0 && errno == EFBIG);
	close(f);
}

static void test_rlimits(void **state)
{
	run_in_child(rlimits);
}

/* Raising a hard limit needs CAP_SYS_RESOURCE, which a sandbox never has: asking for more
 * than the inherited hard limit gets the hard limit (stricter, never an error that would
 * stop every sandbox on a host whose kernel sized the limit smaller, see caps.c). */
static void rlimits_no_raise(int fd)
{
	struct cordon_err e = {};
	struct rlimit rl;
	CHILD_CHECK(fd, rlimits_apply(&spec, &e) == 0);
	CHILD_CHECK(fd, caps_set(0, NULL) == 0);
	struct rlimit_spec more = spec;
	more.nofile = 128;
	CHILD_CHECK(fd, rlimits_apply(&more, &e) == 0);
	CHILD_CHECK(fd, getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max == spec.nofile &&
				rl.rlim_cur == spec.nofile);
}

static void test_rlimits_no_raise(void **state)
{
	run_in_child(rlimits_no_raise);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_drop_all),
		cmocka_unit_test(test_keep_some),
		cmocka_unit_test(test_rlimits),
		cmocka_unit_test(test_rlimits_no_raise),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
