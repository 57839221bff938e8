/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cordon-probe: the attacks a hostile program would try from inside a sandbox.
 *
 * Run it as the command of a sandbox (`cordon run -- cordon-probe`). Each probe is one
 * attack with one expected denial; it runs in a forked child under an alarm, so a probe
 * that crashes, hangs or is killed by seccomp cannot take the others down. One line per
 * probe on stdout:
 *
 *   ok <name>: <what happened>       the attack was denied the way we expect
 *   ESCAPE <name>: <what happened>   it got through, or failed for the wrong reason
 *   skip <name>: <why>               not run (native mode, or a canary was not given)
 *
 * then `probe: N ok, M escape`. Exit status 0 when no probe escaped, 1 otherwise.
 *
 * bubblewrap's try-syscall trick: a dangerous call is made with a bad fd or a bad
 * pointer, so that if the filter lets it through the kernel fails it harmlessly with
 * EBADF/EFAULT/EINVAL. Those errors count as an ESCAPE: the expected denial is the
 * filter's EPERM/ENOSYS (or the kernel's own permission error), never a late argument
 * check.
 *
 * `--native` runs the same probes on the host to show that each one can see an escape.
 * Nothing a probe does may harm the host when it gets through: files are only opened
 * and closed (never written), new objects are removed at once, the ptrace target is a
 * stand-in child, and probes that would send packets off the machine are skipped.
 *
 * Canaries come from the environment (all optional; a probe without its canary skips):
 *   HOST_PID=N            a host pid that must be invisible
 *   HOST_HOSTNAME=name    the host's hostname
 *   HOST_NS="mnt:[id] net:[id] ..."  readlink of the host's /proc/self/ns/<type>
 *   CANARY_TCP_PORT=N     a host listener on 127.0.0.1:N
 *   CANARY_ABSTRACT=name  a host abstract unix listener "@name"
 * and CORDON_CANARY must not be set at all.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* meson passes it for the whole project; this is for a bare gcc */
#endif
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/if_alg.h>
#include <linux/if_ether.h>
#include <linux/keyctl.h>
#include <linux/netlink.h>
#include <linux/perf_event.h>
#include <linux/reboot.h>
#include <linux/vm_sockets.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fanotify.h>
#include <sys/ioctl.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif
#ifndef AF_XDP
#define AF_XDP 44
#endif
#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_RAISE 2
#endif

#define PROBE_TIMEOUT_S 5      /* a probe still running after this has hung: ESCAPE */
#define CONNECT_TIMEOUT_MS 2000 /* for connects that must fail at once */
#define MAX_LEAKED_FDS 16
#define MAX_FD_SCAN 65536

/* An address no process has mapped: a call that reaches the kernel's copy fails EFAULT. */
#define BADPTR ((void *)1)
#define X32_SYSCALL_BIT 0x40000000L

enum verdict { V_OK, V_ESCAPE, V_SKIP };

struct result {
        enum verdict v;
        char msg[400];
};

struct probe {
        const char *name;
        void (*fn)(struct result *r);
        unsigned flags;
        int ok_signal; /* a death by this signal is a denial too (besides SIGSYS) */
};

#define P_NATIVE_SKIP 1u /* sends packets off the machine: never run on the host */

static bool native;
static int leaked_fds[MAX_LEAKED_FDS];
static char leaked_what[MAX_LEAKED_FDS][128];
static int n_leaked;

/* ---- helpers ---------------------------------------------------------------------- */

static void setv(struct result *r, enum verdict v, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static void setv(struct result *r, enum verdict v, const char *fmt, ...)
{
        va_list ap;

        r->v = v;
        va_start(ap, fmt);
        vsnprintf(r->msg, sizeof(r->msg), fmt, ap);
        va_end(ap);
}

#define OK(r, ...) setv(r, V_OK, __VA_ARGS__)
#define ESCAPE(r, ...) setv(r, V_ESCAPE, __VA_ARGS__)
#define SKIP(r, ...) setv(r, V_SKIP, __VA_ARGS__)

static const char *ename(int e)
{
        const char *n = strerrorname_np(e);

        return n ? n : "E?";
}

static bool in_list(int e, const int *list)
{
        for (; *list; list++)
                if (*list == e)
                        return true;
        return false;
}

/*
 * Judge a call that must be denied: ret < 0 with an errno in @denials is the expected
 * denial; success, or any other error (EFAULT, EBADF, EINVAL: the call reached the
 * kernel's argument checks), is an escape.
 */
static void judge(struct result *r, const char *what, long ret, int err, const int *denials)
{
        if (ret >= 0)
                ESCAPE(r, "%s succeeded (returned %ld)", what, ret);
        else if (in_list(err, denials))
                OK(r, "%s denied with %s", what, ename(err));
        else
                ESCAPE(r, "%s failed with %s, not a denial: the call got past the filter", what,
                       ename(err));
}

#define ERRS(...) ((const int[]){ __VA_ARGS__, 0 })

/* Make a call that must be denied with one of the listed errno values. */
#define EXPECT(r, what, call, ...)                                    \
        do {                                                          \
                errno = 0;                                            \
                long ret_ = (long)(call);                             \
                judge(r, what, ret_, errno, ERRS(__VA_ARGS__));       \
        } while (0)

#define EXPECT_SYS(r, what, call) EXPECT(r, what, call, EPERM, ENOSYS)

static const char *env_or_null(const char *name)
{
        const char *v = getenv(name);

        return v && *v ? v : NULL;
}

/* Read up to @size-1 bytes of @path, NUL-terminated. Returns length or -errno. */
static ssize_t read_file(const char *path, char *buf, size_t size)
{
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        ssize_t n, total = 0;

        if (fd < 0)
                return -errno;
        while ((size_t)total < size - 1 && (n = read(fd, buf + total, size - 1 - total)) > 0)
                total += n;
        close(fd);
        buf[total] = 0;
        return total;
}

/* Value of "Name:" in /proc/self/status, copied into @val. Returns 0 or -errno. */
static int status_field(const char *name, char *val, size_t size)
{
        char buf[8192], key[64];
        ssize_t n = read_file("/proc/self/status", buf, sizeof(buf));
        char *p;

        if (n < 0)
                return (int)n;
        snprintf(key, sizeof(key), "\n%s:", name);
        p = strstr(buf, key);
        if (!p)
                return -ENOENT;
        p += strlen(key);
        p += strspn(p, " \t");
        snprintf(val, size, "%.*s", (int)strcspn(p, "\n"), p);
        return 0;
}

/* Open @path with @flags; success (the fd is closed at once, nothing is written) escapes. */
static void expect_open_denied(struct result *r, const char *path, int flags, const int *denials)
{
        static const char *const mode[] = { "O_RDONLY", "O_WRONLY", "O_RDWR", "?" };
        char what[256];
        int fd;

        snprintf(what, sizeof(what), "open(%s, %s)", path, mode[flags & O_ACCMODE]);
        errno = 0;
        fd = open(path, flags | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd >= 0)
                close(fd);
        judge(r, what, fd, errno, denials);
}

/* List @dir's entries (without . and ..) into @out, skipping names in @allowed. */
static int list_dir_except(const char *dir, const char *const *allowed, char *out, size_t size,
                           int *ret_count)
{
        DIR *d = opendir(dir);
        struct dirent *de;
        size_t len = 0;
        int count = 0;

        if (!d)
                return -errno;
        out[0] = 0;
        while ((de = readdir(d))) {
                bool ok = !strcmp(de->d_name, ".") || !strcmp(de->d_name, "..");

                for (const char *const *a = allowed; !ok && a && *a; a++)
                        ok = !strcmp(de->d_name, *a);
                if (ok)
                        continue;
                count++;
                if (len + strlen(de->d_name) + 2 < size)
                        len += snprintf(out + len, size - len, "%s%s", len ? " " : "", de->d_name);
        }
        closedir(d);
        *ret_count = count;
        return 0;
}

/* A host directory must be absent, unreadable, or hold nothing outside @allowed. */
static void expect_dir_hidden(struct result *r, const char *dir, const char *const *allowed)
{
        char names[300];
        int count = 0, e = list_dir_except(dir, allowed, names, sizeof(names), &count);

        if (e == -ENOENT || e == -EACCES || e == -EPERM)
                OK(r, "%s: %s", dir, ename(-e));
        else if (e < 0)
                ESCAPE(r, "%s: opendir failed with unexpected %s", dir, ename(-e));
        else if (count == 0)
                OK(r, "%s exists but shows no host entries", dir);
        else
                ESCAPE(r, "%s shows %d host entr%s: %s", dir, count, count == 1 ? "y" : "ies",
                       names);
}

/* ---- mount API ---------------------------------------------------------------------- */

static void p_mount(struct result *r)
{
        EXPECT_SYS(r, "mount(tmpfs, BADPTR)", syscall(SYS_mount, "none", BADPTR, "tmpfs", 0, NULL));
}

static void p_umount2(struct result *r)
{
        EXPECT_SYS(r, "umount2(BADPTR)", syscall(SYS_umount2, BADPTR, 0));
}

static void p_pivot_root(struct result *r)
{
        EXPECT_SYS(r, "pivot_root(BADPTR, BADPTR)", syscall(SYS_pivot_root, BADPTR, BADPTR));
}

static void p_move_mount(struct result *r)
{
        EXPECT_SYS(r, "move_mount(-1, BADPTR, -1, BADPTR)",
                   syscall(SYS_move_mount, -1, BADPTR, -1, BADPTR, 0));
}

static void p_fsopen(struct result *r)
{
        EXPECT_SYS(r, "fsopen(BADPTR)", syscall(SYS_fsopen, BADPTR, 0));
}

static void p_fspick(struct result *r)
{
        EXPECT_SYS(r, "fspick(-1, BADPTR)", syscall(SYS_fspick, -1, BADPTR, 0));
}

static void p_fsconfig(struct result *r)
{
        EXPECT_SYS(r, "fsconfig(-1)", syscall(SYS_fsconfig, -1, 6 /* CMD_CREATE */, NULL, NULL, 0));
}

static void p_fsmount(struct result *r)
{
        EXPECT_SYS(r, "fsmount(-1)", syscall(SYS_fsmount, -1, 0, 0));
}

static void p_open_tree(struct result *r)
{
        EXPECT_SYS(r, "open_tree(-1, BADPTR, OPEN_TREE_CLONE)",
                   syscall(SYS_open_tree, -1, BADPTR, OPEN_TREE_CLONE | O_CLOEXEC));
}

static void p_mount_setattr(struct result *r)
{
        EXPECT_SYS(r, "mount_setattr(-1, BADPTR)",
                   syscall(SYS_mount_setattr, -1, BADPTR, 0, BADPTR, 32));
}

/* ---- namespaces ------------------------------------------------------------------- */

/* unshare() in a forked probe child only affects that child, so success does no harm. */
static void unshare_probe(struct result *r, int flag, const char *fname)
{
        char what[64];

        snprintf(what, sizeof(what), "unshare(%s)", fname);
        EXPECT_SYS(r, what, syscall(SYS_unshare, flag));
}

static void p_unshare_user(struct result *r) { unshare_probe(r, CLONE_NEWUSER, "CLONE_NEWUSER"); }
static void p_unshare_mnt(struct result *r) { unshare_probe(r, CLONE_NEWNS, "CLONE_NEWNS"); }
static void p_unshare_pid(struct result *r) { unshare_probe(r, CLONE_NEWPID, "CLONE_NEWPID"); }
static void p_unshare_net(struct result *r) { unshare_probe(r, CLONE_NEWNET, "CLONE_NEWNET"); }
static void p_unshare_ipc(struct result *r) { unshare_probe(r, CLONE_NEWIPC, "CLONE_NEWIPC"); }
static void p_unshare_uts(struct result *r) { unshare_probe(r, CLONE_NEWUTS, "CLONE_NEWUTS"); }
static void p_unshare_cgroup(struct result *r) { unshare_probe(r, CLONE_NEWCGROUP, "CLONE_NEWCGROUP"); }
static void p_unshare_time(struct result *r) { unshare_probe(r, CLONE_NEWTIME, "CLONE_NEWTIME"); }

static void clone_probe(struct result *r, unsigned long flag, const char *fname)
{
        char what[64];
        long pid;

        snprintf(what, sizeof(what), "clone(%s)", fname);
        errno = 0;
        pid = syscall(SYS_clone, flag | SIGCHLD, NULL, NULL, NULL, 0);
        if (pid == 0)
                _exit(0);
        if (pid > 0)
                waitpid((pid_t)pid, NULL, 0);
        judge(r, what, pid, errno, ERRS(EPERM, ENOSYS));
}

static void p_clone_newuser(struct result *r) { clone_probe(r, CLONE_NEWUSER, "CLONE_NEWUSER"); }
static void p_clone_newns(struct result *r) { clone_probe(r, CLONE_NEWNS, "CLONE_NEWNS"); }

/* glibc falls back to clone() only on ENOSYS, and clone3's flags live behind a pointer
 * that seccomp cannot read: the only safe answer is ENOSYS. */
static void p_clone3(struct result *r)
{
        EXPECT(r, "clone3(BADPTR)", syscall(SYS_clone3, BADPTR, 88), ENOSYS);
}

static void setns_probe(struct result *r, const char *type)
{
        char path[64], what[96];
        int fd;

        snprintf(path, sizeof(path), "/proc/1/ns/%s", type);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
                if (errno == ENOENT || errno == EACCES || errno == EPERM)
                        OK(r, "open(%s) denied with %s", path, ename(errno));
                else
                        ESCAPE(r, "open(%s) failed with unexpected %s", path, ename(errno));
                return;
        }
        snprintf(what, sizeof(what), "setns(%s)", path);
        EXPECT_SYS(r, what, syscall(SYS_setns, fd, 0));
}

