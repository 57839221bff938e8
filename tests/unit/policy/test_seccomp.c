/* Unit tests of the compiled seccomp policy, on the running kernel.
 *
 * Each probe runs twice in a forked child: once without the filter (the control) and once
 * after no_new_privs + seccomp_apply(cordon_seccomp_sandbox). The child's exit code is the errno of the call (0
 * on success). Probes pass bad fds or pointers where they can, so that a call that wrongly
 * gets through fails harmlessly with EBADF/EFAULT/EINVAL and is reported as a failure
 * (bubblewrap's try-syscall trick). When the control already gives the expected errno (no
 * privilege, feature compiled out) the test is skipped: it must not pass vacuously.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* cmocka.h needs setjmp.h, stdarg.h and stddef.h first. */
#include <cmocka.h>

#include "basic/cleanup.h"
#include "lib/seccomp.h"
#include "policy/seccomp_filter.h"

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif
#ifndef AF_ALG
#define AF_ALG 38
#endif
#define X32_SYSCALL_BIT 0x40000000UL

enum mode {
	MODE_NONE,	 /* control: no filter */
	MODE_FILTER,	 /* no_new_privs + seccomp_apply(cordon_seccomp_sandbox) */
	MODE_PROBED,	 /* a probe filter first, then ours: see probe_install() */
	MODE_PROBE_ONLY, /* control of MODE_PROBED */
};

#define CHILD_SETUP_FAILED 255

/* Every probe returns the errno of its call, 0 on success. */
static int ret_errno(long r) { return r < 0 ? errno : 0; }

/* An older filter that answers EXDEV to foreign-ABI calls (i386 arch, x32 numbers) and
 * allows the rest. Stacked filters all run and, between two errnos, the newer filter wins:
 * so under MODE_PROBED, ENOSYS proves that our filter refused the call and EXDEV that it let
 * it through, whatever the kernel would have done with the call (x32 is often disabled). */
static int probe_install(void)
{
	struct sock_filter insns[] = {
	    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
	    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 0, 3),
	    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
	    BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, X32_SYSCALL_BIT, 1, 0),
	    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EXDEV),
	};
	struct sock_fprog prog = {.len = ELEMENTSOF(insns), .filter = insns};

	return syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0 ? -errno : 0;
}

static int child_setup(enum mode mode)
{
	int r;

	if (mode == MODE_NONE)
		return 0;
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -errno;
	if (mode == MODE_PROBED || mode == MODE_PROBE_ONLY) {
		r = probe_install();
		if (r < 0)
			return r;
	}
	return mode == MODE_PROBE_ONLY ? 0 : seccomp_apply(cordon_seccomp_sandbox.filter, cordon_seccomp_sandbox.len);
}

/* Runs @fn in a child under @mode. Returns its errno (0 on success), or -signal if it was
 * killed. */
static int run_child(int (*fn)(void), enum mode mode)
{
	int status;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0)
		_exit(child_setup(mode) < 0 ? CHILD_SETUP_FAILED : fn() & 0xff);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (WIFSIGNALED(status))
		return -WTERMSIG(status);
	assert_int_not_equal(WEXITSTATUS(status), CHILD_SETUP_FAILED);
	return WEXITSTATUS(status);
}

/* ---- Probes. ---- */

