/* idmap: host uid range slots (flock(2) lock files under /run/cordon/slots, host-wide) and the
 * user namespace maps. Taking slots needs root (the registry lives in /run); the slots taken
 * here are real ones and are given back. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "basic/fileio.h"
#include "lib/idmap.h"

#define SLOTS_DIR "/run/cordon/slots"

static bool need_root(void)
{
	if (geteuid() == 0)
		return true;
	print_message("skip: the slot registry in /run/cordon needs root\n");
	return false;
}

static bool lock_file_exists(unsigned slot)
{
	char path[64];
	snprintf(path, sizeof(path), SLOTS_DIR "/%u", slot);
	return access(path, F_OK) == 0;
}

static void test_base_arithmetic(void **state)
{
	struct idmap_slot s = {.lock_fd = -1, .slot = 0};
	assert_int_equal(idmap_slot_base(&s), CORDON_IDMAP_BASE);
	s.slot = 1;
	assert_int_equal(idmap_slot_base(&s), CORDON_IDMAP_BASE + CORDON_IDMAP_SIZE);
	s.slot = 17;
	assert_int_equal(idmap_slot_base(&s), 0x70000000u + 17u * 65536u);
	/* the last range ends below systemd's foreign range and does not wrap */
	s.slot = CORDON_IDMAP_SLOTS - 1;
	uint64_t last = (uint64_t)idmap_slot_base(&s) + CORDON_IDMAP_SIZE - 1;
	assert_true(last < 0x7ffe0000u);
	assert_true(idmap_slot_base(&s) > CORDON_IDMAP_BASE);
	/* the first range starts above systemd's container range */
	assert_true(CORDON_IDMAP_BASE > 0x6fffffffu);
}

static void test_acquire_release(void **state)
{
	if (!need_root())
		skip();
	struct idmap_slot a, b, c;
	struct cordon_err e = {};

	assert_int_equal(idmap_slot_acquire(&a, &e), 0);
	assert_int_equal(idmap_slot_acquire(&b, &e), 0);
	assert_true(a.lock_fd >= 0);
	assert_true(b.lock_fd >= 0);
	assert_true(a.slot < CORDON_IDMAP_SLOTS);
	assert_true(b.slot < CORDON_IDMAP_SLOTS);
	assert_int_not_equal(a.slot, b.slot);
	assert_true(lock_file_exists(a.slot));
	assert_true(lock_file_exists(b.slot));
	assert_true(fcntl(a.lock_fd, F_GETFD) & FD_CLOEXEC);

	/* held: a second taker (even this process, through another open) is refused */
	assert_int_equal(idmap_slot_try(a.slot, &c), -EWOULDBLOCK);
	assert_int_equal(idmap_slot_try(b.slot, &c), -EWOULDBLOCK);

	idmap_slot_release(&a);
	assert_int_equal(a.lock_fd, -1);
	assert_false(lock_file_exists(a.slot));
	idmap_slot_release(&a); /* twice is harmless */
	assert_true(lock_file_exists(b.slot));

	/* a released slot can be taken again */
	assert_int_equal(idmap_slot_try(a.slot, &c), 0);
	assert_int_equal(c.slot, a.slot);
	assert_true(c.lock_fd >= 0);
	assert_true(lock_file_exists(c.slot));
	idmap_slot_release(&c);
	assert_false(lock_file_exists(c.slot));

	idmap_slot_release(&b);
	assert_false(lock_file_exists(b.slot));
}

/* Many at once: every slot distinct. */
static void test_many_distinct(void **state)
{
	if (!need_root())
		skip();
	enum { N = 64 };
	struct idmap_slot s[N];
	for (int i = 0; i < N; i++) {
		assert_int_equal(idmap_slot_acquire(&s[i], NULL), 0);
		for (int j = 0; j < i; j++)
			assert_int_not_equal(s[i].slot, s[j].slot);
	}
	for (int i = 0; i < N; i++)
		idmap_slot_release(&s[i]);
}

/* The kernel drops the lock when the holder dies, even by SIGKILL. */
static void test_holder_killed(void **state)
{
	if (!need_root())
		skip();
	int p[2];
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct idmap_slot s;
		if (idmap_slot_acquire(&s, NULL) < 0)
			_exit(1);
		if (write(p[1], &s.slot, sizeof(s.slot)) != sizeof(s.slot))
			_exit(1);
		pause();
		_exit(0);
	}
	close(p[1]);
	unsigned slot;
	assert_int_equal(read(p[0], &slot, sizeof(slot)), sizeof(slot));
	close(p[0]);
	struct idmap_slot t;
	assert_int_equal(idmap_slot_try(slot, &t), -EWOULDBLOCK);
	assert_int_equal(kill(pid, SIGKILL), 0);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	/* the stale lock file is still there, but nobody holds it */
	assert_int_equal(idmap_slot_try(slot, &t), 0);
	assert_int_equal(t.slot, slot);
	idmap_slot_release(&t);
	assert_false(lock_file_exists(slot));
}

