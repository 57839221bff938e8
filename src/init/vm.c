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
#include <net/if.h>
#include <net/if_arp.h>
#include <net/route.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <linux/filter.h>
#include <linux/random.h>
#include <linux/seccomp.h>
#include <stdbool.h>
#include <time.h>
#include <unistd.h>

#include "basic/cleanup.h"
#include "basic/fileio.h"
#include "init/agent.h"
#include "init/vm.h"
#include "lib/initproto.h"

#define ROOT "/mnt/root"
#define ARGS_MAX (256u << 10) /* MICROVM_ARGS_MAX */

static const char *const ports[] = {"cordon.channel", "cordon.stdin", "cordon.stdout",
				    "cordon.stderr", "cordon.control"};
enum { PORT_CONTROL = 4, PORTS_N = 5 };

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
	    mount("proc", ROOT "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0 ||
	    mount("sysfs", ROOT "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, NULL) < 0)
		die("mount /dev, /proc, /sys in the root");
}

/* The port @name, waited for up to @ms: the driver adds ports one by one after the device
 * (the host announces each), so a later one may not be there yet; -1 if it never came. */
static int open_port(const char *name, int ms)
{
	char dev[64];
	for (int waited = 0; find_by("/sys/class/virtio-ports", "name", name, dev, sizeof(dev)) < 0;
	     waited += 5) {
		if (waited >= ms)
			return -1;
		usleep(5000);
	}
	return open(dev, O_RDWR | O_CLOEXEC);
}

/* The channel and the control port, which every VM has; the one-shot stdio ports once the
 * command says it is one (agent mode has none). */
static void open_ports(int fds[PORTS_N], bool oneshot)
{
	for (size_t i = 0; i < ELEMENTSOF(ports); i++) {
		bool needed = i == 0 || i == PORT_CONTROL || oneshot;
		if (fds[i] < 0 && needed && (fds[i] = open_port(ports[i], 5000)) < 0)
			die("open the port %s", ports[i]);
	}
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

/* What the host asked cordon-init to be started as (struct vm_args_head). */
struct vm_args {
	char **argv, **envp;
	uid_t uid;
	uint64_t caps;
	struct sock_fprog filter;
};

/* The host's block (struct vm_args_head): the clock is set from it at once (the guest has no
 * RTC), the rest is kept for exec_init(). */
static void read_args(int fd, struct vm_args *a)
{
	struct vm_args_head h;
	if (read_port(fd, &h, sizeof(h)) < 0 || h.bytes > ARGS_MAX || h.argc < 1 ||
	    h.argc + h.envc > h.bytes || h.filter_len == 0 || h.filter_len > BPF_MAXINSNS)
		die("the command block");
	char *buf = malloc(h.bytes + 1);
	char **v = calloc(h.argc + h.envc + 2, sizeof(char *));
	struct sock_filter *insns = calloc(h.filter_len, sizeof(*insns));
	if (!buf || !v || !insns || read_port(fd, buf, h.bytes) < 0 ||
	    read_port(fd, insns, h.filter_len * sizeof(*insns)) < 0)
		die("read the command block");
	buf[h.bytes] = '\0';
	char *p = buf, *end = buf + h.bytes;
	for (uint32_t i = 0; i < h.argc + h.envc; i++) {
		if (p >= end)
			die("a short command block");
		v[i + (i >= h.argc)] = p;
		p += strlen(p) + 1;
	}
	*a = (struct vm_args){.argv = v, .envp = v + h.argc + 1, .uid = h.uid,
			      .caps = (uint64_t)h.caps_hi << 32 | h.caps_lo,
			      .filter = {.len = (unsigned short)h.filter_len, .filter = insns}};
	struct timespec now = {.tv_sec = (time_t)((uint64_t)h.time_hi << 32 | h.time_lo)};
	clock_settime(CLOCK_REALTIME, &now);
}

/* Fresh entropy from the host: credited, and the CRNG reseeded at once (a restored guest
 * starts from its snapshot's RNG state, the same in every child). */
static void reseed(const uint8_t seed[64])
{
	union {
		struct rand_pool_info info;
		char buf[sizeof(struct rand_pool_info) + 64];
	} u;
	u.info.entropy_count = 64 * 8;
	u.info.buf_size = 64;
	memcpy(u.info.buf, seed, 64);
	_cleanup_close_ int fd = open("/dev/urandom", O_RDWR | O_CLOEXEC);
	if (fd >= 0 && ioctl(fd, RNDADDENTROPY, &u.info) == 0)
		(void)ioctl(fd, RNDRESEEDCRNG);
}

static void set_in(struct sockaddr *sa, uint32_t addr)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)sa;
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = addr;
}