static int try_getpid(void) { return ret_errno(syscall(SYS_getpid)); }
static int try_open_null(void)
{
	int fd = openat(AT_FDCWD, "/dev/null", O_RDWR | O_CLOEXEC);
	return fd < 0 ? errno : (close(fd), 0);
}
static int try_socket(int domain, int type, int proto)
{
	int fd = socket(domain, type, proto);
	return fd < 0 ? errno : (close(fd), 0);
}
static int try_inet_stream(void) { return try_socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); }
static int try_inet6_dgram(void) { return try_socket(AF_INET6, SOCK_DGRAM, 0); }
static int try_unix_dgram(void) { return try_socket(AF_UNIX, SOCK_DGRAM, 0); }
static int try_netlink_route(void) { return try_socket(AF_NETLINK, SOCK_RAW, 0); }
static int try_packet(void) { return try_socket(AF_PACKET, SOCK_RAW, 0); }
static int try_inet_raw(void) { return try_socket(AF_INET, SOCK_RAW, IPPROTO_ICMP); }
static int try_vsock(void) { return try_socket(AF_VSOCK, SOCK_STREAM, 0); }
static int try_alg(void) { return try_socket(AF_ALG, SOCK_SEQPACKET, 0); }
static int try_netlink_audit(void) { return try_socket(AF_NETLINK, SOCK_RAW, 9); }
static int try_socketpair_inet(void)
{
	int sv[2];
	return ret_errno(socketpair(AF_INET, SOCK_STREAM, 0, sv));
}
static int try_fork(void)
{
	int status;
	pid_t pid = fork();

	if (pid < 0)
		return errno;
	if (pid == 0)
		_exit(0);
	return waitpid(pid, &status, 0) == pid && WIFEXITED(status) ? WEXITSTATUS(status) : EIO;
}
static void *thread_main(void *arg) { return arg; }
static int try_thread(void)
{
	static int token;
	pthread_t t;
	void *out = NULL;
	int r = pthread_create(&t, NULL, thread_main, &token);

	if (r != 0)
		return r;
	r = pthread_join(t, &out);
	return r ? r : out == &token ? 0 : EIO;
}
/* CLONE_THREAD without CLONE_SIGHAND makes the kernel fail with EINVAL: nothing is created. */
static int try_clone(unsigned long flags)
{
	return ret_errno(syscall(SYS_clone, flags | CLONE_THREAD | SIGCHLD, NULL, NULL, NULL, 0));
}
static int try_clone_newns(void) { return try_clone(CLONE_NEWNS); }
static int try_clone_newuser(void) { return try_clone(CLONE_NEWUSER); }
static int try_clone_newnet(void) { return try_clone(CLONE_NEWNET); }
static int try_clone_newpid_hi(void) { return try_clone(CLONE_NEWPID | (1UL << 32)); }
static int try_clone3(void) { return ret_errno(syscall(SYS_clone3, NULL, 0)); }
static int try_unshare(void) { return ret_errno(unshare(CLONE_NEWUSER)); }
static int try_setns(void) { return ret_errno(setns(-1, 0)); }
static int try_mount(void) { return ret_errno(syscall(SYS_mount, NULL, NULL, NULL, 0, NULL)); }
static int try_chroot(void) { return ret_errno(chroot("/nonexistent-cordon-test")); }
static int try_fsopen(void) { return ret_errno(syscall(SYS_fsopen, NULL, 0)); }
static int try_bpf(void) { return ret_errno(syscall(SYS_bpf, -1, NULL, 0)); }
static int try_perf(void) { return ret_errno(syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0)); }
static int try_io_uring(void) { return ret_errno(syscall(SYS_io_uring_setup, 1, NULL)); }
static int try_userfaultfd(void) { return ret_errno(syscall(SYS_userfaultfd, ~0U)); }
static int try_keyctl(void) { return ret_errno(syscall(SYS_keyctl, -1, 0, 0, 0, 0)); }
static int try_ptrace(void) { return ret_errno(syscall(SYS_ptrace, 12 /* GETREGS */, 0, 0, 0)); }
static int try_pidfd_getfd(void) { return ret_errno(syscall(SYS_pidfd_getfd, -1, -1, 0)); }
static int try_open_by_handle(void)
{
	return ret_errno(syscall(SYS_open_by_handle_at, -1, NULL, 0));
}
static int try_init_module(void) { return ret_errno(syscall(SYS_init_module, NULL, 0, "")); }
static int try_ioctl(unsigned long cmd) { return ret_errno(syscall(SYS_ioctl, -1, cmd, NULL)); }
static int try_tiocsti(void) { return try_ioctl(TIOCSTI); }
static int try_tiocsti_hi(void) { return try_ioctl(TIOCSTI | (1UL << 32)); }
static int try_tioclinux(void) { return try_ioctl(TIOCLINUX); }
static int try_fionread(void) { return try_ioctl(FIONREAD); }
static int try_personality_query(void) { return ret_errno(personality(0xffffffff)); }
static int try_personality_rie(void) { return ret_errno(personality(READ_IMPLIES_EXEC)); }
/* Not in the policy: acts on another process's memory. */
static int try_unlisted(void) { return ret_errno(syscall(SYS_process_madvise, -1, 0, 0, 0, 0)); }
static int try_x32_getpid(void) { return ret_errno(syscall(SYS_getpid | X32_SYSCALL_BIT)); }
/* i386 getpid (eax = 20) through the 32-bit entry. Since Linux 4.x that entry clobbers
 * r8-r11 on return. */
static int try_int80_getpid(void)
{
	long r = 20;

	__asm__ volatile("int $0x80" : "+a"(r) : : "r8", "r9", "r10", "r11", "memory");
	return r < 0 && r > -4096 ? (int)-r : 0;
}

/* ---- Tests. ---- */

struct probe {
	const char *name;
	int (*fn)(void);
	int expect;	/* errno under the filter; 0: success */
	enum mode mode; /* MODE_FILTER or MODE_PROBED */
};

/* Allowed calls must behave as without the filter; where the control fails (no IPv6, a
 * kernel without a feature), there is nothing to compare. */
static enum mode control_mode(const struct probe *p)
{
	return p->mode == MODE_PROBED ? MODE_PROBE_ONLY : MODE_NONE;
}

static void test_allowed(void **state)
{
	const struct probe *p = *state;
	int control = run_child(p->fn, control_mode(p));

	if (control != p->expect) {
		print_message("skip %s: control gives %d, not %d\n", p->name, control, p->expect);
		skip();
	}
	assert_int_equal(run_child(p->fn, p->mode), p->expect);
}

