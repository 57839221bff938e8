/* cordon port-forward ID PORT [--listen ADDR:LPORT]: reach 127.0.0.1:PORT inside a sandbox
 * from the host. Each connection accepted on ADDR:LPORT (127.0.0.1:PORT unless --listen says)
 * becomes one tunnel, GET /v1/sandboxes/ID/ports/PORT answered 101, and the bytes go both
 * ways until either side closes; cordond carries them through the sandbox's agent, so the
 * sandbox needs no network. Runs until SIGINT or SIGTERM. */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "basic/cleanup.h"
#include "basic/log.h"
#include "basic/sigfd.h"
#include "cli/cli.h"
#include "cli/client.h"

#define MAX_TUNNELS 32 /* cordond's own limit per sandbox */

struct tunnel {
	int fd; /* the local client; -1: a free slot */
	struct client_conn *conn;
};

static int listen_on(const char *spec, const char *dflt_port)
{
	char host[256];
	const char *colon = strrchr(spec, ':');
	const char *port = colon ? colon + 1 : dflt_port;
	size_t hl = colon ? (size_t)(colon - spec) : strlen(spec);
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV},
			*res = NULL;

	if (hl >= sizeof(host) || !*port)
		return -EINVAL;
	memcpy(host, spec, hl);
	host[hl] = '\0';
	if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') { /* [::1]:8080 */
		memmove(host, host + 1, hl - 2);
		host[hl - 2] = '\0';
	}
	if (getaddrinfo(host[0] ? host : NULL, port, &hints, &res) != 0 || !res)
		return -EINVAL;
	int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	int r = fd < 0 ? -errno : 0;
	if (r == 0 && (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
		       bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, 16) < 0))
		r = -errno;
	freeaddrinfo(res);
	if (r < 0 && fd >= 0)
		close(fd);
	return r < 0 ? r : fd;
}

/* All of @len into @fd, waiting (at most 30 s at a time) where it is non-blocking and full:
 * the far side's pace is the tunnel's. */
static int send_all(int fd, const char *data, size_t len)
{
	while (len > 0) {
		ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			struct pollfd p = {fd, POLLOUT, 0};
			if (poll(&p, 1, 30000) <= 0)
				return -ETIMEDOUT;
			continue;
		}
		if (n < 0)
			return -errno;
		data += n;
		len -= (size_t)n;
	}
	return 0;
}

static int to_local(const char *data, size_t len, void *userdata)
{
	return send_all(*(int *)userdata, data, len) < 0 ? -EPIPE : 0;
}

static void tunnel_close(struct tunnel *t)
{
	if (t->fd >= 0)
		close(t->fd);
	t->conn = client_conn_free(t->conn);
	t->fd = -1;
}

/* A new local connection: its tunnel, or the daemon's refusal said and the connection closed. */
static void tunnel_open(struct client *c, const char *path, int lfd, struct tunnel *t)
{
	_cleanup_(client_response_done) struct client_response res = {};
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return;
	if (!t) {
		log_error("port-forward: %d connections already; refusing one more", MAX_TUNNELS);
		close(fd);
		return;
	}
	*t = (struct tunnel){.fd = fd};
	int r = client_open(c, "GET", path, NULL, &res, &t->conn);
	if (r < 0) {
		client_fail(c, r);
	} else if (res.status != 101) {
		if (client_read_body(c, t->conn, &res) == 0)
			client_api_error(&res);
	} else {
		client_conn_raw(t->conn);
		if (client_pump(c, t->conn, to_local, &t->fd) == 0)
			return; /* bytes that came with the answer are passed on */
	}
	tunnel_close(t);
}

static void tunnel_up(struct tunnel *t)
{
	char buf[65536];
	ssize_t n = read(t->fd, buf, sizeof(buf));
	if (n <= 0 || send_all(client_fd(t->conn), buf, (size_t)n) < 0)
		tunnel_close(t);
}

static int forward(struct client *c, const char *path, int lfd, int sigfd)
{
	struct tunnel t[MAX_TUNNELS];
	struct pollfd p[2 + 2 * MAX_TUNNELS];
	for (size_t i = 0; i < MAX_TUNNELS; i++)
		t[i] = (struct tunnel){.fd = -1};
	for (;;) {
		struct tunnel *free_slot = NULL;
		p[0] = (struct pollfd){lfd, POLLIN, 0};
		p[1] = (struct pollfd){sigfd, POLLIN, 0};
		for (size_t i = 0; i < MAX_TUNNELS; i++) {
			bool up = t[i].fd >= 0;
			p[2 + 2 * i] = (struct pollfd){up ? t[i].fd : -1, POLLIN, 0};
			p[3 + 2 * i] = (struct pollfd){up ? client_fd(t[i].conn) : -1, POLLIN, 0};
			free_slot = !up && !free_slot ? &t[i] : free_slot;
		}
		if (poll(p, 2 + 2 * MAX_TUNNELS, -1) < 0 && errno != EINTR)
			return CLI_EXIT_API;
		if (p[1].revents)
			break;
		if (p[0].revents)
			tunnel_open(c, path, lfd, free_slot);
		for (size_t i = 0; i < MAX_TUNNELS; i++) {
			if (t[i].fd >= 0 && p[2 + 2 * i].revents)
				tunnel_up(&t[i]);
			if (t[i].fd >= 0 && p[3 + 2 * i].revents &&
			    client_pump(c, t[i].conn, to_local, &t[i].fd) != 0)
				tunnel_close(&t[i]);
		}
	}
	for (size_t i = 0; i < MAX_TUNNELS; i++)
		tunnel_close(&t[i]);
	return 0;
}

int cmd_port_forward(int argc, char **argv)
{
	struct cli_values v;
	_cleanup_(cli_args_done) struct cli_args a = {};
	struct client c;
	char path[320], suffix[32], dflt[64];
	static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};

	int r = cli_parse_cmd(CLI_PORT_FORWARD, "port-forward [OPTIONS] ID PORT",
			      "Runs until interrupted; each local connection is one tunnel.\n", argc,
			      argv, 2, CLI_NO_COMMAND, &v, &a);
	if (r != CLI_GO_ON)
		return r;
	char *end;
	unsigned long port = strtoul(a.pos[1], &end, 10);
	if (*end || end == a.pos[1] || port < 1 || port > 65535) {
		log_error("port-forward: PORT must be 1..65535, not '%s'", a.pos[1]);
		return CORDON_EXIT_USAGE;
	}
	snprintf(suffix, sizeof(suffix), "/ports/%lu", port);
	snprintf(dflt, sizeof(dflt), "127.0.0.1:%lu", port);
	if (cli_sandbox_path(path, sizeof(path), a.pos[0], suffix) < 0 ||
	    client_init(&c, v.socket) < 0)
		return CORDON_EXIT_USAGE;
	_cleanup_close_ int lfd = listen_on(v.listen ? v.listen : dflt, a.pos[1]);
	if (lfd < 0) {
		log_error("port-forward: cannot listen on %s: %s", v.listen ? v.listen : dflt,
			  strerror(-lfd));
		return CORDON_EXIT_USAGE;
	}
	_cleanup_close_ int sigfd = sigfd_block(sigs, ELEMENTSOF(sigs));
	if (sigfd < 0)
		return CLI_EXIT_API;
	fprintf(stderr, "forwarding %s to port %lu of %s\n", v.listen ? v.listen : dflt, port,
		a.pos[0]);
	return forward(&c, path, lfd, sigfd);
}
