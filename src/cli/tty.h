/* The caller's terminal for `exec -t` and `run -t`: raw mode while the remote side owns it,
 * restored on every way out (return, exit(), a fatal signal that can be caught), and its
 * size for the remote PTY.
 *
 *     if (tty_raw(STDIN_FILENO) < 0) ...;   // once; tty_restore() undoes it (idempotent)
 *     struct winsize ws; tty_size(STDIN_FILENO, &ws);
 */
#pragma once

#include <sys/ioctl.h>

/* Puts @fd's terminal in raw mode (no echo, no line editing, no signals from keys: Ctrl-C
 * goes to the remote side as a byte). -ENOTTY when @fd is not a terminal. */
int tty_raw(int fd);
/* Back to how it was before tty_raw(); safe in a signal handler and when nothing was done. */
void tty_restore(void);
/* @fd's window, or 80x24 when it has none. */
void tty_size(int fd, struct winsize *ret);