static void p_setns_mnt(struct result *r) { setns_probe(r, "mnt"); }
static void p_setns_net(struct result *r) { setns_probe(r, "net"); }
static void p_setns_pid(struct result *r) { setns_probe(r, "pid"); }
static void p_setns_user(struct result *r) { setns_probe(r, "user"); }

static void p_setns_badfd(struct result *r)
{
        EXPECT_SYS(r, "setns(-1)", syscall(SYS_setns, -1, 0));
}

/* ---- kernel attack surface ------------------------------------------------------------ */

static void p_io_uring_setup(struct result *r)
{
        EXPECT_SYS(r, "io_uring_setup(1, BADPTR)", syscall(SYS_io_uring_setup, 1, BADPTR));
}

static void p_io_uring_enter(struct result *r)
{
        EXPECT_SYS(r, "io_uring_enter(-1)", syscall(SYS_io_uring_enter, -1, 0, 0, 0, NULL, 0));
}

static void p_io_uring_register(struct result *r)
{
        EXPECT_SYS(r, "io_uring_register(-1)", syscall(SYS_io_uring_register, -1, 0, NULL, 0));
}

static void p_bpf(struct result *r)
{
        EXPECT_SYS(r, "bpf(BPF_MAP_CREATE, BADPTR)", syscall(SYS_bpf, 0 /* MAP_CREATE */, BADPTR, 72));
}

static void p_perf_event_open(struct result *r)
{
        EXPECT_SYS(r, "perf_event_open(BADPTR)", syscall(SYS_perf_event_open, BADPTR, 0, -1, -1, 0));
}

/* UFFD_USER_MODE_ONLY passes the kernel's privilege check, the stray bit then fails
 * EINVAL: only a filter denies this with EPERM. */
static void p_userfaultfd(struct result *r)
{
        EXPECT_SYS(r, "userfaultfd(USER_MODE_ONLY|bad flag)",
                   syscall(SYS_userfaultfd, 1 | 0x40000000));
}

static void p_keyctl(struct result *r)
{
        EXPECT_SYS(r, "keyctl(bogus op)", syscall(SYS_keyctl, 0x7fffffff, 0, 0, 0, 0));
}

static void p_add_key(struct result *r)
{
        EXPECT_SYS(r, "add_key(BADPTR)",
                   syscall(SYS_add_key, BADPTR, BADPTR, NULL, 0, KEY_SPEC_PROCESS_KEYRING));
}

static void p_request_key(struct result *r)
{
        EXPECT_SYS(r, "request_key(BADPTR)", syscall(SYS_request_key, BADPTR, BADPTR, NULL, 0));
}

static void p_init_module(struct result *r)
{
        EXPECT_SYS(r, "init_module(NULL, 0)", syscall(SYS_init_module, NULL, 0, ""));
}

static void p_finit_module(struct result *r)
{
        EXPECT_SYS(r, "finit_module(-1)", syscall(SYS_finit_module, -1, "", 0));
}

static void p_delete_module(struct result *r)
{
        EXPECT_SYS(r, "delete_module(BADPTR)", syscall(SYS_delete_module, BADPTR, 0));
}

/* 0x8000 is no kexec flag: a call that gets through fails EINVAL before any work. */
static void p_kexec_load(struct result *r)
{
        EXPECT_SYS(r, "kexec_load(0 segments, bad flags)", syscall(SYS_kexec_load, 0, 0, NULL, 0x8000));
}

static void p_kexec_file_load(struct result *r)
{
        EXPECT_SYS(r, "kexec_file_load(-1, -1, bad flags)",
                   syscall(SYS_kexec_file_load, -1, -1, 0, NULL, 0x8000));
}

static void p_open_by_handle_at(struct result *r)
{
        EXPECT_SYS(r, "open_by_handle_at(-1, BADPTR)",
                   syscall(SYS_open_by_handle_at, -1, BADPTR, O_RDONLY));
}

static void p_name_to_handle_at(struct result *r)
{
        EXPECT_SYS(r, "name_to_handle_at(BADPTR)",
                   syscall(SYS_name_to_handle_at, AT_FDCWD, BADPTR, BADPTR, BADPTR, 0));
}

static void p_syslog(struct result *r)
{
        EXPECT_SYS(r, "syslog(SIZE_BUFFER)", syscall(SYS_syslog, 10, NULL, 0));
}

static void p_iopl(struct result *r)
{
        EXPECT_SYS(r, "iopl(3)", syscall(SYS_iopl, 3));
}

static void p_ioperm(struct result *r)
{
        EXPECT_SYS(r, "ioperm(0x80, 1, on)", syscall(SYS_ioperm, 0x80, 1, 1));
}

static void p_fanotify_init(struct result *r)
{
        long fd;

        errno = 0;
        fd = syscall(SYS_fanotify_init, FAN_CLASS_CONTENT | FAN_CLOEXEC, O_RDONLY);
        if (fd >= 0)
                close((int)fd);
        judge(r, "fanotify_init(FAN_CLASS_CONTENT)", fd, errno, ERRS(EPERM, ENOSYS));
}

/* ---- sockets ---------------------------------------------------------------------- */

static void socket_probe(struct result *r, int family, int type, int proto, const char *what)
{
        int fd;

        errno = 0;
        fd = socket(family, type | SOCK_CLOEXEC, proto);
        if (fd >= 0)
                close(fd);
        /* EAFNOSUPPORT is what many filters answer for a denied family. */
        judge(r, what, fd, errno, ERRS(EPERM, EACCES, ENOSYS, EAFNOSUPPORT));
}

