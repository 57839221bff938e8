/* Agent tests: agent_main() runs in a forked child with a socketpair on fd 3 (no sandbox) and
 * the test plays the host with the shared codec. Real processes, real files. Needs root (it
 * spawns as uid 1000 and checks file permissions as that user). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "init/agent.h"
#include "lib/initproto.h"
#include "lib/frame.h"

struct host {
	int fd;
	pid_t agent;
	struct frame_decoder dec;
};

struct rframe {
	uint16_t type;
	uint32_t chan;
	uint32_t len;
	uint8_t *payload;
};

struct output {
	char out[1 << 16], err[1 << 16];
	size_t out_len, err_len;
	uint64_t out_total;
	uint32_t pid;
	struct frame_exit exit;
	struct frame_error error; /* errnum != 0 if SPAWN failed */
};

static char tmpdir[64];

static struct host *host_start(void)
{
	struct host *h = calloc(1, sizeof(*h));
	int sv[2];

	assert_non_null(h);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	h->agent = fork();
	assert_true(h->agent >= 0);
	if (h->agent == 0) {
		if (dup2(sv[1], 3) < 0)
			_exit(99);
		_exit(agent_main(3));
	}
	close(sv[1]);
	h->fd = sv[0];
	frame_decoder_init(&h->dec, FRAME_TO_HOST);
	return h;
}