static void test_denied(void **state)
{
	const struct probe *p = *state;
	int control = run_child(p->fn, control_mode(p));

	if (control == p->expect || control < 0) {
		print_message("skip %s: the control already gives %d\n", p->name, control);
		skip();
	}
	assert_int_equal(run_child(p->fn, p->mode), p->expect);
}

static const struct probe allowed[] = {
    {"getpid", try_getpid, 0, MODE_FILTER},
    {"openat /dev/null", try_open_null, 0, MODE_FILTER},
    {"socket AF_INET stream", try_inet_stream, 0, MODE_FILTER},
    {"socket AF_INET6 dgram", try_inet6_dgram, 0, MODE_FILTER},
    {"socket AF_UNIX", try_unix_dgram, 0, MODE_FILTER},
    {"socket AF_NETLINK route", try_netlink_route, 0, MODE_FILTER},
    {"fork", try_fork, 0, MODE_FILTER},
    {"pthread_create", try_thread, 0, MODE_FILTER},
    {"ioctl FIONREAD", try_fionread, EBADF, MODE_FILTER},
    {"personality query", try_personality_query, 0, MODE_FILTER},
    /* Allowed: CAP_SYS_CHROOT gates it (only a build step's root holds it). The path does not
     * exist, so a call that got through fails with ENOENT. */
    {"chroot (capability-gated)", try_chroot, ENOENT, MODE_FILTER},
};

static const struct probe denied[] = {
    {"unshare CLONE_NEWUSER", try_unshare, EPERM, MODE_FILTER},
    {"setns", try_setns, EPERM, MODE_FILTER},
    {"clone CLONE_NEWNS", try_clone_newns, EPERM, MODE_FILTER},
    {"clone CLONE_NEWUSER", try_clone_newuser, EPERM, MODE_FILTER},
    {"clone CLONE_NEWNET", try_clone_newnet, EPERM, MODE_FILTER},
    {"clone CLONE_NEWPID, upper bit", try_clone_newpid_hi, EPERM, MODE_FILTER},
    {"clone3", try_clone3, ENOSYS, MODE_FILTER},
    {"mount", try_mount, EPERM, MODE_FILTER},
    {"fsopen", try_fsopen, EPERM, MODE_FILTER},
    {"bpf", try_bpf, EPERM, MODE_FILTER},
    {"perf_event_open", try_perf, EPERM, MODE_FILTER},
    {"io_uring_setup", try_io_uring, EPERM, MODE_FILTER},
    {"userfaultfd", try_userfaultfd, EPERM, MODE_FILTER},
    {"keyctl", try_keyctl, EPERM, MODE_FILTER},
    {"ptrace", try_ptrace, EPERM, MODE_FILTER},
    {"pidfd_getfd", try_pidfd_getfd, EPERM, MODE_FILTER},
    {"open_by_handle_at", try_open_by_handle, EPERM, MODE_FILTER},
    {"init_module", try_init_module, EPERM, MODE_FILTER},
    {"socket AF_PACKET", try_packet, EPERM, MODE_FILTER},
    {"socket AF_INET SOCK_RAW", try_inet_raw, EPERM, MODE_FILTER},
    {"socket AF_VSOCK", try_vsock, EPERM, MODE_FILTER},
    {"socket AF_ALG", try_alg, EPERM, MODE_FILTER},
    {"socket AF_NETLINK audit", try_netlink_audit, EAFNOSUPPORT, MODE_FILTER},
    {"socketpair AF_INET", try_socketpair_inet, EPERM, MODE_FILTER},
    {"ioctl TIOCSTI", try_tiocsti, EPERM, MODE_FILTER},
    {"ioctl TIOCSTI, upper bit", try_tiocsti_hi, EPERM, MODE_FILTER},
    {"ioctl TIOCLINUX", try_tioclinux, EPERM, MODE_FILTER},
    {"personality READ_IMPLIES_EXEC", try_personality_rie, EPERM, MODE_FILTER},
    {"unlisted syscall", try_unlisted, ENOSYS, MODE_FILTER},
    {"x32 getpid", try_x32_getpid, ENOSYS, MODE_PROBED},
    {"i386 int 0x80 getpid", try_int80_getpid, ENOSYS, MODE_PROBED},
};

static void test_filter_size(void **state)
{
	assert_true(cordon_seccomp_sandbox.len > 0);
	assert_true(cordon_seccomp_sandbox.len <= BPF_MAXINSNS);
}

int main(void)
{
	struct CMUnitTest tests[1 + ELEMENTSOF(allowed) + ELEMENTSOF(denied)];
	size_t n = 0;

	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_filter_size);
	for (size_t i = 0; i < ELEMENTSOF(allowed); i++)
		tests[n++] = (struct CMUnitTest){.name = allowed[i].name,
						 .test_func = test_allowed,
						 .initial_state = (void *)&allowed[i]};
	for (size_t i = 0; i < ELEMENTSOF(denied); i++)
		tests[n++] = (struct CMUnitTest){.name = denied[i].name,
						 .test_func = test_denied,
						 .initial_state = (void *)&denied[i]};
	return _cmocka_run_group_tests("seccomp", tests, n, NULL, NULL);
}
