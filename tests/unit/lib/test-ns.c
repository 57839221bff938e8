/* ns: loopback in a new network namespace, and the time namespace, each in a forked child
 * that first enters a new user namespace (so that this also runs without root, where the
 * kernel allows unprivileged user namespaces). */
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "basic/fileio.h"
#include "lib/ns.h"
#include "child.h"

static void enter_userns(int fd, int extra)
{
	uid_t uid = getuid();
	gid_t gid = getgid();
	char map[64];

	if (unshare(CLONE_NEWUSER | extra) < 0)
		CHILD_SKIP(fd, "unshare(CLONE_NEWUSER|0x%x): %s", extra, strerror(errno));
	CHILD_CHECK(fd, write_file_at(AT_FDCWD, "/proc/self/setgroups", "deny") == 0);
	snprintf(map, sizeof(map), "0 %u 1\n", (unsigned)uid);
	CHILD_CHECK(fd, write_file_at(AT_FDCWD, "/proc/self/uid_map", map) == 0);
	snprintf(map, sizeof(map), "0 %u 1\n", (unsigned)gid);
	CHILD_CHECK(fd, write_file_at(AT_FDCWD, "/proc/self/gid_map", map) == 0);
	CHILD_CHECK(fd, getuid() == 0);
}

static short lo_flags(int fd)
{
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	CHILD_CHECK(fd, s >= 0);
	struct ifreq ifr = {};
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	CHILD_CHECK(fd, ioctl(s, SIOCGIFFLAGS, &ifr) == 0);
	close(s);
	return ifr.ifr_flags;
}

/* A UDP datagram to ourselves over 127.0.0.1. */
static int udp_echo(int fd)
{
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	CHILD_CHECK(fd, s >= 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	int r = bind(s, (struct sockaddr *)&a, sizeof(a));
	if (r == 0)
		r = getsockname(s, (struct sockaddr *)&a, &al);
	if (r == 0 && sendto(s, "ping", 4, 0, (struct sockaddr *)&a, al) != 4)
		r = -1;
	char buf[8];
	if (r == 0 && recv(s, buf, sizeof(buf), MSG_DONTWAIT) != 4)
		r = -1;
	int saved = errno;
	close(s);
	errno = saved;
	return r;
}

static void loopback(int fd)
{
	enter_userns(fd, CLONE_NEWNET);
	CHILD_CHECK(fd, !(lo_flags(fd) & IFF_UP));
	CHILD_CHECK(fd, udp_echo(fd) < 0);
	struct cordon_err e = {};
	int r = ns_loopback_up(&e);
	if (r < 0)
		dprintf(fd, "ns_loopback_up: %s", e.msg), _exit(1);
	short fl = lo_flags(fd);
	CHILD_CHECK(fd, fl & IFF_UP);
	CHILD_CHECK(fd, fl & IFF_LOOPBACK);
	CHILD_CHECK(fd, udp_echo(fd) == 0);
	/* twice is harmless */
	CHILD_CHECK(fd, ns_loopback_up(NULL) == 0);
}

static void test_loopback_up(void **state)
{
	run_in_child(loopback);
}

/* Without CAP_NET_ADMIN over the network namespace: an error, with a message. */
static void loopback_denied(int fd)
{
	enter_userns(fd, 0); /* a new user namespace, but the host's network namespace */
	struct cordon_err e = {};
	short before = lo_flags(fd);
	int r = ns_loopback_up(&e);
	if (before & IFF_UP) /* already up: SIOCSIFFLAGS with no change still needs the cap */
		CHILD_CHECK(fd, r == -EPERM || r == -EACCES);
	else
		CHILD_CHECK(fd, r < 0);
	CHILD_CHECK(fd, e.code == r && strstr(e.msg, "lo") != NULL);
}

static void test_loopback_denied(void **state)
{
	run_in_child(loopback_denied);
}

static void timens(int fd)
{
	enter_userns(fd, 0);
	struct timespec host;
	clock_gettime(CLOCK_MONOTONIC, &host);
	struct cordon_err e = {};
	int r = ns_time_enter(ns_time_offsets_open(), &e);
	if (r == 1)
		CHILD_SKIP(fd, "the kernel has no time namespaces");
	if (r < 0)
		dprintf(fd, "ns_time_enter: %s", e.msg), _exit(1);
	/* the namespace applies to children: a child's clocks start near one second */
	pid_t pid = fork();
	CHILD_CHECK(fd, pid >= 0);
	if (pid == 0) {
		struct timespec m, b;
		clock_gettime(CLOCK_MONOTONIC, &m);
		clock_gettime(CLOCK_BOOTTIME, &b);
		_exit(m.tv_sec >= 1 && m.tv_sec < 30 && b.tv_sec >= 1 && b.tv_sec < 30 ? 0 : 1);
	}
	int st;
	CHILD_CHECK(fd, waitpid(pid, &st, 0) == pid);
	CHILD_CHECK(fd, WIFEXITED(st) && WEXITSTATUS(st) == 0);
	(void)host;
}

static void test_time_ns(void **state)
{
	struct timespec m;
	clock_gettime(CLOCK_MONOTONIC, &m);
	if (m.tv_sec < 60) {
		print_message("skip: the host's uptime is too short to tell the offset apart\n");
		skip();
	}
	run_in_child(timens);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_loopback_up),
		cmocka_unit_test(test_loopback_denied),
		cmocka_unit_test(test_time_ns),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
