/* cordon mcp --listen ADDR:PORT: the Streamable HTTP transport of MCP (2025-03-26 and later).
 *
 * POST /mcp carries one JSON-RPC message; a request's answer is application/json, or a
 * text/event-stream of that one message when the client accepts only that; a notification
 * or a response gets 202. GET and DELETE are 405: this server sends no messages of its own
 * and keeps no session (no Mcp-Session-Id), so every POST stands alone, and each connection
 * is served by a child process of its own (at most HTTP_CHILDREN_MAX at once; past that,
 * 503), closed after its answer, with deadlines on reading and writing. There is no authentication: the address must be loopback, and a request whose
 * Origin is not a loopback one is refused (403), against DNS rebinding from a web page. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "basic/buf.h"
#include "basic/cleanup.h"
#include "basic/fileio.h"
#include "basic/log.h"
#include "cli/mcp.h"

#define HEAD_MAX    (16 * 1024)
#define IO_DEADLINE 10 /* seconds for a client to send its request, and to take the answer */
#define HTTP_CHILDREN_MAX 16 /* connections served at once */

struct request {
	char method[16];
	char target[1024];
	long long content_length; /* -1: none */
	bool chunked;
	char accept[512], origin[512], content_type[128], version[64];
	struct buf raw; /* head, then body */
	size_t body_at;
};

static bool loopback_addr(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
	return sa->sa_family == AF_INET6 &&
	       IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

static int listen_on(const char *spec)
{
	_cleanup_free_ char *host = strdup(spec);
	char *colon = host ? strrchr(host, ':') : NULL;
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
	if (!colon || colon == host) {
		log_error("mcp: --listen '%s': expected ADDR:PORT, such as 127.0.0.1:8931", spec);
		return -EINVAL;
	}
	*colon = 0;
	char *h = host;
	if (h[0] == '[' && colon[-1] == ']') {
		h++;
		colon[-1] = 0;
	}
	int r = getaddrinfo(h, colon + 1, &hints, &ai);
	if (r) {
		log_error("mcp: --listen '%s': %s", spec, gai_strerror(r));
		return -EINVAL;
	}
	if (!loopback_addr(ai->ai_addr)) {
		freeaddrinfo(ai);
		log_error("mcp: --listen '%s': not a loopback address (the MCP endpoint has no "
			  "authentication; put a proxy that has in front of it)", spec);
		return -EINVAL;
	}
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 64) < 0) {
		r = -errno;
		log_error("mcp: --listen '%s': %s", spec, strerror(errno));
		if (fd >= 0)
			close(fd);
		fd = r;
	}
	freeaddrinfo(ai);
	return fd;
}

/* ---- reading a request ---- */

static int read_more(int fd, struct request *q, time_t deadline)
{
	if (buf_reserve(&q->raw, 65536) < 0)
		return -ENOMEM;
	int left = (int)(deadline - time(NULL));
	struct pollfd p = {.fd = fd, .events = POLLIN};
	if (left <= 0 || poll(&p, 1, left * 1000) <= 0)
		return -ETIMEDOUT;
	ssize_t n = read(fd, buf_tail(&q->raw), 65536);
	if (n <= 0)
		return n < 0 ? -errno : -ECONNRESET;
	q->raw.len += (size_t)n;
	return 0;
}

static void header(struct request *q, const char *name, const char *value)
{
	static const struct {
		const char *name;
		size_t off, size;
	} keep[] = {
		{"accept", offsetof(struct request, accept), sizeof(((struct request *)0)->accept)},
		{"origin", offsetof(struct request, origin), sizeof(((struct request *)0)->origin)},
		{"content-type", offsetof(struct request, content_type), sizeof(((struct request *)0)->content_type)},
		{"mcp-protocol-version", offsetof(struct request, version), sizeof(((struct request *)0)->version)},
	};
	if (strcasecmp(name, "content-length") == 0) {
		char *end;
		q->content_length = strtoll(value, &end, 10);
		if (*end || end == value || q->content_length < 0)
			q->content_length = -2;
	} else if (strcasecmp(name, "transfer-encoding") == 0) {
		q->chunked = true;
	}
	for (size_t i = 0; i < ELEMENTSOF(keep); i++)
		if (strcasecmp(name, keep[i].name) == 0)
			snprintf((char *)q + keep[i].off, keep[i].size, "%s", value);
}

