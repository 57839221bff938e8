/* Tests of the audit log on real files in a temporary directory. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include "basic/cleanup.h"
#include "audit/audit.h"

#define LOG "sb-test.jsonl"

struct fixture {
	char dir[64];
	int dirfd;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	strcpy(f->dir, "/tmp/cordon-audit-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	f->dirfd = open(f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(f->dirfd >= 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	_cleanup_closedir_ DIR *d = fdopendir(f->dirfd);
	struct dirent *de;
	while (d && (de = readdir(d)))
		if (de->d_name[0] != '.')
			unlinkat(dirfd(d), de->d_name, 0);
	rmdir(f->dir);
	free(f);
	return 0;
}

static struct audit_log *open_ok(struct fixture *f)
{
	struct cordon_err err = {};
	struct audit_log *log = audit_open(f->dirfd, LOG, &err);
	if (!log)
		fail_msg("audit_open: %s", err.msg);
	return log;
}

static void append_start(struct audit_log *log, int i)
{
	char arg[32];
	snprintf(arg, sizeof(arg), "arg-%d", i);
	json_t *fields = json_pack("{s:[s,s], s:s, s:s, s:[s]}", "argv", "echo", arg, "cwd",
				   "/home/user", "user", "user", "env_names", "PATH");
	assert_non_null(fields);
	assert_int_equal(audit_append(log, "sb-test", AUDIT_PROCESS_START, fields), 0);
	json_decref(fields);
}

static void write_n(struct fixture *f, int n)
{
	struct audit_log *log = open_ok(f);
	for (int i = 0; i < n; i++)
		append_start(log, i);
	assert_int_equal(audit_seq(log), n);
	audit_free(log);
}

static char *slurp(struct fixture *f, size_t *ret_len)
{
	_cleanup_close_ int fd = openat(f->dirfd, LOG, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	char *b = malloc((size_t)st.st_size + 1);
	assert_non_null(b);
	assert_int_equal(read(fd, b, (size_t)st.st_size), st.st_size);
	b[st.st_size] = '\0';
	*ret_len = (size_t)st.st_size;
	return b;
}

static void spew(struct fixture *f, const char *b, size_t len)
{
	_cleanup_close_ int fd = openat(f->dirfd, LOG, O_WRONLY | O_TRUNC | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, b, len), (ssize_t)len);
}

/* Offset and length (newline included) of 1-based line @k of @b. */
static void line_span(const char *b, int k, size_t *ret_off, size_t *ret_len)
{
	const char *s = b;
	for (int i = 1; i < k; i++)
		s = strchr(s, '\n') + 1;
	*ret_off = (size_t)(s - b);
	*ret_len = (size_t)(strchr(s, '\n') - s) + 1;
}

static int verify(struct fixture *f, struct audit_verify_result *res)
{
	int r = audit_verify(f->dirfd, LOG, res);
	print_message("verify: %s\n", res->msg);
	return r;
}

static void test_append_verify(void **state)
{
	struct fixture *f = *state;
	struct audit_verify_result res;

	write_n(f, 20);
	assert_int_equal(verify(f, &res), 0);
	assert_int_equal(res.status, AUDIT_VERIFY_OK);
	assert_int_equal(res.records, 20);
	assert_int_equal(res.head_seq, 20);
	assert_non_null(strstr(res.msg, "OK"));

	/* The chain is plain SHA-256 of each line's bytes, newline included. */
	size_t len, off, llen;
	_cleanup_free_ char *b = slurp(f, &len);
	assert_memory_equal(b, "{\"event\":\"process.start\",\"fields\":{\"argv\":[\"echo\",", 50);
	assert_non_null(strstr(b, "\"prev\":\"0000000000000000000000000000000000000000000000000000"
				  "000000000000\""));
	line_span(b, 20, &off, &llen);
	unsigned char md[32];
	char hex[65];
	assert_true(EVP_Digest(b + off, llen, md, NULL, EVP_sha256(), NULL));
	for (int i = 0; i < 32; i++)
		sprintf(hex + 2 * i, "%02x", md[i]);
	assert_string_equal(hex, res.head_sha256);
	assert_non_null(strstr(b + off, "\"seq\":20,\"t\":\"20"));
	assert_non_null(strstr(b + off, "Z\",\"v\":1}\n"));
}

