/* Waiting for a child process with a deadline: a tool we run (mke2fs, debootstrap, the egress
 * proxy at its end) that does not finish in time is killed, never waited for forever. */
#pragma once

#include <sys/types.h>

/* Waits for @pid at most @ms; past that kills it with SIGKILL, reaps it and returns
 * -ETIMEDOUT. Otherwise fills *@status (may be NULL) and returns 0. */
int child_wait_deadline(pid_t pid, int ms, int *status);

/* The same for a child that leads its own process group (setpgid(0, 0)): past @ms the whole
 * group is killed, so what it started does not outlive it (runsc's sandbox and gofer). */
int child_wait_group_deadline(pid_t pid, int ms, int *status);

/* child_wait_deadline(), then 0 only for exit status 0: -EIO for another end. */
int child_wait_ok(pid_t pid, int ms);
