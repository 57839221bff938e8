/* The one-shot command's stdio between the caller's fds and the VM's ports: the ports are
 * socketpair ends (QEMU's chardevs take sockets only) and the caller's fds may be anything
 * (a tty, a pipe, a file), so a process of ours copies. It holds no other fd of ours, ends
 * when QEMU has closed both output ports (it exited), and is killed with the sandbox. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "basic/fileio.h"
#include "runtime/microvm/microvm.h"

enum { P_IN, P_TOVM, P_OUT, P_ERR, P_N };

struct pump {
	struct pollfd p[P_N];
	int out[2];
	char inbuf[65536];
	size_t inlen, inoff;
};

/* The caller's stdin into the VM, never blocking the outputs: read only once sent. */
static void pump_in(struct pump *s)
{
	if (s->p[P_IN].revents && s->inlen == 0) {
		ssize_t n = read(s->p[P_IN].fd, s->inbuf, sizeof(s->inbuf));
		if (n > 0)
			s->inlen = n, s->inoff = 0;
		else if (n == 0 || errno != EINTR) { /* EOF: the guest's port reads 0 */
			s->p[P_IN].fd = -1;
			shutdown(s->p[P_TOVM].fd, SHUT_WR);
		}
	}
	if (s->p[P_TOVM].revents & POLLOUT && s->inlen) {
		ssize_t n = send(s->p[P_TOVM].fd, s->inbuf + s->inoff, s->inlen, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n > 0)
			s->inoff += n, s->inlen -= n;
		else if (n < 0 && errno != EAGAIN && errno != EINTR)
			s->p[P_IN].fd = -1, s->inlen = 0;
	}
	s->p[P_TOVM].events = s->inlen ? POLLOUT : 0;
	if (s->p[P_IN].fd >= 0)
		s->p[P_IN].events = s->inlen ? 0 : POLLIN;
}

static void pump_out(struct pump *s, int i)
{
	char buf[65536];
	if (!s->p[i].revents)
		return;
	ssize_t n = read(s->p[i].fd, buf, sizeof(buf));
	if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
		s->p[i].fd = -1;
		return;
	}
	if (n > 0 && s->out[i - P_OUT] >= 0 && write_all(s->out[i - P_OUT], buf, n) < 0)
		s->out[i - P_OUT] = -1; /* the reader went: drop the rest, keep QEMU unblocked */
}

static _Noreturn void pump_run(struct pump *s)
{
	signal(SIGPIPE, SIG_IGN);
	while (s->p[P_OUT].fd >= 0 || s->p[P_ERR].fd >= 0) {
		if (poll(s->p, P_N, -1) < 0 && errno != EINTR)
			_exit(1);
		pump_in(s);
		pump_out(s, P_OUT);
		pump_out(s, P_ERR);
	}
	_exit(0);
}

pid_t microvm_pump_spawn(int in, int to_vm, const int from_vm[2], const int out[2])
{
	pid_t pid = fork();
	if (pid != 0)
		return pid < 0 ? -errno : pid;
	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	static struct pump s;
	int keep[] = {in, to_vm, from_vm[0], from_vm[1], out[0], out[1]};
	/* To 3..8 through copies above them, then every other fd closed (one of another
	 * sandbox's would keep its peer from seeing an end). */
	for (int i = 0; i < 6; i++)
		keep[i] = keep[i] >= 0 ? fcntl(keep[i], F_DUPFD_CLOEXEC, 32) : -1;
	for (int i = 0; i < 6; i++)
		if (keep[i] >= 0)
			keep[i] = dup3(keep[i], 3 + i, O_CLOEXEC) < 0 ? -1 : 3 + i;
	syscall(SYS_close_range, 9, ~0U, 0);
	syscall(SYS_close_range, 0, 2, 0);
	s.p[P_IN] = (struct pollfd){keep[0], POLLIN, 0};
	s.p[P_TOVM] = (struct pollfd){keep[1], 0, 0};
	s.p[P_OUT] = (struct pollfd){keep[2], POLLIN, 0};
	s.p[P_ERR] = (struct pollfd){keep[3], POLLIN, 0};
	s.out[0] = keep[4];
	s.out[1] = keep[5];
	if (keep[0] < 0)
		shutdown(keep[1], SHUT_WR);
	pump_run(&s);
}