#define SOCKET_PROBE(fn, fam, type, proto)                                        \
        static void fn(struct result *r)                                          \
        {                                                                         \
                socket_probe(r, fam, type, proto, "socket(" #fam ", " #type ", " #proto ")"); \
        }

SOCKET_PROBE(p_sock_raw_inet, AF_INET, SOCK_RAW, IPPROTO_ICMP)
SOCKET_PROBE(p_sock_raw_inet6, AF_INET6, SOCK_RAW, IPPROTO_ICMPV6)
SOCKET_PROBE(p_sock_inet_packet, AF_INET, SOCK_PACKET, htons(ETH_P_ALL))
SOCKET_PROBE(p_sock_inet_sctp, AF_INET, SOCK_SEQPACKET, IPPROTO_SCTP)
SOCKET_PROBE(p_sock_packet_raw, AF_PACKET, SOCK_RAW, htons(ETH_P_ALL))
SOCKET_PROBE(p_sock_packet_dgram, AF_PACKET, SOCK_DGRAM, htons(ETH_P_ALL))
SOCKET_PROBE(p_sock_vsock, AF_VSOCK, SOCK_STREAM, 0)
SOCKET_PROBE(p_sock_alg, AF_ALG, SOCK_SEQPACKET, 0)
SOCKET_PROBE(p_sock_key, AF_KEY, SOCK_RAW, 2 /* PF_KEY_V2 */)
SOCKET_PROBE(p_sock_tipc, AF_TIPC, SOCK_RDM, 0)
SOCKET_PROBE(p_sock_rds, AF_RDS, SOCK_SEQPACKET, 0)
SOCKET_PROBE(p_sock_can, AF_CAN, SOCK_RAW, 1 /* CAN_RAW */)
SOCKET_PROBE(p_sock_bluetooth, AF_BLUETOOTH, SOCK_RAW, 0)
SOCKET_PROBE(p_sock_xdp, AF_XDP, SOCK_RAW, 0)
SOCKET_PROBE(p_nl_audit, AF_NETLINK, SOCK_RAW, NETLINK_AUDIT)
SOCKET_PROBE(p_nl_uevent, AF_NETLINK, SOCK_RAW, NETLINK_KOBJECT_UEVENT)
SOCKET_PROBE(p_nl_netfilter, AF_NETLINK, SOCK_RAW, NETLINK_NETFILTER)
SOCKET_PROBE(p_nl_xfrm, AF_NETLINK, SOCK_RAW, NETLINK_XFRM)
SOCKET_PROBE(p_nl_generic, AF_NETLINK, SOCK_RAW, NETLINK_GENERIC)
SOCKET_PROBE(p_nl_sock_diag, AF_NETLINK, SOCK_RAW, NETLINK_SOCK_DIAG)

/* ---- foreign ABIs -------------------------------------------------------------------- */

/* The i386 entry through int $0x80 works from a 64-bit process; a filter that does not
 * check the audit arch sees i386 numbers as x86-64 ones (20 = getpid vs writev). */
static long int80(long nr, long a1)
{
        long ret;

        __asm__ volatile("int $0x80"
                         : "=a"(ret)
                         : "a"(nr), "b"(a1), "c"(0L), "d"(0L)
                         : "memory", "r8", "r9", "r10", "r11");
        return ret;
}

static void p_abi_i386_getpid(struct result *r)
{
        long ret = int80(20 /* i386 getpid */, 0);

        if (ret == -ENOSYS || ret == -EPERM)
                OK(r, "i386 getpid returned %s", ename((int)-ret));
        else if (ret == getpid())
                ESCAPE(r, "i386 getpid returned our pid %ld: the i386 ABI is open", ret);
        else
                ESCAPE(r, "i386 getpid returned %ld, not a denial", ret);
}

static void p_abi_i386_unshare(struct result *r)
{
        long ret = int80(310 /* i386 unshare */, CLONE_NEWUSER);

        if (ret == -ENOSYS || ret == -EPERM)
                OK(r, "i386 unshare(CLONE_NEWUSER) returned %s", ename((int)-ret));
        else
                ESCAPE(r, "i386 unshare(CLONE_NEWUSER) returned %ld", ret);
}

static void p_abi_x32_getpid(struct result *r)
{
        long ret;

        errno = 0;
        ret = syscall(X32_SYSCALL_BIT | SYS_getpid);
        if (ret == getpid())
                ESCAPE(r, "x32 getpid returned our pid %ld: the x32 ABI is open", ret);
        else
                judge(r, "x32 getpid", ret, errno, ERRS(ENOSYS, EPERM));
}

static void p_abi_x32_unshare(struct result *r)
{
        EXPECT_SYS(r, "x32 unshare(CLONE_NEWUSER)",
                   syscall(X32_SYSCALL_BIT | SYS_unshare, CLONE_NEWUSER));
}

/* ---- terminal --------------------------------------------------------------------- */

/* TIOCSTI pushes input into the terminal of whoever reads it next (CVE-2017-5226). A NULL
 * char pointer makes a call that gets through fail EFAULT (or ENOTTY/EIO). */
static void p_tiocsti(struct result *r)
{
        EXPECT(r, "ioctl(0, TIOCSTI, NULL)", syscall(SYS_ioctl, 0, TIOCSTI, NULL), EPERM);
}

/* The kernel truncates the command to 32 bits; a filter comparing 64 bits would miss it. */
static void p_tiocsti_highbits(struct result *r)
{
        EXPECT(r, "ioctl(0, TIOCSTI|1<<32, NULL)",
               syscall(SYS_ioctl, 0, (unsigned long)TIOCSTI | (1UL << 32), NULL), EPERM);
}

static void p_tiocsti_fd2(struct result *r)
{
        EXPECT(r, "ioctl(2, TIOCSTI, NULL)", syscall(SYS_ioctl, 2, TIOCSTI, NULL), EPERM);
}

/* Without a controlling terminal there is no terminal to inject into at all. */
static void p_no_ctty(struct result *r)
{
        expect_open_denied(r, "/dev/tty", O_RDWR, ERRS(ENXIO, ENOENT, EACCES, EPERM, EIO));
}

/* ---- other processes ---------------------------------------------------------------- */

static pid_t spawn_standin(void)
{
        pid_t pid = fork();

        if (pid == 0) {
                for (;;)
                        pause();
        }
        return pid;
}

/* In the sandbox the target is pid 1; natively a stand-in child, since stopping the
 * host's init is not harmless. */
static void p_ptrace_attach(struct result *r)
{
        pid_t target = native ? spawn_standin() : 1;
        long ret;
        int err;

        errno = 0;
        ret = ptrace(PTRACE_ATTACH, target, NULL, NULL);
        err = errno;
        if (ret == 0) {
                waitpid(target, NULL, __WALL);
                ptrace(PTRACE_DETACH, target, NULL, NULL);
        }
        if (native) {
                kill(target, SIGKILL);
                waitpid(target, NULL, 0);
        }
        judge(r, native ? "ptrace(ATTACH, stand-in child)" : "ptrace(ATTACH, 1)", ret, err,
              ERRS(EPERM, ENOSYS));
}

static void p_ptrace_traceme(struct result *r)
{
        EXPECT_SYS(r, "ptrace(TRACEME)", ptrace(PTRACE_TRACEME, 0, NULL, NULL));
}

/* Remote address NULL: a call that gets through fails EFAULT without touching pid 1. */
static void p_process_vm_readv(struct result *r)
{
        char buf[8];
        struct iovec local = { buf, sizeof(buf) }, remote = { NULL, sizeof(buf) };

        EXPECT(r, "process_vm_readv(1, NULL)", process_vm_readv(1, &local, 1, &remote, 1, 0),
               EPERM, ENOSYS, ESRCH);
}

static void p_process_vm_writev(struct result *r)
{
        char buf[8] = { 0 };
        struct iovec local = { buf, sizeof(buf) }, remote = { NULL, sizeof(buf) };

        EXPECT(r, "process_vm_writev(1, NULL)", process_vm_writev(1, &local, 1, &remote, 1, 0),
               EPERM, ENOSYS, ESRCH);
}

static void p_pidfd_getfd(struct result *r)
{
        long pidfd, fd;

        errno = 0;
        pidfd = syscall(SYS_pidfd_open, 1, 0);
        if (pidfd < 0) {
                judge(r, "pidfd_open(1)", pidfd, errno, ERRS(EPERM, ENOSYS, ESRCH));
                return;
        }
        errno = 0;
        fd = syscall(SYS_pidfd_getfd, pidfd, 0, 0);
        if (fd >= 0)
                close((int)fd);
        judge(r, "pidfd_getfd(pid 1, fd 0)", fd, errno, ERRS(EPERM, ENOSYS, EBADF));
}

static void p_host_pid_kill(struct result *r)
{
        const char *s = env_or_null("HOST_PID");
        long pid = s ? strtol(s, NULL, 10) : 0;

        if (pid <= 1) {
                SKIP(r, "HOST_PID not given");
                return;
        }
        errno = 0;
        if (kill((pid_t)pid, 0) == 0)
                ESCAPE(r, "kill(%ld, 0) succeeded: host pid visible and signalable", pid);
        else if (errno == ESRCH)
                OK(r, "kill(%ld, 0): ESRCH", pid);
        else
                ESCAPE(r, "kill(%ld, 0) failed with %s: the pid exists for us", pid, ename(errno));
}

static void p_host_pid_proc(struct result *r)
{
        const char *s = env_or_null("HOST_PID");
        char path[64];
        struct stat st;

        if (!s) {
                SKIP(r, "HOST_PID not given");
                return;
        }
        snprintf(path, sizeof(path), "/proc/%ld", strtol(s, NULL, 10));
        if (stat(path, &st) == 0)
                ESCAPE(r, "%s exists", path);
        else if (errno == ENOENT)
                OK(r, "%s: ENOENT", path);
        else
                ESCAPE(r, "stat(%s) failed with unexpected %s", path, ename(errno));
}

/* "type:[inode]" of the host's namespace @type, from HOST_NS. */
static bool host_ns(const char *type, char *out, size_t size)
{
        const char *all = env_or_null("HOST_NS");
        char key[32];
        const char *p;

        if (!all)
                return false;
        snprintf(key, sizeof(key), "%s:[", type);
        for (p = all; (p = strstr(p, key)); p++)
                if (p == all || p[-1] == ' ' || p[-1] == ',') {
                        snprintf(out, size, "%.*s", (int)strcspn(p, " ,"), p);
                        return true;
                }
        return false;
}

/* If /proc were the host's (not remounted for our pid namespace) /proc/1 would be the
 * host's init even though we are in a new pid namespace. */
static void p_pid1_not_host(struct result *r)
{
        char host[64], link[64];
        ssize_t n;

        if (!host_ns("pid", host, sizeof(host))) {
                SKIP(r, "HOST_NS not given");
                return;
        }
        n = readlink("/proc/1/ns/pid", link, sizeof(link) - 1);
        if (n < 0) {
                if (errno == EACCES || errno == EPERM || errno == ENOENT)
                        OK(r, "readlink(/proc/1/ns/pid) denied with %s: pid 1 is a stranger "
                              "inside, not the host's", ename(errno));
                else
                        ESCAPE(r, "readlink(/proc/1/ns/pid) failed with %s", ename(errno));
                return;
        }
        link[n] = 0;
        if (!strcmp(link, host))
                ESCAPE(r, "pid 1 lives in the host pid namespace %s", link);
        else
                OK(r, "pid 1 is in %s, host is %s", link, host);
}

static void p_proc_is_ours(struct result *r)
{
        char link[32];
        ssize_t n = readlink("/proc/self", link, sizeof(link) - 1);

        if (n < 0) {
                ESCAPE(r, "readlink(/proc/self) failed with %s", ename(errno));
                return;
        }
        link[n] = 0;
        if (strtol(link, NULL, 10) == getpid())
                OK(r, "/proc/self is %s = getpid(): /proc belongs to our pid namespace", link);
        else
                ESCAPE(r, "/proc/self is %s but getpid() is %d: /proc is another pid namespace's",
                       link, getpid());
}

static void ns_probe(struct result *r, const char *type)
{
        char host[64], path[64], link[64];
        ssize_t n;

        if (!host_ns(type, host, sizeof(host))) {
                SKIP(r, "HOST_NS has no %s entry", type);
                return;
        }
        snprintf(path, sizeof(path), "/proc/self/ns/%s", type);
        n = readlink(path, link, sizeof(link) - 1);
        if (n < 0) {
                ESCAPE(r, "readlink(%s) failed with %s", path, ename(errno));
                return;
        }
        link[n] = 0;
        if (!strcmp(link, host))
                ESCAPE(r, "still in the host's %s namespace %s", type, link);
        else
                OK(r, "own %s namespace %s (host %s)", type, link, host);
}

static void p_ns_user(struct result *r) { ns_probe(r, "user"); }
static void p_ns_mnt(struct result *r) { ns_probe(r, "mnt"); }
static void p_ns_pid(struct result *r) { ns_probe(r, "pid"); }
static void p_ns_net(struct result *r) { ns_probe(r, "net"); }
static void p_ns_ipc(struct result *r) { ns_probe(r, "ipc"); }
static void p_ns_uts(struct result *r) { ns_probe(r, "uts"); }
static void p_ns_cgroup(struct result *r) { ns_probe(r, "cgroup"); }
static void p_ns_time(struct result *r) { ns_probe(r, "time"); }

/* ---- /proc ------------------------------------------------------------------------ */

#define PROC_WRITE_DENIALS ERRS(EACCES, EROFS, EPERM, ENOENT)

static void p_proc_sysrq(struct result *r)
{
        expect_open_denied(r, "/proc/sysrq-trigger", O_WRONLY, PROC_WRITE_DENIALS);
}

static void p_proc_core_pattern(struct result *r)
{
        expect_open_denied(r, "/proc/sys/kernel/core_pattern", O_WRONLY, PROC_WRITE_DENIALS);
}

static void p_proc_modprobe(struct result *r)
{
        expect_open_denied(r, "/proc/sys/kernel/modprobe", O_WRONLY, PROC_WRITE_DENIALS);
}

static void p_proc_drop_caches(struct result *r)
{
        expect_open_denied(r, "/proc/sys/vm/drop_caches", O_WRONLY, PROC_WRITE_DENIALS);
}

/* A mask with /dev/null (runc, bubblewrap) opens but reads nothing: that is a denial. */
static void p_proc_kcore(struct result *r)
{
        char buf[64];
        int fd = open("/proc/kcore", O_RDONLY | O_CLOEXEC);
        ssize_t n;

        if (fd < 0) {
                if (errno == ENOENT || errno == EACCES || errno == EPERM)
                        OK(r, "open(/proc/kcore) denied with %s", ename(errno));
                else
                        ESCAPE(r, "open(/proc/kcore) failed with unexpected %s", ename(errno));
                return;
        }
        n = read(fd, buf, sizeof(buf));
        close(fd);
        if (n > 0)
                ESCAPE(r, "read %zd bytes of /proc/kcore%s", n,
                       n >= 4 && !memcmp(buf, "\177ELF", 4) ? " (an ELF core: kernel memory)" : "");
        else
                OK(r, "/proc/kcore is masked (read returned %zd)", n);
}

static void p_proc_kallsyms(struct result *r)
{
        char buf[256];
        ssize_t n = read_file("/proc/kallsyms", buf, sizeof(buf));
        unsigned long long addr;

        if (n < 0) {
                OK(r, "/proc/kallsyms unreadable: %s", ename((int)-n));
                return;
        }
        if (n == 0 || sscanf(buf, "%llx", &addr) != 1 || addr == 0)
                OK(r, "/proc/kallsyms shows no kernel addresses");
        else
                ESCAPE(r, "/proc/kallsyms leaks kernel address %llx", addr);
}

/* ---- devices -------------------------------------------------------------------------- */

static void dev_probe(struct result *r, const char *path)
{
        expect_open_denied(r, path, O_RDONLY, ERRS(ENOENT, EACCES, EPERM));
}

static void p_dev_sda(struct result *r) { dev_probe(r, "/dev/sda"); }
static void p_dev_vda(struct result *r) { dev_probe(r, "/dev/vda"); }
static void p_dev_mem(struct result *r) { dev_probe(r, "/dev/mem"); }
static void p_dev_port(struct result *r) { dev_probe(r, "/dev/port"); }
static void p_dev_kmsg(struct result *r) { dev_probe(r, "/dev/kmsg"); }
static void p_dev_kvm(struct result *r) { dev_probe(r, "/dev/kvm"); }
static void p_dev_fuse(struct result *r) { dev_probe(r, "/dev/fuse"); }
static void p_dev_tun(struct result *r) { dev_probe(r, "/dev/net/tun"); }
static void p_dev_loop_control(struct result *r) { dev_probe(r, "/dev/loop-control"); }
static void p_dev_userfaultfd(struct result *r) { dev_probe(r, "/dev/userfaultfd"); }

static void p_dev_minimal(struct result *r)
{
        static const char *const allowed[] = {
                "null", "zero", "full", "random", "urandom", "tty", "pts", "shm", "ptmx",
                "fd", "stdin", "stdout", "stderr", "core", "mqueue", "console", NULL,
        };
        char names[300];
        int count = 0, e = list_dir_except("/dev", allowed, names, sizeof(names), &count);

        if (e < 0)
                ESCAPE(r, "opendir(/dev) failed with %s", ename(-e));
        else if (count)
                ESCAPE(r, "/dev has %d node(s) beyond the minimal set: %s", count, names);
        else
                OK(r, "/dev holds only the minimal set");
}

/* Every device node in /dev must be one of the harmless character devices. */
static void p_dev_nodes(struct result *r)
{
        static const unsigned safe[][2] = {
                { 1, 3 }, { 1, 5 }, { 1, 7 }, { 1, 8 }, { 1, 9 }, /* null zero full random urandom */
                { 5, 0 }, { 5, 2 },                               /* tty ptmx */
        };
        char names[300] = "", path[300];
        size_t len = 0;
        int count = 0;
        struct dirent *de;
        DIR *d = opendir("/dev");

        if (!d) {
                ESCAPE(r, "opendir(/dev) failed with %s", ename(errno));
                return;
        }
        while ((de = readdir(d))) {
                struct stat st;
                bool ok = false;

                snprintf(path, sizeof(path), "/dev/%s", de->d_name);
                if (lstat(path, &st) < 0 || !(S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)))
                        continue;
                for (size_t i = 0; i < sizeof(safe) / sizeof(safe[0]) && S_ISCHR(st.st_mode); i++)
                        ok |= major(st.st_rdev) == safe[i][0] && minor(st.st_rdev) == safe[i][1];
                if (ok)
                        continue;
                count++;
                if (len + strlen(de->d_name) + 24 < sizeof(names))
                        len += snprintf(names + len, sizeof(names) - len, "%s%s(%c %u:%u)",
                                        len ? " " : "", de->d_name, S_ISBLK(st.st_mode) ? 'b' : 'c',
                                        major(st.st_rdev), minor(st.st_rdev));
        }
        closedir(d);
        if (count)
                ESCAPE(r, "%d device node(s) beyond null zero full random urandom tty ptmx: %s",
                       count, names);
        else
                OK(r, "every device node in /dev is a harmless one");
}