/* Closes the host end and returns the agent's exit status. */
static int host_stop(struct host *h)
{
	int st = 0;
	close(h->fd);
	assert_int_equal(waitpid(h->agent, &st, 0), h->agent);
	free(h);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

static void host_send(struct host *h, uint16_t type, uint32_t chan, const void *msg)
{
	ssize_t n = frame_build_size(type, msg);
	assert_true(n > 0);
	uint8_t *b = malloc((size_t)n);
	assert_int_equal(frame_build(b, (size_t)n, type, chan, msg), n);
	for (ssize_t off = 0; off < n;) {
		ssize_t w = write(h->fd, b + off, (size_t)(n - off));
		assert_true(w > 0);
		off += w;
	}
	free(b);
}

/* Next frame from the agent, or type 0 after @timeout_ms of silence or at EOF. */
static struct rframe host_recv(struct host *h, int timeout_ms)
{
	struct rframe r = {0};
	struct frame f;

	for (;;) {
		int k = frame_decoder_next(&h->dec, &f);
		assert_true(k >= 0); /* the agent never sends garbage */
		if (k == 1) {
			r.type = f.type;
			r.chan = f.channel;
			r.len = f.len;
			r.payload = malloc(f.len + 1);
			memcpy(r.payload, f.payload, f.len);
			return r;
		}
		struct pollfd p = {.fd = h->fd, .events = POLLIN};
		if (poll(&p, 1, timeout_ms) <= 0)
			return r;
		uint8_t *sp;
		size_t space = frame_decoder_space(&h->dec, &sp);
		ssize_t n = read(h->fd, sp, space);
		if (n <= 0)
			return r;
		frame_decoder_commit(&h->dec, (size_t)n);
	}
}

static void parse(const struct rframe *r, void *msg)
{
	assert_int_equal(frame_msg_parse(r->type, r->payload, r->len, msg), 0);
}

/* Reads frames of process @chan until its EXIT (or a SPAWN error). */
static void collect(struct host *h, uint32_t chan, struct output *o)
{
	for (;;) {
		struct rframe r = host_recv(h, 10000);
		assert_int_not_equal(r.type, 0);
		assert_int_equal(r.chan, chan);
		switch (r.type) {
		case FRAME_SPAWNED: {
			struct frame_spawned s;
			parse(&r, &s);
			o->pid = s.pid;
			break;
		}
		case FRAME_STDOUT:
			if (o->out_len + r.len < sizeof(o->out)) {
				memcpy(o->out + o->out_len, r.payload, r.len);
				o->out_len += r.len;
			}
			o->out_total += r.len;
			break;
		case FRAME_STDERR:
			assert_true(o->err_len + r.len < sizeof(o->err));
			memcpy(o->err + o->err_len, r.payload, r.len);
			o->err_len += r.len;
			break;
		case FRAME_EXIT:
			parse(&r, &o->exit);
			free(r.payload);
			return;
		case FRAME_ERROR:
			parse(&r, &o->error);
			o->error.message = NULL;
			free(r.payload);
			if (o->pid == 0)
				return;
			break;
		default:
			fail_msg("unexpected frame %s", frame_type_name(r.type));
		}
		free(r.payload);
	}
}

static struct frame_spawn *spawn_msg(const char *cmd, uint32_t user)
{
	static struct frame_spawn sp;
	memset(&sp, 0, sizeof(sp));
	sp.argv[0] = "sh";
	sp.argv[1] = "-c";
	sp.argv[2] = cmd;
	sp.argc = 3;
	sp.envp[0] = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
	sp.envc = 1;
	sp.user = user;
	return &sp;
}

static struct output *run(struct host *h, uint32_t chan, struct frame_spawn *sp)
{
	struct output *o = calloc(1, sizeof(*o));
	host_send(h, FRAME_SPAWN, chan, sp);
	collect(h, chan, o);
	return o;
}

/* Sends a request and returns its one reply, which must be on @chan. */
static struct rframe request(struct host *h, uint16_t type, uint32_t chan, const void *msg)
{
	host_send(h, type, chan, msg);
	struct rframe r = host_recv(h, 10000);
	assert_int_equal(r.chan, chan);
	return r;
}

static uint32_t expect_error(struct rframe r)
{
	struct frame_error e;
	assert_string_equal(frame_type_name(r.type), "ERROR");
	parse(&r, &e);
	free(r.payload);
	return e.errnum;
}

static void expect_ok(struct rframe r, uint64_t size)
{
	struct frame_ok ok;
	if (r.type == FRAME_ERROR) {
		struct frame_error e;
		parse(&r, &e);
		fail_msg("ERROR %u %s", e.errnum, e.message);
	}
	assert_int_equal(r.type, FRAME_OK);
	parse(&r, &ok);
	assert_int_equal(ok.size, size);
	free(r.payload);
}

static bool pid_alive(pid_t pid)
{
	char path[64], st = 0;
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	/* a zombie counts as dead-but-unreaped: report it as alive so tests catch it */
	if (fscanf(f, "%*d %*s %c", &st) != 1)
		st = 0;
	fclose(f);
	return st != 0;
}

/* ---- tests ---- */

static void test_hello_ping(void **state)
{
	struct host *h = host_start();
	struct frame_hello hello = {.version = FRAME_PROTOCOL_VERSION}, ok;
	struct rframe r = request(h, FRAME_HELLO, 0, &hello);
	assert_int_equal(r.type, FRAME_HELLO_OK);
	parse(&r, &ok);
	assert_int_equal(ok.version, FRAME_PROTOCOL_VERSION);
	assert_int_equal(ok.max_payload, FRAME_MAX_PAYLOAD);
	free(r.payload);
	r = request(h, FRAME_PING, 42, NULL);
	assert_int_equal(r.type, FRAME_PONG);
	free(r.payload);
	assert_int_equal(host_stop(h), 0);
}

static void test_spawn_output_exit(void **state)
{
	struct host *h = host_start();
	struct output *o = run(h, 1, spawn_msg("echo out; echo err >&2; exit 3", 1));
	assert_true(o->pid > 0);
	assert_int_equal(o->out_len, 4);
	assert_memory_equal(o->out, "out\n", 4);
	assert_int_equal(o->err_len, 4);
	assert_memory_equal(o->err, "err\n", 4);
	assert_int_equal(o->exit.code, 3);
	assert_int_equal(o->exit.signal, 0);
	assert_int_equal(o->exit.timed_out, 0);
	free(o);

	/* stdin is empty without want_stdin; env is exactly what was asked */
	o = run(h, 2, spawn_msg("cat; echo \"[$FOO]\"; pwd", 1));
	assert_int_equal(o->out_len, strlen("[]\n/\n"));
	assert_memory_equal(o->out, "[]\n/\n", o->out_len);
	free(o);

	/* a missing program is an ERROR on the channel, not a process */
	struct frame_spawn *sp = spawn_msg("", 1);
	sp->argv[0] = "/nonexistent/prog";
	sp->argc = 1;
	sp->argv[1] = NULL;
	o = run(h, 3, sp);
	assert_int_equal(o->pid, 0);
	assert_int_equal(o->error.errnum, ENOENT);
	free(o);
	sp = spawn_msg("pwd", 1);
	sp->cwd = "/nonexistent";
	o = run(h, 3, sp);
	assert_int_equal(o->error.errnum, ENOENT);
	free(o);
	assert_int_equal(host_stop(h), 0);
}

static void test_large_output(void **state)
{
	/* far more than the agent's queue: backpressure must lose nothing */
	struct host *h = host_start();
	struct output *o = run(h, 1, spawn_msg("head -c 5000000 /dev/zero", 1));
	assert_int_equal(o->out_total, 5000000);
	assert_int_equal(o->exit.code, 0);
	free(o);
	assert_int_equal(host_stop(h), 0);
}

static void test_stdin_cat(void **state)
{
	struct host *h = host_start();
	struct frame_spawn *sp = spawn_msg("cat", 0);
	struct frame_data d = {.data = (const uint8_t *)"hello ", .len = 6};
	struct output *o = calloc(1, sizeof(*o));

	sp->want_stdin = 1;
	host_send(h, FRAME_SPAWN, 7, sp);
	host_send(h, FRAME_STDIN, 7, &d);
	d.data = (const uint8_t *)"world\n";
	host_send(h, FRAME_STDIN, 7, &d);
	host_send(h, FRAME_STDIN_CLOSE, 7, NULL);
	collect(h, 7, o);
	assert_int_equal(o->out_len, 12);
	assert_memory_equal(o->out, "hello world\n", 12);
	assert_int_equal(o->exit.code, 0);
	free(o);

	/* stdin to a process that does not exist */
	assert_int_equal(expect_error(request(h, FRAME_STDIN, 99, &d)), ESRCH);
	assert_int_equal(host_stop(h), 0);
}

static void test_signal(void **state)
{
	struct host *h = host_start();
	struct output *o = calloc(1, sizeof(*o));
	struct frame_signal sig = {.signo = SIGKILL};

	host_send(h, FRAME_SPAWN, 9, spawn_msg("exec sleep 100", 0));
	struct rframe r = host_recv(h, 10000);
	assert_int_equal(r.type, FRAME_SPAWNED);
	free(r.payload);
	o->pid = 1;
	host_send(h, FRAME_SIGNAL, 9, &sig);
	collect(h, 9, o);
	assert_int_equal(o->exit.signal, SIGKILL);
	assert_int_equal(o->exit.timed_out, 0);
	free(o);
	sig.signo = 0;
	assert_int_equal(expect_error(request(h, FRAME_SIGNAL, 9, &sig)), ESRCH);
	assert_int_equal(host_stop(h), 0);
}

static void test_timeout(void **state)
{
	struct host *h = host_start();
	struct frame_spawn *sp = spawn_msg("sleep 100", 0);
	struct timespec t0, t1;

	sp->timeout_ms = 300;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	struct output *o = run(h, 4, sp);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	assert_int_equal(o->exit.signal, SIGKILL);
	assert_int_equal(o->exit.timed_out, 1);
	assert_true(t1.tv_sec - t0.tv_sec < 5);
	free(o);
	assert_int_equal(host_stop(h), 0);
}

static void test_orphan_reaped(void **state)
{
	struct host *h = host_start();
	/* the background sleep outlives sh and is reparented to the agent */
	struct output *o = run(h, 5, spawn_msg("sleep 0.3 & echo $!", 0));
	assert_int_equal(o->exit.code, 0);
	o->out[o->out_len] = '\0';
	pid_t orphan = atoi(o->out);
	assert_true(orphan > 0);
	free(o);
	usleep(800 * 1000);
	/* nothing was reported for it, and it is not a zombie */
	struct rframe r = request(h, FRAME_PING, 6, NULL);
	assert_int_equal(r.type, FRAME_PONG);
	free(r.payload);
	assert_false(pid_alive(orphan));
	assert_int_equal(host_stop(h), 0);
}

static void test_user_switch(void **state)
{
	if (geteuid() != 0)
		skip();
	struct host *h = host_start();
	struct output *o = run(h, 1, spawn_msg("id -u; id -g; id -G; grep CapEff /proc/self/status", 0));
	o->out[o->out_len] = '\0';
	assert_string_equal(o->out, "1000\n1000\n1000\nCapEff:\t0000000000000000\n");
	free(o);
	o = run(h, 2, spawn_msg("id -u; grep -E 'CapEff|NoNewPrivs' /proc/self/status", 1));
	o->out[o->out_len] = '\0';
	/* root holds the sandbox root's set (CAPS_SANDBOX_ROOT), no more: no NET_RAW (13),
	 * MKNOD (27), SYS_ADMIN (21), SYS_PTRACE (19) */
	char want[128];
	snprintf(want, sizeof(want), "0\nCapEff:\t%016llx\nNoNewPrivs:\t1\n",
		 (unsigned long long)CAPS_SANDBOX_ROOT);
	assert_string_equal(o->out, want);
	free(o);
	assert_int_equal(host_stop(h), 0);
}

static void test_files(void **state)
{
	struct host *h = host_start();
	char p1[128], p2[128], dir[128], sub[128];
	struct frame_file f;
	struct rframe r;

	snprintf(dir, sizeof(dir), "%s/d", tmpdir);
	snprintf(sub, sizeof(sub), "%s/d/a/b", tmpdir);
	snprintf(p1, sizeof(p1), "%s/d/a/file", tmpdir);
	snprintf(p2, sizeof(p2), "%s/d/moved", tmpdir);
	chmod(tmpdir, 0755);

	/* mkdir -p, as root */
	f = (struct frame_file){.path = sub, .user = FRAME_USER_ROOT, .flags = FRAME_MKDIR_PARENTS};
	expect_ok(request(h, FRAME_FILE_MKDIR, 1, &f), 0);
	f.flags = 0;
	assert_int_equal(expect_error(request(h, FRAME_FILE_MKDIR, 1, &f)), EEXIST);

	/* a 3 MiB file in chunks, read back whole */
	size_t total = 3 << 20, chunk = 512 * 1024;
	uint8_t *data = malloc(total);
	for (size_t i = 0; i < total; i++)
		data[i] = (uint8_t)(i * 7 + i / 1000);
	for (size_t off = 0; off < total; off += chunk) {
		f = (struct frame_file){.path = p1, .user = FRAME_USER_ROOT, .mode = 0640,
					.offset = off, .data = data + off, .data_len = (uint32_t)chunk,
					.flags = off ? 0 : FRAME_WRITE_CREATE | FRAME_WRITE_TRUNC};
		expect_ok(request(h, FRAME_FILE_WRITE, 2, &f), chunk);
	}
	f = (struct frame_file){.path = p1, .user = FRAME_USER_ROOT};
	host_send(h, FRAME_FILE_READ, 3, &f);
	size_t got = 0;
	for (;;) {
		r = host_recv(h, 10000);
		assert_int_equal(r.chan, 3);
		if (r.type != FRAME_FILE_DATA)
			break;
		assert_true(got + r.len <= total);
		assert_memory_equal(r.payload, data + got, r.len);
		got += r.len;
		free(r.payload);
	}
	expect_ok(r, total);
	assert_int_equal(got, total);
	/* ranged read */
	f.offset = 1000;
	f.length = 10;
	host_send(h, FRAME_FILE_READ, 3, &f);
	r = host_recv(h, 10000);
	assert_int_equal(r.type, FRAME_FILE_DATA);
	assert_int_equal(r.len, 10);
	assert_memory_equal(r.payload, data + 1000, 10);
	free(r.payload);
	expect_ok(host_recv(h, 10000), 10);
	free(data);

	/* stat */
	struct frame_file_info fi;
	r = request(h, FRAME_FILE_STAT, 4, &(struct frame_file){.path = p1, .user = 1});
	assert_int_equal(r.type, FRAME_FILE_INFO);
	parse(&r, &fi);
	assert_string_equal(fi.name, "file");
	assert_int_equal(fi.type, FRAME_FT_FILE);
	assert_int_equal(fi.size, total);
	assert_int_equal(fi.mode, 0640);
	free(r.payload);

	/* list depth 2 from d: a, a/b, a/file */
	host_send(h, FRAME_FILE_LIST, 5,
		  &(struct frame_file){.path = dir, .user = 1, .depth = 2});
	int seen = 0;
	for (;;) {
		r = host_recv(h, 10000);
		if (r.type != FRAME_FILE_INFO)
			break;
		parse(&r, &fi);
		if (!strcmp(fi.name, "a") && fi.type == FRAME_FT_DIR)
			seen |= 1;
		else if (!strcmp(fi.name, "a/b") && fi.type == FRAME_FT_DIR)
			seen |= 2;
		else if (!strcmp(fi.name, "a/file") && fi.type == FRAME_FT_FILE)
			seen |= 4;
		else
			fail_msg("unexpected entry %s", fi.name);
		free(r.payload);
	}
	expect_ok(r, 3);
	assert_int_equal(seen, 7);

	/* move, then the old name is gone */
	expect_ok(request(h, FRAME_FILE_MOVE, 6,
			  &(struct frame_file){.path = p1, .dst = p2, .user = 1}), 0);
	assert_int_equal(expect_error(request(h, FRAME_FILE_STAT, 7,
					      &(struct frame_file){.path = p1, .user = 1})),
			 ENOENT);

	/* remove: a non-empty dir needs the recursive flag */
	f = (struct frame_file){.path = dir, .user = 1};
	assert_int_equal(expect_error(request(h, FRAME_FILE_REMOVE, 8, &f)), ENOTEMPTY);
	f.flags = FRAME_REMOVE_RECURSIVE;
	expect_ok(request(h, FRAME_FILE_REMOVE, 8, &f), 0);
	struct stat st;
	assert_int_equal(stat(dir, &st), -1);

	/* relative paths and bad flags are refused */
	assert_int_equal(expect_error(request(h, FRAME_FILE_STAT, 9,
					      &(struct frame_file){.path = "etc", .user = 1})),
			 EINVAL);
	assert_int_equal(host_stop(h), 0);
}

/* PAUSE holds back one process's output at its source (it blocks on its pipe), RESUME lets
 * it go on; nothing is lost, and nothing answers a PAUSE, even of a process that is gone. */
static void test_pause_resume(void **state)
{
	struct host *h = host_start();
	struct output *o = calloc(1, sizeof(*o));
	uint64_t during = 0;

	host_send(h, FRAME_SPAWN, 1, spawn_msg("head -c 1000000 /dev/zero", 1));
	host_send(h, FRAME_PAUSE, 1, NULL);
	for (;;) { /* what was read before PAUSE arrived, then silence */
		struct rframe r = host_recv(h, 500);
		if (r.type == 0)
			break;
		assert_int_not_equal(r.type, FRAME_EXIT);
		if (r.type == FRAME_STDOUT)
			during += r.len;
		free(r.payload);
	}
	assert_true(during < 1000000 / 2);
	host_send(h, FRAME_RESUME, 1, NULL);
	collect(h, 1, o);
	assert_int_equal(during + o->out_total, 1000000);
	assert_int_equal(o->exit.code, 0);
	free(o);

	/* a paused process that ends still reports EXIT (its pipe is drained) */
	o = calloc(1, sizeof(*o));
	host_send(h, FRAME_SPAWN, 2, spawn_msg("echo x", 1));
	host_send(h, FRAME_PAUSE, 2, NULL);
	collect(h, 2, o);
	assert_int_equal(o->exit.code, 0);
	free(o);

	host_send(h, FRAME_PAUSE, 99, NULL); /* gone or never was: no reply */
	host_send(h, FRAME_RESUME, 99, NULL);
	struct rframe r = request(h, FRAME_PING, 5, NULL);
	assert_int_equal(r.type, FRAME_PONG);
	free(r.payload);
	assert_int_equal(host_stop(h), 0);
}

/* FILE_LIST's OFFSET skips that many entries of the walk: pages that add up to the whole. */
static void test_list_offset(void **state)
{
	struct host *h = host_start();
	char dir[128], p[160];
	snprintf(dir, sizeof(dir), "%s/pages", tmpdir);
	assert_int_equal(mkdir(dir, 0755), 0);
	for (int i = 0; i < 5; i++) {
		snprintf(p, sizeof(p), "%s/f%d", dir, i);
		int fd = open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
		assert_true(fd >= 0);
		close(fd);
	}
	unsigned seen = 0;
	for (uint64_t off = 0; off <= 6; off += 2) {
		host_send(h, FRAME_FILE_LIST, 1,
			  &(struct frame_file){.path = dir, .user = 1, .offset = off});
		uint64_t n = 0;
		struct rframe r;
		for (;;) {
			struct frame_file_info fi;
			r = host_recv(h, 10000);
			if (r.type != FRAME_FILE_INFO)
				break;
			parse(&r, &fi);
			if (n < 2)
				seen |= 1u << (fi.name[1] - '0');
			n++;
			free(r.payload);
		}
		assert_int_equal(n, off < 5 ? 5 - off : 0);
		expect_ok(r, n);
	}
	assert_int_equal(seen, 0x1f); /* pages of 2 cover every entry once */
	assert_int_equal(host_stop(h), 0);
}

static void test_files_as_user(void **state)
{
	if (geteuid() != 0)
		skip();
	struct host *h = host_start();
	char root_dir[128], p[128], up[128];
	snprintf(root_dir, sizeof(root_dir), "%s/rootonly", tmpdir);
	snprintf(p, sizeof(p), "%s/rootonly/x", tmpdir);
	snprintf(up, sizeof(up), "%s/userfile", tmpdir);
	chmod(tmpdir, 0777);
	assert_int_equal(mkdir(root_dir, 0755), 0);
	assert_int_equal(close(open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0644)), 0);

	/* user 1000 can neither write root's file nor create one in root's directory */
	struct frame_file f = {.path = p, .user = FRAME_USER_USER, .flags = FRAME_WRITE_CREATE,
			       .data = (const uint8_t *)"x", .data_len = 1};
	assert_int_equal(expect_error(request(h, FRAME_FILE_WRITE, 1, &f)), EACCES);
	char p2[160];
	snprintf(p2, sizeof(p2), "%s/y", root_dir);
	f.path = p2;
	assert_int_equal(expect_error(request(h, FRAME_FILE_WRITE, 1, &f)), EACCES);
	f.path = up;
	expect_ok(request(h, FRAME_FILE_WRITE, 1, &f), 1);
	struct stat st;
	assert_int_equal(stat(up, &st), 0);
	assert_int_equal(st.st_uid, 1000);
	assert_int_equal(st.st_gid, 1000);
	assert_int_equal(st.st_mode & 07777, 0644);
	f = (struct frame_file){.path = root_dir, .user = FRAME_USER_USER,
				.flags = FRAME_REMOVE_RECURSIVE};
	assert_int_equal(expect_error(request(h, FRAME_FILE_REMOVE, 2, &f)), EACCES);
	f.user = 7;
	assert_int_equal(expect_error(request(h, FRAME_FILE_REMOVE, 2, &f)), EINVAL);
	/* root can */
	f = (struct frame_file){.path = root_dir, .user = FRAME_USER_ROOT,
				.flags = FRAME_REMOVE_RECURSIVE};
	expect_ok(request(h, FRAME_FILE_REMOVE, 3, &f), 0);
	unlink(up);
	chmod(tmpdir, 0755);
	assert_int_equal(host_stop(h), 0);
}

