/* The caller's terminal in raw mode: see tty.h. */
#include "cli/tty.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <termios.h>
#include <unistd.h>

static struct termios saved;
static int saved_fd = -1;

void tty_restore(void)
{
	if (saved_fd >= 0)
		(void)tcsetattr(saved_fd, TCSAFLUSH, &saved);
	saved_fd = -1;
}

static void on_fatal(int sig)
{
	tty_restore();
	signal(sig, SIG_DFL);
	raise(sig);
}

int tty_raw(int fd)
{
	static const int fatal[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};
	struct termios raw;

	if (!isatty(fd))
		return -ENOTTY;
	if (tcgetattr(fd, &saved) < 0)
		return -errno;
	raw = saved;
	cfmakeraw(&raw);
	if (tcsetattr(fd, TCSAFLUSH, &raw) < 0)
		return -errno;
	saved_fd = fd;
	atexit(tty_restore);
	for (size_t i = 0; i < sizeof(fatal) / sizeof(fatal[0]); i++)
		signal(fatal[i], on_fatal);
	return 0;
}

void tty_size(int fd, struct winsize *ret)
{
	if (ioctl(fd, TIOCGWINSZ, ret) < 0 || ret->ws_col == 0 || ret->ws_row == 0)
		*ret = (struct winsize){.ws_row = 24, .ws_col = 80};
}