static void mknod_probe(struct result *r, mode_t type, dev_t dev, const char *what)
{
        char path[64];
        int ret;

        snprintf(path, sizeof(path), "/tmp/.cordon-probe-node-%d", getpid());
        errno = 0;
        ret = mknod(path, type | 0600, dev);
        if (ret == 0)
                unlink(path);
        judge(r, what, ret, errno, ERRS(EPERM, ENOSYS));
}

static void p_mknod_char(struct result *r)
{
        mknod_probe(r, S_IFCHR, makedev(1, 3), "mknod(/tmp/x, S_IFCHR 1:3)");
}

static void p_mknod_block(struct result *r)
{
        mknod_probe(r, S_IFBLK, makedev(8, 0), "mknod(/tmp/x, S_IFBLK 8:0)");
}

/* ---- file descriptors --------------------------------------------------------------- */

/* Runs in main() before anything opens a file, so every fd >= 3 came from our parent. */
static void scan_leaked_fds(void)
{
        struct rlimit rl;
        int max = MAX_FD_SCAN;

        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)max)
                max = (int)rl.rlim_cur;
        for (int fd = 3; fd < max && n_leaked < MAX_LEAKED_FDS; fd++) {
                char path[64], *w = leaked_what[n_leaked];
                struct stat st;
                ssize_t n;

                if (fcntl(fd, F_GETFD) < 0)
                        continue;
                snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
                n = readlink(path, w, sizeof(leaked_what[0]) - 1);
                if (n >= 0)
                        w[n] = 0;
                else if (fstat(fd, &st) == 0)
                        snprintf(w, sizeof(leaked_what[0]), "mode %o dev %u:%u ino %llu",
                                 st.st_mode, major(st.st_dev), minor(st.st_dev),
                                 (unsigned long long)st.st_ino);
                else
                        snprintf(w, sizeof(leaked_what[0]), "?");
                leaked_fds[n_leaked++] = fd;
        }
}

