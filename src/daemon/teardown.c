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
 * The thread (a worker.c thread) touches no loop state: a job is the handle (which nothing
 * on the loop refers to any more: its events are freed first), the callback and its
 * argument, and the thread only frees the handle. The uid slot stays locked until the free
 * releases it, so nothing reuses a slot, cgroup or scratch name that is still being torn
 * down. If the job cannot be queued the loop frees it itself, as it always did.
 *
 * The thread lives as long as cordond, which is why the start hands it the egress proxy's
 * spawn too (network.c, teardown_call()): the proxy's parent-death signal follows the thread
 * that forked it, and a thread that ended would take the proxy with it. */
#include "daemon/daemon.h"

static struct worker teardown = WORKER_INIT;

int teardown_start(void)
{
	return worker_start(&teardown, "cordond-teardn");
}

int teardown_call(void (*work)(void *arg), void *work_arg, void (*done)(void *arg), void *arg)
{
	return worker_call(&teardown, work, work_arg, done, arg);
}

static void free_rt(void *rt)
{
	cordon_sandbox_free(rt);
}

int teardown_free(struct cordon_sandbox *rt, void (*done)(void *arg), void *arg)
{
	return teardown_call(free_rt, rt, done, arg);
}

size_t teardown_pending(void) { return teardown.pending; }
