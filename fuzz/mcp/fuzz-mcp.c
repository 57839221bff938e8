/* libFuzzer target for cordon mcp's HTTP transport (src/cli/mcp_http.c) and everything behind
 * it: the request head and body reader, the routing, JSON-RPC (mcp_proto.c) and each tool's
 * argument checking (mcp_tools.c). The input is what a client sends on a connection: it is
 * written into one end of a socketpair (then shut for writing) and serve_one() reads it from
 * the other end and answers there, as over a TCP connection. The tools reach for a cordond
 * whose socket does not exist, so a call that passes its checks fails fast as "cannot be
 * reached". The answer must be one HTTP/1.1 response. */
#include "cli/mcp_http.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct mcp_server server;

static void check_answer(int fd)
{
	char buf[1 << 16];
	size_t len = 0;
	ssize_t n;
	while (len < sizeof(buf) - 1 && (n = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0)
		len += (size_t)n;
	buf[len] = 0;
	/* every request that was read gets exactly one answer */
	if (len && strncmp(buf, "HTTP/1.1 ", 9) != 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int sv[2];
	if (!server.cfg.owner) {
		server.cfg = (struct mcp_config){.owner = "fuzz", .ttl_s = 300, .max_ttl_s = 3600,
						  .exec_timeout_s = 60, .max_exec_s = 600, .max_output = 4096,
						  .max_file = 1 << 20};
		setenv("CORDON_SOCKET", "/nonexistent/cordon-fuzz.sock", 1);
		unsetenv("CORDON_URL");
		client_init(&server.c, NULL);
	}
	if (size > 70000 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return 0;
	int buf = 1 << 20;
	setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
	setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
	if (write_all(sv[0], data, size) == 0) {
		shutdown(sv[0], SHUT_WR);
		serve_one(&server, sv[1]);
		shutdown(sv[1], SHUT_WR);
		check_answer(sv[0]);
	}
	close(sv[0]);
	close(sv[1]);
	return 0;
}
