/* The runtime half of seccomp: hand the BPF baked in at build time to the kernel. */
#include <errno.h>
#include <linux/seccomp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lib/seccomp.h"
#include "policy/seccomp_filter.h"

int seccomp_apply(void)
{
	/* The kernel copies the program and never writes to it: the cast drops const only to
	 * fit struct sock_fprog. */
	struct sock_fprog prog = {
	    .len = cordon_seccomp_filter_len,
	    .filter = (struct sock_filter *)cordon_seccomp_filter,
	};

	/* seccomp(2) rather than prctl(PR_SET_SECCOMP): it is the interface that takes flags,
	 * and glibc 2.36 has no wrapper for it. */
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0)
		return -errno;
	return 0;
}
