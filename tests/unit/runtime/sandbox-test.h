/* What the runtime tests that run real sandboxes share: the root check and the wait for a
 * start's setup. Include after <cmocka.h> and <cordon/cordon.h>. */
#pragma once

#include <errno.h>
#include <poll.h>
#include <unistd.h>

/* Skips the test unless we are root (the child becomes root of its user namespace); then
 * makes what libcordon caches per process, as a threaded caller must. */
static inline void need_root(void)
{
	struct cordon_err err = {};
	if (geteuid() != 0) {
		print_message("skip: needs root (the child becomes root of its user namespace)\n");
		skip();
	}
	if (cordon_prepare(&err) < 0)
		fail_msg("prepare: %s", err.msg);
}

/* Setup of @sb within @timeout_ms: 0, the child's error, or -ETIMEDOUT (it hangs). */
static inline int finish_within(struct cordon_sandbox *sb, int timeout_ms, struct cordon_err *err)
{
	int r;
	while ((r = cordon_sandbox_finish(sb, err)) == -EAGAIN) {
		struct pollfd p = {cordon_sandbox_setup_fd(sb), POLLIN, 0};
		if (poll(&p, 1, timeout_ms) == 0)
			return -ETIMEDOUT;
	}
	return r;
}
