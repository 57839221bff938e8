/* basic/tar.c: what the writer makes the reader reads back (long names, links, every size
 * form), and what the reader refuses: absolute names, "..", links out, devices, malformed
 * headers, too much data or too many entries, an archive cut short. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "basic/tar.h"

struct seen {
	int n;
	char names[8][TAR_MAX_PATH];
	uint64_t data;
};

static int on_entry(const struct tar_entry *e, void *arg)
{
	struct seen *s = arg;
	if (s->n < 8)
		snprintf(s->names[s->n], TAR_MAX_PATH, "%s", e->name);
	s->n++;
	return 0;
}

static int on_data(const uint8_t *p, size_t n, void *arg)
{
	((struct seen *)arg)->data += n;
	return 0;
}

static const struct tar_ops ops = {on_entry, on_data};

/* An archive of @n entries (a header each, @size bytes of data for files) and its end. */
static size_t build(uint8_t *buf, const struct tar_entry *es, size_t n)
{
	size_t off = 0;
	for (size_t i = 0; i < n; i++) {
		off += tar_header(buf + off, &es[i]);
		if (es[i].type == TAR_FILE) {
			memset(buf + off, 'd', es[i].size);
			off += es[i].size;
			memset(buf + off, 0, tar_padding(es[i].size));
			off += tar_padding(es[i].size);
		}
	}
	memset(buf + off, 0, 2 * TAR_BLOCK);
	return off + 2 * TAR_BLOCK;
}

static int read_all(const uint8_t *buf, size_t len, size_t step, struct seen *s, struct tar_reader *r)
{
	tar_reader_init(r, 1 << 20, 100);
	for (size_t off = 0; off < len; off += step) {
		int k = tar_reader_feed(r, buf + off, len - off < step ? len - off : step, &ops, s);
		if (k < 0)
			return k;
	}
	return tar_reader_finish(r);
}

static struct tar_reader R;
static uint8_t B[1 << 16];

static void test_round_trip(void **state)
{
	struct tar_entry es[4] = {{.type = TAR_DIR, .mode = 0755}, {.type = TAR_FILE, .size = 1000},
				  {.type = TAR_SYMLINK}, {.type = TAR_HARDLINK}};
	snprintf(es[0].name, TAR_MAX_PATH, "dir");
	memset(es[1].name, 'n', 300);
	memcpy(es[1].name, "dir/", 4);
	snprintf(es[2].name, TAR_MAX_PATH, "dir/link");
	memset(es[2].link, 'x', 150); /* a long target: a 'K' record */
	snprintf(es[3].name, TAR_MAX_PATH, "hard");
	snprintf(es[3].link, TAR_MAX_PATH, "dir/link");
	size_t len = build(B, es, 4);
	for (size_t step = 1; step <= len; step = step * 7 + 1) {
		struct seen s = {};
		assert_int_equal(read_all(B, len, step, &s, &R), 0);
		assert_int_equal(s.n, 4);
		assert_string_equal(s.names[1], es[1].name);
		assert_int_equal(s.data, 1000);
	}
}

static void expect_refused(const char *name, enum tar_type type, const char *link, int code)
{
	struct tar_entry e = {.type = type};
	struct seen s = {};
	snprintf(e.name, TAR_MAX_PATH, "%s", name);
	snprintf(e.link, TAR_MAX_PATH, "%s", link);
	size_t len = build(B, &e, 1);
	assert_int_equal(read_all(B, len, len, &s, &R), code);
	assert_int_equal(s.n, 0);
	assert_true(R.why[0]);
}

static void test_refused(void **state)
{
	expect_refused("/etc/passwd", TAR_FILE, "", -EPERM);
	expect_refused("../x", TAR_FILE, "", -EPERM);
	expect_refused("a/../../x", TAR_FILE, "", -EPERM);
	expect_refused("a/./b", TAR_FILE, "", -EPERM);
	expect_refused("l", TAR_SYMLINK, "/etc", -EPERM);
	expect_refused("a/l", TAR_SYMLINK, "../../etc", -EPERM);
	expect_refused("l", TAR_SYMLINK, "..", -EPERM);
	expect_refused("h", TAR_HARDLINK, "../x", -EPERM);
	/* a device: the writer cannot make one, so its type flag is patched in */
	struct tar_entry e = {.type = TAR_FILE};
	snprintf(e.name, TAR_MAX_PATH, "null");
	size_t len = build(B, &e, 1);
	B[156] = '3';
	unsigned long sum = 0;
	memset(B + 148, ' ', 8);
	for (int i = 0; i < 512; i++)
		sum += B[i];
	snprintf((char *)B + 148, 8, "%06lo", sum);
	struct seen s = {};
	assert_int_equal(read_all(B, len, len, &s, &R), -EPERM);
}

static void test_safe_links(void **state)
{
	assert_true(tar_link_safe("a/b/l", "../../c"));
	assert_true(tar_link_safe("l", "a/../b"));
	assert_false(tar_link_safe("l", "a/../../b"));
	assert_false(tar_link_safe("a/l", "../.."));
	/* out of a sandbox: an absolute target is kept, one that climbs out is not */
	assert_true(tar_link_kept("bin/python", "/usr/bin/python3"));
	assert_true(tar_link_kept("a/l", "../b"));
	assert_false(tar_link_kept("a/l", "../../etc"));
	assert_true(tar_name_safe("a/b"));
	assert_false(tar_name_safe(""));
	assert_false(tar_name_safe("a//b"));
}

static void test_malformed_and_limits(void **state)
{
	struct seen s = {};
	memset(B, 'x', 1024);
	assert_int_equal(read_all(B, 1024, 1024, &s, &R), -EBADMSG);
	struct tar_entry es[2] = {{.type = TAR_FILE, .size = 600 << 10},
				  {.type = TAR_FILE, .size = 600 << 10}};
	snprintf(es[0].name, TAR_MAX_PATH, "a");
	snprintf(es[1].name, TAR_MAX_PATH, "b");
	uint8_t *big = malloc(4 << 20);
	size_t len = build(big, es, 2);
	assert_int_equal(read_all(big, len, len, &s, &R), -EFBIG); /* 1 MiB of data at most */
	tar_reader_init(&R, UINT64_MAX, 100);
	assert_int_equal(tar_reader_feed(&R, big, 700, &ops, &s), 0);
	assert_int_equal(tar_reader_finish(&R), -EBADMSG); /* cut in the middle of an entry */
	free(big);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_round_trip),
	    cmocka_unit_test(test_refused),
	    cmocka_unit_test(test_safe_links),
	    cmocka_unit_test(test_malformed_and_limits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
