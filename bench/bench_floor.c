/* bench_floor: what the kernel's part of a jail sandbox costs on this machine, with nothing
 * of Cordon's around it (issue 18: the floor under goals 2 and 3).
 *
 *     build/bench-floor            # each step for 3 s, then 1.5 s for what follows it
 *     build/bench-floor --quick    # 0.3 s and 0.3 s: a smoke test (CI)
 *     build/bench-floor --memory [N] # what N holders (300) of the same objects keep in memory
 *
 * Each step is done in a loop for a few seconds, as root, and costs the machine's CPU per
 * iteration: the busy time of every CPU from before the loop to a settling time after it, so
 * the kernel's workers that finish a step later (the network namespace's cleanup_net, RCU
 * callbacks, a loop device's work) are counted with it, less the machine's own background
 * (measured first) over that time. The machine must be otherwise idle; each step's figure less the
 * "baseline" step's is its own.
 *
 * Steps: a process (clone and reap); the namespaces of a jail child (user, mount, PID,
 * network, IPC, UTS, cgroup); the network namespace alone; the sandbox's cgroups made and
 * removed (five v1 hierarchies, or one v2 directory); /bin/true exec'd; an ext4 on a loop
 * device mounted and unmounted (an image made once with mke2fs); a root of 48 read-only bind
 * mounts made in a new mount namespace and pivoted into; and a static program exec'd (a
 * sandbox execs twice: cordon-init, then the command). A step the host cannot do (no cgroup
 * hierarchy we may write, no mke2fs, no busybox) says so and is left out.
 *
 * The last line is one JSON object: {"bench": "floor", "run_ms": N, "steps": {name:
 * ms_per_iteration, ...}, "sum_ms": .., "rate_bound_per_s": ..}, where sum_ms adds the
 * steps a lifecycle needs once each (less the baseline counted in each) and rate_bound_per_s
 * is the number of CPUs over it: the most lifecycles a second this machine could make if
 * nothing but these steps cost anything. */
#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ELEMENTSOF(a) (sizeof(a) / sizeof((a)[0]))
#define NS_ALL (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP)

static char dir[] = "/tmp/cordon-floor.XXXXXX";
static char image[64], mnt[64];
static unsigned run_ms = 3000, settle_ms = 1500;

static double mono_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1000.0 + (double)t.tv_nsec / 1e6;
}

/* The busy time of the whole machine so far, in ms: /proc/stat's user, nice, system, irq,
 * softirq and steal of every CPU (ticks: each step runs for seconds, so that a tick is a
 * small part of what it measures). cpuidle's microsecond counters would be finer, but a CPU
 * adds its idle time to them only when it leaves idle: an idle CPU reads as busy. */
static double machine_cpu_ms(void)
{
	unsigned long long v[8] = {0};
	FILE *f = fopen("/proc/stat", "re");
	if (!f || fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
			 &v[4], &v[5], &v[6], &v[7]) != 8) {
		if (f)
			fclose(f);
		return -1;
	}
	fclose(f);
	return (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) * 1000.0 / (double)sysconf(_SC_CLK_TCK);
}

static void sleep_ms(unsigned ms)
{
	struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000};
	while (nanosleep(&t, &t) < 0 && errno == EINTR)
		;
}

static char child_stack[64 * 1024] __attribute__((aligned(16)));

static int child_exit(void *arg)
{
	(void)arg;
	_exit(0);
}

/* Execs @arg (a program that runs `true` by that name). */
static int child_exec(void *arg)
{
	char *const argv[] = {"true", NULL};
	execv(arg, argv);
	_exit(127);
}

static int spawn(int (*fn)(void *), int flags, void *arg)
{
	pid_t pid = clone(fn, child_stack + sizeof(child_stack), flags | SIGCHLD, arg);
	if (pid < 0)
		return -errno;
	int st;
	if (waitpid(pid, &st, 0) < 0)
		return -errno;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -ECHILD;
}

/* A root as a sandbox's is made (a jail's has some 50 mounts: the host's trees read-only,
 * /dev's nodes, /proc's masks, its own tmpfs, overlays, the disk): ROOT_MOUNTS read-only
 * binds on a tmpfs in a new mount namespace, pivot_root into it and the old root detached;
 * the process's exit tears the namespace down. As root, without a user namespace: the
 * namespaces step has that. */
#define ROOT_MOUNTS 48
static char rootdir[64];