static void test_empty_ok(void **state)
{
	struct fixture *f = *state;
	struct audit_verify_result res;

	write_n(f, 0);
	assert_int_equal(verify(f, &res), 0);
	assert_int_equal(res.records, 0);
	assert_int_equal(audit_verify(f->dirfd, "missing.jsonl", &res), -ENOENT);
}

static void test_reopen_continues(void **state)
{
	struct fixture *f = *state;
	struct audit_verify_result res;

	write_n(f, 3);
	struct audit_log *log = open_ok(f);
	assert_int_equal(audit_seq(log), 3);
	append_start(log, 3);
	audit_set_sync(log, true);
	append_start(log, 4);
	assert_int_equal(audit_sync(log), 0);
	audit_close(log);
	assert_int_equal(verify(f, &res), 0);
	assert_int_equal(res.records, 5);
}

static void test_edited(void **state)
{
	struct fixture *f = *state;
	struct audit_verify_result res;
	size_t len, off, llen;

	write_n(f, 10);
	_cleanup_free_ char *b = slurp(f, &len);
	line_span(b, 5, &off, &llen);
	char *p = strstr(b + off, "arg-4");
	assert_non_null(p);
	p[0] = 'A'; /* still valid JSON, same seq: only the chain can tell */
	spew(f, b, len);
	assert_int_equal(verify(f, &res), -EBADMSG);
	assert_int_equal(res.status, AUDIT_VERIFY_EDITED);
	assert_int_equal(res.bad_line, 5);
	assert_int_equal(res.records, 5);
	assert_non_null(strstr(res.msg, "line 5: record edited"));
}

static void test_edited_seq(void **state)
{
	struct fixture *f = *state;
	struct audit_verify_result res;
	size_t len, off, llen;

	write_n(f, 10);
	_cleanup_free_ char *b = slurp(f, &len);
	line_span(b, 6, &off, &llen);
	char *p = strstr(b + off, "\"seq\":6");
	p[6] = '9';
	spew(f, b, len);
	assert_int_equal(verify(f, &res), -EBADMSG);
	assert_int_equal(res.status, AUDIT_VERIFY_EDITED);
	assert_int_equal(res.bad_line, 6);
}

static void test_removed(void **state)
{
	struct fixture *f = *state;
	struct audit_verify_result res;
	size_t len, off, llen;

	write_n(f, 10);
	_cleanup_free_ char *b = slurp(f, &len);
	line_span(b, 4, &off, &llen);
	memmove(b + off, b + off + llen, len - off - llen);
	spew(f, b, len - llen);
	assert_int_equal(verify(f, &res), -EBADMSG);
	assert_int_equal(res.status, AUDIT_VERIFY_REMOVED);
	assert_int_equal(res.bad_line, 4);
	assert_non_null(strstr(res.msg, "removed: seq gap"));
}

static void test_removed_first(void **state)
{
	struct fixture *f = *state;
	struct audit_verify_result res;
	size_t len, off, llen;

	write_n(f, 3);
	_cleanup_free_ char *b = slurp(f, &len);
	line_span(b, 1, &off, &llen);
	spew(f, b + llen, len - llen);
	assert_int_equal(verify(f, &res), -EBADMSG);
	assert_int_equal(res.status, AUDIT_VERIFY_REMOVED);
	assert_int_equal(res.bad_line, 1);
}

static void test_reordered(void **state)
{
	struct fixture *f = *state;
	struct audit_verify_result res;
	size_t len, o1, l1, o2, l2;

	write_n(f, 10);
	_cleanup_free_ char *b = slurp(f, &len);
	_cleanup_free_ char *c = malloc(len);
	line_span(b, 6, &o1, &l1);
	line_span(b, 7, &o2, &l2);
	memcpy(c, b, o1);
	memcpy(c + o1, b + o2, l2);
	memcpy(c + o1 + l2, b + o1, l1);
	memcpy(c + o2 + l2, b + o2 + l2, len - o2 - l2);
	spew(f, c, len);
	assert_int_equal(verify(f, &res), -EBADMSG);
	assert_int_equal(res.status, AUDIT_VERIFY_REORDERED);
	assert_int_equal(res.bad_line, 6);
	assert_non_null(strstr(res.msg, "reordered"));
}