static void p_fd_leak(struct result *r)
{
        char list[360];
        size_t len = 0;

        if (!n_leaked) {
                OK(r, "no fd >= 3 open at start");
                return;
        }
        for (int i = 0; i < n_leaked && len < sizeof(list); i++)
                len += snprintf(list + len, sizeof(list) - len, "%s%d -> %s", i ? ", " : "",
                                leaked_fds[i], leaked_what[i]);
        ESCAPE(r, "%d leaked fd(s): %s", n_leaked, list);
}

/* ---- host filesystem -------------------------------------------------------------- */

static void p_host_shadow(struct result *r)
{
        expect_open_denied(r, "/etc/shadow", O_RDONLY, ERRS(ENOENT, EACCES, EPERM));
}

static void p_host_etc_ssh(struct result *r) { expect_dir_hidden(r, "/etc/ssh", NULL); }
static void p_host_root(struct result *r) { expect_dir_hidden(r, "/root", NULL); }
/* /var is the sandbox's: its tmp, and apt's and dpkg's state (the `host` template shows the
 * host's dpkg database copy-on-write; apt's cache, lists and logs are fresh and empty).
 * Nothing else of the host's /var. */
static void p_host_var(struct result *r)
{
        static const struct {
                const char *dir;
                const char *const allowed[5];
        } views[] = {
                { "/var", { "tmp", "lib", "cache", "log", NULL } },
                { "/var/lib", { "apt", "dpkg", NULL } },
                { "/var/lib/apt", { "lists", NULL } },
                { "/var/cache", { "apt", NULL } },
                { "/var/log", { "apt", NULL } },
                { "/var/lib/apt/lists", { NULL } },
                { "/var/cache/apt", { NULL } },
                { "/var/log/apt", { NULL } },
        };

        for (size_t i = 0; i < sizeof(views) / sizeof(views[0]); i++) {
                expect_dir_hidden(r, views[i].dir, views[i].allowed);
                if (r->v == V_ESCAPE)
                        return;
        }
        OK(r, "/var shows nothing of the host's but its dpkg database");
}

/* apt's credentials for the host's mirrors (the `host` template's /etc/apt is the host's,
 * copy-on-write, with these whited out). */
static void p_host_etc_apt_auth(struct result *r)
{
        expect_open_denied(r, "/etc/apt/auth.conf", O_RDONLY, ERRS(ENOENT, EACCES, EPERM));
        if (r->v != V_ESCAPE)
                expect_dir_hidden(r, "/etc/apt/auth.conf.d", NULL);
}
static void p_host_run(struct result *r) { expect_dir_hidden(r, "/run", NULL); }

static void p_host_home(struct result *r)
{
        static const char *const allowed[] = { "user", NULL };

        expect_dir_hidden(r, "/home", allowed);
}

static void p_host_sys(struct result *r)
{
        struct stat st;

        if (stat("/sys", &st) < 0 && errno == ENOENT)
                OK(r, "/sys: ENOENT");
        else
                expect_dir_hidden(r, "/sys", NULL);
}

/* Only the image's directories may be at the top; a leftover old root from pivot_root,
 * or a host path like /work or /boot, is an escape. */
static void p_host_toplevel(struct result *r)
{
        static const char *const allowed[] = {
                "bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "home", "tmp",
                "proc", "dev", "run", "var", "root", NULL,
        };
        char names[300];
        int count = 0, e = list_dir_except("/", allowed, names, sizeof(names), &count);

        if (e < 0)
                ESCAPE(r, "opendir(/) failed with %s", ename(-e));
        else if (count)
                ESCAPE(r, "/ shows %d entr%s outside the image: %s", count, count == 1 ? "y" : "ies",
                       names);
        else
                OK(r, "/ shows only the image's directories");
}

static void p_host_dev_shm(struct result *r) { expect_dir_hidden(r, "/dev/shm", NULL); }

/* Split one /proc/self/mountinfo line into root, mount point and fs type. */
static bool parse_mountinfo(char *line, char **root, char **mnt, char **fstype)
{
        char *sep = strstr(line, " - ");
        char *save = NULL, *f;
        int i = 0;

        if (!sep)
                return false;
        *sep = 0;
        for (f = strtok_r(line, " ", &save); f; f = strtok_r(NULL, " ", &save), i++) {
                if (i == 3)
                        *root = f;
                else if (i == 4)
                        *mnt = f;
        }
        *fstype = strtok_r(sep + 3, " ", &save);
        return i >= 5 && *fstype;
}

