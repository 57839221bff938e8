/* libFuzzer target for the CLI's HTTP response reader (src/cli/client.c): the status line and
 * headers, Content-Length, chunked and read-to-EOF bodies, and NDJSON line splitting. A
 * daemon on the other end of $CORDON_URL may be anyone's.
 *
 * The reader only works on a connection, so client.c is compiled into this file and its
 * static reader runs over one end of a socketpair into which the input was written and then
 * closed: the same read(2)s, polls and EOF as over the daemon's socket, without a daemon.
 *
 * Input: byte 0 bit 0 picks the body reader (1: buffered, as client_request(); 0: streamed
 * through client_lines_sink(), as `exec` and `logs --follow`). Byte 1 is the size of the
 * pieces the rest is written in (0: at once); SOCK_SEQPACKET keeps the pieces apart, so every
 * split of the head, a chunk-size line or a CRLF is reachable. */
#include "cli/client.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_PIECES 64
#define MAX_PIECE  (32 * 1024)

static int line_cb(char *line, size_t len, void *userdata)
{
	size_t *lines = userdata;
	/* a line never holds its terminator, is never empty, and has its NUL */
	if (len == 0 || len > CLIENT_LINE_MAX || memchr(line, '\n', len) || line[len] != '\0')
		abort();
	(*lines)++;
	return 0;
}

/* Writes @data into @fd in pieces of @step bytes, as many as the socket buffer takes. */
static void feed(int fd, const uint8_t *data, size_t size, size_t step)
{
	if (step == 0 || step > MAX_PIECE)
		step = MAX_PIECE;
	if (size / step >= MAX_PIECES)
		step = size / MAX_PIECES + 1;
	while (size > 0) {
		size_t n = size < step ? size : step;
		if (send(fd, data, n, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)n)
			return;
		data += n;
		size -= n;
	}
}

static void read_response(struct client *c, struct client_conn *conn, bool buffered)
{
	struct client_response res = {};

	if (read_head(c, conn, &res) < 0) {
		client_response_done(&res);
		return;
	}
	if (res.status < 100 || res.status > 599)
		abort();
	bool length = conn->mode == BODY_LENGTH;
	uint64_t want = conn->done ? 0 : conn->remaining;
	if (buffered) {
		if (client_read_body(c, conn, &res) == 0) {
			if (!res.body || res.body[res.body_len] != '\0')
				abort();
			/* a Content-Length body is exactly that long, or the read failed */
			if (length && res.body_len != want)
				abort();
		}
	} else {
		size_t lines = 0;
		struct client_lines l = {.cb = line_cb, .userdata = &lines};
		if (client_drain(c, conn, client_lines_sink, &l, true) == 0)
			client_lines_finish(&l);
		client_lines_done(&l);
	}
	client_response_done(&res);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool init;
	int sv[2];

	if (size < 2)
		return 0;
	if (!init) {
		signal(SIGPIPE, SIG_IGN);
		log_max_level = -1; /* the reader does not log; keep the run quiet if it ever does */
		init = true;
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		abort();
	int sndbuf = 1 << 20;
	setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	feed(sv[0], data + 2, size - 2, data[1]);
	close(sv[0]);
	if (fcntl(sv[1], F_SETFL, O_NONBLOCK) < 0)
		abort();

	struct client c = {.timeout_ms = 100};
	struct client_conn *conn = calloc(1, sizeof(*conn));
	if (!conn)
		abort();
	conn->fd = sv[1];
	read_response(&c, conn, data[0] & 1);
	client_conn_free(conn);
	return 0;
}
