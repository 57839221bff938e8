#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "basic/cleanup.h"
#include "basic/tree.h"

bool tree_is_dot(const char *n)
{
	return n[0] == '.' && (!n[1] || (n[1] == '.' && !n[2]));
}

DIR *tree_opendir_dup(int fd)
{
	int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (dfd < 0)
		return NULL;
	DIR *d = fdopendir(dfd);
	if (!d) {
		int e = errno;
		close(dfd);
		errno = e;
	}
	return d;
}

static int remove_at(int dirfd, const char *name, unsigned depth, unsigned max_depth);

/* The entries of @fd, at @depth below where the walk began. A pass may miss entries when
 * the directory changes under readdir; another finds them. */
static int empty_at(int fd, unsigned depth, unsigned max_depth)
{
	for (int pass = 0; pass < 3; pass++) {
		_cleanup_closedir_ DIR *d = tree_opendir_dup(fd);
		if (!d)
			return -errno;
		rewinddir(d);
		bool any = false;
		struct dirent *de;
		while ((de = readdir(d))) {
			if (tree_is_dot(de->d_name))
				continue;
			int r = remove_at(fd, de->d_name, depth, max_depth);
			if (r < 0)
				return r;
			any = true;
		}
		if (!any)
			return 0;
	}
	return 0;
}

/* A directory may be read-only (0555 from an image): each is made 0700 before it is
 * emptied, which matters without CAP_DAC_OVERRIDE. */
static int remove_at(int dirfd, const char *name, unsigned depth, unsigned max_depth)
{
	if (unlinkat(dirfd, name, 0) == 0 || errno == ENOENT)
		return 0;
	if (errno != EISDIR && errno != EPERM)
		return -errno;
	if (depth > max_depth)
		return -ELOOP;
	_cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	(void)fchmod(fd, 0700);
	int r = empty_at(fd, depth + 1, max_depth);
	if (r < 0)
		return r;
	if (unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

int tree_empty(int fd, unsigned max_depth)
{
	return empty_at(fd, 1, max_depth);
}

int tree_remove_at(int dirfd, const char *name, unsigned max_depth)
{
	return remove_at(dirfd, name, 1, max_depth);
}

static int size_at(int fd, unsigned depth, uint64_t *size)
{
	if (depth >= TREE_MAX_DEPTH)
		return -ELOOP;
	_cleanup_closedir_ DIR *d = tree_opendir_dup(fd);
	if (!d)
		return -errno;
	struct dirent *de;
	struct stat st;
	while ((de = readdir(d))) {
		if (tree_is_dot(de->d_name))
			continue;
		if (fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			return -errno;
		if (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode))
			*size += st.st_size;
		if (!S_ISDIR(st.st_mode))
			continue;
		_cleanup_close_ int sub = openat(fd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub < 0)
			return -errno;
		int r = size_at(sub, depth + 1, size);
		if (r < 0)
			return r;
	}
	return 0;
}

int tree_size(int fd, uint64_t *size)
{
	return size_at(fd, 0, size);
}
