/* What this host can give one sandbox at most, for refusing limits it could never honour
 * (`--cpus 99` on two cores, `--memory 1T` on 24 GiB) instead of accepting them silently.
 *
 *     uint32_t cpus_milli = host_cpus_milli();
 *     uint64_t mem;
 *     if (host_memory_bytes(&mem) == 0 && want > mem) refuse...
 */
#pragma once

#include <stdint.h>

/* The CPUs this process may run on (its affinity mask, so a cpuset counts), in thousandths
 * of a CPU as cordon_spec.cpus_milli; at least 1000. */
uint32_t host_cpus_milli(void);

/* The host's memory (MemTotal of /proc/meminfo). -errno when it cannot be read. */
int host_memory_bytes(uint64_t *ret);
