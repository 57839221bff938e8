#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>

#include "basic/cleanup.h"
#include "basic/fileio.h"
#include "basic/helper.h"
#include "net/egressctl.h"

#define REPLY_TIMEOUT_MS 5000

/* Reads one line (without its newline) within the deadline; -ETIMEDOUT, -EPIPE. */
static int read_line(int fd, char *buf, size_t size, int timeout_ms)
{
	size_t n = 0;
	while (n + 1 < size) {
		struct pollfd p = {fd, POLLIN, 0};
		int r = poll(&p, 1, timeout_ms);
		if (r == 0)
			return -ETIMEDOUT;
		if (r < 0 && errno != EINTR)
			return -errno;
		ssize_t k = read(fd, buf + n, 1); /* one byte at a time: lines are short and rare */
		if (k == 0)
			return -EPIPE;
		if (k < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		if (buf[n] == '\n') {
			buf[n] = '\0';
			return 0;
		}
		n++;
	}
	return -E2BIG;
}

int egressctl_spawn(struct egressctl *ret, struct cordon_err *err)
{
	char path[PATH_MAX], arg[16], line[256];
	int sv[2];
	if (helper_path("cordon-egress", "CORDON_EGRESS", path, sizeof(path)) < 0)
		return cordon_err_set(err, -ENOENT, "network: cordon-egress not found (%s)", path);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return cordon_err_set(err, -errno, "network: socketpair");
	pid_t pid = fork();
	if (pid < 0) {
		close(sv[0]);
		close(sv[1]);
		return cordon_err_set(err, -errno, "network: fork");
	}
	if (pid == 0) {
		int fd = fcntl(sv[1], F_DUPFD, 3); /* without CLOEXEC: the child keeps it */
		snprintf(arg, sizeof(arg), "%d", fd);
		execl(path, "cordon-egress", arg, (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	*ret = (struct egressctl){.pid = pid, .fd = sv[0]};
	int r = read_line(ret->fd, line, sizeof(line), REPLY_TIMEOUT_MS);
	unsigned tcp = 0, dns = 0;
	if (r < 0 || sscanf(line, "{\"op\":\"ready\",\"tcp_port\":%u,\"dns_port\":%u}", &tcp, &dns) != 2 ||
	    !tcp || !dns || tcp > 65535 || dns > 65535) {
		close(ret->fd);
		kill(pid, SIGKILL);
		return cordon_err_setf(err, r < 0 ? r : -EPROTO, "network: cordon-egress did not start");
	}
	ret->tcp_port = (uint16_t)tcp;
	ret->dns_port = (uint16_t)dns;
	return 0;
}

char *egressctl_set_line(const char *ip, const char *sandbox_id, const char *mode,
			 const char *const *allow, size_t n, const char *ifname)
{
	_cleanup_(json_decrefp) json_t *a = json_array();
	for (size_t i = 0; a && i < n; i++)
		json_array_append_new(a, json_string(allow[i]));
	_cleanup_(json_decrefp) json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:O, s:s?}", "op", "set",
						       "ip", ip, "sandbox", sandbox_id, "mode", mode,
						       "allow", a, "ifname", ifname);
	return o ? json_dumps(o, JSON_COMPACT) : NULL;
}

char *egressctl_del_line(const char *ip)
{
	_cleanup_(json_decrefp) json_t *o = json_pack("{s:s, s:s}", "op", "del", "ip", ip);
	return o ? json_dumps(o, JSON_COMPACT) : NULL;
}

int egressctl_request(struct egressctl *e, const char *line, struct cordon_err *err)
{
	char buf[4096];
	if (write_all(e->fd, line, strlen(line)) < 0 || write_all(e->fd, "\n", 1) < 0)
		return cordon_err_set(err, -EPIPE, "network: egress proxy gone");
	for (;;) {
		int r = read_line(e->fd, buf, sizeof(buf), REPLY_TIMEOUT_MS);
		if (r < 0)
			return cordon_err_set(err, r, "network: no answer from the egress proxy");
		_cleanup_(json_decrefp) json_t *m = json_loads(buf, 0, NULL);
		const char *op = json_string_value(json_object_get(m, "op"));
		if (!op || strcmp(op, "reply") != 0)
			continue; /* an event: not for us here */
		if (json_is_true(json_object_get(m, "ok")))
			return 0;
		const char *msg = json_string_value(json_object_get(m, "error"));
		return cordon_err_setf(err, -EINVAL, "network: %s", msg ? msg : "refused");
	}
}
