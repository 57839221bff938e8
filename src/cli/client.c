/* HTTP/1.1 over a unix socket or TCP, on plain sockets and poll(2): one request per
 * connection, responses with Content-Length, chunked, or read to EOF. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cordon/cordon.h>

#include "basic/buf.h"
#include "basic/cleanup.h"
#include "basic/log.h"
#include "cli/client.h"

#define CONN_BUF      CLIENT_HEAD_MAX
#define CHUNK_LINE_MAX 1024 /* a chunk-size line, extensions included */
#define REQ_HEAD_MAX  (32 * 1024)

enum body_mode { BODY_NONE, BODY_LENGTH, BODY_CHUNKED, BODY_EOF };
enum chunk_state { CH_SIZE, CH_DATA, CH_DATA_END, CH_TRAILER };

struct client_conn {
	int fd;
	enum body_mode mode;
	enum chunk_state cs;
	uint64_t remaining; /* of the body (BODY_LENGTH) or of the current chunk */
	bool done;
	size_t start, end; /* unconsumed bytes of buf */
	char buf[CONN_BUF];
};

/* A body or a line, bounded by @max. */
struct growbuf {
	struct buf b;
	size_t max;
};

/* ---- setup ---- */

static int parse_url(struct client *c, const char *url)
{
	const char *h = url + strlen("http://"), *end;
	size_t hl;

	if (strncmp(url, "http://", 7) != 0)
		return -EINVAL;
	if (*h == '[') {
		end = strchr(h, ']');
		if (!end)
			return -EINVAL;
		hl = (size_t)(end - h - 1);
		h++;
		end++;
	} else {
		end = h + strcspn(h, ":/");
		hl = (size_t)(end - h);
	}
	if (hl == 0 || hl >= sizeof(c->host))
		return -EINVAL;
	memcpy(c->host, h, hl);
	c->host[hl] = 0;
	const char *port = "80";
	size_t pl = 2;
	if (*end == ':') {
		port = end + 1;
		pl = strcspn(port, "/");
		end = port + pl;
	}
	if (pl == 0 || pl >= sizeof(c->port) || strspn(port, "0123456789") < pl)
		return -EINVAL;
	memcpy(c->port, port, pl);
	c->port[pl] = 0;
	if (*end && strcmp(end, "/") != 0)
		return -EINVAL; /* no base path: the API lives at the root */
	snprintf(c->where, sizeof(c->where), "http://%s:%s", c->host, c->port);
	return 0;
}

int client_init(struct client *c, const char *socket_path)
{
	const char *url = getenv("CORDON_URL");

	*c = (struct client){.timeout_ms = CLIENT_TIMEOUT_MS};
	/* A daemon that goes away mid-write must fail the write, not kill the CLI. */
	signal(SIGPIPE, SIG_IGN);
	if (!socket_path && url && *url) {
		if (parse_url(c, url) < 0) {
			log_error("$CORDON_URL '%s': expected http://HOST:PORT", url);
			return -EINVAL;
		}
		c->api_key = getenv("CORDON_API_KEY");
		return 0;
	}
	if (!socket_path)
		socket_path = getenv("CORDON_SOCKET");
	if (!socket_path || !*socket_path)
		socket_path = CLIENT_DEFAULT_SOCKET;
	if (strlen(socket_path) >= sizeof(c->unix_path)) {
		log_error("socket path '%s' is too long (at most %zu bytes)", socket_path,
			  sizeof(c->unix_path) - 1);
		return -ENAMETOOLONG;
	}
	strcpy(c->unix_path, socket_path);
	snprintf(c->where, sizeof(c->where), "unix socket %s", socket_path);
	return 0;
}

/* ---- waiting and moving bytes ---- */

static int wait_fd(int fd, short events, int timeout_ms)
{
	struct pollfd p = {.fd = fd, .events = events};
	for (;;) {
		int r = poll(&p, 1, timeout_ms);
		if (r > 0)
			return 0;
		if (r == 0)
			return -ETIMEDOUT;
		if (errno != EINTR)
			return -errno;
	}
}

static int send_all(struct client *c, int fd, const char *p, size_t len)
{
	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)
				return -errno;
			int r = wait_fd(fd, POLLOUT, c->timeout_ms);
			if (r < 0)
				return r;
			continue;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int connect_unix(struct client *c)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	_cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	memcpy(sa.sun_path, c->unix_path, strlen(c->unix_path) + 1);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -errno;
	return TAKE_FD(fd);
}