static void test_replayed(void **state)
{
	struct fixture *f = *state;
	struct audit_verify_result res;
	size_t len, off, llen;

	write_n(f, 5);
	_cleanup_free_ char *b = slurp(f, &len);
	line_span(b, 2, &off, &llen);
	_cleanup_free_ char *c = malloc(len + llen);
	memcpy(c, b, len);
	memcpy(c + len, b + off, llen);
	spew(f, c, len + llen);
	assert_int_equal(verify(f, &res), -EBADMSG);
	assert_int_equal(res.status, AUDIT_VERIFY_REORDERED);
	assert_int_equal(res.bad_line, 6);
}

static void test_bad_json(void **state)
{
	struct fixture *f = *state;
	struct audit_verify_result res;
	size_t len, off, llen;

	write_n(f, 5);
	_cleanup_free_ char *b = slurp(f, &len);
	line_span(b, 3, &off, &llen);
	b[off] = '[';
	spew(f, b, len);
	assert_int_equal(verify(f, &res), -EBADMSG);
	assert_int_equal(res.status, AUDIT_VERIFY_BAD_JSON);
	assert_int_equal(res.bad_line, 3);
	assert_non_null(strstr(res.msg, "bad JSON"));
}

static void test_too_long_line(void **state)
{
	struct fixture *f = *state;
	struct audit_verify_result res;

	write_n(f, 1);
	_cleanup_close_ int fd = openat(f->dirfd, LOG, O_WRONLY | O_APPEND | O_CLOEXEC);
	_cleanup_free_ char *junk = malloc(3 * AUDIT_RECORD_MAX);
	memset(junk, 'x', 3 * AUDIT_RECORD_MAX);
	junk[3 * AUDIT_RECORD_MAX - 1] = '\n';
	assert_int_equal(write(fd, junk, 3 * AUDIT_RECORD_MAX), 3 * AUDIT_RECORD_MAX);
	assert_int_equal(verify(f, &res), -EBADMSG);
	assert_int_equal(res.status, AUDIT_VERIFY_TOO_LONG);
	assert_int_equal(res.bad_line, 2);
}

static void cut_tail(struct fixture *f, size_t keep_of_last)
{
	size_t len, off, llen;
	_cleanup_free_ char *b = slurp(f, &len);
	int lines = 0;
	for (size_t i = 0; i < len; i++)
		lines += b[i] == '\n';
	line_span(b, lines, &off, &llen);
	_cleanup_close_ int fd = openat(f->dirfd, LOG, O_WRONLY | O_CLOEXEC);
	assert_int_equal(ftruncate(fd, (off_t)(off + keep_of_last)), 0);
}

static void test_truncated(void **state)
{
	struct fixture *f = *state;
	struct audit_verify_result res;

	write_n(f, 5);
	cut_tail(f, 40);
	assert_int_equal(verify(f, &res), -EBADMSG);
	assert_int_equal(res.status, AUDIT_VERIFY_TRUNCATED);
	assert_int_equal(res.bad_line, 5);
	assert_int_equal(res.records, 4);
	assert_non_null(strstr(res.msg, "truncated tail"));
}

static void test_recover_torn_tail(void **state)
{
	struct fixture *f = *state;
	struct audit_verify_result res;
	size_t len, off, llen;

	write_n(f, 5);
	cut_tail(f, 40);
	struct audit_log *log = open_ok(f);
	assert_int_equal(audit_seq(log), 5); /* 4 complete records and the log.recovered one */
	append_start(log, 5);
	audit_free(log);

	assert_int_equal(verify(f, &res), 0);
	assert_int_equal(res.records, 6);
	assert_int_equal(res.recoveries, 1);
	_cleanup_free_ char *b = slurp(f, &len);
	line_span(b, 5, &off, &llen);
	assert_non_null(strstr(b + off, "{\"event\":\"log.recovered\",\"fields\":{\"bytes\":40,"));
	assert_non_null(strstr(b + off, "\"reason\":\"torn_tail\""));
	assert_non_null(strstr(b + off, "\"sandbox\":null,\"seq\":5,"));
	line_span(b, 6, &off, &llen);
	assert_non_null(strstr(b + off, "\"arg-5\""));
}