static void test_special_files_refused(void **state)
{
	struct host *h = host_start();
	char fifo[128];
	snprintf(fifo, sizeof(fifo), "%s/fifo", tmpdir);
	assert_int_equal(mkfifo(fifo, 0666), 0);

	struct frame_file f = {.path = fifo, .user = FRAME_USER_ROOT};
	assert_int_equal(expect_error(request(h, FRAME_FILE_READ, 1, &f)), EINVAL);
	f.flags = FRAME_WRITE_CREATE;
	assert_int_equal(expect_error(request(h, FRAME_FILE_WRITE, 1, &f)), EINVAL);
	f = (struct frame_file){.path = "/dev/zero", .user = FRAME_USER_ROOT};
	assert_int_equal(expect_error(request(h, FRAME_FILE_READ, 2, &f)), EINVAL);
	f.path = "/proc/self/fd/0"; /* a magic link */
	assert_int_equal(expect_error(request(h, FRAME_FILE_READ, 3, &f)), ELOOP);
	f.path = "/";
	assert_int_equal(expect_error(request(h, FRAME_FILE_READ, 4, &f)), EISDIR);
	unlink(fifo);
	assert_int_equal(host_stop(h), 0);
}

/* A PTY: the process's stdio is a terminal of its own session, its size the SPAWN's, and
 * RESIZE reaches it; a process without one refuses RESIZE with ENOTTY. */
