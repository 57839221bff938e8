#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "basic/cleanup.h"
#include "basic/fileio.h"
#include "lib/ns.h"

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

int ns_loopback_up(struct cordon_err *err)
{
	_cleanup_close_ int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return cordon_err_set(err, -errno, "network: socket");
	struct ifreq ifr = {};
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) < 0)
		return cordon_err_set(err, -errno, "network: get lo flags");
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
		return cordon_err_set(err, -errno, "network: bring lo up");
	return 0;
}

int ns_time_offsets_open(void)
{
	return open("/proc/self/timens_offsets", O_WRONLY | O_CLOEXEC);
}

int ns_time_enter(int offsets_fd, struct cordon_err *err)
{
	struct timespec mono, boot;
	char buf[128];

	if (unshare(CLONE_NEWTIME) < 0)
		return errno == EINVAL ? 1 : cordon_err_set(err, -errno, "unshare time namespace");
	if (offsets_fd < 0)
		return cordon_err_setf(err, -EPROTO, "timens_offsets: not opened");
	clock_gettime(CLOCK_MONOTONIC, &mono);
	clock_gettime(CLOCK_BOOTTIME, &boot);
	/* Offsets may be negative; leave one second so no clock reads zero or less. */
	int n = snprintf(buf, sizeof(buf), "monotonic %lld 0\nboottime %lld 0\n",
			 -(long long)mono.tv_sec + 1, -(long long)boot.tv_sec + 1);
	ssize_t w = write(offsets_fd, buf, (size_t)n);
	if (w != n)
		return cordon_err_set(err, w < 0 ? -errno : -EIO, "write timens_offsets");
	return 0;
}
