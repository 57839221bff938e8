#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/landlock.h>

#include "basic/cleanup.h"
#include "lib/landlock.h"

#ifndef LANDLOCK_ACCESS_FS_REFER
#define LANDLOCK_ACCESS_FS_REFER (1ULL << 13)
#endif
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15)
#endif

#define FS_READ                                                                                    \
	(LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR)

/* The rights each ABI version knows; handling a right the kernel does not know is EINVAL. */
static uint64_t fs_rights(int abi)
{
	uint64_t all = (1ULL << 13) - 1; /* ABI 1: EXECUTE .. MAKE_SYM */
	if (abi >= 2)
		all |= LANDLOCK_ACCESS_FS_REFER;
	if (abi >= 3)
		all |= LANDLOCK_ACCESS_FS_TRUNCATE;
	if (abi >= 5)
		all |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
	return all;
}

int landlock_abi(void)
{
	long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
	return abi < 0 ? 0 : (int)abi;
}

static int add_rule(int ruleset, const char *path, uint64_t access)
{
	_cleanup_close_ int fd = open(path, O_PATH | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	struct landlock_path_beneath_attr attr = {.allowed_access = access, .parent_fd = fd};
	if (syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &attr, 0) < 0)
		return -errno;
	return 0;
}

int landlock_apply(const char *const *writable, struct cordon_err *err)
{
	int abi = landlock_abi();
	if (abi <= 0)
		return 0;
	uint64_t all = fs_rights(abi);
	struct landlock_ruleset_attr attr = {.handled_access_fs = all};
	_cleanup_close_ int rs = syscall(SYS_landlock_create_ruleset, &attr, sizeof(attr), 0);
	if (rs < 0)
		return cordon_err_set(err, -errno, "landlock: create ruleset (ABI %d)", abi);
	int r = add_rule(rs, "/", FS_READ);
	if (r < 0)
		return cordon_err_set(err, r, "landlock: rule for /");
	for (const char *const *p = writable; *p; p++) {
		r = add_rule(rs, *p, all);
		if (r < 0)
			return cordon_err_set(err, r, "landlock: rule for %s", *p);
	}
	if (syscall(SYS_landlock_restrict_self, rs, 0) < 0)
		return cordon_err_set(err, -errno, "landlock: restrict");
	return abi;
}
