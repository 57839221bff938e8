/* cordon-init's port connections (PORT_OPEN, PORT_WRITE, PORT_CLOSE): a TCP connection to
 * 127.0.0.1:PORT on the sandbox's loopback per channel, relayed both ways and paced (the
 * host's window by OK{SIZE}, its reader by PAUSE/RESUME). */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "init/agent-int.h"

/* ---- ports: TCP connections to the sandbox's loopback, for the host ---- */

struct aport *port_find(struct agent *a, uint32_t chan)
{
	for (struct aport *p = a->ports; p; p = p->next)
		if (p->chan == chan)
			return p;
	return NULL;
}

void port_free(struct agent *a, struct aport *p)
{
	for (struct aport **pp = &a->ports; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	close_fd(&p->fd);
	buf_done(&p->q);
	free(p);
	a->n_ports--;
}

/* The sandbox's end is done (@err 0: EOF): said once; the host closes the channel. */
static void port_eof(struct agent *a, struct aport *p, int err)
{
	if (!p->rd_eof)
		emit(a, FRAME_PORT_EOF, p->chan, &(struct frame_exit){.code = (uint32_t)err});
	p->rd_eof = true;
	if (err) {
		close_fd(&p->fd);
		buf_done(&p->q);
	}
}

int do_port_open(struct agent *a, uint32_t chan, void *m)
{
	const struct frame_port *fp = m;
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)fp->port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};

	if (port_find(a, chan))
		return -EEXIST;
	if (a->n_ports >= MAX_PORTS)
		return -EAGAIN;
	if (fp->port < 1 || fp->port > 65535)
		return -EINVAL;
	struct aport *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->chan = chan;
	p->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int r = p->fd < 0 ? -errno : 0;
	if (r == 0 && connect(p->fd, (struct sockaddr *)&sin, sizeof(sin)) < 0)
		r = errno == EINPROGRESS ? 1 : -errno;
	if (r < 0) {
		close_fd(&p->fd);
		free(p);
		return r;
	}
	p->connecting = r == 1;
	p->next = a->ports;
	a->ports = p;
	a->n_ports++;
	if (!p->connecting)
		emit(a, FRAME_OK, chan, &(struct frame_ok){0});
	return 0;
}

static void port_flush(struct agent *a, struct aport *p)
{
	uint64_t before = p->written;
	while (p->fd >= 0 && p->q.len > 0) {
		ssize_t n = send(p->fd, p->q.p + p->q.head, p->q.len, MSG_NOSIGNAL);
		if (n > 0) {
			buf_consume(&p->q, (size_t)n);
			p->written += (uint64_t)n;
			continue;
		}
		if (n < 0 && (errno == EINTR))
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		port_eof(a, p, n < 0 ? errno : EPIPE);
		return;
	}
	if (p->written != before) /* the host's window opens by what was taken */
		emit(a, FRAME_OK, p->chan, &(struct frame_ok){.size = p->written});
}

int do_port_write(struct agent *a, uint32_t chan, void *m)
{
	const struct frame_data *d = m;
	struct aport *p = port_find(a, chan);

	if (!p)
		return -ESRCH;
	if (p->fd < 0)
		return 0; /* its PORT_EOF is on the way: the bytes go nowhere */
	if (p->q.len + d->len > PORT_QUEUE_MAX)
		return -ENOBUFS;
	if (buf_reserve(&p->q, d->len) < 0)
		return -ENOMEM;
	memcpy(buf_tail(&p->q), d->data, d->len);
	p->q.len += d->len;
	if (!p->connecting)
		port_flush(a, p);
	return 0;
}

/* PORT_CLOSE: answered OK, the last frame on the channel (so the host keeps it until then). */
int do_port_close(struct agent *a, uint32_t chan, void *m)
{
	struct aport *p = port_find(a, chan);
	if (p)
		port_free(a, p);
	emit(a, FRAME_OK, chan, &(struct frame_ok){0});
	return 0;
}

static void port_connected(struct agent *a, struct aport *p)
{
	int err = 0;
	socklen_t len = sizeof(err);
	if (getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err == EINPROGRESS || err == EALREADY)
		return;
	p->connecting = false;
	if (err) {
		emit_error(a, p->chan, err, "PORT_OPEN");
		port_free(a, p);
		return;
	}
	emit(a, FRAME_OK, p->chan, &(struct frame_ok){0});
	port_flush(a, p);
}

static void port_read(struct agent *a, struct aport *p)
{
	ssize_t n = emit_from_fd(a, FRAME_PORT_DATA, p->chan, p->fd, PIPE_CHUNK, -1);
	if (n == 0)
		port_eof(a, p, 0);
	else if (n < 0 && n != -EAGAIN && n != -EWOULDBLOCK)
		port_eof(a, p, (int)-n);
}

static bool port_wants_read(const struct agent *a, const struct aport *p)
{
	return p->fd >= 0 && !p->connecting && !p->rd_eof && !p->paused && out_room(a);
}

/* Poll events for a port's socket: its connect, its reads (with room, not paused), the
 * bytes it has queued. */
short port_events(const struct agent *a, const struct aport *p)
{
	if (p->fd < 0)
		return 0;
	if (p->connecting)
		return POLLOUT;
	return (short)((port_wants_read(a, p) ? POLLIN : 0) | (p->q.len ? POLLOUT : 0));
}

void port_event(struct agent *a, struct aport *p, short revents)
{
	if (p->connecting) {
		port_connected(a, p); /* may free @p */
		return;
	}
	if ((revents & (POLLIN | POLLHUP | POLLERR)) && port_wants_read(a, p))
		port_read(a, p);
	if ((revents & (POLLOUT | POLLERR)) && p->fd >= 0 && p->q.len)
		port_flush(a, p);
}

