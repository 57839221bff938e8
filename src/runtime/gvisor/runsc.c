/* runsc under deadlines, and the platform probe (gvisor.h).
 *
 * Every call is a child in its own process group, waited for at most its deadline and then
 * SIGKILLed with its group: runsc never hangs us (on some hosts `--platform=kvm` never
 * returns). The probe tries kvm only where /dev/kvm opens, and falls back to ptrace; its
 * answer is kept in the base directory per runsc binary and boot, so that a `cordon run`
 * does not pay for it every time.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "basic/child.h"
#include "basic/cleanup.h"
#include "basic/clock.h"
#include "basic/fileio.h"
#include "runtime/gvisor/gvisor.h"

static char runsc_path[PATH_MAX];
static const char *platform; /* NULL until probed */
static int probed = 1;	     /* 1: not yet */
static char probe_why[200];

const char *gvisor_base(void)
{
	const char *d = getenv("CORDON_GVISOR_DIR");
	return d && d[0] == '/' ? d : "/run/cordon/gvisor";
}

const char *gvisor_runsc(void)
{
	return runsc_path[0] ? runsc_path : NULL;
}

const char *gvisor_platform(void)
{
	return platform ? platform : "ptrace";
}

/* $CORDON_RUNSC, else the package's place. */
int gvisor_find_runsc(void)
{
	static const char *const places[] = {"/usr/bin/runsc", "/usr/sbin/runsc",
					     "/usr/local/bin/runsc"};
	const char *env = getenv("CORDON_RUNSC");
	if (env && env[0] == '/') {
		snprintf(runsc_path, sizeof(runsc_path), "%s", env);
		return access(env, X_OK) == 0 ? 0 : -ENOENT;
	}
	for (size_t i = 0; i < ELEMENTSOF(places); i++)
		if (access(places[i], X_OK) == 0) {
			snprintf(runsc_path, sizeof(runsc_path), "%s", places[i]);
			return 0;
		}
	return -ENOENT;
}

int gvisor_argv(const char **argv, size_t max, const char *network, bool host_uds,
		const char *const *args)
{
	static char root[PATH_MAX], plat[32];
	snprintf(root, sizeof(root), "--root=%s/runsc", gvisor_base());
	snprintf(plat, sizeof(plat), "--platform=%s", gvisor_platform());
	const char *head[] = {runsc_path, root, plat, network && strcmp(network, "sandbox") == 0 ?
			      "--network=sandbox" : "--network=none", "--ignore-cgroups"};
	size_t n = 0;
	for (size_t i = 0; i < ELEMENTSOF(head) && n < max; i++)
		argv[n++] = head[i];
	if (host_uds && n < max)
		argv[n++] = "--host-uds=open";
	for (; args && *args && n < max; args++)
		argv[n++] = *args;
	if (n >= max)
		return -E2BIG;
	argv[n] = NULL;
	return (int)n;
}

/* @pid's exit status (128 + N for a signal), or -ETIMEDOUT (past @ms its group is killed),
 * or -errno of waitpid. */
static int runsc_wait(pid_t pid, int ms)
{
	int st, r = child_wait_group_deadline(pid, ms, &st);
	if (r < 0)
		return r;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The child: its own group (the deadline kills all of it), nothing of ours but @errfd on 2. */
static _noreturn_ void exec_runsc(const char *const *argv, int errfd)
{
	int null = open("/dev/null", O_RDWR);
	setpgid(0, 0);
	if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(errfd, 2) < 0)
		_exit(127);
	syscall(SYS_close_range, 3, ~0U, 0);
	execv(argv[0], (char *const *)argv);
	_exit(127);
}

/* The first line runsc wrote to stderr, for @err. */
static void first_line(int fd, char *buf, size_t size)
{
	ssize_t n = pread(fd, buf, size - 1, 0);
	buf[n > 0 ? n : 0] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
}