static void test_recover_torn_only(void **state)
{
	struct fixture *f = *state;
	struct audit_verify_result res;

	/* A torn tail longer than the recovery record: the rest is cut off. */
	_cleanup_close_ int fd = openat(f->dirfd, LOG, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	char junk[1000];
	memset(junk, 'x', sizeof(junk));
	assert_int_equal(write(fd, junk, sizeof(junk)), sizeof(junk));
	struct audit_log *log = open_ok(f);
	assert_int_equal(audit_seq(log), 1);
	audit_free(log);
	assert_int_equal(verify(f, &res), 0);
	assert_int_equal(res.records, 1);
	assert_int_equal(res.recoveries, 1);
}

static void test_open_refuses_bad_last_record(void **state)
{
	struct fixture *f = *state;
	struct cordon_err err = {};

	write_n(f, 2);
	_cleanup_close_ int fd = openat(f->dirfd, LOG, O_WRONLY | O_APPEND | O_CLOEXEC);
	assert_int_equal(write(fd, "not json\n", 9), 9);
	assert_null(audit_open(f->dirfd, LOG, &err));
	assert_int_equal(err.code, -EBADMSG);
}

static void test_single_writer(void **state)
{
	struct fixture *f = *state;
	struct cordon_err err = {};

	struct audit_log *log = open_ok(f);
	assert_null(audit_open(f->dirfd, LOG, &err));
	assert_int_equal(err.code, -EBUSY);

	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct cordon_err cerr = {};
		/* The fd is inherited across fork but not exec; a fresh open must still fail. */
		struct audit_log *l2 = audit_open(f->dirfd, LOG, &cerr);
		_exit(!l2 && cerr.code == -EBUSY ? 0 : 1);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);

	audit_free(log);
	log = open_ok(f); /* free released the lock */
	audit_free(log);
}

static void test_events_table(void **state)
{
	struct fixture *f = *state;
	struct audit_log *log = open_ok(f);

	assert_int_equal(audit_append(log, "sb", "process.fork", NULL), -EINVAL);
	assert_int_equal(audit_append(log, "sb", AUDIT_PROCESS_START, NULL), -EINVAL);
	json_t *a = json_array();
	assert_int_equal(audit_append(log, "sb", AUDIT_SANDBOX_READY, a), -EINVAL);
	json_decref(a);
	assert_int_equal(audit_append(log, "sb", AUDIT_SANDBOX_READY, NULL), 0);
	json_t *api = json_pack("{s:s, s:s, s:s}", "principal", "key:ci", "method", "DELETE",
				"path", "/v1/sandboxes/sb");
	assert_int_equal(audit_append(log, NULL, AUDIT_API_CALL, api), 0);
	assert_int_equal(api->refcount, 1); /* borrowed, not stolen */
	json_decref(api);
	for (size_t i = 0; i < audit_events_count; i++)
		assert_ptr_equal(audit_event_lookup(audit_events[i].name), &audit_events[i]);
	audit_free(log);

	struct cordon_err err = {};
	assert_null(audit_open(f->dirfd, "../x", &err));
	assert_int_equal(err.code, -EINVAL);
	assert_null(audit_open(f->dirfd, ".hidden", &err));
}

