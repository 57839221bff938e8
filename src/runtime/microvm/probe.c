/* What the microvm runtime needs of the host, found once per process: QEMU, a guest kernel
 * with its modules, and the accelerator.
 *
 * The kernel is Debian's linux-image-cloud-amd64 (contrib/microvm-kernel.sh fetches it
 * and extracts vmlinuz and the modules of microvm_modules[]): $CORDON_MICROVM_KERNEL, a
 * directory holding vmlinuz and modules/, else /var/cache/cordon-kernels/microvm.
 *
 * KVM only counts when it runs the guest: some hosts' /dev/kvm (nested, paravirtual) opens
 * but QEMU aborts at once (`failed to set MSR 0x10a`) or hangs after the boot loader. The
 * probe boots the kernel without an initramfs under KVM, and the kernel's own panic for the
 * missing root (or its /init) within MICROVM_PROBE_MS is the proof; otherwise TCG, and why
 * (tests/kernels/qemu.sh's qemu_probe_kvm, the same rule).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "basic/child.h"
#include "basic/cleanup.h"
#include "basic/clock.h"
#include "runtime/microvm/microvm.h"

const char *const microvm_modules[] = {
    "virtio_ring", "virtio",	   "virtio_mmio", "virtio_blk", "virtio_console", "virtio-rng",
    "failover",	   "net_failover", "virtio_net",  "libcrc32c",	"erofs",	  "overlay",
};
const size_t microvm_modules_n = ELEMENTSOF(microvm_modules);

static const char *env_or(const char *name, const char *dflt)
{
	const char *v = getenv(name);
	return v && *v ? v : dflt;
}

const char *microvm_base(void)
{
	return env_or("CORDON_MICROVM_DIR", "/run/cordon/microvm");
}

const char *microvm_cache(void)
{
	return env_or("CORDON_MICROVM_CACHE", "/var/cache/cordon-microvm");
}

static bool is_exec(const char *path)
{
	return access(path, X_OK) == 0;
}

static int find_qemu(struct microvm_host *h, struct cordon_err *err)
{
	const char *q = getenv("CORDON_MICROVM_QEMU");
	if (q && *q) {
		snprintf(h->qemu, sizeof(h->qemu), "%s", q);
		return is_exec(q) ? 0 : cordon_err_setf(err, -ENOENT, "no QEMU at '%s'", q);
	}
	const char *path = env_or("PATH", "/usr/bin:/bin");
	for (const char *p = path; *p;) {
		size_t n = strcspn(p, ":");
		snprintf(h->qemu, sizeof(h->qemu), "%.*s/qemu-system-x86_64", (int)n, p);
		if (n && is_exec(h->qemu))
			return 0;
		p += n + (p[n] == ':');
	}
	return cordon_err_setf(err, -ENOENT,
			       "qemu-system-x86_64 not found (apt-get install qemu-system-x86)");
}

static int find_kernel(struct microvm_host *h, struct cordon_err *err)
{
	const char *dir = env_or("CORDON_MICROVM_KERNEL", "/var/cache/cordon-kernels/microvm");
	char ko[512];
	snprintf(h->kernel, sizeof(h->kernel), "%s/vmlinuz", dir);
	snprintf(h->modules, sizeof(h->modules), "%s/modules", dir);
	if (access(h->kernel, R_OK) < 0)
		return cordon_err_setf(err, -ENOENT,
				       "no guest kernel at '%s' (contrib/microvm-kernel.sh fetches it)",
				       h->kernel);
	for (size_t i = 0; i < microvm_modules_n; i++) {
		snprintf(ko, sizeof(ko), "%s/%s.ko", h->modules, microvm_modules[i]);
		if (access(ko, R_OK) < 0)
			return cordon_err_setf(err, -ENOENT, "guest module '%s' missing", ko);
	}
	return 0;
}

/* Reads QEMU's serial console (@fd) until the kernel shows it ran or the deadline. */
static bool console_shows_kernel(int fd, char *tail, size_t size)
{
	static const char *const marks[] = {"Kernel panic", "VFS: Unable to mount root", "Run /init"};
	char buf[8192];
	size_t len = 0;
	uint64_t end = mono_ms() + MICROVM_PROBE_MS;
	tail[0] = '\0';
	for (uint64_t now; (now = mono_ms()) < end;) {
		struct pollfd p = {fd, POLLIN, 0};
		if (poll(&p, 1, (int)(end - now)) <= 0)
			break;
		ssize_t n = read(fd, buf + len, sizeof(buf) - 1 - len);
		if (n <= 0)
			break;
		len += n;
		buf[len] = '\0';
		for (size_t i = 0; i < ELEMENTSOF(marks); i++)
			if (strstr(buf, marks[i]))
				return true;
		if (len > sizeof(buf) / 2) { /* keep the last half */
			memmove(buf, buf + len - sizeof(buf) / 4, sizeof(buf) / 4);
			len = sizeof(buf) / 4;
		}
	}
	snprintf(tail, size, "%.160s", len > 160 ? buf + len - 160 : buf);
	for (char *c = tail; *c; c++)
		if (*c < 32 || *c > 126)
			*c = ' ';
	return false;
}

