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

extern char **environ;

/* Our environment for the proxy, with CORDON_EGRESS_CA_DIR=@ca_dir or without it: made
 * before fork(), so that the child only execs. */
static char **proxy_env(const char *ca_dir, char **ret_entry)
{
	size_t n = 0, k = 0;
	while (environ[n])
		n++;
	char **envp = calloc(n + 2, sizeof(*envp));
	if (!envp || (ca_dir && asprintf(ret_entry, "CORDON_EGRESS_CA_DIR=%s", ca_dir) < 0)) {
		free(envp);
		return NULL;
	}
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "CORDON_EGRESS_CA_DIR=", 21) != 0)
			envp[k++] = environ[i];
	if (ca_dir)
		envp[k++] = *ret_entry;
	return envp;
}

int egressctl_spawn(struct egressctl *ret, struct cordon_err *err)
{
	return egressctl_spawn_ca(ret, NULL, err);
}

int egressctl_spawn_ca(struct egressctl *ret, const char *ca_dir, struct cordon_err *err)
{
	char path[PATH_MAX], arg[16], line[256];
	int sv[2];
	if (helper_path("cordon-egress", "CORDON_EGRESS", path, sizeof(path)) < 0)
		return cordon_err_set(err, -ENOENT, "network: cordon-egress not found (%s)", path);
	_cleanup_free_ char *ca_env = NULL;
	_cleanup_free_ char **envp = proxy_env(ca_dir, &ca_env);
	if (!envp)
		return cordon_err_set(err, -ENOMEM, "network: out of memory");
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
		char *const argv[] = {"cordon-egress", arg, NULL};
		execve(path, argv, envp);
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
	return egressctl_set_line_secrets(ip, sandbox_id, mode, allow, n, ifname, NULL);
}

char *egressctl_set_line_secrets(const char *ip, const char *sandbox_id, const char *mode,
				 const char *const *allow, size_t n, const char *ifname, json_t *secrets)
{
	return egressctl_set_line_extra(ip, sandbox_id, mode, allow, n, ifname, secrets, NULL);
}

char *egressctl_set_line_extra(const char *ip, const char *sandbox_id, const char *mode,
			       const char *const *allow, size_t n, const char *ifname, json_t *secrets,
			       json_t *extra)
{
	_cleanup_(json_decrefp) json_t *a = json_array();
	for (size_t i = 0; a && i < n; i++)
		json_array_append_new(a, json_string(allow[i]));
	_cleanup_(json_decrefp) json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:O, s:s?, s:O*}", "op", "set",
						       "ip", ip, "sandbox", sandbox_id, "mode", mode,
						       "allow", a, "ifname", ifname, "secrets", secrets);
	if (o && extra)
		json_object_update(o, extra);
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

int egressctl_drain_events(struct egressctl *e, int quiet_ms, void (*fn)(json_t *ev, void *data), void *data)
{
	char buf[4096];
	int n = 0;
	for (;;) {
		int r = read_line(e->fd, buf, sizeof(buf), quiet_ms);
		if (r == -E2BIG)
			continue; /* an over-long line: its rest is read as the next one, and skipped */
		if (r < 0)
			return n;
		_cleanup_(json_decrefp) json_t *m = json_loads(buf, 0, NULL);
		const char *op = json_string_value(json_object_get(m, "op"));
		if (op && strcmp(op, "event") == 0) {
			fn(m, data);
			n++;
		}
	}
}