static void p_mount_fstypes(struct result *r)
{
        static const char *const bad[] = {
                "sysfs", "debugfs", "tracefs", "securityfs", "bpf", "configfs", "fusectl",
                "efivarfs", "pstore", "binfmt_misc", "cgroup", "cgroup2", "devtmpfs",
                "hugetlbfs", "autofs", "nfsd", "rpc_pipefs", NULL,
        };
        char buf[65536], found[300] = "";
        ssize_t n = read_file("/proc/self/mountinfo", buf, sizeof(buf));
        size_t len = 0;

        if (n < 0) {
                OK(r, "/proc/self/mountinfo unreadable: %s", ename((int)-n));
                return;
        }
        for (char *save = NULL, *l = strtok_r(buf, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
                char *root, *mnt, *fstype;

                if (!parse_mountinfo(l, &root, &mnt, &fstype))
                        continue;
                /* Single device nodes bound from devtmpfs (how a user namespace gets
                 * /dev/null) are fine, and dev-nodes checks which; all of it is not. */
                if (!strcmp(fstype, "devtmpfs") && strcmp(root, "/"))
                        continue;
                for (const char *const *b = bad; *b; b++)
                        if (!strcmp(fstype, *b) && len + strlen(mnt) + 32 < sizeof(found))
                                len += snprintf(found + len, sizeof(found) - len, "%s%s on %s",
                                                len ? ", " : "", fstype, mnt);
        }
        if (len)
                ESCAPE(r, "kernel interfaces mounted: %s", found);
        else
                OK(r, "no sysfs/debugfs/cgroupfs/devtmpfs/... mounts");
}

/* A disk file system mounted from its root, with etc/ and usr/ under it, is a whole host
 * root file system in view (an undetached old root, or a bind of the host's /). */
static void p_mount_host_root(struct result *r)
{
        static const char *const disk[] = {
                "ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "zfs", "virtiofs", "9p", NULL,
        };
        char buf[65536];
        ssize_t n = read_file("/proc/self/mountinfo", buf, sizeof(buf));

        if (n < 0) {
                OK(r, "/proc/self/mountinfo unreadable: %s", ename((int)-n));
                return;
        }
        for (char *save = NULL, *l = strtok_r(buf, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
                char *root, *mnt, *fstype, p1[4200], p2[4200];
                struct stat st;
                bool is_disk = false;

                if (!parse_mountinfo(l, &root, &mnt, &fstype) || strcmp(root, "/"))
                        continue;
                for (const char *const *d = disk; *d; d++)
                        is_disk |= !strcmp(fstype, *d);
                snprintf(p1, sizeof(p1), "%s/etc", strcmp(mnt, "/") ? mnt : "");
                snprintf(p2, sizeof(p2), "%s/usr", strcmp(mnt, "/") ? mnt : "");
                if (is_disk && stat(p1, &st) == 0 && stat(p2, &st) == 0) {
                        ESCAPE(r, "a whole %s root file system is mounted on %s", fstype, mnt);
                        return;
                }
        }
        OK(r, "no whole disk root file system in view");
}

/* ---- host environment and identity ------------------------------------------------ */

extern char **environ;

static void p_env_canary(struct result *r)
{
        const char *v = getenv("CORDON_CANARY");

        if (v)
                ESCAPE(r, "CORDON_CANARY=%s leaked from the host environment", v);
        else
                OK(r, "CORDON_CANARY absent");
}

static void p_env_allowlist(struct result *r)
{
        static const char *const allowed[] = {
                "PATH", "HOME", "LANG", "TERM", "HOST_PID", "HOST_HOSTNAME", "HOST_NS",
                "CANARY_TCP_PORT", "CANARY_ABSTRACT", NULL,
        };
        char extra[300] = "";
        size_t len = 0;
        int count = 0;

        for (char **e = environ; e && *e; e++) {
                size_t klen = strcspn(*e, "=");
                bool ok = false;

                for (const char *const *a = allowed; *a && !ok; a++)
                        ok = strlen(*a) == klen && !strncmp(*e, *a, klen);
                /* the gvisor runtime's stat shim (src/runtime/gvisor/stat-compat.c), exactly */
                ok = ok || !strcmp(*e, "LD_PRELOAD=/dev/.cordon-stat.so");
                if (ok)
                        continue;
                count++;
                if (len + klen + 2 < sizeof(extra))
                        len += snprintf(extra + len, sizeof(extra) - len, "%s%.*s", len ? " " : "",
                                        (int)klen, *e);
        }
        if (count)
                ESCAPE(r, "%d variable(s) beyond PATH HOME LANG TERM and the canaries: %s", count,
                       extra);
        else
                OK(r, "environment holds only PATH HOME LANG TERM and the canaries");
}

static void p_hostname(struct result *r)
{
        const char *host = env_or_null("HOST_HOSTNAME");
        struct utsname u;

        if (!host) {
                SKIP(r, "HOST_HOSTNAME not given");
                return;
        }
        uname(&u);
        if (!strcmp(u.nodename, host))
                ESCAPE(r, "hostname is the host's (%s)", host);
        else
                OK(r, "hostname %s differs from the host's %s", u.nodename, host);
}

/* ---- network ---------------------------------------------------------------------- */

/* Connect with a timeout; returns 0 on success or the errno. */
static int connect_timeout(int family, const struct sockaddr *sa, socklen_t len, int type)
{
        int fd = socket(family, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        struct pollfd pfd;
        socklen_t elen = sizeof(int);
        int err = 0;

        if (fd < 0)
                return errno;
        if (connect(fd, sa, len) < 0) {
                err = errno;
                if (err == EINPROGRESS) {
                        pfd = (struct pollfd){ .fd = fd, .events = POLLOUT };
                        if (poll(&pfd, 1, CONNECT_TIMEOUT_MS) == 1)
                                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen);
                        else
                                err = ETIMEDOUT;
                }
        }
        close(fd);
        return err;
}

static int connect_inet(const char *ip, int port)
{
        struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(port) };

        inet_pton(AF_INET, ip, &sin.sin_addr);
        return connect_timeout(AF_INET, (struct sockaddr *)&sin, sizeof(sin), SOCK_STREAM);
}

static void judge_connect(struct result *r, const char *what, int err, int want)
{
        if (err == 0)
                ESCAPE(r, "connect(%s) succeeded", what);
        else if (err == want)
                OK(r, "connect(%s): %s", what, ename(err));
        else
                ESCAPE(r, "connect(%s) failed with %s, expected %s", what, ename(err), ename(want));
}

static void p_net_host_tcp(struct result *r)
{
        const char *port = env_or_null("CANARY_TCP_PORT");
        char what[64];

        if (!port) {
                SKIP(r, "CANARY_TCP_PORT not given");
                return;
        }
        snprintf(what, sizeof(what), "127.0.0.1:%s", port);
        judge_connect(r, what, connect_inet("127.0.0.1", atoi(port)), ECONNREFUSED);
}

/* Abstract unix sockets are scoped by network namespace: the host's must be unreachable. */
static void p_net_host_abstract(struct result *r)
{
        const char *name = env_or_null("CANARY_ABSTRACT");
        struct sockaddr_un sun = { .sun_family = AF_UNIX };
        char what[128];
        size_t len;
        int err;

        if (!name) {
                SKIP(r, "CANARY_ABSTRACT not given");
                return;
        }
        if (*name == '@')
                name++;
        len = strnlen(name, sizeof(sun.sun_path) - 1);
        memcpy(sun.sun_path + 1, name, len);
        snprintf(what, sizeof(what), "@%s", name);
        err = connect_timeout(AF_UNIX, (struct sockaddr *)&sun,
                              (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len),
                              SOCK_STREAM);
        if (err == EPERM || err == EACCES) /* Landlock's abstract unix scoping */
                OK(r, "connect(%s) denied with %s", what, ename(err));
        else
                judge_connect(r, what, err, ECONNREFUSED);
}

static void p_net_metadata(struct result *r)
{
        judge_connect(r, "169.254.169.254:80", connect_inet("169.254.169.254", 80), ENETUNREACH);
}

static void p_net_external(struct result *r)
{
        judge_connect(r, "192.0.2.1:80", connect_inet("192.0.2.1", 80), ENETUNREACH);
}

static void p_net_only_loopback(struct result *r)
{
        struct if_nameindex *ifs = if_nameindex();
        char extra[300] = "";
        size_t len = 0;

        if (!ifs) {
                ESCAPE(r, "if_nameindex failed with %s: cannot list interfaces", ename(errno));
                return;
        }
        for (struct if_nameindex *i = ifs; i->if_index; i++)
                if (strcmp(i->if_name, "lo") && len + strlen(i->if_name) + 2 < sizeof(extra))
                        len += snprintf(extra + len, sizeof(extra) - len, "%s%s", len ? " " : "",
                                        i->if_name);
        if_freenameindex(ifs);
        if (len)
                ESCAPE(r, "interfaces beyond loopback: %s", extra);
        else
                OK(r, "only lo");
}

/* ---- the image is read-only --------------------------------------------------------- */

#define RO_DENIALS ERRS(EROFS, EACCES, EPERM)

static void create_probe(struct result *r, const char *dir)
{
        char path[128], what[160];
        int fd;

        snprintf(path, sizeof(path), "%s/.cordon-probe-%d", dir, getpid());
        snprintf(what, sizeof(what), "create(%s)", path);
        errno = 0;
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd >= 0) {
                close(fd);
                unlink(path);
        }
        judge(r, what, fd, errno, RO_DENIALS);
}

static void p_ro_usr_bin(struct result *r) { create_probe(r, "/usr/bin"); }
static void p_ro_rootdir(struct result *r) { create_probe(r, ""); }
static void p_ro_etc_passwd(struct result *r) { expect_open_denied(r, "/etc/passwd", O_WRONLY, RO_DENIALS); }
static void p_ro_bin_sh(struct result *r) { expect_open_denied(r, "/bin/sh", O_WRONLY, RO_DENIALS); }

static void p_ro_libc(struct result *r)
{
        const char *libc = "/lib/x86_64-linux-gnu/libc.so.6";

        if (access(libc, F_OK) < 0)
                libc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
        expect_open_denied(r, libc, O_WRONLY, RO_DENIALS);
}

/* CVE-2019-5736: pid 1's binary must be sealed or inside the sandbox's own view, never a
 * host binary the sandbox can reach through /proc/1/exe. */
static void p_proc1_exe_link(struct result *r)
{
        char link[4096];
        struct stat a, b;
        ssize_t n = readlink("/proc/1/exe", link, sizeof(link) - 1);

        if (n < 0) {
                if (errno == EACCES || errno == EPERM || errno == ENOENT)
                        OK(r, "readlink(/proc/1/exe) denied with %s", ename(errno));
                else
                        ESCAPE(r, "readlink(/proc/1/exe) failed with %s", ename(errno));
                return;
        }
        link[n] = 0;
        if (!strncmp(link, "/memfd:", 7))
                OK(r, "/proc/1/exe is a sealed memfd (%s)", link);
        else if (stat(link, &a) == 0 && stat("/proc/1/exe", &b) == 0 && a.st_dev == b.st_dev &&
                 a.st_ino == b.st_ino)
                OK(r, "/proc/1/exe is %s, inside the sandbox's view", link);
        else
                ESCAPE(r, "/proc/1/exe -> %s, which is not a file in the sandbox's view", link);
}

static void p_proc1_exe_write(struct result *r)
{
        expect_open_denied(r, "/proc/1/exe", O_WRONLY, ERRS(EACCES, EROFS, ETXTBSY, EPERM, ENOENT));
}

/* ---- credentials ------------------------------------------------------------------- */

static void p_caps_status(struct result *r)
{
        static const char *const fields[] = { "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", NULL };
        char val[64], bad[300] = "";
        size_t len = 0;

        for (const char *const *f = fields; *f; f++) {
                if (status_field(*f, val, sizeof(val)) < 0) {
                        ESCAPE(r, "no %s in /proc/self/status", *f);
                        return;
                }
                if (strtoull(val, NULL, 16) != 0)
                        len += snprintf(bad + len, sizeof(bad) - len, "%s%s=%s", len ? " " : "",
                                        *f, val);
        }
        if (len)
                ESCAPE(r, "capabilities held: %s", bad);
        else
                OK(r, "CapInh CapPrm CapEff CapBnd CapAmb all zero");
}

static int capget_v3(struct __user_cap_data_struct data[2])
{
        struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };

        return (int)syscall(SYS_capget, &hdr, data);
}

static void p_capget(struct result *r)
{
        struct __user_cap_data_struct d[2] = { 0 };

        if (capget_v3(d) < 0) {
                ESCAPE(r, "capget failed with %s", ename(errno));
                return;
        }
        if (d[0].effective | d[1].effective | d[0].permitted | d[1].permitted | d[0].inheritable |
            d[1].inheritable)
                ESCAPE(r, "capget: effective %08x%08x permitted %08x%08x", d[1].effective,
                       d[0].effective, d[1].permitted, d[0].permitted);
        else
                OK(r, "capget: effective, permitted and inheritable empty");
}

