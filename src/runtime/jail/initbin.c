/* The sealed copy of cordon-init that every sandbox execs as its PID 1.
 *
 * Exec'ing a host file would let the sandbox reach it through /proc/1/exe; a memfd sealed
 * against writes, growth and shrinking is not a host file and cannot be changed, while the
 * kernel shares its pages between all sandboxes of this process.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include "basic/helper.h"
#include "runtime/jail/jail.h"

#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U
#endif

#define INIT_MAX_SIZE (64u << 20)

static int cached_fd = -1;

static int open_init_binary(char *path, size_t size)
{
	if (helper_path("cordon-init", "CORDON_INIT", path, size) < 0)
		return -1;
	return open(path, O_RDONLY | O_CLOEXEC);
}

static int new_memfd(void)
{
	/* MFD_EXEC (6.3+) keeps it executable where vm.memfd_noexec would forbid it. */
	int fd = memfd_create("cordon-init", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_EXEC);
	if (fd < 0 && errno == EINVAL)
		fd = memfd_create("cordon-init", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	return fd;
}

int jail_init_memfd(struct cordon_err *err)
{
	char path[PATH_MAX];
	struct stat st;

	if (cached_fd >= 0)
		return cached_fd;
	_cleanup_close_ int src = open_init_binary(path, sizeof(path));
	if (src < 0)
		return cordon_err_set(err, -errno, "cordon-init '%s'", path);
	if (fstat(src, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
	    st.st_size > INIT_MAX_SIZE)
		return cordon_err_setf(err, -EINVAL, "cordon-init '%s': not a usable binary", path);
	_cleanup_close_ int mfd = new_memfd();
	if (mfd < 0)
		return cordon_err_set(err, -errno, "memfd for cordon-init");
	for (off_t off = 0; off < st.st_size;) {
		ssize_t n = sendfile(mfd, src, &off, st.st_size - off);
		if (n <= 0)
			return cordon_err_set(err, n < 0 ? -errno : -EIO, "copy cordon-init");
	}
	int seals = F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE;
	if (fcntl(mfd, F_ADD_SEALS, seals) < 0)
		return cordon_err_set(err, -errno, "seal cordon-init");
	cached_fd = TAKE_FD(mfd);
	return cached_fd;
}