static int connect_one(struct client *c, const struct addrinfo *ai)
{
	_cleanup_close_ int fd =
	    socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
	int err = 0;
	socklen_t el = sizeof(err);

	if (fd < 0)
		return -errno;
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		if (errno != EINPROGRESS)
			return -errno;
		int r = wait_fd(fd, POLLOUT, c->timeout_ms);
		if (r < 0)
			return r;
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
			return -errno;
		if (err)
			return -err;
	}
	return TAKE_FD(fd);
}

static int connect_tcp(struct client *c)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
	int r = getaddrinfo(c->host, c->port, &hints, &res);

	if (r != 0)
		return r == EAI_SYSTEM ? -errno : -EHOSTUNREACH;
	r = -EHOSTUNREACH;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		r = connect_one(c, ai);
		if (r >= 0)
			break;
	}
	freeaddrinfo(res);
	return r;
}

static int client_connect(struct client *c)
{
	c->stage = CLIENT_CONNECT;
	int fd = c->host[0] ? connect_tcp(c) : connect_unix(c);
	if (fd < 0)
		return fd;
	if (fcntl(fd, F_SETFL, O_NONBLOCK) < 0) {
		int r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

/* ---- the request ---- */

static int send_head(struct client *c, int fd, const char *method, const char *path,
		     const struct client_body *body)
{
	_cleanup_free_ char *head = malloc(REQ_HEAD_MAX);
	int n;

	if (!head)
		return -ENOMEM;
	n = snprintf(head, REQ_HEAD_MAX,
		     "%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: cordon/0.1\r\nConnection: close\r\n"
		     "Accept: application/json, application/x-ndjson, */*\r\n",
		     method, path, c->host[0] ? c->host : "localhost");
	if (c->host[0] && c->api_key && *c->api_key && n > 0 && n < REQ_HEAD_MAX)
		n += snprintf(head + n, REQ_HEAD_MAX - n, "Authorization: Bearer %s\r\n", c->api_key);
	if (body && n > 0 && n < REQ_HEAD_MAX)
		n += snprintf(head + n, REQ_HEAD_MAX - n, "Content-Type: %s\r\nContent-Length: %zu\r\n",
			      body->content_type, body->len);
	else if (n > 0 && n < REQ_HEAD_MAX && strcmp(method, "GET") != 0)
		n += snprintf(head + n, REQ_HEAD_MAX - n, "Content-Length: 0\r\n");
	if (n > 0 && n < REQ_HEAD_MAX)
		n += snprintf(head + n, REQ_HEAD_MAX - n, "\r\n");
	if (n <= 0 || n >= REQ_HEAD_MAX)
		return -E2BIG;
	return send_all(c, fd, head, (size_t)n);
}

static int send_body_fd(struct client *c, int fd, const struct client_body *body)
{
	_cleanup_free_ char *buf = malloc(64 * 1024);
	size_t left = body->len;

	if (!buf)
		return -ENOMEM;
	while (left > 0) {
		ssize_t n = read(body->fd, buf, left < 64 * 1024 ? left : 64 * 1024);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO; /* the file shrank under us: the length we sent is a lie */
		int r = send_all(c, fd, buf, (size_t)n);
		if (r < 0)
			return r;
		left -= (size_t)n;
	}
	return 0;
}

static int send_request(struct client *c, int fd, const char *method, const char *path,
			const struct client_body *body)
{
	c->stage = CLIENT_SEND;
	int r = send_head(c, fd, method, path, body);
	if (r < 0 || !body)
		return r;
	if (body->fd >= 0)
		return send_body_fd(c, fd, body);
	return send_all(c, fd, body->data, body->len);
}

/* ---- the response head ---- */

static const char *find_crlf(const char *p, const char *end)
{
	for (; p + 1 < end; p++)
		if (p[0] == '\r' && p[1] == '\n')
			return p;
	return NULL;
}

static int parse_header(struct client_conn *conn, struct client_response *res, char *line)
{
	char *colon = strchr(line, ':');
	if (!colon)
		return -EBADMSG;
	*colon = 0;
	char *v = colon + 1;
	v += strspn(v, " \t");
	if (strcasecmp(line, "Content-Length") == 0) {
		char *e;
		errno = 0;
		unsigned long long n = strtoull(v, &e, 10);
		if (errno || e == v || !isdigit((unsigned char)*v) || (*e && !isspace((unsigned char)*e)))
			return -EBADMSG;
		if (conn->mode != BODY_CHUNKED) {
			conn->mode = BODY_LENGTH;
			conn->remaining = n;
		}
	} else if (strcasecmp(line, "Transfer-Encoding") == 0) {
		if (!strcasestr(v, "chunked"))
			return -EBADMSG; /* gzip and friends: never asked for */
		conn->mode = BODY_CHUNKED;
		conn->cs = CH_SIZE;
	} else if (strcasecmp(line, "Content-Type") == 0) {
		snprintf(res->content_type, sizeof(res->content_type), "%s", v);
	}
	return 0;
}

static int parse_head(struct client_conn *conn, struct client_response *res, char *head)
{
	char *save = NULL;
	char *line = strtok_r(head, "\r\n", &save);
	int minor, status;
	char sp;

	if (!line || sscanf(line, "HTTP/1.%d %3d%c", &minor, &status, &sp) < 2 || status < 100 ||
	    status > 599)
		return -EBADMSG;
	res->status = status;
	conn->mode = BODY_EOF;
	while ((line = strtok_r(NULL, "\r\n", &save))) {
		int r = parse_header(conn, res, line);
		if (r < 0)
			return r;
	}
	if (status == 204 || status == 304 || status < 200 ||
	    (conn->mode == BODY_LENGTH && conn->remaining == 0))
		conn->done = true;
	return 0;
}

static int read_some(struct client *c, struct client_conn *conn, bool wait)
{
	for (;;) {
		ssize_t n = read(conn->fd, conn->buf + conn->end, sizeof(conn->buf) - conn->end);
		if (n >= 0) {
			conn->end += (size_t)n;
			return (int)n;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN || !wait)
			return -errno;
		int r = wait_fd(conn->fd, POLLIN, c->timeout_ms);
		if (r < 0)
			return r;
	}
}

static int read_head(struct client *c, struct client_conn *conn, struct client_response *res)
{
	for (;;) {
		char *p = memmem(conn->buf, conn->end, "\r\n\r\n", 4);
		if (p) {
			*p = 0;
			conn->start = (size_t)(p - conn->buf) + 4;
			c->stage = CLIENT_PROTOCOL;
			return parse_head(conn, res, conn->buf);
		}
		if (conn->end == sizeof(conn->buf)) {
			c->stage = CLIENT_PROTOCOL;
			return -E2BIG;
		}
		int n = read_some(c, conn, true);
		if (n < 0)
			return n;
		if (n == 0)
			return -ECONNRESET;
	}
}

struct client_conn *client_conn_free(struct client_conn *conn)
{
	if (conn) {
		if (conn->fd >= 0)
			close(conn->fd);
		free(conn);
	}
	return NULL;
}

int client_fd(const struct client_conn *conn)
{
	return conn->fd;
}

int client_open(struct client *c, const char *method, const char *path,
		const struct client_body *body, struct client_response *ret_res,
		struct client_conn **ret_conn)
{
	_cleanup_(client_conn_freep) struct client_conn *conn = calloc(1, sizeof(*conn));
	if (!conn)
		return -ENOMEM;
	conn->fd = client_connect(c);
	if (conn->fd < 0)
		return conn->fd;
	int sr = send_request(c, conn->fd, method, path, body);
	/* A daemon may answer (413, 404) and close before reading all of an upload: the
	 * answer, when there is one, says more than EPIPE. */
	if (sr < 0 && sr != -EPIPE && sr != -ECONNRESET)
		return sr;
	c->stage = CLIENT_RECEIVE;
	int r = read_head(c, conn, ret_res);
	if (r < 0 && sr < 0) {
		c->stage = CLIENT_SEND;
		return sr;
	}
	if (r < 0)
		return r;
	c->stage = CLIENT_RECEIVE;
	*ret_conn = TAKE_PTR(conn);
	return 0;
}

/* ---- the response body ---- */

static int chunk_size_line(struct client_conn *conn)
{
	const char *b = conn->buf + conn->start, *e = conn->buf + conn->end;
	const char *crlf = find_crlf(b, e);
	if (!crlf)
		return e - b > CHUNK_LINE_MAX ? -EBADMSG : 0;
	char *end;
	if (!isxdigit((unsigned char)*b))
		return -EBADMSG;
	errno = 0;
	unsigned long long n = strtoull(b, &end, 16);
	if (errno || (end != crlf && *end != ';' && *end != ' ' && *end != '\t'))
		return -EBADMSG;
	conn->start = (size_t)(crlf - conn->buf) + 2;
	conn->remaining = n;
	conn->cs = n ? CH_DATA : CH_TRAILER;
	return 1;
}

static int chunk_step(struct client_conn *conn)
{
	const char *b = conn->buf + conn->start, *e = conn->buf + conn->end;
	switch (conn->cs) {
	case CH_SIZE:
		return chunk_size_line(conn);
	case CH_DATA_END:
		if (e - b < 2)
			return 0;
		if (b[0] != '\r' || b[1] != '\n')
			return -EBADMSG;
		conn->start += 2;
		conn->cs = CH_SIZE;
		return 1;
	case CH_TRAILER: {
		const char *crlf = find_crlf(b, e);
		if (!crlf)
			return e - b > CHUNK_LINE_MAX ? -EBADMSG : 0;
		conn->start = (size_t)(crlf - conn->buf) + 2;
		if (crlf == b)
			conn->done = true;
		return 1;
	}
	case CH_DATA:
		break;
	}
	return -EINVAL;
}

/* Hands every decodable buffered byte to @sink. */
static int decode(struct client_conn *conn, client_sink sink, void *userdata)
{
	while (!conn->done && conn->start < conn->end) {
		size_t avail = conn->end - conn->start;
		bool counted = conn->mode == BODY_LENGTH ||
			       (conn->mode == BODY_CHUNKED && conn->cs == CH_DATA);
		if (conn->mode == BODY_CHUNKED && !counted) {
			int r = chunk_step(conn);
			if (r <= 0)
				return r;
			continue;
		}
		size_t n = counted && conn->remaining < avail ? (size_t)conn->remaining : avail;
		int r = sink ? sink(conn->buf + conn->start, n, userdata) : 0;
		if (r < 0)
			return r;
		conn->start += n;
		if (counted && (conn->remaining -= n) == 0) {
			if (conn->mode == BODY_LENGTH)
				conn->done = true;
			else
				conn->cs = CH_DATA_END;
		}
	}
	if (conn->start == conn->end)
		conn->start = conn->end = 0;
	return 0;
}

void client_conn_raw(struct client_conn *conn)
{
	conn->mode = BODY_EOF;
	conn->done = false;
}

int client_pump(struct client *c, struct client_conn *conn, client_sink sink, void *userdata)
{
	c->stage = CLIENT_PROTOCOL;
	int r = decode(conn, sink, userdata);
	if (r < 0 || conn->done)
		return r < 0 ? r : 1;
	if (conn->start > 0) {
		memmove(conn->buf, conn->buf + conn->start, conn->end - conn->start);
		conn->end -= conn->start;
		conn->start = 0;
	}
	c->stage = CLIENT_RECEIVE;
	int n = read_some(c, conn, false);
	if (n == -EAGAIN)
		return 0;
	if (n < 0)
		return n;
	if (n == 0) {
		if (conn->mode != BODY_EOF)
			return -ECONNRESET; /* cut short */
		conn->done = true;
		return 1;
	}
	c->stage = CLIENT_PROTOCOL;
	r = decode(conn, sink, userdata);
	if (r < 0)
		return r;
	return conn->done ? 1 : 0;
}

int client_drain(struct client *c, struct client_conn *conn, client_sink sink, void *userdata,
		 bool idle_timeout)
{
	for (;;) {
		int r = client_pump(c, conn, sink, userdata);
		if (r != 0)
			return r < 0 ? r : 0;
		c->stage = CLIENT_RECEIVE;
		r = wait_fd(conn->fd, POLLIN, idle_timeout ? c->timeout_ms : -1);
		if (r < 0)
			return r;
	}
}

static int growbuf_sink(const char *data, size_t len, void *userdata)
{
	struct growbuf *g = userdata;
	if (len > g->max - g->b.len)
		return -E2BIG;
	return buf_add(&g->b, data, len);
}

void client_response_done(struct client_response *res)
{
	free(res->body);
	json_decref(res->json);
	*res = (struct client_response){};
}

int client_read_body(struct client *c, struct client_conn *conn, struct client_response *res)
{
	struct growbuf g = {.max = CLIENT_BODY_MAX};

	int r = client_drain(c, conn, growbuf_sink, &g, true);
	if (r < 0) {
		buf_done(&g.b);
		return r;
	}
	res->body_len = g.b.len;
	res->body = buf_take(&g.b);
	if (!res->body)
		return -ENOMEM;
	if (res->body_len > 0 &&
	    (strncasecmp(res->content_type, "application/json", 16) == 0 || res->body[0] == '{'))
		res->json = json_loadb(res->body, res->body_len, JSON_REJECT_DUPLICATES, NULL);
	return 0;
}

int client_request(struct client *c, const char *method, const char *path,
		   const struct client_body *body, struct client_response *ret_res)
{
	_cleanup_(client_conn_freep) struct client_conn *conn = NULL;

	int r = client_open(c, method, path, body, ret_res, &conn);
	if (r < 0)
		return r;
	return client_read_body(c, conn, ret_res);
}

int client_json(struct client *c, const char *method, const char *path, json_t *req,
		struct client_response *ret_res)
{
	_cleanup_free_ char *s = req ? json_dumps(req, JSON_COMPACT) : NULL;
	struct client_body body = {"application/json", s, s ? strlen(s) : 0, -1};

	if (req && !s)
		return -ENOMEM;
	return client_request(c, method, path, req ? &body : NULL, ret_res);
}

/* ---- NDJSON lines ---- */

int client_lines_sink(const char *data, size_t len, void *userdata)
{
	struct client_lines *l = userdata;
	while (len > 0) {
		const char *nl = memchr(data, '\n', len);
		size_t n = nl ? (size_t)(nl - data) : len;
		struct growbuf g = {{l->buf, 0, l->len, l->cap}, CLIENT_LINE_MAX};
		int r = growbuf_sink(data, n, &g);
		l->buf = g.b.p, l->len = g.b.len, l->cap = g.b.cap;
		if (r < 0)
			return r;
		if (!nl)
			return 0;
		data += n + 1;
		len -= n + 1;
		size_t ll = l->len;
		l->len = 0;
		if (ll > 0 && l->buf[ll - 1] == '\r')
			l->buf[--ll] = 0;
		if (ll > 0 && (r = l->cb(l->buf, ll, l->userdata)) < 0)
			return r;
	}
	return 0;
}

int client_lines_finish(struct client_lines *l)
{
	size_t ll = l->len;
	l->len = 0;
	return ll > 0 ? l->cb(l->buf, ll, l->userdata) : 0;
}

void client_lines_done(struct client_lines *l)
{
	free(l->buf);
	l->buf = NULL;
	l->len = l->cap = 0;
}

/* ---- reporting ---- */

int client_fail(const struct client *c, int r)
{
	switch (c->stage) {
	case CLIENT_CONNECT:
		log_error("cannot reach cordond at %s: %s (is cordond running? --socket, "
			  "$CORDON_SOCKET or $CORDON_URL name another)",
			  c->where, strerror(-r));
		return CLI_EXIT_UNREACHABLE;
	case CLIENT_SEND:
	case CLIENT_RECEIVE:
		if (r == -ETIMEDOUT)
			log_error("cordond at %s: no answer within %d s", c->where, c->timeout_ms / 1000);
		else
			log_error("cordond at %s: connection lost: %s", c->where, strerror(-r));
		return CLI_EXIT_UNREACHABLE;
	case CLIENT_PROTOCOL:
		break;
	}
	log_error("cordond at %s: malformed response: %s", c->where,
		  r == -E2BIG ? "too large" : strerror(-r));
	return CLI_EXIT_API;
}

int client_api_error(const struct client_response *res)
{
	const char *code = NULL, *msg = NULL;

	if (res->json &&
	    json_unpack(res->json, "{s:{s:s, s:s}}", "error", "code", &code, "message", &msg) == 0) {
		log_error("%s: %s", code, msg);
		return 1;
	}
	size_t n = res->body ? strcspn(res->body, "\r\n") : 0;
	log_error("http_%d: %.*s", res->status, (int)(n > 200 ? 200 : n), n ? res->body : "(no body)");
	return 1;
}

/* ---- encodings ---- */

int client_urlencode(char *buf, size_t size, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = strlen(buf);

	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		bool keep = isalnum(ch) || strchr("-._~/", ch);
		if (n + (keep ? 1 : 3) >= size)
			return -E2BIG;
		if (keep) {
			buf[n++] = (char)ch;
		} else {
			buf[n++] = '%';
			buf[n++] = hex[ch >> 4];
			buf[n++] = hex[ch & 15];
		}
	}
	buf[n] = 0;
	return 0;
}

bool client_valid_id(const char *s, size_t len)
{
	if (len == 0 || len > 64)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!(isalnum((unsigned char)s[i]) || s[i] == '_' || s[i] == '-'))
			return false;
	return true;
}

