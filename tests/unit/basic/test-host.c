/* host_cpus_milli() and host_memory_bytes(): what the host can give one sandbox, checked
 * against the kernel's own answers (the affinity mask and /proc/meminfo) read another way. */
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "basic/host.h"

static void test_cpus_are_the_affinity_mask(void **state)
{
	cpu_set_t set;
	assert_int_equal(sched_getaffinity(0, sizeof(set), &set), 0);
	assert_int_equal(host_cpus_milli(), (uint32_t)CPU_COUNT(&set) * 1000);

	/* One CPU allowed: one CPU is what a sandbox can have (a cpuset shrinks the maximum). */
	cpu_set_t one;
	CPU_ZERO(&one);
	for (int i = 0; i < CPU_SETSIZE; i++)
		if (CPU_ISSET(i, &set)) {
			CPU_SET(i, &one);
			break;
		}
	assert_int_equal(sched_setaffinity(0, sizeof(one), &one), 0);
	assert_int_equal(host_cpus_milli(), 1000);
	assert_int_equal(sched_setaffinity(0, sizeof(set), &set), 0);
}

static void test_memory_is_memtotal(void **state)
{
	FILE *f = fopen("/proc/meminfo", "re");
	unsigned long long kib = 0;
	char line[256];
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "MemTotal: %llu kB", &kib) == 1)
			break;
	fclose(f);
	assert_true(kib > 0);

	uint64_t bytes = 0;
	assert_int_equal(host_memory_bytes(&bytes), 0);
	assert_true(bytes == (uint64_t)kib << 10);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cpus_are_the_affinity_mask),
		cmocka_unit_test(test_memory_is_memtotal),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
