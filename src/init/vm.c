/* The microVM guest stage (vm.h). Everything here runs as the guest's PID 1, before any
 * code of the sandbox: a failure is a line on the console (ttyS0) and a power-off. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <grp.h>
#include <poll.h>
#include <stdbool.h>
#include <time.h>
#include <unistd.h>

#include "basic/cleanup.h"
#include "basic/fileio.h"
#include "init/vm.h"
#include "lib/initproto.h"

#define ROOT "/mnt/root"
#define ARGS_MAX (256u << 10) /* MICROVM_ARGS_MAX */

static const char *const ports[] = {"cordon.channel", "cordon.stdin", "cordon.stdout",
				    "cordon.stderr"};

static _Noreturn void power_off(void)
{
	sync();
	reboot(RB_POWER_OFF);
	for (;;)
		pause();
}

static _Noreturn void die(const char *fmt, ...)
{
	va_list ap;
	int con = open("/dev/console", O_WRONLY | O_CLOEXEC);
	va_start(ap, fmt);
	if (con >= 0) {
		dprintf(con, "cordon-vm: ");
		vdprintf(con, fmt, ap);
		dprintf(con, ": %s\n", strerror(errno));
	}
	va_end(ap);
	power_off();
}

static void early_mounts(void)
{
	if (mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, NULL) < 0 ||
	    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0 ||
	    mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		die("early mounts");
}

static void load_modules(void)
{
	char order[1024], path[128];
	ssize_t n = read_file_at(AT_FDCWD, "/lib/modules/order", order, sizeof(order));
	if (n < 0)
		die("read /lib/modules/order");
	for (char *save = NULL, *m = strtok_r(order, "\n", &save); m; m = strtok_r(NULL, "\n", &save)) {
		snprintf(path, sizeof(path), "/lib/modules/%s.ko", m);
		_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || (syscall(SYS_finit_module, fd, "", 0) < 0 && errno != EEXIST))
			die("load %s", path);
	}
}

/* /dev/NAME of the entry of @class whose @attr file holds @want ("vda" for a serial). */
static int find_by(const char *class, const char *attr, const char *want, char *dev, size_t size)
{
	_cleanup_closedir_ DIR *d = opendir(class);
	struct dirent *e;
	char path[256], val[64];
	while (d && (e = readdir(d))) {
		snprintf(path, sizeof(path), "%.64s/%.64s/%.32s", class, e->d_name, attr);
		ssize_t n = read_file_at(AT_FDCWD, path, val, sizeof(val));
		if (n <= 0)
			continue;
		val[strcspn(val, "\n")] = '\0';
		if (strcmp(val, want) == 0) {
			snprintf(dev, size, "/dev/%.48s", e->d_name);
			return 0;
		}
	}
	return -ENOENT;
}

