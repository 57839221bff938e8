/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cordon-ktest: the workloads of the in-guest kernel suite (tests/kernels/init.sh), one
 * static multi-call binary so that the guest needs no compiler and no Python. Each command
 * prints one line saying what it saw and exits 0 when it saw what a working limit causes.
 *
 *   memhog MIB         allocate and touch MIB MiB, 1 MiB at a time (the memory limit kills it)
 *   forkbomb SECONDS   fork sleeping children until fork fails; print the count; hold for
 *                      SECONDS and exit, leaving the children to the sandbox's teardown
 *   spin SECONDS       burn CPU for SECONDS of wall time; print the CPU time it got
 *   fill PATH          write PATH until the disk is full; exit 0 on ENOSPC (or EFBIG)
 *   fds                open /dev/null until EMFILE; exit 0 on EMFILE
 *   canary PORTFILE NAME   listen on 127.0.0.1:0 (port written to PORTFILE) and on the
 *                      abstract unix socket @NAME, then sleep forever (host-side canaries)
 *   landlock           print the kernel's Landlock ABI (0: none)
 *   clone3             print whether clone3(CLONE_INTO_CGROUP) works here, outside cordon
 *   leftovers          print "PID COMM" of every process in a pid namespace other than ours
 *                      (a sandbox's) and of every `cordon` process: what a run left behind
 *
 * Build: gcc -static -O2 -o cordon-ktest ktest.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <netinet/in.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <dirent.h>
#include <ctype.h>
#include <time.h>
#include <unistd.h>

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif
#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#endif

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int memhog(long mib)
{
	long i;
	for (i = 0; i < mib; i++) {
		char *p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED) {
			printf("memhog: mmap failed after %ld MiB: %s\n", i, strerror(errno));
			return 1;
		}
		memset(p, 0x5a, 1 << 20);
	}
	printf("memhog: touched %ld MiB and was not killed\n", i);
	return 1;
}

static int forkbomb(int hold)
{
	int n = 0, err = 0;
	for (;;) {
		pid_t p = fork();
		if (p < 0) {
			err = errno;
			break;
		}
		if (p == 0) {
			pause();
			_exit(0);
		}
		if (++n >= 100000)
			break;
	}
	printf("forkbomb: %d children, then fork: %s\n", n, err ? strerror(err) : "no error");
	fflush(stdout);
	sleep(hold);
	/* the children are left to the sandbox: they die with its pid namespace */
	return err == EAGAIN ? 0 : 1;
}

static int spin(double secs)
{
	double end = now() + secs;
	volatile unsigned long x = 0;
	while (now() < end)
		for (int i = 0; i < 100000; i++)
			x++;
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	double cpu = ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
		     (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
	printf("spin: %.2f s cpu in %.2f s wall (%.2f)\n", cpu, secs, cpu / secs);
	return 0;
}

static int fill(const char *path)
{
	signal(SIGXFSZ, SIG_IGN); /* RLIMIT_FSIZE gives EFBIG instead of killing us */
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0) {
		printf("fill: open %s: %s\n", path, strerror(errno));
		return 1;
	}
	static char buf[1 << 16];
	memset(buf, 'x', sizeof(buf));
	long long total = 0;
	for (;;) {
		ssize_t n = write(fd, buf, sizeof(buf));
		if (n < 0) {
			int e = errno;
			printf("fill: %lld KiB written, then %s\n", total >> 10, strerror(e));
			return e == ENOSPC || e == EFBIG ? 0 : 1;
		}
		total += n;
		if (total > (4LL << 30)) {
			printf("fill: 4 GiB written without an error\n");
			return 1;
		}
	}
}

static int fds(void)
{
	struct rlimit rl;
	getrlimit(RLIMIT_NOFILE, &rl);
	int n = 0;
	for (;;) {
		int fd = open("/dev/null", O_RDONLY);
		if (fd < 0) {
			int e = errno;
			printf("fds: %d opened (RLIMIT_NOFILE %llu), then %s\n", n,
			       (unsigned long long)rl.rlim_cur, strerror(e));
			return e == EMFILE ? 0 : 1;
		}
		if (++n > 10000000) {
			printf("fds: 10M opened without an error\n");
			return 1;
		}
	}
}