static void test_pty(void **state)
{
	struct host *h = host_start();
	struct frame_spawn *sp = spawn_msg("test -t 0 && test -t 2 && echo TTY; stty size",
					   FRAME_USER_ROOT);
	sp->cols = 91;
	sp->rows = 27;
	struct output *o = run(h, 1, sp);
	o->out[o->out_len] = '\0';
	assert_int_equal(o->exit.code, 0);
	assert_non_null(strstr(o->out, "TTY"));
	assert_non_null(strstr(o->out, "27 91"));
	assert_int_equal(o->err_len, 0); /* stderr is the terminal too */
	free(o);

	host_send(h, FRAME_SPAWN, 2, spawn_msg("sleep 30", FRAME_USER_ROOT));
	struct rframe r = host_recv(h, 10000);
	assert_int_equal(r.type, FRAME_SPAWNED);
	free(r.payload);
	struct frame_winsize w = {.cols = 100, .rows = 30};
	assert_int_equal(expect_error(request(h, FRAME_RESIZE, 2, &w)), ENOTTY);
	struct frame_winsize bad = {.cols = 0, .rows = 30};
	sp = spawn_msg("sleep 30", FRAME_USER_ROOT);
	sp->cols = 80;
	sp->rows = 24;
	host_send(h, FRAME_SPAWN, 3, sp);
	r = host_recv(h, 10000);
	assert_int_equal(r.type, FRAME_SPAWNED);
	free(r.payload);
	assert_int_equal(expect_error(request(h, FRAME_RESIZE, 3, &bad)), EINVAL);
	assert_int_equal(host_stop(h), 0);
}

