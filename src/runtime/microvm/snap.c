/* Memory snapshots of a microVM, and the restore that every fork child is (issue 13's spike,
 * findings sections 5 and 6).
 *
 * A VM's RAM is a file of its directory that QEMU maps shared (memory-backend-file
 * share=on). The snapshot, with the VM stopped (QMP `stop`, the runtime's pause): QEMU's
 * device state through `migrate fd:` with x-ignore-shared (the RAM is not in the stream:
 * ~70 KB in ~10 ms), then a sparse copy of the RAM file and of the scratch disk as they are
 * at that instant, and the machine they need. The parent goes on after `cont`: its own file
 * is not the snapshot's, so nothing it writes later reaches a child.
 *
 * A restore maps the snapshot's RAM file privately (share=off: MAP_PRIVATE, copy-on-write,
 * the page cache shared between all children of one snapshot), from a read-only fd: the
 * file is root's, bound read-only into QEMU's jail, and cordon-qemu-ro.so turns QEMU 7.2's
 * O_RDWR open of it into O_RDONLY. A child cannot write its siblings' memory. QEMU starts
 * with -incoming defer; `migrate-incoming fd:N` reads the state, `cont`, and the guest is
 * told its new identity (clock, entropy, hostname, MAC, address: microvm.c) on the control
 * port; setup is over at its answer. Each child has its own copy of the scratch disk
 * (a reflink where the filesystem has them). */
#include <stddef.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "basic/cleanup.h"
#include "basic/fdwatch.h"
#include "basic/fileio.h"
#include "basic/helper.h"
#include "lib/initproto.h"
#include "runtime/microvm/microvm.h"
#include "runtime/scratch.h"

static struct microvm *microvm_of(struct cordon_sandbox *sb)
{
	return (struct microvm *)sb;
}

/* A command on the monitor, its greeting answered first (once). */
static int qmp_do(struct microvm *m, const char *cmd, struct cordon_err *err)
{
	char reply[512];
	int r = m->qmp < 0 ? -ENOTCONN : 0;
	if (r == 0 && !m->qmp_ready && (r = microvm_qmp_hello(m->qmp, MICROVM_QMP_MS)) == 0)
		m->qmp_ready = true;
	if (r == 0)
		r = microvm_qmp(m->qmp, cmd, -1, reply, sizeof(reply), MICROVM_QMP_MS);
	else
		snprintf(reply, sizeof(reply), "no monitor");
	return r < 0 ? cordon_err_set(err, r, "microvm: QMP %s: %s", cmd, reply) : 0;
}

int microvm_pause(struct cordon_sandbox *sb)
{
	return qmp_do(microvm_of(sb), "{\"execute\":\"stop\"}", NULL);
}

/* Running again, with its clock set again (it stood still while paused). */
int microvm_resume(struct cordon_sandbox *sb)
{
	struct microvm *m = microvm_of(sb);
	int r = qmp_do(m, "{\"execute\":\"cont\"}", NULL);
	return r < 0 ? r : microvm_send_identity(m, NULL);
}