static int call_network(const char *network, const char *const *args, int ms,
			struct cordon_err *err)
{
	const char *argv[24];
	if (gvisor_argv(argv, ELEMENTSOF(argv), network, false, args) < 0)
		return cordon_err_setf(err, -E2BIG, "gvisor: too many arguments");
	_cleanup_close_ int errfd = memfd_create("runsc-stderr", MFD_CLOEXEC);
	if (errfd < 0)
		return cordon_err_set(err, -errno, "gvisor: memfd");
	pid_t pid = fork();
	if (pid < 0)
		return cordon_err_set(err, -errno, "gvisor: fork");
	if (pid == 0)
		exec_runsc(argv, errfd);
	int r = runsc_wait(pid, ms);
	if (r == 0)
		return 0;
	char line[160];
	first_line(errfd, line, sizeof(line));
	if (r == -ETIMEDOUT)
		return cordon_err_setf(err, -ETIMEDOUT, "gvisor: runsc %s: no answer in %d ms",
				       args[0], ms);
	if (r < 0)
		return cordon_err_set(err, r, "gvisor: waiting for runsc");
	return cordon_err_setf(err, -EIO, "gvisor: runsc %s: exit %d: %s", args[0], r,
			       line[0] ? line : "(no message)");
}

int gvisor_call(const char *const *args, int ms, struct cordon_err *err)
{
	return call_network("none", args, ms, err);
}

/* The key of a remembered probe: the binary and the boot it was made for. */
static void probe_key(char *buf, size_t size)
{
	struct stat st = {};
	char boot[40] = "";
	stat(runsc_path, &st);
	read_file_at(AT_FDCWD, "/proc/sys/kernel/random/boot_id", boot, sizeof(boot));
	boot[strcspn(boot, "\n")] = '\0';
	snprintf(buf, size, "%.200s %lld %lld %s", runsc_path, (long long)st.st_size,
		 (long long)st.st_mtime, boot);
}

static const char *remembered(const char *key)
{
	char path[PATH_MAX], buf[512];
	snprintf(path, sizeof(path), "%s/probe", gvisor_base());
	if (read_file_at(AT_FDCWD, path, buf, sizeof(buf)) <= 0)
		return NULL;
	char *nl = strchr(buf, '\n');
	if (!nl)
		return NULL;
	*nl = '\0';
	nl[strcspn(nl + 1, "\n") + 1] = '\0';
	if (strcmp(nl + 1, key) != 0)
		return NULL;
	return strcmp(buf, "kvm") == 0 ? "kvm" : strcmp(buf, "ptrace") == 0 ? "ptrace" : NULL;
}

static void remember(const char *plat, const char *key)
{
	char path[256], tmp[300], buf[600];
	mkdir(gvisor_base(), 0700);
	snprintf(path, sizeof(path), "%.200s/probe", gvisor_base());
	snprintf(tmp, sizeof(tmp), "%s.%d", path, (int)getpid());
	snprintf(buf, sizeof(buf), "%s\n%s\n", plat, key);
	if (gvisor_create_file(tmp, buf, 0600) == 0 && rename(tmp, path) == 0)
		return;
	unlink(tmp);
}

static bool kvm_usable(void)
{
	int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return false;
	close(fd);
	return true;
}

/* `runsc do /bin/true` on @plat, within the deadline. */
static int try_platform(const char *plat, struct cordon_err *err)
{
	static const char *const args[] = {"do", "/bin/true", NULL};
	platform = plat;
	int r = call_network("none", args, GVISOR_PROBE_MS, err);
	platform = NULL;
	return r;
}

static int probe(void)
{
	char key[512];
	struct cordon_err e = {};
	if (geteuid() != 0)
		return snprintf(probe_why, sizeof(probe_why), "needs root (runsc makes the "
				"sandbox's namespaces and mounts)"), -EPERM;
	if (gvisor_find_runsc() < 0)
		return snprintf(probe_why, sizeof(probe_why), "runsc not found (apt-get install "
				"runsc, or set CORDON_RUNSC)"), -ENOENT;
	const char *forced = getenv("CORDON_GVISOR_PLATFORM");
	if (forced && (strcmp(forced, "ptrace") == 0 || strcmp(forced, "kvm") == 0)) {
		platform = strcmp(forced, "kvm") == 0 ? "kvm" : "ptrace";
		return 0;
	}
	probe_key(key, sizeof(key));
	if ((platform = remembered(key)))
		return 0;
	if (kvm_usable() && try_platform("kvm", &e) == 0)
		platform = "kvm";
	else if (try_platform("ptrace", &e) == 0)
		platform = "ptrace";
	else
		return snprintf(probe_why, sizeof(probe_why), "no platform works: %.150s", e.msg), -EIO;
	remember(platform, key);
	return 0;
}

int gvisor_probe(struct cordon_err *err)
{
	if (probed == 1)
		probed = probe();
	return probed < 0 ? cordon_err_setf(err, probed, "%s", probe_why) : 0;
}
