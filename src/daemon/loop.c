/* Events and bufferevents on fds, created and freed through one place so that debug builds
 * can check the rule of basic/fdwatch.h: an fd is unwatched before it is closed. */
#include <stdlib.h>
#include <string.h>

#include <event2/bufferevent.h>
#include <event2/event.h>

#include "basic/fdwatch.h"
#include "daemon/daemon.h"

struct event *loop_event_new(int fd, short what, event_callback_fn cb, void *arg)
{
	struct event *ev = event_new(D.base, fd, what, cb, arg);
	if (ev && fd >= 0)
		fdwatch_add(fd);
	return ev;
}

/* event_free() deletes the event from the backend at once (epoll_ctl), even from within the
 * event's own callback. */
struct event *loop_event_free(struct event *ev)
{
	if (!ev)
		return NULL;
	int fd = event_get_fd(ev);
	event_free(ev);
	if (fd >= 0)
		fdwatch_del(fd);
	return NULL;
}

struct bufferevent *loop_bev_new(int fd, int options)
{
	struct bufferevent *bev = bufferevent_socket_new(D.base, fd, options);
	if (bev)
		fdwatch_add(fd);
	return bev;
}

/* bufferevent_free() from within the bufferevent's own callback defers the removal of the
 * running event to its finalizer; disable removes both events from the backend now. */
struct bufferevent *loop_bev_free(struct bufferevent *bev)
{
	if (!bev)
		return NULL;
	int fd = bufferevent_getfd(bev);
	bufferevent_disable(bev, EV_READ | EV_WRITE);
	bufferevent_free(bev);
	fdwatch_del(fd);
	return NULL;
}

void egress_send_line(char *line)
{
	if (line && D.egress) {
		bufferevent_write(D.egress, line, strlen(line));
		bufferevent_write(D.egress, "\n", 1);
	}
	free(line);
}