void cli_print_json(json_t *j)
{
	json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	fputc('\n', stdout);
}

json_t *cli_kv_json(const struct cli_list *l, const char *what)
{
	_cleanup_(json_decrefp) json_t *obj = json_object();
	for (size_t i = 0; obj && i < l->n; i++) {
		const char *arg = l->v[i], *eq = strchr(arg, '=');
		_cleanup_free_ char *key = strndup(arg, (size_t)(eq - arg));
		if (!key || json_object_set_new(obj, key, json_string(eq + 1)) < 0) {
			log_error("--%s '%s': not valid UTF-8", what, arg);
			return NULL;
		}
	}
	return TAKE_PTR(obj);
}

/* --net and --allow, for create and network: {"policy": "allow", "allow": [RULE...]}. */
json_t *cli_network_json(const struct cli_values *v)
{
	_cleanup_(json_decrefp) json_t *net = json_object();
	const char *policy = v->net && strcmp(v->net, "none") == 0 ? "deny" : v->net;
	if (!policy && v->allow.n)
		policy = "allow";
	if (!net || (policy && json_object_set_new(net, "policy", json_string(policy)) < 0))
		return NULL;
	if (v->allow.n && json_object_set_new(net, "allow", cli_list_json(&v->allow, "allow")) < 0)
		return NULL;
	return TAKE_PTR(net);
}


