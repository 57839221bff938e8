/* The runtime half of seccomp: hand a BPF program compiled at build time to the kernel. */
#include <errno.h>
#include <linux/seccomp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lib/seccomp.h"

int seccomp_apply(const struct sock_filter *filter, unsigned short len)
{
	/* The kernel copies the program and never writes to it: the cast drops const only to
	 * fit struct sock_fprog. */
	struct sock_fprog prog = {
	    .len = len,
	    .filter = (struct sock_filter *)filter,
	};

	/* seccomp(2) rather than prctl(PR_SET_SECCOMP): it is the interface that takes flags,
	 * and glibc 2.36 has no wrapper for it. */
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0)
		return -errno;
	return 0;
}