static int parse_head(struct request *q, char *head)
{
	char *save = NULL, *line = strtok_r(head, "\r\n", &save);
	char version[16];
	if (!line || sscanf(line, "%15s %1023s %15s", q->method, q->target, version) != 3 ||
	    strncmp(version, "HTTP/1.", 7) != 0)
		return -EBADMSG;
	while ((line = strtok_r(NULL, "\r\n", &save))) {
		char *colon = strchr(line, ':');
		if (!colon)
			return -EBADMSG;
		*colon = 0;
		char *v = colon + 1;
		v += strspn(v, " \t");
		header(q, line, v);
	}
	return 0;
}

/* 0, or the HTTP status to refuse the request with. */
static int read_request(int fd, struct request *q)
{
	time_t deadline = time(NULL) + IO_DEADLINE;
	char *end;
	q->content_length = -1;
	while (!q->raw.len || !(end = strstr(q->raw.p + q->raw.head, "\r\n\r\n"))) {
		if (q->raw.len > HEAD_MAX)
			return 431;
		if (read_more(fd, q, deadline) < 0)
			return -1;
	}
	*end = 0;
	q->body_at = (size_t)(end + 4 - (q->raw.p + q->raw.head));
	if (parse_head(q, q->raw.p + q->raw.head) < 0 || q->content_length == -2)
		return 400;
	if (q->chunked || (q->content_length < 0 && strcmp(q->method, "POST") == 0))
		return 411;
	if (q->content_length > MCP_LINE_MAX)
		return 413;
	while (q->content_length > 0 && q->raw.len - q->body_at < (size_t)q->content_length)
		if (read_more(fd, q, deadline) < 0)
			return -1;
	return 0;
}

/* ---- answering ---- */

static const char *reason(int status)
{
	static const struct {
		int status;
		const char *text;
	} reasons[] = {
		{200, "OK"}, {202, "Accepted"}, {400, "Bad Request"}, {403, "Forbidden"}, {404, "Not Found"},
		{405, "Method Not Allowed"}, {406, "Not Acceptable"}, {411, "Length Required"},
		{413, "Content Too Large"}, {415, "Unsupported Media Type"}, {431, "Request Header Fields Too Large"},
	};
	for (size_t i = 0; i < ELEMENTSOF(reasons); i++)
		if (reasons[i].status == status)
			return reasons[i].text;
	return "Error";
}

static void answer(int fd, int status, const char *ctype, const char *body, size_t len)
{
	char head[512];
	int n = snprintf(head, sizeof(head),
			 "HTTP/1.1 %d %s\r\nContent-Length: %zu\r\nConnection: close\r\n"
			 "Cache-Control: no-store\r\n%s%s%s%s\r\n",
			 status, reason(status), len, ctype ? "Content-Type: " : "", ctype ?: "",
			 ctype ? "\r\n" : "", status == 405 ? "Allow: POST\r\n" : "");
	if (write_all(fd, head, (size_t)n) == 0 && len)
		write_all(fd, body, len);
}

/* An HTTP error with a JSON-RPC error body, as the MCP SDKs expect. */
static void refuse(int fd, int status, const char *why)
{
	_cleanup_(json_decrefp) json_t *e = mcp_rpc_error(NULL, -32000, why);
	_cleanup_free_ char *s = e ? json_dumps(e, JSON_COMPACT) : NULL;
	answer(fd, status, s ? "application/json" : NULL, s, s ? strlen(s) : 0);
}

static bool accepts(const char *accept, const char *type)
{
	return !*accept || strstr(accept, type) || strstr(accept, "*/*");
}

/* An Origin a page on this machine has: http(s)://localhost, 127.x.x.x or [::1], any port. */
static bool local_origin(const char *origin)
{
	static const char *const hosts[] = {"localhost", "127.", "[::1]"};
	const char *h = strstr(origin, "://");
	if (!*origin)
		return true;
	if (!h)
		return false;
	h += 3;
	for (size_t i = 0; i < ELEMENTSOF(hosts); i++)
		if (strncmp(h, hosts[i], strlen(hosts[i])) == 0) {
			const char *rest = h + strlen(hosts[i]);
			if (i == 1)
				rest += strspn(rest, "0123456789.");
			if (!*rest || *rest == ':' || *rest == '/')
				return true;
		}
	return false;
}