static void test_truncation(void **state)
{
	struct fixture *f = *state;
	struct audit_log *log = open_ok(f);
	size_t len;

	/* 2000 arguments of 10000 bytes: 20 MB cut to fit one 64 KiB record. */
	_cleanup_free_ char *big = malloc(10001);
	memset(big, 'a', 10000);
	big[10000] = '\0';
	json_t *argv = json_array();
	for (int i = 0; i < 2000; i++)
		json_array_append_new(argv, json_string(big));
	json_t *fields = json_pack("{s:o, s:s, s:s, s:[]}", "argv", argv, "cwd", "/", "user",
				   "root", "env_names");
	assert_int_equal(audit_append(log, "sb-test", AUDIT_PROCESS_START, fields), 0);
	assert_int_equal(json_array_size(argv), 2000); /* the caller's object is untouched */
	json_decref(fields);

	/* A short one is not marked. */
	append_start(log, 1);
	audit_free(log);

	_cleanup_free_ char *b = slurp(f, &len);
	char *nl = strchr(b, '\n');
	assert_true(nl - b + 1 <= AUDIT_RECORD_MAX);
	assert_non_null(strstr(b, "\"truncated\":true"));
	assert_null(strstr(nl, "truncated"));
	struct audit_verify_result res;
	assert_int_equal(verify(f, &res), 0);
}

static void test_utf8_cut(void **state)
{
	struct fixture *f = *state;
	struct audit_log *log = open_ok(f);

	/* 4095 ASCII bytes then a 3-byte character straddling the 4096 cut. */
	_cleanup_free_ char *s = malloc(4095 + 3 + 1);
	memset(s, 'b', 4095);
	strcpy(s + 4095, "\xe2\x82\xac");
	json_t *fields = json_pack("{s:s, s:I}", "path", s, "bytes", (json_int_t)1);
	assert_int_equal(audit_append(log, "sb", AUDIT_FILE_WRITE, fields), 0);
	json_decref(fields);
	/* Bad UTF-8 in the sandbox id is refused, not written. */
	json_t *ready = json_object();
	assert_int_equal(audit_append(log, "sb\xff", AUDIT_SANDBOX_READY, ready), -EINVAL);
	json_decref(ready);
	audit_free(log);

	struct audit_verify_result res;
	assert_int_equal(verify(f, &res), 0);
	assert_int_equal(res.records, 1);
}

/* A write cut short by RLIMIT_FSIZE (as by a full disk) leaves a torn line; the next append
 * repairs it. In a child, so that the limit and SIGXFSZ stay there. */
static void test_short_write_repair(void **state)
{
	struct fixture *f = *state;
	struct audit_verify_result res;

	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct audit_log *log = audit_open(f->dirfd, LOG, NULL);
		if (!log)
			_exit(10);
		signal(SIGXFSZ, SIG_IGN);
		struct rlimit old, rl;
		getrlimit(RLIMIT_FSIZE, &old);
		rl = old;
		rl.rlim_cur = 300;
		setrlimit(RLIMIT_FSIZE, &rl);
		json_t *fields = json_pack("{s:[s], s:s, s:s, s:[]}", "argv", "x", "cwd", "/",
					   "user", "user", "env_names");
		int r1 = audit_append(log, "sb", AUDIT_PROCESS_START, fields);
		int r2 = audit_append(log, "sb", AUDIT_PROCESS_START, fields);
		setrlimit(RLIMIT_FSIZE, &old);
		int r3 = audit_append(log, "sb", AUDIT_PROCESS_START, fields);
		_exit(r1 == 0 && r2 < 0 && r3 == 0 && audit_seq(log) == 3 ? 0 : 11);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(verify(f, &res), 0);
	assert_int_equal(res.records, 3);
	assert_int_equal(res.recoveries, 1);
}

struct collected {
	int n;
	off_t offs[16];
	char last[256];
};

static int collect(const char *line, size_t len, off_t offset, void *userdata)
{
	struct collected *c = userdata;
	assert_int_equal(line[len - 1], '\n');
	c->offs[c->n++] = offset;
	snprintf(c->last, sizeof(c->last), "%.*s", (int)len, line);
	return c->n == 3 ? 1 : 0;
}