/* Ask for CAP_SYS_ADMIN on top of what we hold; with an empty bounding set this fails. */
static void p_capset_raise(struct result *r)
{
        struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
        struct __user_cap_data_struct d[2] = { 0 };

        capget_v3(d);
        d[0].permitted |= 1u << CAP_SYS_ADMIN;
        d[0].effective |= 1u << CAP_SYS_ADMIN;
        EXPECT_SYS(r, "capset(+CAP_SYS_ADMIN)", syscall(SYS_capset, &hdr, d));
}

static void p_ambient_raise(struct result *r)
{
        EXPECT_SYS(r, "prctl(CAP_AMBIENT_RAISE, CAP_SYS_ADMIN)",
                   prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_SYS_ADMIN, 0, 0));
}

static void p_no_new_privs(struct result *r)
{
        char val[16] = "";
        int p = prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0);

        status_field("NoNewPrivs", val, sizeof(val));
        if (p == 1 && !strcmp(val, "1"))
                OK(r, "NoNewPrivs: 1");
        else
                ESCAPE(r, "no_new_privs not set (prctl %d, status \"%s\")", p, val);
}

static void p_seccomp_mode(struct result *r)
{
        char val[16] = "";

        status_field("Seccomp", val, sizeof(val));
        if (!strcmp(val, "2"))
                OK(r, "Seccomp: 2 (filter)");
        else
                ESCAPE(r, "Seccomp: \"%s\", not in filter mode", val);
}

/* Unmapped ids fail EINVAL before any privilege check: also no way up. */
static void p_setuid(struct result *r)
{
        uid_t target = getuid() == 0 ? 12345 : 0;
        char what[32];

        snprintf(what, sizeof(what), "setuid(%u)", target);
        EXPECT(r, what, syscall(SYS_setuid, target), EPERM, EINVAL);
}

static void p_setgid(struct result *r)
{
        gid_t target = getgid() == 0 ? 12345 : 0;
        char what[32];

        snprintf(what, sizeof(what), "setgid(%u)", target);
        EXPECT(r, what, syscall(SYS_setgid, target), EPERM, EINVAL);
}

static void p_setgroups(struct result *r)
{
        gid_t g = 0;

        EXPECT(r, "setgroups([0])", syscall(SYS_setgroups, 1, &g), EPERM, EINVAL);
}

static void p_chroot(struct result *r)
{
        EXPECT_SYS(r, "chroot(/)", syscall(SYS_chroot, "/"));
}

static void p_sethostname(struct result *r)
{
        EXPECT_SYS(r, "sethostname(BADPTR)", syscall(SYS_sethostname, BADPTR, 5));
}

static void p_setdomainname(struct result *r)
{
        EXPECT_SYS(r, "setdomainname(BADPTR)", syscall(SYS_setdomainname, BADPTR, 5));
}

/* The host id that inside id @id maps to, or -1 when unmapped. */
static long long map_to_host(const char *map, unsigned long long id)
{
        char buf[4096];
        unsigned long long in, out, count;
        int off = 0, used;

        if (read_file(map, buf, sizeof(buf)) < 0)
                return -2;
        while (sscanf(buf + off, "%llu %llu %llu%n", &in, &out, &count, &used) == 3) {
                if (id >= in && id - in < count)
                        return (long long)(out + (id - in));
                off += used;
        }
        return -1;
}

static void idmap_probe(struct result *r, const char *map, unsigned long long self)
{
        long long h0 = map_to_host(map, 0), hs = map_to_host(map, self);

        if (h0 == -2)
                ESCAPE(r, "cannot read %s", map);
        else if (h0 == 0 || hs == 0)
                ESCAPE(r, "%s maps %s to host 0: sandbox root is host root", map,
                       h0 == 0 ? "inside 0" : "our own id");
        else
                OK(r, "%s: inside 0 -> %lld, self %llu -> %lld (-1 = unmapped)", map, h0, self, hs);
}

static void p_uid_map(struct result *r) { idmap_probe(r, "/proc/self/uid_map", getuid()); }
static void p_gid_map(struct result *r) { idmap_probe(r, "/proc/self/gid_map", getgid()); }

static void p_clock_settime(struct result *r)
{
        EXPECT_SYS(r, "clock_settime(REALTIME, BADPTR)",
                   syscall(SYS_clock_settime, CLOCK_REALTIME, BADPTR));
}

static void p_settimeofday(struct result *r)
{
        EXPECT_SYS(r, "settimeofday(BADPTR)", syscall(SYS_settimeofday, BADPTR, NULL));
}

/* Wrong magic numbers: a call that gets through fails EINVAL and reboots nothing. */
static void p_reboot(struct result *r)
{
        EXPECT_SYS(r, "reboot(bad magic)", syscall(SYS_reboot, 0, 0, LINUX_REBOOT_CMD_CAD_OFF, NULL));
}

static void p_swapon(struct result *r)
{
        EXPECT_SYS(r, "swapon(BADPTR)", syscall(SYS_swapon, BADPTR, 0));
}

static void p_swapoff(struct result *r)
{
        EXPECT_SYS(r, "swapoff(BADPTR)", syscall(SYS_swapoff, BADPTR));
}

static void p_acct(struct result *r)
{
        EXPECT_SYS(r, "acct(BADPTR)", syscall(SYS_acct, BADPTR));
}

/* READ_IMPLIES_EXEC makes every readable mapping executable. */
static void p_personality(struct result *r)
{
        EXPECT_SYS(r, "personality(READ_IMPLIES_EXEC)", syscall(SYS_personality, READ_IMPLIES_EXEC));
}

static void p_setpriority(struct result *r)
{
        EXPECT(r, "setpriority(self, -20)", setpriority(PRIO_PROCESS, 0, -20), EACCES, EPERM);
}

static void p_sched_fifo(struct result *r)
{
        struct sched_param sp = { .sched_priority = 1 };

        EXPECT_SYS(r, "sched_setscheduler(FIFO)", sched_setscheduler(0, SCHED_FIFO, &sp));
}

static void p_setrlimit_raise(struct result *r)
{
        struct rlimit rl;

        getrlimit(RLIMIT_NOFILE, &rl);
        rl.rlim_max += 1;
        if (rl.rlim_cur > rl.rlim_max)
                rl.rlim_cur = rl.rlim_max;
        EXPECT_SYS(r, "setrlimit(NOFILE, hard + 1)", setrlimit(RLIMIT_NOFILE, &rl));
}

/* ---- the table ------------------------------------------------------------------------ */

#define PROBE(name, fn) { name, fn, 0, 0 }

