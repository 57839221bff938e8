/* cordon-init: PID 1 of every sandbox.
 *
 *   cordon-init --run --workdir DIR -- CMD [ARGS...]   one-shot: run CMD, reap, exit with it
 *   cordon-init --agent                                serve the host on fd 3 (agent.c)
 *   /init (PID 1 of a microVM, no argument)            the guest stage first (vm.c)
 *   cordon-init --agent --connect PATH                 the same over the unix socket PATH (a
 *                                                      runtime such as gvisor that hands the
 *                                                      sandbox no fd 3)
 *
 * It is exec'd from a sealed memfd after the boundary is complete, so it runs with the same
 * (no) privileges as what it starts. In one-shot mode it forwards the host's signals to CMD,
 * reaps every orphan, and when CMD ends writes a struct init_status to fd 3 and exits: the
 * kernel then kills whatever else is left in the pid namespace.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "basic/cleanup.h"
#include "basic/fileio.h"
#include "init/agent.h"
#include "init/preload.h"
#include "init/vm.h"
#include "lib/initproto.h"

static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGCONT};

static void report(int kind, int value)
{
	struct init_status st = {kind, value};
	write_all(INIT_STATUS_FD, &st, sizeof(st));
}

static _noreturn_ void exec_child(const char *workdir, char **cmd, int errfd)
{
	struct init_status st = {INIT_CWD_FAILED, 0};
	sigset_t none;

	/* CMD starts with a clean signal state whatever ours was. */
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* On a terminal (cordon run -t), CMD leads a session with it as its controlling
	 * terminal, so that job control and Ctrl-C work as in a login. */
	if (isatty(0) && setsid() >= 0)
		(void)ioctl(0, TIOCSCTTY, 0);
	if (chdir(workdir) == 0) {
		environ = preload_env(environ);
		execvp(cmd[0], cmd);
		st.kind = INIT_EXEC_FAILED;
	}
	st.value = errno;
	write_all(errfd, &st, sizeof(st));
	_exit(127);
}

/* Returns CMD's exit status for our own exit, after telling the host. */
static int supervise(pid_t child, int sfd)
{
	for (;;) {
		struct signalfd_siginfo ssi;
		if (read(sfd, &ssi, sizeof(ssi)) != sizeof(ssi)) {
			if (errno == EINTR)
				continue;
			return 125;
		}
		if (ssi.ssi_signo != SIGCHLD) {
			kill(child, ssi.ssi_signo);
			continue;
		}
		int status;
		pid_t pid;
		while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
			if (pid != child)
				continue; /* an orphan: reaped, nothing more */
			if (WIFEXITED(status)) {
				report(INIT_EXITED, WEXITSTATUS(status));
				return WEXITSTATUS(status);
			}
			report(INIT_SIGNALED, WTERMSIG(status));
			return 128 + WTERMSIG(status);
		}
	}
}

static int run_main(int argc, char **argv)
{
	const char *workdir = "/";
	int i = 2;

	for (; i < argc && strcmp(argv[i], "--") != 0; i++)
		if (strcmp(argv[i], "--workdir") == 0 && i + 1 < argc)
			workdir = argv[++i];
	if (i + 1 >= argc)
		return 125;
	char **cmd = argv + i + 1;

	/* The status fd is ours alone: CMD must not be able to forge a status. */
	fcntl(INIT_STATUS_FD, F_SETFD, FD_CLOEXEC);
	sigset_t mask;
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	for (size_t k = 0; k < ELEMENTSOF(forwarded); k++)
		sigaddset(&mask, forwarded[k]);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	_cleanup_close_ int sfd = signalfd(-1, &mask, SFD_CLOEXEC);
	int errpipe[2];
	if (sfd < 0 || pipe2(errpipe, O_CLOEXEC) < 0)
		return 125;

	pid_t child = fork();
	if (child < 0)
		return 125;
	if (child == 0)
		exec_child(workdir, cmd, errpipe[1]);
	close(errpipe[1]);
	struct init_status st;
	int r = read_exact(errpipe[0], &st, sizeof(st));
	close(errpipe[0]);
	if (r == 0) { /* exec or chdir failed: the child wrote why */
		const char *what = st.kind == INIT_CWD_FAILED ? "workdir" : "cannot run";
		const char *arg = st.kind == INIT_CWD_FAILED ? workdir : cmd[0];
		dprintf(STDERR_FILENO, "cordon: %s '%s': %s\n", what, arg, strerror(st.value));
		waitpid(child, NULL, 0);
		report(st.kind, st.value);
		return st.kind == INIT_CWD_FAILED ? 125 : st.value == ENOENT ? 127 : 126;
	}
	return supervise(child, sfd);
}

/* Agent mode: PID 1 holds its channel (fd 3) and /dev/null on 0-2, and nothing else,
 * whatever the runtime left it (the jail does this already; a VM's init is given the
 * console). It writes nothing to stderr in this mode: what goes wrong goes over the channel. */
static void agent_fds(void)
{
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	for (int fd = 0; null >= 0 && fd < 3; fd++)
		if (fd != null)
			dup2(null, fd);
	if (null > 2)
		close(null);
	close_range(INIT_AGENT_FD + 1, ~0u, 0);
}

/* The host listens on @path (a unix socket it made for us alone); the connection becomes
 * fd 3. */
static int connect_channel(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(sa.sun_path))
		return -1;
	strcpy(sa.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    (fd != INIT_AGENT_FD && dup2(fd, INIT_AGENT_FD) < 0))
		return -1;
	if (fd != INIT_AGENT_FD)
		close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	/* Nothing in the sandbox may read our memory or environment through /proc/1. */
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	preload_take();
	/* The kernel runs a microVM's /init with no argument as PID 1. */
	if (argc == 1 && getpid() == 1 && strcmp(argv[0], "/init") == 0)
		vm_main();
	if (argc >= 2 && strcmp(argv[1], "--agent") == 0) {
		if (argc >= 4 && strcmp(argv[2], "--connect") == 0 && connect_channel(argv[3]) < 0)
			return 2;
		agent_fds();
		return agent_main(INIT_AGENT_FD);
	}
	if (argc >= 2 && strcmp(argv[1], "--run") == 0)
		return run_main(argc, argv);
	dprintf(STDERR_FILENO, "cordon-init: runs only as PID 1 of a Cordon sandbox\n");
	return 2;
}
