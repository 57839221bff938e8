/* QEMU's own jail, entered by QEMU's child between fork and exec (async-signal-safe calls
 * only): the VMM is the code a guest attacks first, so it holds as little as the spike found
 * it needs (issue 13 findings, section 6).
 *
 * It was cloned into new mount, pid, network, ipc, uts and cgroup namespaces (qemu.c). Its
 * root is a tmpfs in <dir>/root with: /usr read-only (QEMU, its libraries, the microvm
 * firmware in /usr/share/qemu, TCG's module), the top-level links of a merged /usr,
 * /etc/ld.so.cache, /dev/null and /dev/urandom (and /dev/kvm under KVM), the kernel,
 * initramfs and template image read-only at /img, the VM's directory at /vm (its scratch
 * disk, console log), a fresh /proc; nothing else of the host, and no network (its netns is
 * empty). Then: every capability gone (bounding set included), no_new_privs, and the
 * slot's uid (under KVM uid 0 with no capability: /dev/kvm is root's 0600), before QEMU's
 * own -sandbox seccomp filter.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/capability.h>

#include "basic/cleanup.h"
#include "runtime/microvm/microvm.h"

#define R "/root" /* under the VM's directory */

/* @src bound at @root@dst: a file or a directory, read-only unless @rw. */
static int bind_at(const char *root, const char *src, const char *dst, bool rw)
{
	char path[512];
	struct stat st;
	snprintf(path, sizeof(path), "%s%s", root, dst);
	if (stat(src, &st) < 0)
		return -errno;
	int r = S_ISDIR(st.st_mode) ? mkdir(path, 0755) : mknod(path, S_IFREG | 0600, 0);
	if (r < 0 && errno != EEXIST)
		return -errno;
	if (mount(src, path, NULL, MS_BIND | MS_REC, NULL) < 0)
		return -errno;
	if (!rw && mount(NULL, path, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID, NULL) < 0)
		return -errno;
	return 0;
}

/* /bin, /lib, /lib64, /sbin: the links of a merged /usr copied, real directories bound. */
static int top_level(const char *root)
{
	static const char *const names[] = {"/bin", "/sbin", "/lib", "/lib32", "/lib64"};
	char target[256], path[512];
	for (size_t i = 0; i < ELEMENTSOF(names); i++) {
		ssize_t n = readlink(names[i], target, sizeof(target) - 1);
		snprintf(path, sizeof(path), "%s%s", root, names[i]);
		if (n > 0) {
			target[n] = '\0';
			if (symlink(target, path) < 0)
				return -errno;
		} else if (access(names[i], F_OK) == 0 && bind_at(root, names[i], names[i], false) < 0) {
			return -errno;
		}
	}
	return 0;
}

static int populate(const struct microvm_vm *vm, const char *root)
{
	static const char *const dirs[] = {"/etc", "/dev", "/img", "/proc", "/vm", "/old"};
	char path[512];
	bool kvm = strcmp(vm->host->accel, "kvm") == 0;
	for (size_t i = 0; i < ELEMENTSOF(dirs); i++) {
		snprintf(path, sizeof(path), "%s%s", root, dirs[i]);
		if (mkdir(path, 0755) < 0)
			return -errno;
	}
	const struct {
		const char *src, *dst;
		bool rw, when, optional;
	} binds[] = {
	    {"/usr", "/usr", false, true, false},
	    {"/etc/ld.so.cache", "/etc/ld.so.cache", false, true, true},
	    {"/dev/null", "/dev/null", true, true, false},
	    {"/dev/urandom", "/dev/urandom", true, true, false},
	    {"/dev/kvm", "/dev/kvm", true, kvm, false},
	    {vm->host->kernel, MICROVM_JAIL_KERNEL, false, true, false},
	    {vm->initrd, MICROVM_JAIL_INITRD, false, true, false},
	    {vm->rootfs, MICROVM_JAIL_ROOTFS, false, true, false},
	    {vm->dir, MICROVM_JAIL_DIR, true, true, false},
	    {vm->mem, MICROVM_JAIL_MEM, false, vm->restore, false},
	    {vm->shim, MICROVM_JAIL_SHIM, false, vm->restore, false},
	};
	for (size_t i = 0; i < ELEMENTSOF(binds); i++) {
		if (!binds[i].when || (binds[i].optional && access(binds[i].src, F_OK) < 0))
			continue;
		int r = bind_at(root, binds[i].src, binds[i].dst, binds[i].rw);
		if (r < 0)
			return r;
	}
	return top_level(root);
}

static int drop_privileges(uid_t uid)
{
	for (int cap = 0; cap <= CAP_LAST_CAP; cap++)
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
			return -errno;
	if (setgroups(0, NULL) < 0 || setresgid(uid, uid, uid) < 0 || setresuid(uid, uid, uid) < 0)
		return -errno;
	/* Root that stays root (KVM) has its capabilities cleared by hand. */
	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct d[2] = {};
	if (syscall(SYS_capset, &h, d) < 0 ||
	    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 ||
	    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -errno;
	return 0;
}

int microvm_vmm_enter(const struct microvm_vm *vm)
{
	char root[256];
	snprintf(root, sizeof(root), "%s" R, vm->dir);
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") < 0)
		return -errno;
	int r = populate(vm, root);
	if (r < 0)
		return r;
	if (chdir(root) < 0 || syscall(SYS_pivot_root, ".", "old") < 0 ||
	    umount2("/old", MNT_DETACH) < 0 || rmdir("/old") < 0 || chdir("/") < 0)
		return -errno;
	if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=invisible") < 0 ||
	    mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
		return -errno;
	return drop_privileges(vm->uid);
}