int cli_set_string(json_t *obj, const char *key, const char *s)
{
	return s && json_object_set_new(obj, key, json_string(s)) < 0 ? -EINVAL : 0;
}

json_t *cli_list_json(const struct cli_list *l, const char *what)
{
	_cleanup_(json_decrefp) json_t *a = json_array();
	for (size_t i = 0; a && i < l->n; i++)
		if (json_array_append_new(a, json_string(l->v[i])) < 0) {
			log_error("--%s '%s': not valid UTF-8", what, l->v[i]);
			return NULL;
		}
	return TAKE_PTR(a);
}

int cli_call(const char *socket, const char *method, const char *path, json_t *req,
	     struct client_response *ret_res)
{
	struct client c;
	int r = client_init(&c, socket);
	if (r < 0)
		return CORDON_EXIT_USAGE;
	r = client_json(&c, method, path, req, ret_res);
	if (r < 0)
		return client_fail(&c, r);
	if (ret_res->status >= 300)
		return client_api_error(ret_res);
	return 0;
}

int cli_sandbox_path(char *buf, size_t size, const char *id, const char *suffix)
{
	if (!client_valid_id(id, strlen(id))) {
		log_error("'%s' is not a sandbox id (letters, digits, '_' and '-', at most 64)", id);
		return -EINVAL;
	}
	int n = snprintf(buf, size, "/v1/sandboxes/%s%s", id, suffix);
	return n < 0 || (size_t)n >= size ? -E2BIG : 0;
}

int cli_parse_seconds(const char *name, const char *arg, long long min, long long *ret)
{
	uint64_t ms;
	if (cordon_parse_duration_ms(arg, &ms) < 0 || ms % 1000 || ms / 1000 < (uint64_t)min ||
	    ms / 1000 > 1000000000) {
		log_error("%s '%s': expected whole seconds (at least %lld), such as 300, 90s or 5m",
			  name, arg, min);
		return -EINVAL;
	}
	*ret = (long long)(ms / 1000);
	return 0;
}

int client_get_stream(struct client *c, const char *path, struct client_response *ret_res,
		      struct client_conn **ret_conn)
{
	int r = client_open(c, "GET", path, NULL, ret_res, ret_conn);
	if (r < 0)
		return client_fail(c, r);
	if (ret_res->status == 200)
		return 0;
	r = client_read_body(c, *ret_conn, ret_res);
	return r < 0 ? client_fail(c, r) : client_api_error(ret_res);
}
