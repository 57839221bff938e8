/* The E2B surface's pure parsers: the Connect envelope (src/daemon/connectenv.c) and
 * multipart/form-data (src/daemon/multipart.c). Bytes from any client of --e2b-listen. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/connect.h"
#include "daemon/multipart.h"

static void test_envelope(void **state)
{
	const uint8_t one[] = "\x00\x00\x00\x00\x02{}";
	struct connect_frame f;
	assert_int_equal(connect_envelope_next(one, 7, 100, &f), 7);
	assert_int_equal(f.len, 2);
	assert_memory_equal(f.data, "{}", 2);
	assert_int_equal(connect_envelope_next(one, 6, 100, &f), 0);  /* incomplete */
	assert_int_equal(connect_envelope_next(one, 4, 100, &f), 0);
	assert_int_equal(connect_envelope_next(one, 7, 1, &f), -EMSGSIZE);
	assert_int_equal(connect_envelope_single(one, 7, 100, &f), 0);
	assert_int_equal(connect_envelope_single(one, 6, 100, &f), -EBADMSG);
	const uint8_t two[] = "\x00\x00\x00\x00\x02{}\x00\x00\x00\x00\x00";
	assert_int_equal(connect_envelope_single(two, 12, 100, &f), -EBADMSG); /* not one */
	const uint8_t end[] = "\x02\x00\x00\x00\x02{}";
	assert_int_equal(connect_envelope_single(end, 7, 100, &f), -EBADMSG);
	const uint8_t gz[] = "\x01\x00\x00\x00\x02{}";
	assert_int_equal(connect_envelope_single(gz, 7, 100, &f), -EOPNOTSUPP);
	const uint8_t flags[] = "\x80\x00\x00\x00\x02{}";
	assert_int_equal(connect_envelope_next(flags, 7, 100, &f), -EBADMSG);
	uint8_t head[5];
	connect_envelope_head(head, CONNECT_FLAG_END, 0x01020304);
	assert_memory_equal(head, "\x02\x01\x02\x03\x04", 5);
}

static void test_codes(void **state)
{
	assert_string_equal(connect_code_name(CONNECT_UNIMPLEMENTED), "unimplemented");
	assert_int_equal(connect_code_status(CONNECT_NOT_FOUND), 404);
	assert_int_equal(connect_code_from_api(API_ERR_NOT_FOUND), CONNECT_NOT_FOUND);
	assert_int_equal(connect_code_from_api(API_ERR_UNAUTHORIZED), CONNECT_UNAUTHENTICATED);
	assert_int_equal(connect_code_from_api(API_ERR_INTERNAL), CONNECT_INTERNAL);
	uint64_t ms;
	assert_int_equal(connect_timeout_parse("2500", &ms), 0);
	assert_int_equal(ms, 2500);
	assert_int_equal(connect_timeout_parse("", &ms), -EINVAL);
	assert_int_equal(connect_timeout_parse("12345678901", &ms), -EINVAL);
	assert_int_equal(connect_timeout_parse("-1", &ms), -EINVAL);
}

static void test_boundary(void **state)
{
	char b[MULTIPART_MAX_BOUNDARY + 1];
	assert_int_equal(multipart_boundary("multipart/form-data; boundary=abc", b), 0);
	assert_string_equal(b, "abc");
	assert_int_equal(multipart_boundary("Multipart/Form-Data; charset=x; boundary=\"a b\"", b), 0);
	assert_string_equal(b, "a b");
	assert_int_equal(multipart_boundary("text/plain; boundary=abc", b), -EINVAL);
	assert_int_equal(multipart_boundary("multipart/form-data", b), -EINVAL);
	assert_int_equal(multipart_boundary("multipart/form-data; boundary=a<b", b), -EINVAL);
	assert_int_equal(multipart_boundary("multipart/form-data; boundary=\"abc", b), -EINVAL);
	char longb[200] = "multipart/form-data; boundary=";
	memset(longb + strlen(longb), 'x', 71);
	assert_int_equal(multipart_boundary(longb, b), -EINVAL);
}

static void test_parts(void **state)
{
	const char body[] = "preamble\r\n--B\r\n"
			    "Content-Disposition: form-data; name=\"file\"; filename=\"/tmp/a%22b.txt\"\r\n"
			    "Content-Type: application/octet-stream\r\n\r\n"
			    "one\r\n--B\r\n"
			    "content-disposition: form-data; name=file; filename=\"rel\\\\x\"\r\n\r\n"
			    "\r\n--B\r\n\r\nbare\r\n--B--\r\n";
	struct multipart_reader r;
	struct multipart_part p;
	multipart_init(&r, "B", body, sizeof(body) - 1);
	assert_int_equal(multipart_next(&r, &p), 1);
	assert_string_equal(p.name, "file");
	assert_string_equal(p.filename, "/tmp/a\"b.txt");
	assert_int_equal(p.len, 3);
	assert_memory_equal(p.data, "one", 3);
	assert_int_equal(multipart_next(&r, &p), 1);
	assert_string_equal(p.filename, "rel\\x");
	assert_int_equal(p.len, 0);
	assert_int_equal(multipart_next(&r, &p), 1);
	assert_false(p.has_filename);
	assert_memory_equal(p.data, "bare", 4);
	assert_int_equal(multipart_next(&r, &p), 0);
	assert_int_equal(multipart_next(&r, &p), 0);
}

