/* The teardown thread: cordon_sandbox_free() of a reaped sandbox, off the event loop.
 *
 * What a sandbox's end leaves to free costs the kernel milliseconds in the caller's context:
 * closing the last reference to its scratch's detached ext4 mount unmounts that filesystem
 * there and then (task_work at close: the superblock written out, the loop device let go,
 * the unlinked image's extents freed), and its cgroups' rmdir waits for the cgroup core. On
 * the loop that was most of a destroy's cost, and every request queued behind it (measured
 * in docs/ARCHITECTURE.md, "What a lifecycle costs"). Here the loop hands the runtime's
 * handle to this thread and gets the sandbox back, through a pipe, once it is all gone: the
 * order of a sandbox's end is unchanged (free, then sandbox.c's final hooks: a volume is let
 * go only after the mounts that held it), only where it runs.
 *
 * The thread touches no loop state: a job is the handle (which nothing on the loop refers
 * to any more: its events are freed first), the callback and its argument, and the thread
 * only frees the handle. The uid slot stays locked until the free releases it, so nothing
 * reuses a slot, cgroup or scratch name that is still being torn down. If the job cannot be
 * queued the loop frees it itself, as it always did.
 *
 * The thread lives as long as cordond, which is why the start hands it the egress proxy's
 * spawn too (network.c, teardown_call()): the proxy's parent-death signal follows the thread
 * that forked it, and a thread that ended would take the proxy with it. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "daemon/daemon.h"

struct teardown_job {
	void (*work)(void *arg); /* on the thread */
	void *work_arg;
	void (*done)(void *arg); /* on the loop, after; NULL: nothing */
	void *arg;
};

static int req[2] = {-1, -1}, res[2] = {-1, -1};
static size_t pending;
static struct event *done_ev;

static void *teardown_main(void *arg)
{
	struct teardown_job *j;
	(void)arg;
	for (;;) {
		ssize_t n = read(req[0], &j, sizeof(j));
		if (n == 0)
			return NULL;
		if (n != sizeof(j))
			continue; /* EINTR */
		j->work(j->work_arg);
		/* Blocking: the loop drains it, and a job is never lost. */
		while (write(res[1], &j, sizeof(j)) < 0 && errno == EINTR)
			;
	}
}

static void on_done(evutil_socket_t fd, short what, void *arg)
{
	struct teardown_job *j;
	(void)fd, (void)what, (void)arg;
	while (read(res[0], &j, sizeof(j)) == sizeof(j)) {
		pending--;
		if (j->done)
			j->done(j->arg);
		free(j);
	}
}

int teardown_start(void)
{
	pthread_t t;
	if (pipe2(req, O_CLOEXEC) < 0 || pipe2(res, O_CLOEXEC) < 0)
		return -errno;
	/* The loop never waits: a full queue frees on the loop instead. */
	if (fcntl(req[1], F_SETFL, O_NONBLOCK) < 0 || fcntl(res[0], F_SETFL, O_NONBLOCK) < 0)
		return -errno;
	done_ev = loop_event_new(res[0], EV_READ | EV_PERSIST, on_done, NULL);
	if (!done_ev || event_add(done_ev, NULL) < 0)
		return -ENOMEM;
	int r = pthread_create(&t, NULL, teardown_main, NULL);
	if (r != 0)
		return -r;
	pthread_setname_np(t, "cordond-teardn");
	pthread_detach(t);
	return 0;
}

int teardown_call(void (*work)(void *arg), void *work_arg, void (*done)(void *arg), void *arg)
{
	if (!done_ev)
		return -ENOTCONN;
	struct teardown_job *j = malloc(sizeof(*j));
	if (!j)
		return -ENOMEM;
	*j = (struct teardown_job){work, work_arg, done, arg};
	if (write(req[1], &j, sizeof(j)) != sizeof(j)) {
		int r = -errno;
		free(j);
		return r;
	}
	pending++;
	return 0;
}

static void free_rt(void *rt)
{
	cordon_sandbox_free(rt);
}

int teardown_free(struct cordon_sandbox *rt, void (*done)(void *arg), void *arg)
{
	return teardown_call(free_rt, rt, done, arg);
}

size_t teardown_pending(void) { return pending; }