/* audit_tail() reads the end without a writer's open; audit_seal() ends the chain. */
static void test_tail_and_seal(void **state)
{
	struct fixture *f = *state;
	struct audit_tail t;
	struct cordon_err err = {};

	struct audit_log *log = open_ok(f);
	assert_true(audit_empty(log));
	assert_int_equal(audit_tail(f->dirfd, LOG, &t), 0);
	assert_true(t.empty && !t.sealed && !t.torn && t.event[0] == '\0');
	append_start(log, 0);
	json_t *d = json_pack("{s:s}", "reason", "api");
	assert_int_equal(audit_append(log, "sb-test", AUDIT_SANDBOX_DESTROY, d), 0);
	json_decref(d);
	assert_false(audit_empty(log));
	assert_int_equal(audit_tail(f->dirfd, LOG, &t), 0);
	assert_false(t.empty || t.sealed || t.torn);
	assert_string_equal(t.event, AUDIT_SANDBOX_DESTROY);
	assert_int_equal(audit_seal(log), 0);
	audit_free(log);

	assert_int_equal(audit_tail(f->dirfd, LOG, &t), 0);
	assert_true(t.sealed);
	assert_null(audit_open(f->dirfd, LOG, &err));
	assert_int_equal(err.code, -EROFS);
	assert_int_equal(fchmodat(f->dirfd, LOG, 0600, 0), 0);

	/* A torn tail after a long record: the small read does not hold the last line. */
	log = open_ok(f);
	char big[3000];
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	json_t *fields = json_pack("{s:[s,s], s:s, s:s, s:[]}", "argv", big, big, "cwd", "/", "user",
				   "user", "env_names");
	assert_int_equal(audit_append(log, "sb-test", AUDIT_PROCESS_START, fields), 0);
	assert_int_equal(audit_append(log, "sb-test", AUDIT_PROCESS_START, fields), 0);
	json_decref(fields);
	audit_free(log);
	cut_tail(f, 10);
	assert_int_equal(audit_tail(f->dirfd, LOG, &t), 0);
	assert_true(t.torn);
	assert_string_equal(t.event, AUDIT_PROCESS_START);
}

static void test_read_from(void **state)
{
	struct fixture *f = *state;
	struct collected c = {};
	off_t next;

	write_n(f, 5);
	assert_int_equal(audit_read_from(f->dirfd, LOG, 0, collect, &c, &next), 3);
	assert_int_equal(c.offs[0], 0);
	assert_non_null(strstr(c.last, "\"seq\":3"));

	struct collected d = {};
	assert_int_equal(audit_read_from(f->dirfd, LOG, next, collect, &d, &next), 2);
	assert_non_null(strstr(d.last, "\"seq\":5"));
	assert_int_equal(audit_read_from(f->dirfd, LOG, next, collect, &d, &next), 0);

	/* Following a live log: a record in progress is not delivered until complete. */
	struct audit_log *log = open_ok(f);
	assert_int_equal(audit_size(log), next);
	append_start(log, 5);
	audit_free(log);
	struct collected e = {};
	assert_int_equal(audit_read_from(f->dirfd, LOG, next, collect, &e, &next), 1);
	assert_non_null(strstr(e.last, "\"seq\":6"));
	_cleanup_close_ int fd = openat(f->dirfd, LOG, O_WRONLY | O_APPEND | O_CLOEXEC);
	assert_int_equal(write(fd, "{\"ev", 4), 4);
	off_t before = next;
	assert_int_equal(audit_read_from(f->dirfd, LOG, next, collect, &e, &next), 0);
	assert_int_equal(next, before);

	assert_int_equal(audit_read_from(f->dirfd, LOG, 3, collect, &e, &next), -EINVAL);
	assert_int_equal(audit_read_from(f->dirfd, LOG, -1, collect, &e, &next), -EINVAL);
	assert_int_equal(audit_read_from(f->dirfd, "../" LOG, 0, collect, &e, &next), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_append_verify, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_empty_ok, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_reopen_continues, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_edited, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_edited_seq, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_removed, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_removed_first, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_reordered, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_replayed, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bad_json, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_too_long_line, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_truncated, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_recover_torn_tail, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_recover_torn_only, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_open_refuses_bad_last_record, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_single_writer, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_events_table, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_truncation, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_utf8_cut, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_short_write_repair, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_read_from, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_tail_and_seal, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