/* In a child with a mount namespace of its own: the root made, with @disk (a block device,
 * or NULL) mounted at /disk in it, and pivoted into. Exits the child with a code naming the
 * step that failed. */
static void make_root(const char *disk)
{
	char p[96];
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("tmpfs", rootdir, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755") < 0)
		_exit(1);
	for (int i = 0; i < ROOT_MOUNTS; i++) {
		snprintf(p, sizeof(p), "%s/%d", rootdir, i);
		if (mkdir(p, 0755) < 0 || mount("/usr", p, NULL, MS_BIND, NULL) < 0 ||
		    mount(NULL, p, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
			_exit(2);
	}
	snprintf(p, sizeof(p), "%s/disk", rootdir);
	if (disk && (mkdir(p, 0755) < 0 || mount(disk, p, "ext4", MS_NOSUID | MS_NODEV, "noinit_itable") < 0))
		_exit(3);
	if (chdir(rootdir) < 0 || syscall(SYS_pivot_root, ".", ".") < 0 || umount2(".", MNT_DETACH) < 0)
		_exit(4);
}

static int child_root(void *arg)
{
	(void)arg;
	make_root(NULL);
	_exit(0);
}

static int step_root(int i);

static bool root_probe(void)
{
	snprintf(rootdir, sizeof(rootdir), "%s/root", dir);
	bool ok = mkdir(rootdir, 0700) == 0 && step_root(-1) == 0;
	if (!ok)
		fprintf(stderr, "bench-floor: no mount namespace with binds here: the root step left out\n");
	return ok;
}

static bool static_probe(void)
{
	bool ok = access("/bin/busybox", X_OK) == 0;
	if (!ok)
		fprintf(stderr, "bench-floor: no /bin/busybox (busybox-static): the static exec step left out\n");
	return ok;
}

static int step_process(int i) { (void)i; return spawn(child_exit, 0, NULL); }
static int step_namespaces(int i) { (void)i; return spawn(child_exit, NS_ALL, NULL); }
static int step_netns(int i) { (void)i; return spawn(child_exit, CLONE_NEWUSER | CLONE_NEWNET, NULL); }
static int step_exec(int i) { (void)i; return spawn(child_exec, 0, "/bin/true"); }
/* A second exec of a static program, as a sandbox's cordon-init (static, musl) is. */
static int step_exec_static(int i) { (void)i; return spawn(child_exec, 0, "/bin/busybox"); }
static int step_root(int i) { (void)i; return spawn(child_root, CLONE_NEWNS, NULL); }

/* The hierarchies a sandbox's cgroups are made in: v1's five (cpu and cpuacct one where they
 * are mounted together), else v2's one. */
static const char *const cg_v1[] = {"memory", "pids", "cpu", "cpuacct", "freezer"};
static const char *cg_roots[ELEMENTSOF(cg_v1) + 1];

static int cg_path(char *buf, size_t size, const char *h, int i)
{
	return snprintf(buf, size, "/sys/fs/cgroup/%s%scordon-floor-%d-%d", h, h[0] ? "/" : "", (int)getpid(), i) < (int)size ? 0 : -ENAMETOOLONG;
}

static int step_cgroups(int i)
{
	char p[256];
	for (const char *const *h = cg_roots; *h; h++)
		if (cg_path(p, sizeof(p), *h, i) < 0 || mkdir(p, 0755) < 0)
			return -errno;
	for (const char *const *h = cg_roots; *h; h++)
		if (cg_path(p, sizeof(p), *h, i) < 0 || rmdir(p) < 0)
			return -errno;
	return 0;
}

static bool cgroups_probe(void)
{
	size_t n = 0;
	dev_t seen[ELEMENTSOF(cg_v1)];
	for (size_t i = 0; i < ELEMENTSOF(cg_v1); i++) {
		char p[64];
		struct stat st;
		snprintf(p, sizeof(p), "/sys/fs/cgroup/%s", cg_v1[i]);
		bool dup = false;
		for (size_t j = 0; j < n && stat(p, &st) == 0; j++)
			dup |= seen[j] == st.st_dev;
		if (!dup && stat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
			seen[n] = st.st_dev;
			cg_roots[n++] = cg_v1[i];
		}
	}
	if (!n)
		cg_roots[n++] = ""; /* v2: one directory */
	cg_roots[n] = NULL;
	int r = step_cgroups(-1);
	if (r < 0)
		fprintf(stderr, "bench-floor: no cgroups to make (%s): step left out\n", strerror(-r));
	return r == 0;
}

static int step_loop_ext4(int i)
{
	(void)i;
	int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	int nr = ctl < 0 ? -1 : ioctl(ctl, LOOP_CTL_GET_FREE);
	if (ctl >= 0)
		close(ctl);
	if (nr < 0)
		return -errno;
	char dev[32];
	snprintf(dev, sizeof(dev), "/dev/loop%d", nr);
	int lfd = open(dev, O_RDWR | O_CLOEXEC), ifd = open(image, O_RDWR | O_CLOEXEC);
	struct loop_config c = {.fd = (unsigned)ifd, .block_size = 4096,
				.info = {.lo_flags = LO_FLAGS_DIRECT_IO | LO_FLAGS_AUTOCLEAR}};
	int r = lfd < 0 || ifd < 0 || ioctl(lfd, LOOP_CONFIGURE, &c) < 0 ? -errno : 0;
	if (ifd >= 0)
		close(ifd);
	if (r == 0 && mount(dev, mnt, "ext4", MS_NOSUID | MS_NODEV, "nobarrier,noinit_itable") < 0)
		r = -errno;
	if (r == 0 && umount2(mnt, 0) < 0)
		r = -errno;
	if (lfd >= 0) {
		(void)ioctl(lfd, LOOP_CLR_FD, 0);
		close(lfd);
	}
	return r;
}

static bool loop_probe(void)
{
	static const char *const tools[] = {"/usr/sbin/mke2fs", "/sbin/mke2fs"};
	const char *tool = NULL;
	for (size_t i = 0; i < ELEMENTSOF(tools) && !tool; i++)
		if (access(tools[i], X_OK) == 0)
			tool = tools[i];
	snprintf(image, sizeof(image), "%s/image", dir);
	snprintf(mnt, sizeof(mnt), "%s/mnt", dir);
	int fd = open(image, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	bool ok = tool && fd >= 0 && ftruncate(fd, 64 << 20) == 0 && mkdir(mnt, 0700) == 0;
	if (fd >= 0)
		close(fd);
	pid_t pid = ok ? fork() : -1;
	if (pid == 0) {
		char *const argv[] = {"mke2fs", "-q", "-F", "-t", "ext4", "-b", "4096", "-O",
				      "^has_journal,^resize_inode", image, NULL};
		execv(tool, argv);
		_exit(127);
	}
	int st = 0;
	ok = ok && pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
	if (ok && step_loop_ext4(-1) < 0)
		ok = false;
	if (!ok)
		fprintf(stderr, "bench-floor: no ext4 on a loop device here (mke2fs, /dev/loop-control): step left out\n");
	return ok;
}

struct step {
	const char *name;
	int (*run)(int i);
	bool (*probe)(void);
	bool once; /* a lifecycle needs it once: counted in sum_ms */
};

static const struct step steps[] = {
    {"baseline (a process)", step_process, NULL, false},
    {"namespaces (user, mount, pid, net, ipc, uts, cgroup)", step_namespaces, NULL, true},
    {"of which the network namespace", step_netns, NULL, false},
    {"cgroups made and removed", step_cgroups, cgroups_probe, true},
    {"exec of /bin/true", step_exec, NULL, true},
    {"ext4 on a loop device, mounted and unmounted", step_loop_ext4, loop_probe, true},
    {"a root of 48 read-only binds, pivot_root, torn down", step_root, root_probe, true},
    {"exec of a static program (cordon-init's second exec)", step_exec_static, static_probe, true},
};

static double background; /* the machine's busy ms per ms of wall time with nothing running */

/* ms of machine CPU per iteration of @s, run for run_ms and then settle_ms for what the kernel
 * finishes later, less the background over that time; a failed iteration's negative errno in
 * @err. */
static double measure(const struct step *s, int *err)
{
	double w0 = mono_ms(), t0 = machine_cpu_ms();
	int n = 0;
	do
		if ((*err = s->run(n++)) < 0)
			return 0;
	while (mono_ms() - w0 < run_ms);
	sleep_ms(settle_ms);
	double busy = machine_cpu_ms() - t0 - background * (mono_ms() - w0);
	return busy / n;
}

static void cleanup(void)
{
	(void)umount2(mnt, MNT_DETACH);
	(void)unlink(image);
	(void)rmdir(mnt);
	(void)rmdir(rootdir);
	(void)rmdir(dir);
}

/* ---- --memory: what the same objects hold while they live ----
 *
 * N holders at a time, each a process blocked on a pipe, with more of what an idle sandbox
 * holds at each layer: nothing else; six namespaces (all a jail's but the user namespace,
 * whose id map root's binds do not need); a root of ROOT_MOUNTS read-only binds pivoted into;
 * cgroups of its own (every hierarchy the cgroups step uses), the process in them; an ext4 on
 * a loop device (its own sparse copy of the image) mounted inside. Host memory per holder:
 * the difference in /proc/meminfo between before and after, caches dropped both times; each
 * layer's own is its figure less the one above it. */

enum { L_NS = 1, L_ROOT = 2, L_CG = 4, L_DISK = 8 };

static const struct layer {
	const char *name;
	unsigned parts;
} layers[] = {
    {"a process", 0},
    {"+ six namespaces", L_NS},
    {"+ a root of 48 binds", L_NS | L_ROOT},
    {"+ cgroups", L_NS | L_ROOT | L_CG},
    {"+ ext4 on a loop device", L_NS | L_ROOT | L_CG | L_DISK},
};

struct holder {
	pid_t pid;
	int go[2]; /* the child blocks reading go[0]; closing go[1] ends it */
	int loop;  /* the loop device's fd, or -1 */
	int nr;
};

static int meminfo_kib(const char *key, long *ret)
{
	char line[256];
	size_t n = strlen(key);
	FILE *f = fopen("/proc/meminfo", "re");
	if (!f)
		return -errno;
	int r = -ENOENT;
	while (r < 0 && fgets(line, sizeof(line), f))
		if (strncmp(line, key, n) == 0 && line[n] == ':' && sscanf(line + n + 1, "%ld", ret) == 1)
			r = 0;
	fclose(f);
	return r;
}

static const char *const mem_keys[] = {"MemAvailable", "Slab", "KernelStack", "PageTables"};

static void mem_read(long *v)
{
	sync();
	int fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		(void)!write(fd, "3", 1);
		close(fd);
	}
	sleep_ms(500); /* RCU-freed objects */
	for (size_t i = 0; i < ELEMENTSOF(mem_keys); i++)
		if (meminfo_kib(mem_keys[i], &v[i]) < 0)
			v[i] = 0;
}

struct hold_arg {
	int go;
	unsigned parts;
	const char *dev; /* its loop device, mounted inside */
};

static int child_hold(void *arg)
{
	const struct hold_arg *a = arg;
	char c;
	/* Only its own end: the write ends of every holder (its own among them) would keep its
	 * read from ever seeing EOF. */
	if ((a->go > 3 && syscall(SYS_close_range, 3, a->go - 1, 0) < 0) ||
	    syscall(SYS_close_range, a->go + 1, ~0U, 0) < 0)
		_exit(5);
	if (a->parts & L_ROOT)
		make_root(a->dev);
	while (read(a->go, &c, 1) < 0 && errno == EINTR)
		;
	_exit(0);
}

/* A loop device on a sparse copy of the image (unlinked: the device holds it); its fd. */
static int loop_attach(int i, int *ret_nr)
{
	char path[96];
	snprintf(path, sizeof(path), "%s/hold%d.img", dir, i);
	int src = open(image, O_RDONLY | O_CLOEXEC);
	int dst = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	struct stat st;
	int r = src < 0 || dst < 0 || fstat(src, &st) < 0 || ftruncate(dst, st.st_size) < 0 ? -errno : 0;
	for (off_t off = 0; r == 0;) { /* the data extents only: holes stay holes */
		off_t data = lseek(src, off, SEEK_DATA);
		if (data < 0)
			break;
		off_t hole = lseek(src, data, SEEK_HOLE);
		loff_t in = data, out = data;
		while (r == 0 && in < hole) {
			ssize_t n = copy_file_range(src, &in, dst, &out, (size_t)(hole - in), 0);
			r = n > 0 ? 0 : -EIO;
		}
		off = hole;
	}
	unlink(path);
	int ctl = r < 0 ? -1 : open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	int nr = ctl < 0 ? -1 : ioctl(ctl, LOOP_CTL_GET_FREE);
	if (ctl >= 0)
		close(ctl);
	char dev[32];
	snprintf(dev, sizeof(dev), "/dev/loop%d", nr);
	int lfd = nr < 0 ? -1 : open(dev, O_RDWR | O_CLOEXEC);
	struct loop_config c = {.fd = (unsigned)dst, .block_size = 4096,
				.info = {.lo_flags = LO_FLAGS_DIRECT_IO | LO_FLAGS_AUTOCLEAR}};
	if (lfd >= 0 && ioctl(lfd, LOOP_CONFIGURE, &c) < 0) {
		close(lfd);
		lfd = -1;
	}
	if (src >= 0)
		close(src);
	if (dst >= 0)
		close(dst);
	*ret_nr = nr;
	return lfd < 0 ? -EIO : lfd;
}

static int cg_join(int i, pid_t pid)
{
	for (const char *const *h = cg_roots; *h; h++) {
		char p[300], s[16];
		if (cg_path(p, sizeof(p) - 16, *h, i) < 0)
			return -ENAMETOOLONG;
		strcat(p, "/cgroup.procs");
		snprintf(s, sizeof(s), "%d", (int)pid);
		int fd = open(p, O_WRONLY | O_CLOEXEC);
		int r = fd < 0 || write(fd, s, strlen(s)) < 0 ? -errno : 0;
		if (fd >= 0)
			close(fd);
		if (r < 0)
			return r;
	}
	return 0;
}

static int hold(struct holder *h, int i, unsigned parts)
{
	static char stack[64 * 1024] __attribute__((aligned(16)));
	char dev[32];
	h->loop = -1;
	if ((parts & L_DISK) && (h->loop = loop_attach(i, &h->nr)) < 0)
		return h->loop;
	snprintf(dev, sizeof(dev), "/dev/loop%d", h->nr);
	if (pipe2(h->go, O_CLOEXEC) < 0)
		return -errno;
	struct hold_arg a = {h->go[0], parts, (parts & L_DISK) ? dev : NULL};
	for (const char *const *hh = cg_roots; (parts & L_CG) && *hh; hh++) {
		char p[256];
		if (cg_path(p, sizeof(p), *hh, i) < 0 || mkdir(p, 0755) < 0)
			return -errno;
	}
	int flags = (parts & L_NS) ? NS_ALL & ~CLONE_NEWUSER : 0;
	/* Without CLONE_VM: the child runs on its own copy of @stack. */
	h->pid = clone(child_hold, stack + sizeof(stack), flags | SIGCHLD, &a);
	if (h->pid < 0)
		return -errno;
	close(h->go[0]);
	return (parts & L_CG) ? cg_join(i, h->pid) : 0;
}

static void unhold(struct holder *h, int i)
{
	if (h->pid > 0) {
		close(h->go[1]);
		waitpid(h->pid, NULL, 0);
	}
	for (const char *const *hh = cg_roots; *hh; hh++) {
		char p[256];
		if (cg_path(p, sizeof(p), *hh, i) == 0)
			(void)rmdir(p);
	}
	if (h->loop >= 0)
		close(h->loop); /* autoclear: the last close of the device */
}

/* @n holders of @parts made, counted and let go: KiB per holder of each of mem_keys in @kib
 * (MemAvailable as what it took). */
static int hold_count(int n, unsigned parts, double *kib)
{
	struct holder *hs = calloc((size_t)n, sizeof(*hs));
	long before[ELEMENTSOF(mem_keys)], after[ELEMENTSOF(mem_keys)];
	if (!hs)
		return -ENOMEM;
	mem_read(before);
	int made = 0, r = 0;
	while (made < n && (r = hold(&hs[made], made, parts)) == 0)
		made++;
	sleep_ms(200); /* the last children reach their read */
	for (int i = 0; i < made && r == 0; i++)
		if (waitpid(hs[i].pid, NULL, WNOHANG) == hs[i].pid) {
			hs[i].pid = 0;
			r = -ECHILD; /* a holder that could not make its part */
		}
	mem_read(after);
	for (int i = made; i-- > 0;)
		unhold(&hs[i], i);
	free(hs);
	for (size_t k = 0; k < ELEMENTSOF(mem_keys); k++)
		kib[k] = (double)(k == 0 ? before[k] - after[k] : after[k] - before[k]) / (made ? made : 1);
	return r;
}

/* The kernel's own of a holder: MemAvailable moves with the page cache's estimate. */
static double kernel_kib(const double *kib)
{
	return kib[1] + kib[2] + kib[3];
}

static int memory_mode(int n)
{
	bool disk = loop_probe();
	if (!cgroups_probe() || !root_probe()) {
		fprintf(stderr, "bench-floor: --memory needs cgroups and mount namespaces\n");
		return 2;
	}
	double kib[ELEMENTSOF(layers)][ELEMENTSOF(mem_keys)];
	int failed = 0;
	printf("%d holders at a time; KiB per holder (kernel: Slab, KernelStack and PageTables)\n%-26s", n,
	       "holding");
	for (size_t k = 0; k < ELEMENTSOF(mem_keys); k++)
		printf(" %12s", mem_keys[k]);
	printf(" %12s\n", "kernel");
	for (size_t l = 0; l < ELEMENTSOF(layers); l++) {
		if ((layers[l].parts & L_DISK) && !disk)
			continue;
		int r = hold_count(n, layers[l].parts, kib[l]);
		if (r < 0) {
			fprintf(stderr, "bench-floor: %s: %s\n", layers[l].name, strerror(-r));
			failed++;
		}
		printf("%-26s", layers[l].name);
		for (size_t k = 0; k < ELEMENTSOF(mem_keys); k++)
			printf(" %12.1f", kib[l][k]);
		printf(" %12.1f\n", kernel_kib(kib[l]));
	}
	size_t last = disk ? ELEMENTSOF(layers) - 1 : ELEMENTSOF(layers) - 2;
	printf("{\"bench\": \"floor-memory\", \"holders\": %d, \"kernel_kib\": {", n);
	for (size_t l = 0; l <= last; l++)
		printf("%s\"%s\": %.1f", l ? ", " : "", layers[l].name, kernel_kib(kib[l]));
	printf("}, \"errors\": %d}\n", failed);
	return failed ? 1 : 0;
}

int main(int argc, char **argv)
{
	int memory = 0;
	if (argc > 1 && strcmp(argv[1], "--quick") == 0) {
		run_ms = 300;
		settle_ms = 300;
	} else if (argc > 1 && strcmp(argv[1], "--memory") == 0) {
		memory = argc > 2 ? atoi(argv[2]) : 300;
		if (memory < 1 || memory > 2000) {
			fprintf(stderr, "bench-floor: --memory N: 1 to 2000 holders\n");
			return 2;
		}
	} else if (argc > 1) {
		fprintf(stderr, "usage: bench-floor [--quick | --memory [N]]\n");
		return 2;
	}
	if (geteuid() != 0) {
		fprintf(stderr, "bench-floor: skipped, needs root (namespaces, cgroups, loop devices)\n");
		return 2;
	}
	if (!mkdtemp(dir)) {
		perror("bench-floor: mkdtemp");
		return 2;
	}
	atexit(cleanup);
	if (memory > 0)
		return memory_mode(memory);
	double w0 = mono_ms(), b0 = machine_cpu_ms();
	sleep_ms(settle_ms);
	background = (machine_cpu_ms() - b0) / (mono_ms() - w0);
	double ms[ELEMENTSOF(steps)], base = 0, sum = 0;
	bool done[ELEMENTSOF(steps)] = {false};
	int failed = 0;
	printf("%-55s %10s\n", "step", "ms CPU");
	for (size_t i = 0; i < ELEMENTSOF(steps); i++) {
		const struct step *s = &steps[i];
		if (s->probe && !s->probe())
			continue;
		int r = 0;
		ms[i] = measure(s, &r);
		if (r < 0) {
			fprintf(stderr, "bench-floor: %s: %s\n", s->name, strerror(-r));
			failed++;
			continue;
		}
		done[i] = true;
		if (i == 0)
			base = ms[i];
		if (s->once)
			sum += ms[i] - base;
		printf("%-55s %10.3f\n", s->name, ms[i]);
	}
	sum += base; /* the sandbox's process itself, once */
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	printf("%-55s %10.3f\n", "sum (each once, the baseline once)", sum);
	printf("at most %.0f lifecycles a second on %ld CPUs from these steps alone\n", cpus / sum * 1000, cpus);
	printf("{\"bench\": \"floor\", \"run_ms\": %u, \"steps\": {", run_ms);
	for (size_t i = 0, n = 0; i < ELEMENTSOF(steps); i++)
		if (done[i])
			printf("%s\"%s\": %.4f", n++ ? ", " : "", steps[i].name, ms[i]);
	printf("}, \"sum_ms\": %.4f, \"cpus\": %ld, \"rate_bound_per_s\": %.1f, \"errors\": %d}\n", sum, cpus,
	       cpus / sum * 1000, failed);
	return failed ? 1 : 0;
}