/* A watch: events of a directory and of one made in it later; WATCH_CLOSE's OK ends it. */
static void test_watch(void **state)
{
	char dir[128], path[160];
	snprintf(dir, sizeof(dir), "%s/w", tmpdir);
	assert_int_equal(mkdir(dir, 0755), 0);
	struct host *h = host_start();
	struct frame_file m = {.path = dir, .user = FRAME_USER_ROOT, .flags = FRAME_WATCH_RECURSIVE};
	expect_ok(request(h, FRAME_WATCH_OPEN, 7, &m), 0);
	snprintf(path, sizeof(path), "%s/sub", dir);
	assert_int_equal(mkdir(path, 0755), 0);
	usleep(200000); /* the agent adds its watch when it reads the create */
	snprintf(path, sizeof(path), "%s/sub/f", dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fclose(f);
	bool sub = false, inner = false;
	for (int i = 0; i < 20 && !(sub && inner); i++) {
		struct rframe r = host_recv(h, 5000);
		struct frame_watch_event ev;
		assert_int_equal(r.type, FRAME_WATCH_EVENT);
		assert_int_equal(r.chan, 7);
		parse(&r, &ev);
		sub |= strstr(ev.name, "/w/sub") && !strstr(ev.name, "/w/sub/") &&
		       (ev.type & FRAME_WATCH_EV_CREATE);
		inner |= !strcmp(ev.name, path) && (ev.type & FRAME_WATCH_EV_CREATE);
		free(r.payload);
	}
	assert_true(sub && inner);
	host_send(h, FRAME_WATCH_CLOSE, 7, NULL);
	struct rframe r;
	while ((r = host_recv(h, 5000)).type == FRAME_WATCH_EVENT)
		free(r.payload);
	expect_ok(r, 0);
	/* a file is no directory to watch */
	m.path = path;
	assert_int_equal(expect_error(request(h, FRAME_WATCH_OPEN, 8, &m)), ENOTDIR);
	assert_int_equal(host_stop(h), 0);
}

/* A port: bytes both ways through a listener of ours, the writes acknowledged, EOF said. */
static void test_port(void **state)
{
	/* the agent first: a fork holds what the test had open, the host's end included when it
	 * is not on the fd the child's dup2() replaces */
	struct host *h = host_start();
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sin);
	assert_int_equal(bind(l, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_equal(listen(l, 4), 0);
	assert_int_equal(getsockname(l, (struct sockaddr *)&sin, &len), 0);
	struct frame_port p = {.port = ntohs(sin.sin_port)};
	expect_ok(request(h, FRAME_PORT_OPEN, 9, &p), 0);
	int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	assert_true(c >= 0);
	struct frame_data d = {(const uint8_t *)"ping", 4};
	expect_ok(request(h, FRAME_PORT_WRITE, 9, &d), 4);
	char buf[8] = {0};
	assert_int_equal(read(c, buf, sizeof(buf)), 4);
	assert_string_equal(buf, "ping");
	assert_int_equal(write(c, "pong", 4), 4);
	struct rframe r = host_recv(h, 5000);
	assert_int_equal(r.type, FRAME_PORT_DATA);
	assert_memory_equal(r.payload, "pong", 4);
	free(r.payload);
	close(c);
	r = host_recv(h, 5000);
	assert_int_equal(r.type, FRAME_PORT_EOF);
	free(r.payload);
	host_send(h, FRAME_PORT_CLOSE, 9, NULL);
	expect_ok(host_recv(h, 5000), 0);
	/* nothing listens there now */
	close(l);
	assert_int_equal(expect_error(request(h, FRAME_PORT_OPEN, 10, &p)), ECONNREFUSED);
	assert_int_equal(host_stop(h), 0);
}

static void test_host_eof_kills_children(void **state)
{
	struct host *h = host_start();
	host_send(h, FRAME_SPAWN, 1, spawn_msg("exec sleep 100", 0));
	struct rframe r = host_recv(h, 10000);
	struct frame_spawned s;
	assert_int_equal(r.type, FRAME_SPAWNED);
	parse(&r, &s);
	free(r.payload);
	assert_true(pid_alive((pid_t)s.pid));
	assert_int_equal(host_stop(h), 0);
	assert_false(pid_alive((pid_t)s.pid));
}

static void test_protocol_error_exits(void **state)
{
	struct host *h = host_start();
	uint8_t hdr[FRAME_HDR_SIZE];

	/* an agent->host type sent to the agent */
	frame_hdr_write(hdr, FRAME_EXIT, 1, 0);
	assert_int_equal(write(h->fd, hdr, sizeof(hdr)), sizeof(hdr));
	struct rframe r = host_recv(h, 10000);
	assert_int_equal(expect_error(r), EPROTO);
	assert_int_equal(host_stop(h), 1);

	/* a malformed payload */
	h = host_start();
	uint8_t bad[FRAME_HDR_SIZE + 2] = {0};
	frame_hdr_write(bad, FRAME_SIGNAL, 1, 2);
	assert_int_equal(write(h->fd, bad, sizeof(bad)), sizeof(bad));
	assert_int_equal(expect_error(host_recv(h, 10000)), EBADMSG);
	assert_int_equal(host_stop(h), 1);
}

static int setup(void **state)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/cordon-agent-test.XXXXXX");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hello_ping),
		cmocka_unit_test(test_spawn_output_exit),
		cmocka_unit_test(test_large_output),
		cmocka_unit_test(test_stdin_cat),
		cmocka_unit_test(test_signal),
		cmocka_unit_test(test_timeout),
		cmocka_unit_test(test_orphan_reaped),
		cmocka_unit_test(test_user_switch),
		cmocka_unit_test(test_files),
		cmocka_unit_test(test_files_as_user),
		cmocka_unit_test(test_pause_resume),
		cmocka_unit_test(test_list_offset),
		cmocka_unit_test(test_special_files_refused),
		cmocka_unit_test(test_pty),
		cmocka_unit_test(test_watch),
		cmocka_unit_test(test_port),
		cmocka_unit_test(test_host_eof_kills_children),
		cmocka_unit_test(test_protocol_error_exits),
	};
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, setup, teardown);
}