static void serve_post(struct mcp_server *s, int fd, struct request *q)
{
	if (strncasecmp(q->content_type, "application/json", 16) != 0)
		return refuse(fd, 415, "Content-Type must be application/json");
	if (*q->version && !mcp_protocol_supported(q->version))
		return refuse(fd, 400, "unsupported MCP-Protocol-Version");
	bool json_ok = accepts(q->accept, "application/json");
	if (!json_ok && !accepts(q->accept, "text/event-stream"))
		return refuse(fd, 406, "Accept must allow application/json or text/event-stream");
	_cleanup_(json_decrefp) json_t *ans =
		mcp_handle_text(s, q->raw.p + q->raw.head + q->body_at, (size_t)q->content_length);
	if (!ans)
		return answer(fd, 202, NULL, NULL, 0);
	_cleanup_free_ char *body = json_dumps(ans, JSON_COMPACT);
	if (!body)
		return refuse(fd, 500, "out of memory");
	if (json_ok)
		return answer(fd, 200, "application/json", body, strlen(body));
	_cleanup_free_ char *sse = NULL;
	int n = asprintf(&sse, "event: message\ndata: %s\n\n", body);
	if (n < 0)
		return refuse(fd, 500, "out of memory");
	answer(fd, 200, "text/event-stream", sse, (size_t)n);
}

static void serve_one(struct mcp_server *s, int fd)
{
	_cleanup_(buf_done) struct buf raw = {};
	struct request q = {};
	struct timeval tv = {.tv_sec = IO_DEADLINE};
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	int st = read_request(fd, &q);
	raw = q.raw;
	if (st < 0)
		return;
	if (st > 0)
		return refuse(fd, st, reason(st));
	size_t plen = strcspn(q.target, "?");
	if (plen != 4 || strncmp(q.target, "/mcp", 4) != 0)
		return refuse(fd, 404, "the MCP endpoint is /mcp");
	if (!local_origin(q.origin))
		return refuse(fd, 403, "Origin is not a local one");
	if (strcmp(q.method, "POST") != 0)
		return refuse(fd, 405, "only POST: this server sends no messages of its own and keeps no session");
	serve_post(s, fd, &q);
}

/* After the answer: read what the client still sends (a refused body) for a moment before
 * closing, so that its answer is not lost to a reset. */
static void linger_close(int fd)
{
	char junk[65536];
	size_t total = 0;
	time_t deadline = time(NULL) + 2;
	shutdown(fd, SHUT_WR);
	while (total < 2 * (size_t)MCP_LINE_MAX && time(NULL) < deadline) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, 500) <= 0)
			break;
		ssize_t n = read(fd, junk, sizeof(junk));
		if (n <= 0)
			break;
		total += (size_t)n;
	}
	close(fd);
}

/* Children serving connections now, after reaping those that ended. */
static size_t reap(size_t n)
{
	while (n > 0 && waitpid(-1, NULL, WNOHANG) > 0)
		n--;
	return n;
}

int mcp_serve_http(struct mcp_server *s, const char *listen_spec)
{
	_cleanup_close_ int lfd = listen_on(listen_spec);
	size_t children = 0;
	if (lfd < 0)
		return CLI_EXIT_USAGE;
	log_info("mcp: serving MCP on http://%s/mcp", listen_spec);
	fprintf(stderr, "cordon mcp: listening on http://%s/mcp\n", listen_spec);
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			int e = errno;
			if (e == EMFILE || e == ENFILE)
				poll(NULL, 0, 100); /* out of fds for a moment: no busy loop */
			if (e == EINTR || e == ECONNABORTED || e == EMFILE || e == ENFILE)
				continue;
			log_error("mcp: accept: %s", strerror(e));
			return 1;
		}
		/* each connection in a child of its own: a long run_command holds up no other call
		 * (the server keeps no state between requests to share) */
		children = reap(children);
		pid_t pid = children < HTTP_CHILDREN_MAX ? fork() : -1;
		if (pid == 0) {
			close(lfd);
			serve_one(s, fd);
			linger_close(fd);
			_exit(0);
		}
		if (pid < 0)
			refuse(fd, 503, "too many requests at once; retry");
		else
			children++;
		if (pid < 0)
			linger_close(fd);
		else
			close(fd);
	}
}