static int spawn_probe(const struct microvm_host *h, int out)
{
	const char *const argv[] = {
	    h->qemu, "-M", "microvm,x-option-roms=off,pit=on,pic=off,rtc=off,isa-serial=on",
	    "-accel", "kvm", "-cpu", "host", "-smp", "1", "-m", "128", "-nodefaults",
	    "-no-user-config", "-display", "none", "-no-reboot", "-kernel", h->kernel, "-append",
	    "console=ttyS0 panic=-1", "-serial", "stdio", NULL};
	pid_t pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_RDONLY);
		if (null < 0 || dup2(null, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0)
			_exit(127);
		syscall(SYS_close_range, 3, ~0U, 0);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	return pid;
}

/* "kvm" when KVM runs the guest's kernel, else "tcg" and h->why_tcg. */
static void probe_accel(struct microvm_host *h)
{
	char tail[200];
	int p[2];
	h->accel = "tcg";
	if (access("/dev/kvm", R_OK | W_OK) < 0) {
		snprintf(h->why_tcg, sizeof(h->why_tcg), "no usable /dev/kvm");
		return;
	}
	if (pipe2(p, O_CLOEXEC) < 0) {
		snprintf(h->why_tcg, sizeof(h->why_tcg), "probe: %s", strerror(errno));
		return;
	}
	pid_t pid = spawn_probe(h, p[1]);
	close(p[1]);
	bool ok = pid > 0 && console_shows_kernel(p[0], tail, sizeof(tail));
	close(p[0]);
	if (pid > 0) {
		kill(pid, SIGKILL);
		child_wait_deadline(pid, MICROVM_KILL_MS, NULL);
	}
	if (ok)
		h->accel = "kvm";
	else
		snprintf(h->why_tcg, sizeof(h->why_tcg),
			 "KVM did not run the guest's kernel in %d s; qemu said: '%.100s'",
			 MICROVM_PROBE_MS / 1000, pid > 0 ? tail : "fork failed");
}

/* The host's TSC rate, which a TCG guest's TSC runs at: the kernel is told it
 * (tsc_early_khz=) rather than calibrating against the PIT, whose emulation under TCG left
 * about one boot in three hung early on this host's 2 busy cores. 0 when unknown. */
static unsigned host_tsc_khz(void)
{
	_cleanup_fclose_ FILE *f = fopen("/proc/cpuinfo", "re");
	char line[256];
	double mhz = 0;
	bool known = false;
	while (f && fgets(line, sizeof(line), f)) {
		if (!mhz && sscanf(line, "cpu MHz : %lf", &mhz) == 1)
			continue;
		if (strncmp(line, "flags", 5) == 0 && strstr(line, " tsc_known_freq"))
			known = true;
		if (strncmp(line, "flags", 5) == 0)
			break;
	}
	return known && mhz > 0 ? (unsigned)(mhz * 1000 + 0.5) : 0;
}

static struct microvm_host host;
static struct cordon_err why;
static int result;

static void probe_once(void)
{
	result = find_qemu(&host, &why);
	if (result == 0)
		result = find_kernel(&host, &why);
	if (result == 0)
		probe_accel(&host);
	host.tsc_khz = host_tsc_khz();
}

/* Once per process, whichever thread asks first (cordond's pool thread and its loop). */
int microvm_probe(const struct microvm_host **ret, struct cordon_err *err)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, probe_once);
	if (result < 0)
		return cordon_err_setf(err, result, "%s", why.msg);
	if (ret)
		*ret = &host;
	return 0;
}