static int if_flags(int s, const char *name, short set, short clear)
{
	struct ifreq ifr = {};
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
	if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
		return -errno;
	ifr.ifr_flags = (short)((ifr.ifr_flags | set) & ~clear);
	return ioctl(s, SIOCSIFFLAGS, &ifr) < 0 ? -errno : 0;
}

/* The resolver is the host end of the link (its DNS filter), as in the jail. */
static int resolver_write(uint32_t gw)
{
	const uint8_t *b = (const uint8_t *)&gw;
	_cleanup_close_ int fd = -1;
	mkdir(ROOT "/etc", 0755);
	(void)unlink(ROOT "/etc/resolv.conf"); /* the template's, a link perhaps */
	fd = open(ROOT "/etc/resolv.conf", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
	return fd < 0 || dprintf(fd, "nameserver %u.%u.%u.%u\n", b[0], b[1], b[2], b[3]) < 0 ? -errno : 0;
}

/* eth0 as the host says: its MAC (a restored guest has its snapshot's), address, route. */
static int net_apply(const struct vm_control *c)
{
	_cleanup_close_ int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct ifreq ifr = {};
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "eth0");
	ifr.ifr_hwaddr.sa_family = ARPHRD_ETHER;
	memcpy(ifr.ifr_hwaddr.sa_data, c->mac, 6);
	if (s < 0)
		return -errno;
	if (ioctl(s, SIOCSIFHWADDR, &ifr) < 0 &&
	    (if_flags(s, "eth0", 0, IFF_UP) < 0 || ioctl(s, SIOCSIFHWADDR, &ifr) < 0))
		return -errno;
	set_in(&ifr.ifr_addr, c->ip);
	if (ioctl(s, SIOCSIFADDR, &ifr) < 0)
		return -errno;
	set_in(&ifr.ifr_netmask, htonl(~0u << (32 - c->prefix)));
	if (ioctl(s, SIOCSIFNETMASK, &ifr) < 0 || if_flags(s, "eth0", IFF_UP, 0) < 0)
		return -errno;
	struct rtentry rt = {.rt_flags = RTF_UP | RTF_GATEWAY, .rt_dev = (char *)"eth0"};
	set_in(&rt.rt_dst, 0);
	set_in(&rt.rt_genmask, 0);
	set_in(&rt.rt_gateway, c->gw);
	if (ioctl(s, SIOCADDRT, &rt) < 0 && errno != EEXIST)
		return -errno;
	return resolver_write(c->gw);
}

/* No network: eth0 without an address, down (a restored guest may have had one). */
static int net_none(int s)
{
	struct ifreq ifr = {};
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "eth0");
	set_in(&ifr.ifr_addr, 0);
	if (ioctl(s, SIOCSIFADDR, &ifr) < 0 && errno != EADDRNOTAVAIL && errno != ENODEV)
		return -errno;
	int r = if_flags(s, "eth0", 0, IFF_UP);
	return r == -ENODEV ? 0 : r;
}

