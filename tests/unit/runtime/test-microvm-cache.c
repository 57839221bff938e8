/* The microvm image cache's sweep (src/runtime/microvm/cache.c) on a cache directory of the
 * test's own, with the files it would find there: what the host can still use stays, what
 * nothing can use goes. No VM is booted. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "runtime/microvm/microvm.h"

static char dir[64];

static void put(const char *name, const char *content, time_t age_s)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(content, f);
	fclose(f);
	struct timespec t[2] = {{time(NULL) - age_s, 0}, {time(NULL) - age_s, 0}};
	assert_int_equal(utimensat(AT_FDCWD, path, t, 0), 0);
}

static void put_dir(const char *name, const char *machine)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/" MICROVM_SNAP_MACHINE, name);
	put(path, machine, 0);
}

static bool there(const char *name)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return access(path, F_OK) == 0;
}

static int setup(void **state)
{
	strcpy(dir, "/tmp/cordon-mvcache-XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	return setenv("CORDON_MICROVM_CACHE", dir, 1);
}

static int teardown(void **state)
{
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static void test_a_new_host_image_supersedes_the_others(void **state)
{
	char fresh[PATH_MAX], machine[2 * PATH_MAX], self[32];
	put("rootfs-1111111111111111.erofs", "old host", 0);
	put("rootfs-1111111111111111.src", "host\n", 0);
	put("rootfs-2222222222222222.erofs", "fresh host", 0);
	put("rootfs-2222222222222222.src", "host\n", 0);
	put("rootfs-3333333333333333.erofs", "a template gone", 0);
	put("rootfs-3333333333333333.src", "/nonexistent/cordon/template/v1\n", 0);
	put("rootfs-4444444444444444.erofs", "a template still there", 0);
	put("rootfs-4444444444444444.src", "/tmp\n", 0);
	put("rootfs-5555555555555555.erofs", "no .src: not ours to judge", 0);
	put("initrd-6666666666666666.cpio", "a day and more old", 2 * 24 * 3600);
	put("rootfs-7777777777777777.erofs.tmp.999999999", "a dead writer's", 0);
	snprintf(self, sizeof(self), "rootfs-8.erofs.tmp.%d", (int)getpid());
	put(self, "a live writer's", 0);
	snprintf(machine, sizeof(machine), "microvm 1\ninitrd /nonexistent/initrd\nrootfs %s/rootfs-2222222222222222.erofs\n", dir);
	put_dir("vm-template-aaaaaaaaaaaaaaaa", machine);
	put_dir("stage.999999998", "");
	snprintf(machine, sizeof(machine), "microvm 1\ninitrd %s/rootfs-2222222222222222.erofs\nrootfs %s/rootfs-2222222222222222.erofs\n", dir, dir);
	put_dir("vm-template-bbbbbbbbbbbbbbbb", machine);

	snprintf(fresh, sizeof(fresh), "%s/rootfs-2222222222222222.erofs", dir);
	microvm_cache_sweep(fresh, true);

	assert_false(there("rootfs-1111111111111111.erofs"));
	assert_false(there("rootfs-1111111111111111.src"));
	assert_true(there("rootfs-2222222222222222.erofs"));
	assert_true(there("rootfs-2222222222222222.src"));
	assert_false(there("rootfs-3333333333333333.erofs"));
	assert_true(there("rootfs-4444444444444444.erofs"));
	assert_true(there("rootfs-5555555555555555.erofs"));
	assert_true(there("initrd-6666666666666666.cpio")); /* only a new initramfs sweeps them */
	assert_false(there("rootfs-7777777777777777.erofs.tmp.999999999"));
	assert_true(there(self));
	assert_false(there("stage.999999998"));
	assert_false(there("vm-template-aaaaaaaaaaaaaaaa"));
	assert_true(there("vm-template-bbbbbbbbbbbbbbbb"));
}

static void test_a_new_initramfs_sweeps_day_old_ones(void **state)
{
	char fresh[PATH_MAX];
	put("initrd-9999999999999999.cpio", "the fresh one", 3 * 24 * 3600); /* its mtime aside */
	put("initrd-6666666666666666.cpio", "a day and more old", 2 * 24 * 3600);
	put("initrd-7777777777777777.cpio", "another install's, an hour old", 3600);
	put("rootfs-2222222222222222.erofs", "fresh host", 0);
	put("rootfs-2222222222222222.src", "host\n", 0);
	put("rootfs-1111111111111111.erofs", "old host", 0);
	put("rootfs-1111111111111111.src", "host\n", 0);
	snprintf(fresh, sizeof(fresh), "%s/initrd-9999999999999999.cpio", dir);
	microvm_cache_sweep(fresh, false);
	assert_true(there("initrd-9999999999999999.cpio"));
	assert_false(there("initrd-6666666666666666.cpio"));
	assert_true(there("initrd-7777777777777777.cpio"));
	/* no host image was published: the host's images are left as they are */
	assert_true(there("rootfs-1111111111111111.erofs") && there("rootfs-2222222222222222.erofs"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_a_new_host_image_supersedes_the_others, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_a_new_initramfs_sweeps_day_old_ones, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
