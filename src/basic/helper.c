#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "basic/helper.h"

int helper_path(const char *name, const char *env, char *path, size_t size)
{
	if (!path || size == 0)
		return -EINVAL;
	const char *e = env ? secure_getenv(env) : NULL;
	if (e && *e == '/') {
		snprintf(path, size, "%s", e);
		return access(path, X_OK) == 0 ? 0 : -ENOENT;
	}
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = '\0';
		char *slash = strrchr(self, '/');
		if (slash) {
			*slash = '\0';
			if ((size_t)snprintf(path, size, "%s/%s", self, name) < size &&
			    access(path, X_OK) == 0)
				return 0;
		}
	}
	snprintf(path, size, "%s/%s", CORDON_LIBEXECDIR, name);
	return access(path, X_OK) == 0 ? 0 : -ENOENT;
}
