/* A helper thread of cordond's (daemon.h, "worker.c"): blocking jobs run on it in order, off
 * the event loop, and each comes back to the loop when done.
 *
 * A job is two calls and their arguments: work() on the thread, then done() on the loop.
 * The loop hands the job's pointer to the thread over one pipe and gets it back over
 * another, which the loop watches; the thread touches no loop state, so whoever queues a
 * job keeps the loop's hands off what work() uses until its done() (teardown.c: a handle
 * nothing refers to any more; svc_snapshot.c: a sandbox marked busy). The request pipe is
 * non-blocking on the loop's side: a full queue is an error the caller handles, never a
 * wait. The thread lives as long as cordond (what it forks may hold a parent-death signal
 * that follows the thread). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "daemon/daemon.h"

struct worker_job {
	void (*work)(void *arg); /* on the thread */
	void *work_arg;
	void (*done)(void *arg); /* on the loop, after; NULL: nothing */
	void *arg;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct worker_job *j;
	for (;;) {
		ssize_t n = read(w->req[0], &j, sizeof(j));
		if (n == 0)
			return NULL;
		if (n != sizeof(j))
			continue; /* EINTR */
		j->work(j->work_arg);
		/* Blocking: the loop drains it, and a job is never lost. */
		while (write(w->res[1], &j, sizeof(j)) < 0 && errno == EINTR)
			;
	}
}

static void on_done(evutil_socket_t fd, short what, void *arg)
{
	struct worker *w = arg;
	struct worker_job *j;
	(void)fd, (void)what;
	while (read(w->res[0], &j, sizeof(j)) == sizeof(j)) {
		w->pending--;
		if (j->done)
			j->done(j->arg);
		free(j);
	}
}

int worker_start(struct worker *w, const char *name)
{
	pthread_t t;
	if (pipe2(w->req, O_CLOEXEC) < 0 || pipe2(w->res, O_CLOEXEC) < 0)
		return -errno;
	/* The loop never waits: a full queue is the caller's to handle. */
	if (fcntl(w->req[1], F_SETFL, O_NONBLOCK) < 0 || fcntl(w->res[0], F_SETFL, O_NONBLOCK) < 0)
		return -errno;
	w->done_ev = loop_event_new(w->res[0], EV_READ | EV_PERSIST, on_done, w);
	if (!w->done_ev || event_add(w->done_ev, NULL) < 0)
		return -ENOMEM;
	int r = pthread_create(&t, NULL, worker_main, w);
	if (r != 0)
		return -r;
	pthread_setname_np(t, name);
	pthread_detach(t);
	return 0;
}

int worker_call(struct worker *w, void (*work)(void *arg), void *work_arg, void (*done)(void *arg),
		void *arg)
{
	if (!w->done_ev)
		return -ENOTCONN;
	struct worker_job *j = malloc(sizeof(*j));
	if (!j)
		return -ENOMEM;
	*j = (struct worker_job){work, work_arg, done, arg};
	if (write(w->req[1], &j, sizeof(j)) != sizeof(j)) {
		int r = -errno;
		free(j);
		return r;
	}
	w->pending++;
	return 0;
}
