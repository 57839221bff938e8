/* libFuzzer target for oci_apply_layer(): the input is one layer. Each run gets a fresh
 * mkdtemp directory holding "root" (the target) and "canary"; beyond "no crash, no leak" it
 * checks that nothing was written outside root: the parent holds exactly those two, the
 * canary still holds its one file unchanged, and no file named by the seeds appeared on the
 * host. Then the whole directory is removed. */
#include <assert.h>
#include <stdbool.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "basic/cleanup.h"
#include "image/oci.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const host_paths[] = {"/etc/x", "/x", "/tmp/x"};
static struct {
	bool exists;
	struct stat st;
} host_before[3];

static void check_outside(const char *dir)
{
	char p[128], buf[16] = "";
	_cleanup_closedir_ DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;
	assert(d);
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
			assert(strcmp(de->d_name, "root") == 0 || strcmp(de->d_name, "canary") == 0);
			n++;
		}
	assert(n == 2);
	snprintf(p, sizeof(p), "%s/canary", dir);
	_cleanup_closedir_ DIR *c = opendir(p);
	n = 0;
	while ((de = readdir(c)))
		n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
	assert(n == 1);
	snprintf(p, sizeof(p), "%s/canary/file", dir);
	_cleanup_close_ int fd = open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	assert(fd >= 0 && read(fd, buf, sizeof(buf)) == 6 && memcmp(buf, "canary", 6) == 0);
	/* The seeds name these; a path that was already there (a host's own /tmp/x) is checked
	 * for change rather than for absence. */
	for (size_t i = 0; i < sizeof(host_paths) / sizeof(host_paths[0]); i++) {
		struct stat st;
		bool now = lstat(host_paths[i], &st) == 0;
		assert(now == host_before[i].exists);
		assert(!now || (st.st_ino == host_before[i].st.st_ino &&
				st.st_mtim.tv_sec == host_before[i].st.st_mtim.tv_sec &&
				st.st_mtim.tv_nsec == host_before[i].st.st_mtim.tv_nsec));
	}
}

static void note_host_paths(void)
{
	static bool noted;
	if (noted)
		return;
	for (size_t i = 0; i < sizeof(host_paths) / sizeof(host_paths[0]); i++)
		host_before[i].exists = lstat(host_paths[i], &host_before[i].st) == 0;
	noted = true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char dir[] = "/tmp/fuzz-image-XXXXXX", p[128], cmd[160];
	struct cordon_err err = {0};

	note_host_paths();
	assert(mkdtemp(dir));
	snprintf(p, sizeof(p), "%s/canary", dir);
	assert(mkdir(p, 0755) == 0);
	snprintf(p, sizeof(p), "%s/canary/file", dir);
	FILE *f = fopen(p, "we");
	assert(f && fputs("canary", f) >= 0 && fclose(f) == 0);
	snprintf(p, sizeof(p), "%s/root", dir);
	assert(mkdir(p, 0755) == 0);
	_cleanup_close_ int root = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	_cleanup_close_ int fd = memfd_create("layer", MFD_CLOEXEC);
	assert(root >= 0 && fd >= 0);
	assert(write(fd, data, size) == (ssize_t)size && lseek(fd, 0, SEEK_SET) == 0);

	int r = oci_apply_layer(root, fd, 1 << 20, &err);
	assert(r <= 0 && (r == 0 || err.msg[0]));
	assert(!strchr(err.msg, '\n'));
	check_outside(dir);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert(system(cmd) == 0);
	return 0;
}