static const struct probe probes[] = {
        PROBE("mount", p_mount),
        PROBE("umount2", p_umount2),
        PROBE("pivot_root", p_pivot_root),
        PROBE("move_mount", p_move_mount),
        PROBE("fsopen", p_fsopen),
        PROBE("fspick", p_fspick),
        PROBE("fsconfig", p_fsconfig),
        PROBE("fsmount", p_fsmount),
        PROBE("open_tree", p_open_tree),
        PROBE("mount_setattr", p_mount_setattr),

        PROBE("unshare-user", p_unshare_user),
        PROBE("unshare-mnt", p_unshare_mnt),
        PROBE("unshare-pid", p_unshare_pid),
        PROBE("unshare-net", p_unshare_net),
        PROBE("unshare-ipc", p_unshare_ipc),
        PROBE("unshare-uts", p_unshare_uts),
        PROBE("unshare-cgroup", p_unshare_cgroup),
        PROBE("unshare-time", p_unshare_time),
        PROBE("clone-newuser", p_clone_newuser),
        PROBE("clone-newns", p_clone_newns),
        PROBE("clone3", p_clone3),
        PROBE("setns-mnt", p_setns_mnt),
        PROBE("setns-net", p_setns_net),
        PROBE("setns-pid", p_setns_pid),
        PROBE("setns-user", p_setns_user),
        PROBE("setns-badfd", p_setns_badfd),

        PROBE("io_uring_setup", p_io_uring_setup),
        PROBE("io_uring_enter", p_io_uring_enter),
        PROBE("io_uring_register", p_io_uring_register),
        PROBE("bpf", p_bpf),
        PROBE("perf_event_open", p_perf_event_open),
        PROBE("userfaultfd", p_userfaultfd),
        PROBE("keyctl", p_keyctl),
        PROBE("add_key", p_add_key),
        PROBE("request_key", p_request_key),
        PROBE("init_module", p_init_module),
        PROBE("finit_module", p_finit_module),
        PROBE("delete_module", p_delete_module),
        PROBE("kexec_load", p_kexec_load),
        PROBE("kexec_file_load", p_kexec_file_load),
        PROBE("open_by_handle_at", p_open_by_handle_at),
        PROBE("name_to_handle_at", p_name_to_handle_at),
        PROBE("syslog", p_syslog),
        PROBE("iopl", p_iopl),
        PROBE("ioperm", p_ioperm),
        PROBE("fanotify_init", p_fanotify_init),

        PROBE("sock-raw-inet", p_sock_raw_inet),
        PROBE("sock-raw-inet6", p_sock_raw_inet6),
        PROBE("sock-inet-packet", p_sock_inet_packet),
        PROBE("sock-inet-sctp", p_sock_inet_sctp),
        PROBE("sock-packet-raw", p_sock_packet_raw),
        PROBE("sock-packet-dgram", p_sock_packet_dgram),
        PROBE("sock-vsock", p_sock_vsock),
        PROBE("sock-alg", p_sock_alg),
        PROBE("sock-key", p_sock_key),
        PROBE("sock-tipc", p_sock_tipc),
        PROBE("sock-rds", p_sock_rds),
        PROBE("sock-can", p_sock_can),
        PROBE("sock-bluetooth", p_sock_bluetooth),
        PROBE("sock-xdp", p_sock_xdp),
        PROBE("netlink-audit", p_nl_audit),
        PROBE("netlink-uevent", p_nl_uevent),
        PROBE("netlink-netfilter", p_nl_netfilter),
        PROBE("netlink-xfrm", p_nl_xfrm),
        PROBE("netlink-generic", p_nl_generic),
        PROBE("netlink-sock-diag", p_nl_sock_diag),

        /* Without IA32 emulation int $0x80 faults: SIGSEGV is a denial there. */
        { "abi-i386-getpid", p_abi_i386_getpid, 0, SIGSEGV },
        { "abi-i386-unshare", p_abi_i386_unshare, 0, SIGSEGV },
        PROBE("abi-x32-getpid", p_abi_x32_getpid),
        PROBE("abi-x32-unshare", p_abi_x32_unshare),

        PROBE("tiocsti", p_tiocsti),
        PROBE("tiocsti-highbits", p_tiocsti_highbits),
        PROBE("tiocsti-fd2", p_tiocsti_fd2),
        PROBE("no-ctty", p_no_ctty),

        PROBE("ptrace-attach", p_ptrace_attach),
        PROBE("ptrace-traceme", p_ptrace_traceme),
        PROBE("process_vm_readv", p_process_vm_readv),
        PROBE("process_vm_writev", p_process_vm_writev),
        PROBE("pidfd_getfd", p_pidfd_getfd),
        PROBE("host-pid-kill", p_host_pid_kill),
        PROBE("host-pid-proc", p_host_pid_proc),
        PROBE("pid1-not-host", p_pid1_not_host),
        PROBE("proc-is-ours", p_proc_is_ours),
        PROBE("ns-user", p_ns_user),
        PROBE("ns-mnt", p_ns_mnt),
        PROBE("ns-pid", p_ns_pid),
        PROBE("ns-net", p_ns_net),
        PROBE("ns-ipc", p_ns_ipc),
        PROBE("ns-uts", p_ns_uts),
        PROBE("ns-cgroup", p_ns_cgroup),
        PROBE("ns-time", p_ns_time),

        PROBE("proc-sysrq-trigger", p_proc_sysrq),
        PROBE("proc-core-pattern", p_proc_core_pattern),
        PROBE("proc-modprobe", p_proc_modprobe),
        PROBE("proc-drop-caches", p_proc_drop_caches),
        PROBE("proc-kcore", p_proc_kcore),
        PROBE("proc-kallsyms", p_proc_kallsyms),

        PROBE("dev-sda", p_dev_sda),
        PROBE("dev-vda", p_dev_vda),
        PROBE("dev-mem", p_dev_mem),
        PROBE("dev-port", p_dev_port),
        PROBE("dev-kmsg", p_dev_kmsg),
        PROBE("dev-kvm", p_dev_kvm),
        PROBE("dev-fuse", p_dev_fuse),
        PROBE("dev-net-tun", p_dev_tun),
        PROBE("dev-loop-control", p_dev_loop_control),
        PROBE("dev-userfaultfd", p_dev_userfaultfd),
        PROBE("dev-minimal", p_dev_minimal),
        PROBE("dev-nodes", p_dev_nodes),
        PROBE("mknod-char", p_mknod_char),
        PROBE("mknod-block", p_mknod_block),

        PROBE("fd-leak", p_fd_leak),

        PROBE("host-etc-shadow", p_host_shadow),
        PROBE("host-etc-ssh", p_host_etc_ssh),
        PROBE("host-root", p_host_root),
        PROBE("host-home", p_host_home),
        PROBE("host-var", p_host_var),
        PROBE("host-etc-apt-auth", p_host_etc_apt_auth),
        PROBE("host-run", p_host_run),
        PROBE("host-sys", p_host_sys),
        PROBE("host-toplevel", p_host_toplevel),
        PROBE("host-dev-shm", p_host_dev_shm),
        PROBE("mount-fstypes", p_mount_fstypes),
        PROBE("mount-host-root", p_mount_host_root),

        PROBE("env-canary", p_env_canary),
        PROBE("env-allowlist", p_env_allowlist),
        PROBE("hostname", p_hostname),

        PROBE("net-host-tcp", p_net_host_tcp),
        PROBE("net-host-abstract", p_net_host_abstract),
        { "net-metadata", p_net_metadata, P_NATIVE_SKIP, 0 },
        { "net-external", p_net_external, P_NATIVE_SKIP, 0 },
        PROBE("net-only-loopback", p_net_only_loopback),

        PROBE("ro-usr-bin", p_ro_usr_bin),
        PROBE("ro-rootdir", p_ro_rootdir),
        PROBE("ro-etc-passwd", p_ro_etc_passwd),
        PROBE("ro-bin-sh", p_ro_bin_sh),
        PROBE("ro-libc", p_ro_libc),
        PROBE("proc1-exe-link", p_proc1_exe_link),
        PROBE("proc1-exe-write", p_proc1_exe_write),

        PROBE("caps-status", p_caps_status),
        PROBE("capget", p_capget),
        PROBE("capset-raise", p_capset_raise),
        PROBE("ambient-raise", p_ambient_raise),
        PROBE("no-new-privs", p_no_new_privs),
        PROBE("seccomp-mode", p_seccomp_mode),
        PROBE("setuid", p_setuid),
        PROBE("setgid", p_setgid),
        PROBE("setgroups", p_setgroups),
        PROBE("chroot", p_chroot),
        PROBE("sethostname", p_sethostname),
        PROBE("setdomainname", p_setdomainname),
        PROBE("uid-map", p_uid_map),
        PROBE("gid-map", p_gid_map),
        PROBE("clock_settime", p_clock_settime),
        PROBE("settimeofday", p_settimeofday),
        PROBE("reboot", p_reboot),
        PROBE("swapon", p_swapon),
        PROBE("swapoff", p_swapoff),
        PROBE("acct", p_acct),
        PROBE("personality", p_personality),
        PROBE("setpriority", p_setpriority),
        PROBE("sched-fifo", p_sched_fifo),
        PROBE("setrlimit-raise", p_setrlimit_raise),
};

#define N_PROBES (sizeof(probes) / sizeof(probes[0]))

/* ---- the runner ----------------------------------------------------------------------- */

static void judge_death(struct result *r, const struct probe *p, int status)
{
        int sig = WTERMSIG(status);

        if (sig == SIGSYS)
                OK(r, "killed by SIGSYS (seccomp denied the call)");
        else if (sig == SIGALRM)
                ESCAPE(r, "hung for more than %ds instead of being denied", PROBE_TIMEOUT_S);
        else if (p->ok_signal && sig == p->ok_signal)
                OK(r, "killed by SIG%s (the call cannot be made)", sigabbrev_np(sig));
        else
                ESCAPE(r, "probe died with SIG%s", sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
}

static void run_in_child(const struct probe *p, struct result *r)
{
        int fds[2], status = 0;
        pid_t pid;

        *r = (struct result){ V_ESCAPE, "probe returned no verdict" };
        if (pipe2(fds, O_CLOEXEC) < 0 || (pid = fork()) < 0) {
                ESCAPE(r, "cannot fork the probe: %s", ename(errno));
                return;
        }
        if (pid == 0) {
                close(fds[0]);
                alarm(PROBE_TIMEOUT_S);
                p->fn(r);
                if (write(fds[1], r, sizeof(*r)) != sizeof(*r))
                        _exit(2);
                _exit(0);
        }
        close(fds[1]);
        /* ptrace-traceme makes us the tracer: a traced child reports its stops here. */
        while (waitpid(pid, &status, __WALL) == pid && WIFSTOPPED(status))
                kill(pid, SIGKILL);
        fcntl(fds[0], F_SETFL, O_NONBLOCK);
        if (WIFSIGNALED(status))
                judge_death(r, p, status);
        else if (read(fds[0], r, sizeof(*r)) != sizeof(*r))
                ESCAPE(r, "probe exited with status %d without a verdict", WEXITSTATUS(status));
        close(fds[0]);
}

static bool selected(const char *only, const char *name)
{
        size_t len = strlen(name);

        if (!only)
                return true;
        for (const char *p = only; (p = strstr(p, name)); p++)
                if ((p == only || p[-1] == ',') && (p[len] == 0 || p[len] == ','))
                        return true;
        return false;
}

static int usage(void)
{
        fprintf(stderr, "usage: cordon-probe [--native] [--list] [--only NAME[,NAME...]]\n");
        return 2;
}

int main(int argc, char **argv)
{
        static const char *const tag[] = { "ok", "ESCAPE", "skip" };
        const char *only = NULL;
        int counts[3] = { 0 };

        scan_leaked_fds(); /* first: before anything of ours is open */
        for (int i = 1; i < argc; i++) {
                if (!strcmp(argv[i], "--native"))
                        native = true;
                else if (!strcmp(argv[i], "--list")) {
                        for (size_t k = 0; k < N_PROBES; k++)
                                printf("%s\n", probes[k].name);
                        return 0;
                } else if (!strcmp(argv[i], "--only") && i + 1 < argc)
                        only = argv[++i];
                else
                        return usage();
        }
        setvbuf(stdout, NULL, _IOLBF, 0);
        for (size_t k = 0; k < N_PROBES; k++) {
                const struct probe *p = &probes[k];
                struct result r;

                if (!selected(only, p->name))
                        continue;
                if (native && (p->flags & P_NATIVE_SKIP))
                        SKIP(&r, "would send packets off the machine; not run natively");
                else
                        run_in_child(p, &r);
                counts[r.v]++;
                printf("%s %s: %s\n", tag[r.v], p->name, r.msg);
        }
        printf("probe: %d ok, %d escape\n", counts[V_OK], counts[V_ESCAPE]);
        return counts[V_ESCAPE] ? 1 : 0;
}