static int copy_at(int sdir, const char *sname, int ddir, const char *dname, mode_t mode)
{
	_cleanup_close_ int src = openat(sdir, sname, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	_cleanup_close_ int dst = src < 0 ? -1 : openat(ddir, dname, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
	if (src < 0 || dst < 0)
		return -errno;
	return scratch_copy_sparse(src, dst);
}

/* What a restore must match: the same guest kernel, initramfs, template image, and shape. */
static int machine_line(const struct microvm_vm *vm, char *buf, size_t size)
{
	return snprintf(buf, size, "microvm 1\nqemu %s\nkernel %s\ninitrd %s\nrootfs %s\ncpus %u\nmemory %llu\n",
			vm->host->qemu, vm->host->kernel, vm->initrd, vm->rootfs, vm->cpus,
			(unsigned long long)vm->memory_bytes);
}

static uint64_t allocated(int dirfd, const char *name)
{
	struct stat st;
	return fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 ? (uint64_t)st.st_blocks * 512 : 0;
}

/* The device state out through `migrate fd:` (spawn=deny forbids exec:), the RAM not in it. */
static int save_state(struct microvm *m, int dirfd, struct cordon_err *err)
{
	char reply[512];
	_cleanup_close_ int fd = openat(dirfd, MICROVM_SNAP_STATE, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return cordon_err_set(err, -errno, "microvm: the snapshot's state file");
	int r = qmp_do(m, "{\"execute\":\"migrate-set-capabilities\",\"arguments\":{\"capabilities\":"
			  "[{\"capability\":\"x-ignore-shared\",\"state\":true}]}}", err);
	/* A restored VM's RAM is private, so in the stream: not at QEMU 7.2's 32 MiB/s. */
	if (r == 0)
		r = qmp_do(m, "{\"execute\":\"migrate-set-parameters\",\"arguments\":"
			      "{\"max-bandwidth\":8589934592}}", err);
	if (r == 0 && (r = microvm_qmp(m->qmp, "{\"execute\":\"getfd\",\"arguments\":{\"fdname\":\"snap\"}}",
				       fd, reply, sizeof(reply), MICROVM_QMP_MS)) < 0)
		return cordon_err_set(err, r, "microvm: QMP getfd: %s", reply);
	if (r == 0)
		r = qmp_do(m, "{\"execute\":\"migrate\",\"arguments\":{\"uri\":\"fd:snap\"}}", err);
	if (r == 0 && (r = microvm_qmp_migrated(m->qmp, MICROVM_QMP_MS, reply, sizeof(reply))) < 0)
		return cordon_err_set(err, r, "microvm: the snapshot's migration: %s", reply);
	return r;
}

/* A booted VM's RAM is its shared file, copied now. A restored VM's is a private mapping of
 * its snapshot's file, which x-ignore-shared does not skip: the stream carries every page
 * (a fork of a restored sandbox: no copy-on-write between its children and its snapshot's
 * siblings, but correct); its RAM file is then only the base those pages land on, the same
 * read-only file, linked (it never changes). */
static int keep_ram(struct microvm *m, int vmdir, int dirfd)
{
	if (!m->vm.restore)
		return copy_at(vmdir, "mem", dirfd, MICROVM_SNAP_MEM, 0644);
	if (linkat(AT_FDCWD, m->vm.mem, dirfd, MICROVM_SNAP_MEM, 0) == 0)
		return 0;
	return copy_at(AT_FDCWD, m->vm.mem, dirfd, MICROVM_SNAP_MEM, 0644);
}

int microvm_snapshot(struct cordon_sandbox *sb, int dirfd, struct cordon_snapshot_info *ret,
		     struct cordon_err *err)
{
	struct microvm *m = microvm_of(sb);
	char line[1024];
	if (m->vm.oneshot || !m->hello)
		return cordon_err_setf(err, -EOPNOTSUPP, "microvm: only a running agent-mode VM is snapshotted");
	int n = machine_line(&m->vm, line, sizeof(line));
	_cleanup_close_ int vmdir = open(m->vm.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	int r = save_state(m, dirfd, err);
	if (r < 0)
		return r;
	if (vmdir < 0 || (r = keep_ram(m, vmdir, dirfd)) < 0 ||
	    (r = copy_at(vmdir, "scratch.ext4", dirfd, MICROVM_SNAP_DISK, 0600)) < 0)
		return cordon_err_set(err, vmdir < 0 ? -errno : r, "microvm: copy the RAM and the disk");
	_cleanup_close_ int fd = openat(dirfd, MICROVM_SNAP_MACHINE, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || (r = write_all(fd, line, (size_t)n)) < 0)
		return cordon_err_set(err, fd < 0 ? -errno : r, "microvm: the snapshot's machine");
	ret->memory = true;
	ret->bytes = allocated(dirfd, MICROVM_SNAP_MEM) + allocated(dirfd, MICROVM_SNAP_DISK) +
		     allocated(dirfd, MICROVM_SNAP_STATE) + (uint64_t)n;
	return 0;
}

int microvm_restore_prepare(struct microvm *m, int dirfd, struct cordon_err *err)
{
	struct microvm_vm *vm = &m->vm;
	char want[1024], have[1024], self[64];
	int n = machine_line(vm, want, sizeof(want));
	ssize_t got = read_file_at(dirfd, MICROVM_SNAP_MACHINE, have, sizeof(have) - 1);
	if (got < 0)
		return cordon_err_setf(err, -EINVAL, "microvm: not a memory snapshot of a microvm sandbox");
	have[got] = '\0';
	if (got != n || memcmp(have, want, (size_t)n) != 0)
		return cordon_err_setf(err, -EINVAL, "microvm: the snapshot is of another machine "
				       "(guest kernel, template version, cpus or memory)");
	snprintf(self, sizeof(self), "/proc/self/fd/%d", dirfd);
	ssize_t len = readlink(self, vm->mem, sizeof(vm->mem) - sizeof(MICROVM_SNAP_MEM) - 1);
	if (len <= 0)
		return cordon_err_set(err, -errno, "microvm: the snapshot's directory");
	snprintf(vm->mem + len, sizeof(vm->mem) - (size_t)len, "/%s", MICROVM_SNAP_MEM);
	if (helper_path("cordon-qemu-ro.so", "CORDON_QEMU_RO", vm->shim, sizeof(vm->shim)) < 0)
		return cordon_err_setf(err, -ENOENT, "microvm: cordon-qemu-ro.so not found");
	_cleanup_close_ int vmdir = open(vm->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	int r = vmdir < 0 ? -errno : copy_at(dirfd, MICROVM_SNAP_DISK, vmdir, "scratch.ext4", 0600);
	if (r < 0)
		return cordon_err_set(err, r, "microvm: copy the snapshot's disk");
	if ((m->state = openat(dirfd, MICROVM_SNAP_STATE, O_RDONLY | O_CLOEXEC)) < 0)
		return cordon_err_set(err, -errno, "microvm: the snapshot's state");
	return 0;
}

int microvm_restore_load(struct microvm *m, struct cordon_err *err)
{
	char reply[512];
	int r;
	if ((r = qmp_do(m, "{\"execute\":\"migrate-set-capabilities\",\"arguments\":{\"capabilities\":"
			   "[{\"capability\":\"x-ignore-shared\",\"state\":true}]}}", err)) < 0)
		return r;
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "{\"execute\":\"migrate-incoming\",\"arguments\":{\"uri\":\"fd:%d\"}}",
		 MICROVM_FD_STATE);
	if ((r = qmp_do(m, cmd, err)) < 0)
		return r;
	if ((r = microvm_qmp_migrated(m->qmp, MICROVM_QMP_MS, reply, sizeof(reply))) < 0)
		return cordon_err_set(err, r, "microvm: the restore's migration: %s", reply);
	fd_close(TAKE_FD(m->state));
	if ((r = qmp_do(m, "{\"execute\":\"cont\"}", err)) < 0)
		return r;
	return microvm_send_identity(m, err);
}

/* ---- every create a restore: a template's snapshot, made once off the loop ----
 *
 * By default (CORDON_MICROVM_TEMPLATES=0 turns it off) an agent-mode VM is restored from
 * its template's snapshot in the cache, never booted. The snapshot is made by a VM of its
 * own: booted to its guest's hello (a freshly booted template, nothing of any sandbox's),
 * paused, snapshotted into a temporary directory that is renamed, then destroyed. That
 * takes a boot, QMP calls and a copy, so only a caller that may wait makes it: the pool's
 * creator thread (warm, or a pooled start), a CLI; a start on cordond's loop
 * (spec->cached_only) that finds none fails with -EINPROGRESS and the creator makes it.
 * The key is the machine (QEMU, kernel, initramfs, template image, cpus, memory), the
 * disk's size and cordon-init's command without the boot's time. */

static bool templates_on(void)
{
	const char *e = getenv("CORDON_MICROVM_TEMPLATES");
	return !e || strcmp(e, "0") != 0;
}

static void template_path(const struct microvm *m, char *buf, size_t size)
{
	char line[1024];
	int n = machine_line(&m->vm, line, sizeof(line));
	uint64_t h = 1469598103934665603ULL; /* FNV-1a */
	for (int i = 0; i < n && i < (int)sizeof(line); i++)
		h = (h ^ (uint8_t)line[i]) * 1099511628211ULL;
	const size_t t0 = offsetof(struct vm_args_head, time_lo), t1 = t0 + 2 * sizeof(uint32_t);
	for (size_t i = 0; i < m->args_len; i++) /* all but the host's time */
		h = (h ^ (i >= t0 && i < t1 ? 0 : (uint8_t)m->args[i])) * 1099511628211ULL;
	h = (h ^ m->disk_bytes) * 1099511628211ULL;
	snprintf(buf, size, "%s/vm-template-%016llx", microvm_cache(), (unsigned long long)h);
}

static const char *const snap_files[] = {MICROVM_SNAP_STATE, MICROVM_SNAP_MEM, MICROVM_SNAP_DISK,
					 MICROVM_SNAP_MACHINE};

/* @m, at its hello, snapshotted into @path: paused, a temporary directory, renamed. One
 * made meanwhile by another process is as good. */
static int template_save(struct microvm *m, const char *path, struct cordon_err *err)
{
	char tmp[PATH_MAX + 32];
	struct cordon_snapshot_info info;
	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)gettid());
	if (mkdir(tmp, 0700) < 0)
		return cordon_err_set(err, -errno, "microvm: '%s'", tmp);
	_cleanup_close_ int fd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	int r = fd < 0 ? cordon_err_set(err, -errno, "microvm: '%s'", tmp) : microvm_pause(&m->sb);
	if (r == 0)
		r = microvm_snapshot(&m->sb, fd, &info, err);
	if (r == 0 && rename(tmp, path) == 0)
		return 0;
	if (r == 0 && errno != EEXIST && errno != ENOTEMPTY)
		r = cordon_err_set(err, -errno, "microvm: publish '%s'", path);
	microvm_snap_dir_remove(AT_FDCWD, tmp);
	return r;
}

/* Set by the thread that boots the VM a template snapshot is made of: that VM boots. */
static __thread bool making;

/* The template snapshot of @spec's machine, made now if it is not (see above). */
static int template_make(const struct cordon_spec *spec, struct cordon_err *err)
{
	struct cordon_spec s = *spec;
	struct cordon_sandbox *sb;
	char path[PATH_MAX];
	s.runtime = "microvm";
	s.argv = NULL;
	s.timeout_ms = 0;
	making = true;
	int r = cordon_sandbox_create(&s, &sb, err);
	making = false;
	if (r == -EEXIST)
		return 0;
	if (r < 0)
		return r;
	template_path(microvm_of(sb), path, sizeof(path));
	r = template_save(microvm_of(sb), path, err);
	cordon_sandbox_free(sb);
	return r;
}

int microvm_template_warm(const struct cordon_spec *spec, struct cordon_err *err)
{
	return templates_on() && !spec->argv ? template_make(spec, err) : 0;
}

int microvm_template_use(struct microvm *m, const struct cordon_spec *spec, struct cordon_err *err)
{
	char path[PATH_MAX];
	if (!templates_on() || m->vm.oneshot)
		return 0;
	template_path(m, path, sizeof(path));
	_cleanup_close_ int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (making)
		return fd >= 0 ? -EEXIST : 0;
	if (fd < 0 && spec->cached_only)
		return cordon_err_setf(err, -EINPROGRESS, "microvm: the template's memory snapshot");
	int r = fd < 0 ? template_make(spec, err) : 0;
	if (r == 0 && fd < 0 && (fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW)) < 0)
		r = cordon_err_set(err, -errno, "microvm: the template's snapshot '%s'", path);
	if (r < 0)
		return r;
	(void)unlink(m->vm.scratch); /* the template's disk instead */
	m->vm.restore = true;
	r = microvm_restore_prepare(m, fd, err);
	if (r == 0 && chown(m->vm.scratch, m->vm.uid, m->vm.uid) < 0)
		r = cordon_err_set(err, -errno, "microvm: chown the scratch");
	return r < 0 ? r : 1;
}

void microvm_snap_dir_remove(int dirfd, const char *name)
{
	_cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	for (size_t i = 0; fd >= 0 && i < ELEMENTSOF(snap_files); i++)
		(void)unlinkat(fd, snap_files[i], 0);
	(void)unlinkat(dirfd, name, AT_REMOVEDIR);
}