/* Who the guest is now (initproto.h): the clock first, then entropy, name and network. */
static int control_apply(const struct vm_control *c)
{
	struct timespec now = {.tv_sec = (time_t)(c->time_ns / 1000000000u),
			       .tv_nsec = (long)(c->time_ns % 1000000000u)};
	if (c->magic != VM_CONTROL_MAGIC)
		return -EINVAL;
	clock_settime(CLOCK_REALTIME, &now);
	reseed(c->seed);
	_cleanup_close_ int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (sethostname(c->hostname, strnlen(c->hostname, sizeof(c->hostname))) < 0 || s < 0 ||
	    if_flags(s, "lo", IFF_UP, 0) < 0)
		return -errno;
	return c->net ? net_apply(c) : net_none(s);
}

/* A message on the control port (after a restore): applied, then answered. 0 when the
 * port had nothing (no host connected: it reads 0). */
static int control_serve(int fd)
{
	struct vm_control c;
	ssize_t n = read(fd, &c, sizeof(c));
	if (n <= 0)
		return 0;
	if ((size_t)n < sizeof(c) && read_port(fd, (char *)&c + n, sizeof(c) - n) < 0)
		return -EIO;
	char ack = control_apply(&c) == 0 ? VM_CONTROL_ACK : 'E';
	return write(fd, &ack, 1) == 1 ? 1 : -EIO;
}

/* What the jail's child does last (runtime/jail/child.c, harden()): the credentials as
 * cordon-init gives its own children (@a->caps, the user, no_new_privs), then the sandbox's
 * seccomp filter. -errno. */
static int harden(const struct vm_args *a)
{
	int r = init_creds_drop(a->uid, a->uid, a->caps);
	if (r < 0)
		return r;
	return syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &a->filter) < 0 ? -errno : 0;
}

/* cordon-init, as the jail's child would start it: --run as the sandbox's user, --agent as
 * root (to start processes as either). */
static _Noreturn void exec_init(int self, const int fds[4], const struct vm_args *a)
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
	int r = harden(a);
	if (r < 0) {
		dprintf(2, "cordon-init: the guest's hardening failed: %s\n", strerror(-r));
		_exit(127);
	}
	syscall(SYS_execveat, self, "", a->argv, a->envp, AT_EMPTY_PATH);
	_exit(127);
}

/* Reaps until cordon-init ends; meanwhile each byte the host sends on the channel is a
 * signal for cordon-init, which forwards it to the command (one-shot mode: the channel is
 * otherwise cordon-init's for its status alone; in agent mode the host sends none here),
 * and each message on the control port is served (a restore's new identity). */
static void supervise(pid_t child, int chan, int ctl, bool oneshot)
{
	for (;;) {
		int status;
		pid_t pid;
		while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
			if (pid == child)
				return;
		if (pid < 0 && errno == ECHILD)
			return;
		struct pollfd p[2] = {{oneshot ? chan : -1, POLLIN, 0}, {ctl, POLLIN, 0}};
		unsigned char sig;
		bool busy = false;
		if (poll(p, 2, 50) > 0) {
			if (p[0].revents & POLLIN && read(chan, &sig, 1) == 1 && sig > 0 && sig < 65)
				busy = kill(child, sig) == 0;
			if (p[1].revents & POLLIN)
				busy |= control_serve(ctl) > 0;
		}
		/* A port with no host reads 0 at once: no busy loop then. */
		if (!busy && (p[0].revents | p[1].revents))
			usleep(50000);
	}
}

_Noreturn void vm_main(void)
{
	int fds[PORTS_N] = {-1, -1, -1, -1, -1};
	struct vm_control c;
	struct vm_args a;
	early_mounts();
	load_modules();
	mount_disks();
	open_ports(fds, false);
	read_args(fds[0], &a);
	bool oneshot = a.argv[1] && strcmp(a.argv[1], "--run") == 0;
	open_ports(fds, oneshot);
	if (read_port(fds[PORT_CONTROL], &c, sizeof(c)) < 0 || control_apply(&c) < 0)
		die("the host's control message");
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
		exec_init(self, fds, &a);
	supervise(child, fds[0], fds[PORT_CONTROL], oneshot);
	power_off();
}
