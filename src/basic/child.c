#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "basic/child.h"
#include "basic/cleanup.h"
#include "basic/clock.h"

/* Sleeps until @pid may have ended or @ms passed: on its pidfd (Linux 5.3), else a short nap. */
static void wait_a_while(int pidfd, int ms)
{
	if (pidfd >= 0) {
		(void)poll(&(struct pollfd){.fd = pidfd, .events = POLLIN}, 1, ms);
		return;
	}
	struct timespec ts = {0, (long)(ms < 10 ? ms : 10) * 1000000L};
	nanosleep(&ts, NULL);
}

static int wait_deadline(pid_t pid, int ms, int *status, bool group)
{
	_cleanup_close_ int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	uint64_t end = now_ms() + (uint64_t)(ms > 0 ? ms : 0);
	int st;
	for (;;) {
		pid_t w = waitpid(pid, &st, WNOHANG);
		if (w == pid)
			break;
		if (w < 0 && errno != EINTR)
			return -errno;
		uint64_t now = now_ms();
		if (now >= end) {
			if (group)
				kill(-pid, SIGKILL);
			kill(pid, SIGKILL);
			while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
				;
			return -ETIMEDOUT;
		}
		wait_a_while(pidfd, (int)(end - now));
	}
	if (status)
		*status = st;
	return 0;
}

int child_wait_deadline(pid_t pid, int ms, int *status)
{
	return wait_deadline(pid, ms, status, false);
}

int child_wait_group_deadline(pid_t pid, int ms, int *status)
{
	return wait_deadline(pid, ms, status, true);
}

int child_wait_ok(pid_t pid, int ms)
{
	int st, r = child_wait_deadline(pid, ms, &st);
	if (r < 0)
		return r;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EIO;
}
