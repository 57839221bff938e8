#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <unistd.h>

#include "basic/fileio.h"
#include "basic/host.h"

uint32_t host_cpus_milli(void)
{
	cpu_set_t set;
	int n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
	if (n <= 0) /* more CPUs than a cpu_set_t holds: the online count is then the better guess */
		n = (int)sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (uint32_t)n * 1000 : 1000;
}

int host_memory_bytes(uint64_t *ret)
{
	uint64_t kib;
	int r = read_keyed_u64_at(AT_FDCWD, "/proc/meminfo", "MemTotal:", &kib);
	if (r < 0)
		return r;
	if (kib == 0 || kib > UINT64_MAX >> 10)
		return -EINVAL;
	*ret = kib << 10;
	return 0;
}
