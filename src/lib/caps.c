#include <errno.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/capability.h>

#include "basic/cleanup.h"
#include "lib/caps.h"

int caps_drop_bounding(uint64_t keep, struct cordon_err *err)
{
	/* Walk up to 63 and stop at the first EINVAL: that is the kernel's last capability, so a
	 * kernel newer than our headers loses its new capabilities too. */
	for (int c = 0; c < 64; c++) {
		if (keep & CAP_BIT(c))
			continue;
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0) {
			if (errno == EINVAL)
				break;
			return cordon_err_set(err, -errno, "drop capability %d from the bounding set", c);
		}
	}
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		return cordon_err_set(err, -errno, "clear ambient capabilities");
	return 0;
}

int caps_set(uint64_t keep, struct cordon_err *err)
{
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct data[2] = {};
	for (int i = 0; i < 2; i++)
		data[i].effective = data[i].permitted = (uint32_t)(keep >> (32 * i));
	if (syscall(SYS_capset, &hdr, data) < 0)
		return cordon_err_set(err, -errno, "capset");
	return 0;
}

int rlimits_apply(const struct rlimit_spec *r, struct cordon_err *err)
{
	const struct {
		int resource;
		uint64_t value;
		const char *name;
	} table[] = {
		{RLIMIT_NOFILE, r->nofile, "NOFILE"},	  {RLIMIT_NPROC, r->nproc, "NPROC"},
		{RLIMIT_FSIZE, r->fsize, "FSIZE"},	  {RLIMIT_CORE, r->core, "CORE"},
		{RLIMIT_MEMLOCK, r->memlock, "MEMLOCK"},  {RLIMIT_MSGQUEUE, r->msgqueue, "MSGQUEUE"},
		{RLIMIT_SIGPENDING, r->sigpending, "SIGPENDING"},
	};
	for (size_t i = 0; i < ELEMENTSOF(table); i++) {
		/* Never above the hard limit we were given: raising it needs CAP_SYS_RESOURCE in
		 * the host's user namespace (the kernel sizes SIGPENDING and NPROC by memory, and
		 * systemd passes those on), and lower is only stricter. */
		struct rlimit rl = {table[i].value, table[i].value}, cur;
		if (getrlimit(table[i].resource, &cur) == 0 && cur.rlim_max != RLIM_INFINITY &&
		    rl.rlim_max > cur.rlim_max)
			rl.rlim_cur = rl.rlim_max = cur.rlim_max;
		if (setrlimit(table[i].resource, &rl) < 0)
			return cordon_err_set(err, -errno, "setrlimit %s", table[i].name);
	}
	return 0;
}