/* The hint (/proc/locks) calls a held slot held, a released one and a dead holder's free. */
static void test_held_hint(void **state)
{
	if (!need_root())
		skip();
	struct idmap_slot a, b;
	struct idmap_held h;
	assert_int_equal(idmap_slot_acquire(&a, NULL), 0);
	assert_int_equal(idmap_slot_acquire(&b, NULL), 0);
	idmap_held_load(&h);
	assert_true(idmap_held_test(&h, a.slot));
	assert_true(idmap_held_test(&h, b.slot));
	assert_false(idmap_held_test(&h, CORDON_IDMAP_SLOTS)); /* out of range: never held */
	unsigned freed = a.slot;
	idmap_slot_release(&a);
	idmap_held_load(&h);
	assert_false(idmap_held_test(&h, freed));
	assert_true(idmap_held_test(&h, b.slot));
	/* a stale lock file (holder gone, file kept) is free too */
	int fd = b.lock_fd;
	unsigned stale = b.slot;
	close(fd);
	idmap_held_load(&h);
	assert_false(idmap_held_test(&h, stale));
	assert_int_equal(idmap_slot_try(stale, &b), 0);
	idmap_slot_release(&b);
}

/* idmap_write() with a slot maps 0..65535 inside onto the slot's range. */
static void test_write_range(void **state)
{
	if (!need_root())
		skip();
	int go[2], done[2];
	assert_int_equal(pipe2(go, O_CLOEXEC), 0);
	assert_int_equal(pipe2(done, O_CLOEXEC), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char c = unshare(CLONE_NEWUSER) == 0 ? 'u' : 'x';
		if (write(done[1], &c, 1) != 1 || read(go[0], &c, 1) != 1)
			_exit(1);
		/* mapped now: the host's root is not in the map, but becoming root inside works
		 * (and makes this process the range's first uid outside) */
		if (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
			_exit(3);
		_exit(getuid() == 0 && getgid() == 0 ? 0 : 2);
	}
	char c;
	assert_int_equal(read(done[0], &c, 1), 1);
	if (c != 'u') {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		print_message("skip: unshare(CLONE_NEWUSER) is not available\n");
		skip();
	}
	struct idmap_slot s;
	struct cordon_err e = {};
	assert_int_equal(idmap_slot_acquire(&s, &e), 0);
	int r = idmap_write(pid, &s, 0, &e);
	if (r < 0)
		fail_msg("idmap_write: %s", e.msg);
	char path[64], buf[128], want[128];
	snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)pid);
	assert_true(read_file_at(AT_FDCWD, path, buf, sizeof(buf)) > 0);
	snprintf(want, sizeof(want), "%u %u %u", 0u, idmap_slot_base(&s), CORDON_IDMAP_SIZE);
	/* the kernel pads the columns */
	char got[128];
	unsigned a, b2, n;
	assert_int_equal(sscanf(buf, "%u %u %u", &a, &b2, &n), 3);
	snprintf(got, sizeof(got), "%u %u %u", a, b2, n);
	assert_string_equal(got, want);
	snprintf(path, sizeof(path), "/proc/%d/gid_map", (int)pid);
	assert_true(read_file_at(AT_FDCWD, path, buf, sizeof(buf)) > 0);
	assert_int_equal(sscanf(buf, "%u %u %u", &a, &b2, &n), 3);
	snprintf(got, sizeof(got), "%u %u %u", a, b2, n);
	assert_string_equal(got, want);
	/* a map is written once */
	assert_true(idmap_write(pid, &s, 0, &e) < 0);
	assert_int_equal(write(go[1], "g", 1), 1);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	idmap_slot_release(&s);
	close(go[0]), close(go[1]), close(done[0]), close(done[1]);
}

/* Without a slot: one id inside onto the caller's, setgroups denied. */
static void test_write_single(void **state)
{
	int go[2], done[2];
	assert_int_equal(pipe2(go, O_CLOEXEC), 0);
	assert_int_equal(pipe2(done, O_CLOEXEC), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char c = unshare(CLONE_NEWUSER) == 0 ? 'u' : 'x';
		if (write(done[1], &c, 1) != 1 || read(go[0], &c, 1) != 1)
			_exit(1);
		_exit(getuid() == 1000 && getgid() == 1000 ? 0 : 2);
	}
	char c;
	assert_int_equal(read(done[0], &c, 1), 1);
	if (c != 'u') {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		print_message("skip: unshare(CLONE_NEWUSER) is not available\n");
		skip();
	}
	struct cordon_err e = {};
	int r = idmap_write(pid, NULL, 1000, &e);
	if (r < 0)
		fail_msg("idmap_write: %s", e.msg);
	char path[64], buf[128];
	unsigned a, b, n;
	snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)pid);
	assert_true(read_file_at(AT_FDCWD, path, buf, sizeof(buf)) > 0);
	assert_int_equal(sscanf(buf, "%u %u %u", &a, &b, &n), 3);
	assert_int_equal(a, 1000);
	assert_int_equal(b, getuid());
	assert_int_equal(n, 1);
	snprintf(path, sizeof(path), "/proc/%d/setgroups", (int)pid);
	assert_true(read_file_at(AT_FDCWD, path, buf, sizeof(buf)) > 0);
	assert_string_equal(buf, "deny\n");
	assert_int_equal(write(go[1], "g", 1), 1);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	close(go[0]), close(go[1]), close(done[0]), close(done[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_base_arithmetic), cmocka_unit_test(test_acquire_release),
		cmocka_unit_test(test_many_distinct),	cmocka_unit_test(test_holder_killed),
		cmocka_unit_test(test_held_hint),
		cmocka_unit_test(test_write_range),	cmocka_unit_test(test_write_single),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
