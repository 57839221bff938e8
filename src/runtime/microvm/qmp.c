/* QEMU's monitor (QMP) on a socketpair end QEMU inherits (`-chardev socket,fd=N -mon
 * chardev=..,mode=control`): no socket path in the jail. Synchronous, each call under a
 * deadline: a command, its answer (events in between are skipped), an fd passed with it
 * (getfd: the snapshot's state file, since -sandbox forbids exec: migration). Answers are
 * read a byte at a time: they are short, and nothing of a later line is ever taken early. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "runtime/microvm/microvm.h"

static long long now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* One line of QMP's into @buf, by @deadline. */
static int read_line(int fd, char *buf, size_t size, long long deadline)
{
	size_t n = 0;
	for (;;) {
		struct pollfd p = {fd, POLLIN, 0};
		long long left = deadline - now_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		int r = poll(&p, 1, (int)left);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -ETIMEDOUT;
		char c;
		ssize_t got = read(fd, &c, 1);
		if (got <= 0)
			return got < 0 && errno == EINTR ? 0 : -EPIPE;
		if (c == '\n') {
			buf[n] = '\0';
			return 0;
		}
		if (n + 1 < size)
			buf[n++] = c;
	}
}

static int send_cmd(int fd, const char *cmd, int pass_fd)
{
	struct iovec iov = {(void *)cmd, strlen(cmd)};
	char ctl[CMSG_SPACE(sizeof(int))] = {0};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	if (pass_fd >= 0) {
		mh.msg_control = ctl;
		mh.msg_controllen = sizeof(ctl);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
	}
	return sendmsg(fd, &mh, MSG_NOSIGNAL) == (ssize_t)iov.iov_len ? 0 : -errno;
}

int microvm_qmp(int fd, const char *cmd, int pass_fd, char *reply, size_t size, int ms)
{
	char line[1024];
	long long deadline = now_ms() + ms;
	int r = send_cmd(fd, cmd, pass_fd);
	while (r == 0 && (r = read_line(fd, line, sizeof(line), deadline)) == 0) {
		bool ok = strstr(line, "\"return\"") != NULL, bad = strstr(line, "\"error\"") != NULL;
		if (!ok && !bad)
			continue; /* an event, the greeting */
		if (reply)
			snprintf(reply, size, "%s", line);
		return ok ? 0 : -EIO;
	}
	if (reply)
		snprintf(reply, size, "%s", r == -ETIMEDOUT ? "no answer in time" : "the monitor is gone");
	return r;
}

int microvm_qmp_hello(int fd, int ms)
{
	return microvm_qmp(fd, "{\"execute\":\"qmp_capabilities\"}", -1, NULL, 0, ms);
}

int microvm_qmp_migrated(int fd, int ms, char *reply, size_t size)
{
	long long deadline = now_ms() + ms;
	while (now_ms() < deadline) {
		int r = microvm_qmp(fd, "{\"execute\":\"query-migrate\"}", -1, reply, size,
				    (int)(deadline - now_ms()));
		if (r < 0)
			return r;
		if (strstr(reply, "\"completed\""))
			return 0;
		if (strstr(reply, "\"failed\"") || strstr(reply, "\"cancelled\""))
			return -EIO;
		usleep(2000);
	}
	snprintf(reply, size, "the migration did not end in %d ms", ms);
	return -ETIMEDOUT;
}