static int canary(const char *portfile, const char *name)
{
	int t = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	if (t < 0 || bind(t, (void *)&a, sizeof(a)) < 0 || listen(t, 16) < 0 ||
	    getsockname(t, (void *)&a, &al) < 0) {
		perror("canary: tcp");
		return 1;
	}
	int u = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un ua = {.sun_family = AF_UNIX};
	size_t nl = strlen(name);
	if (nl + 1 >= sizeof(ua.sun_path))
		return 1;
	memcpy(ua.sun_path + 1, name, nl);
	if (u < 0 || bind(u, (void *)&ua, offsetof(struct sockaddr_un, sun_path) + 1 + nl) < 0 ||
	    listen(u, 16) < 0) {
		perror("canary: abstract");
		return 1;
	}
	FILE *f = fopen(portfile, "w");
	if (!f)
		return 1;
	fprintf(f, "%d\n", ntohs(a.sin_port));
	fclose(f);
	for (;;)
		pause();
}

static int landlock(void)
{
	long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, 1 /* _VERSION */);
	if (abi < 0)
		printf("0 (%s)\n", strerror(errno));
	else
		printf("%ld\n", abi);
	return 0;
}

static int clone3_probe(void)
{
	int cg = open("/sys/fs/cgroup", O_RDONLY | O_DIRECTORY);
	if (cg < 0) {
		printf("no /sys/fs/cgroup: %s\n", strerror(errno));
		return 1;
	}
	struct clone_args args = {.flags = CLONE_INTO_CGROUP, .exit_signal = SIGCHLD,
				  .cgroup = (uint64_t)cg};
	long pid = syscall(SYS_clone3, &args, sizeof(args));
	if (pid == 0)
		_exit(0);
	if (pid < 0) {
		printf("unavailable (%s)\n", strerror(errno));
		return 1;
	}
	waitpid(pid, NULL, 0);
	printf("available\n");
	return 0;
}

static int leftovers(void)
{
	char self[64] = "", path[300], ns[64], comm[64];
	if (readlink("/proc/self/ns/pid", self, sizeof(self) - 1) < 0)
		return 1;
	DIR *d = opendir("/proc");
	if (!d)
		return 1;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!isdigit((unsigned char)de->d_name[0]) || atoi(de->d_name) == getpid())
			continue;
		snprintf(path, sizeof(path), "/proc/%s/ns/pid", de->d_name);
		ssize_t n = readlink(path, ns, sizeof(ns) - 1);
		if (n < 0)
			continue; /* gone */
		ns[n] = 0;
		snprintf(path, sizeof(path), "/proc/%s/comm", de->d_name);
		FILE *f = fopen(path, "r");
		if (!f || !fgets(comm, sizeof(comm), f))
			strcpy(comm, "?\n");
		if (f)
			fclose(f);
		comm[strcspn(comm, "\n")] = 0;
		if (strcmp(ns, self) || !strcmp(comm, "cordon"))
			printf("%s:%s\n", de->d_name, comm);
	}
	closedir(d);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *cmd = argc > 1 ? argv[1] : "";
	const char *a1 = argc > 2 ? argv[2] : NULL;
	if (!strcmp(cmd, "memhog") && a1)
		return memhog(atol(a1));
	if (!strcmp(cmd, "forkbomb"))
		return forkbomb(a1 ? atoi(a1) : 1);
	if (!strcmp(cmd, "spin") && a1)
		return spin(atof(a1));
	if (!strcmp(cmd, "fill") && a1)
		return fill(a1);
	if (!strcmp(cmd, "fds"))
		return fds();
	if (!strcmp(cmd, "canary") && a1 && argc > 3)
		return canary(a1, argv[3]);
	if (!strcmp(cmd, "landlock"))
		return landlock();
	if (!strcmp(cmd, "clone3"))
		return clone3_probe();
	if (!strcmp(cmd, "leftovers"))
		return leftovers();
	fprintf(stderr, "usage: cordon-ktest memhog MIB | forkbomb SECONDS | spin SECONDS | "
			"fill PATH | fds | canary PORTFILE NAME | landlock | clone3 | "
			"leftovers\n");
	return 2;
}