static void test_bad_parts(void **state)
{
	static const char *const bad[] = {
		"--B\r\nContent-Disposition: form-data; filename=\"x\"\r\n\r\nno end",
		"--B\r\nContent-Disposition: form-data; filename=\"x\r\n\r\ny\r\n--B--",
		"no delimiter at all",
		"--B\r\n",
		"--Bjunk",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct multipart_reader r;
		struct multipart_part p;
		multipart_init(&r, "B", bad[i], strlen(bad[i]));
		if (multipart_next(&r, &p) >= 0)
			fail_msg("accepted: %s", bad[i]);
	}
}

static void test_too_many_parts(void **state)
{
	static char body[(MULTIPART_MAX_PARTS + 2) * 16];
	size_t n = 0;
	for (int i = 0; i < MULTIPART_MAX_PARTS + 1; i++)
		n += (size_t)snprintf(body + n, sizeof(body) - n, "--B\r\n\r\nx\r\n");
	n += (size_t)snprintf(body + n, sizeof(body) - n, "--B--");
	struct multipart_reader r;
	struct multipart_part p;
	int rc;
	multipart_init(&r, "B", body, n);
	while ((rc = multipart_next(&r, &p)) > 0)
		;
	assert_int_equal(rc, -E2BIG);
}

/* @body read from a file (multipart_init_fd) gives the parts it gives in memory. */
static void same_from_file(const char *body, size_t len, const char *boundary)
{
	int fd = memfd_create("multipart", MFD_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, body, len), (ssize_t)len);
	static struct multipart_reader m, f;
	struct multipart_part pm, pf;
	int rm, rf;
	multipart_init(&m, boundary, body, len);
	multipart_init_fd(&f, boundary, fd, len);
	do {
		rm = multipart_next(&m, &pm);
		rf = multipart_next(&f, &pf);
		assert_int_equal(rm, rf);
		if (rm <= 0)
			break;
		assert_null(pf.data);
		assert_ptr_equal(pm.data, (const uint8_t *)body + pm.off);
		assert_int_equal(pm.off, pf.off);
		assert_int_equal(pm.len, pf.len);
		assert_string_equal(pm.filename, pf.filename);
	} while (1);
	close(fd);
}

/* Parts whose delimiters straddle the reader's first and second windows (the second begins
 * dlen - 1 bytes before the first ends) at every offset of the delimiter. */
static void test_parts_from_a_file(void **state)
{
	static const char b[] = "BoundaryOfSomeLength";
	const size_t dlen = 4 + sizeof(b) - 1, W = MULTIPART_WINDOW;
	size_t cap = 48 * (2 * W + 256);
	char *body = malloc(cap);
	assert_non_null(body);
	size_t n = (size_t)snprintf(body, cap, "--%s", b);
	for (size_t k = 0; k < 2 * (dlen + 2); k++) {
		n += (size_t)snprintf(body + n, cap - n,
				      "\r\nContent-Disposition: form-data; name=\"f\"; filename=\"/f%zu\"\r\n\r\n", k);
		size_t len = k < dlen + 2 ? W + 2 - k : 2 * W - (dlen - 1) + 2 - (k - dlen - 2);
		memset(body + n, 'x', len);
		n += len;
		n += (size_t)snprintf(body + n, cap - n, "\r\n--%s", b);
	}
	n += (size_t)snprintf(body + n, cap - n, "--\r\n");
	same_from_file(body, n, b);
	/* unended, and a delimiter cut by the end of the body */
	same_from_file(body, n / 2, b);
	same_from_file(body, 3 * MULTIPART_WINDOW + 5, b);
	static const char *const bad[] = {"no delimiter at all", "--B\r\n", "--Bjunk",
					  "--B\r\n\r\nx\r\n--B--"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		same_from_file(bad[i], strlen(bad[i]), "B");
	free(body);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_envelope),     cmocka_unit_test(test_codes),
		cmocka_unit_test(test_boundary),     cmocka_unit_test(test_parts),
		cmocka_unit_test(test_bad_parts),    cmocka_unit_test(test_too_many_parts),
		cmocka_unit_test(test_parts_from_a_file),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