static void mount_disks(void)
{
	char root[64], scratch[64];
	if (find_by("/sys/block", "serial", "cordon-root", root, sizeof(root)) < 0 ||
	    find_by("/sys/block", "serial", "cordon-scratch", scratch, sizeof(scratch)) < 0)
		die("find the disks");
	mkdir("/mnt/lower", 0755);
	mkdir("/mnt/scratch", 0755);
	mkdir(ROOT, 0755);
	if (mount(root, "/mnt/lower", "erofs", MS_RDONLY, NULL) < 0)
		die("mount %s (erofs)", root);
	if (mount(scratch, "/mnt/scratch", "ext4", MS_NOATIME, NULL) < 0)
		die("mount %s (ext4)", scratch);
	mkdir("/mnt/scratch/upper", 0755);
	mkdir("/mnt/scratch/work", 0755);
	if (mount("overlay", ROOT, "overlay", 0,
		  "lowerdir=/mnt/lower,upperdir=/mnt/scratch/upper,workdir=/mnt/scratch/work") < 0)
		die("mount the overlay");
	static const char *const dirs[] = {ROOT "/dev", ROOT "/proc", ROOT "/sys", ROOT "/tmp",
					   ROOT "/root", ROOT "/home", ROOT "/home/user"};
	for (size_t i = 0; i < ELEMENTSOF(dirs); i++)
		mkdir(dirs[i], 0755);
	chmod(ROOT "/tmp", 01777);
	chmod(ROOT "/root", 0700);
	if (chown(ROOT "/home/user", 1000, 1000) < 0)
		die("chown /home/user");
	if (mount("devtmpfs", ROOT "/dev", "devtmpfs", MS_NOSUID, NULL) < 0 ||
	    mount("proc", ROOT "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		die("mount /dev, /proc in the root");
}

/* The ports by name; -1 for one the host did not give (agent mode has the channel only). */
static void open_ports(int fds[4])
{
	char dev[64];
	for (size_t i = 0; i < ELEMENTSOF(ports); i++) {
		fds[i] = -1;
		if (find_by("/sys/class/virtio-ports", "name", ports[i], dev, sizeof(dev)) == 0)
			fds[i] = open(dev, O_RDWR | O_CLOEXEC);
	}
	if (fds[0] < 0)
		die("open the port %s", ports[0]);
}

/* Until the host has connected, a port reads 0: wait (the host sent the block first). */
static int read_port(int fd, void *buf, size_t len)
{
	char *p = buf;
	for (size_t got = 0; got < len;) {
		ssize_t n = read(fd, p + got, len - got);
		if (n < 0 && errno != EINTR && errno != EAGAIN)
			return -errno;
		if (n <= 0)
			usleep(10000);
		else
			got += n;
	}
	return 0;
}

/* The host's block: u32 bytes, u32 argc, u32 envc, u32 uid, u32 x2 the time (the guest has
 * no RTC: its clock starts from it), then argc + envc strings. */
static void read_args(int fd, char ***ret_argv, char ***ret_envp, uid_t *ret_uid)
{
	uint32_t hdr[6];
	if (read_port(fd, hdr, sizeof(hdr)) < 0 || hdr[0] > ARGS_MAX || hdr[1] < 1 ||
	    hdr[1] + hdr[2] > hdr[0])
		die("the command block");
	char *buf = malloc(hdr[0] + 1);
	char **v = calloc(hdr[1] + hdr[2] + 2, sizeof(char *));
	if (!buf || !v || read_port(fd, buf, hdr[0]) < 0)
		die("read the command block");
	buf[hdr[0]] = '\0';
	char *p = buf, *end = buf + hdr[0];
	for (uint32_t i = 0; i < hdr[1] + hdr[2]; i++) {
		if (p >= end)
			die("a short command block");
		v[i + (i >= hdr[1])] = p;
		p += strlen(p) + 1;
	}
	*ret_argv = v;
	*ret_envp = v + hdr[1] + 1;
	*ret_uid = hdr[3];
	struct timespec now = {.tv_sec = (time_t)((uint64_t)hdr[5] << 32 | hdr[4])};
	clock_settime(CLOCK_REALTIME, &now);
}

/* One-shot: cordon-init --run as the sandbox's user (agent mode keeps root to start
 * processes as either). */
static _Noreturn void exec_init(int self, const int fds[4], char **argv, char **envp, uid_t uid)
{
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	static const int want[4] = {INIT_STATUS_FD, 0, 1, 2};
	int tmp[4];
	for (int i = 0; i < 4; i++)
		if ((tmp[i] = fcntl(fds[i] >= 0 ? fds[i] : null, F_DUPFD_CLOEXEC, 10)) < 0)
			_exit(127);
	for (int i = 0; i < 4; i++)
		if (dup2(tmp[i], want[i]) < 0)
			_exit(127);
	if (chroot(ROOT) < 0 || chdir("/") < 0)
		_exit(127);
	if (uid && (setgroups(0, NULL) < 0 || setgid(uid) < 0 || setuid(uid) < 0))
		_exit(127);
	syscall(SYS_execveat, self, "", argv, envp, AT_EMPTY_PATH);
	_exit(127);
}

/* Reaps until cordon-init ends; meanwhile each byte the host sends on the channel is a
 * signal for cordon-init, which forwards it to the command (one-shot mode: the channel is
 * otherwise cordon-init's for its status alone; in agent mode the host sends none here). */
static void supervise(pid_t child, int chan, bool oneshot)
{
	for (;;) {
		int status;
		pid_t pid;
		while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
			if (pid == child)
				return;
		if (pid < 0 && errno == ECHILD)
			return;
		struct pollfd p = {chan, POLLIN, 0};
		unsigned char sig;
		/* A port with no host reads 0 at once: no busy loop then. */
		if (!oneshot || poll(&p, 1, 50) != 1 || read(chan, &sig, 1) != 1)
			usleep(50000);
		else if (sig > 0 && sig < 65)
			kill(child, sig);
	}
}

_Noreturn void vm_main(void)
{
	int fds[4];
	char **argv, **envp;
	uid_t uid;
	early_mounts();
	load_modules();
	mount_disks();
	open_ports(fds);
	read_args(fds[0], &argv, &envp, &uid);
	int self = open("/init", O_RDONLY | O_CLOEXEC);
	if (self < 0)
		die("open /init");
	char hello = 'H'; /* MICROVM_HELLO */
	if (write(fds[0], &hello, 1) != 1)
		die("hello");
	pid_t child = fork();
	if (child < 0)
		die("fork");
	if (child == 0)
		exec_init(self, fds, argv, envp, uid);
	supervise(child, fds[0], argv[1] && strcmp(argv[1], "--run") == 0);
	power_off();
}
