# SPDX-License-Identifier: Apache-2.0
"""The security suite: cordon-probe tries to break out of a `cordon run` sandbox.

Every protection has a probe that attacks it and expects one specific denial (see
probe.c). Here the probe runs inside a sandbox, as the default user and as sandbox root,
with canaries planted on the host (a TCP listener on loopback, an abstract unix listener,
a file in /dev/shm, a variable in cordon's own environment, our pid, hostname and
namespaces), and every probe must say `ok`. The same probe then runs natively on the host
with the same canaries, where most probes must say ESCAPE: a probe that cannot see an
escape proves nothing.

Run as root:  /usr/bin/python3 -m pytest tests/security
CORDON_BUILD selects the build directory (default: <repo>/build).
"""
import os
import re
import secrets
import socket
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("CORDON_BUILD", REPO / "build"))
CORDON = BUILD / "cordon"
PROBE = BUILD / "tests" / "security" / "cordon-probe"

# Where the probe is bound inside the sandbox: /tmp is the sandbox's own scratch, so the
# mount point adds no top-level directory for host-toplevel to flag.
PROBE_IN_SANDBOX = "/tmp/cordon-probe"

RUN_TIMEOUT_S = 120
MIN_OK = 45
MIN_NATIVE_ESCAPES = 30
NS_TYPES = ("user", "mnt", "pid", "net", "ipc", "uts", "cgroup", "time")

# Every probe the suite must run: a probe dropped from probe.c (or silently not run)
# fails the suite instead of shrinking it.
EXPECTED_PROBES = """
mount umount2 pivot_root move_mount fsopen fspick fsconfig fsmount open_tree mount_setattr
unshare-user unshare-mnt unshare-pid unshare-net unshare-ipc unshare-uts unshare-cgroup
unshare-time clone-newuser clone-newns clone3 setns-mnt setns-net setns-pid setns-user
setns-badfd
io_uring_setup io_uring_enter io_uring_register bpf perf_event_open userfaultfd keyctl
add_key request_key init_module finit_module delete_module kexec_load kexec_file_load
open_by_handle_at name_to_handle_at syslog iopl ioperm fanotify_init
sock-raw-inet sock-raw-inet6 sock-inet-packet sock-inet-sctp sock-packet-raw
sock-packet-dgram sock-vsock sock-alg sock-key sock-tipc sock-rds sock-can sock-bluetooth
sock-xdp netlink-audit netlink-uevent netlink-netfilter netlink-xfrm netlink-generic
netlink-sock-diag
abi-i386-getpid abi-i386-unshare abi-x32-getpid abi-x32-unshare
tiocsti tiocsti-highbits tiocsti-fd2 no-ctty
ptrace-attach ptrace-traceme process_vm_readv process_vm_writev pidfd_getfd host-pid-kill
host-pid-proc pid1-not-host proc-is-ours ns-user ns-mnt ns-pid ns-net ns-ipc ns-uts
ns-cgroup ns-time
proc-sysrq-trigger proc-core-pattern proc-modprobe proc-drop-caches proc-kcore
proc-kallsyms
dev-sda dev-vda dev-mem dev-port dev-kmsg dev-kvm dev-fuse dev-net-tun dev-loop-control
dev-userfaultfd dev-minimal dev-nodes mknod-char mknod-block
fd-leak
host-etc-shadow host-etc-ssh host-etc-apt-auth host-root host-home host-var host-run host-sys host-toplevel
host-dev-shm mount-fstypes mount-host-root
env-canary env-allowlist hostname
net-host-tcp net-host-abstract net-metadata net-external net-only-loopback
ro-usr-bin ro-rootdir ro-etc-passwd ro-bin-sh ro-libc proc1-exe-link proc1-exe-write
caps-status capget capset-raise ambient-raise no-new-privs seccomp-mode setuid setgid
setgroups chroot sethostname setdomainname uid-map gid-map clock_settime settimeofday
reboot swapon swapoff acct personality setpriority sched-fifo setrlimit-raise
""".split()

# Probes that must report ESCAPE when run natively as host root with the canaries set:
# chosen to hold on any Linux host, whatever its kernel config.
MUST_ESCAPE_NATIVELY = """
mount umount2 pivot_root unshare-user unshare-mnt unshare-net clone-newuser setns-badfd
sock-raw-inet sock-packet-raw tiocsti ptrace-attach ptrace-traceme host-pid-kill
host-pid-proc ns-user ns-mnt ns-pid ns-net ns-uts ns-ipc host-etc-shadow host-dev-shm
env-canary env-allowlist hostname net-host-tcp net-host-abstract ro-etc-passwd caps-status
capget no-new-privs seccomp-mode setuid chroot sethostname uid-map personality mknod-char
""".split()

# Never run on the host: they would send packets off the machine.
NATIVE_SKIPPED = {"net-metadata", "net-external"}

LINE_RE = re.compile(r"^(ok|ESCAPE|skip) ([A-Za-z0-9_-]+): (.*)$")
SUMMARY_RE = re.compile(r"^probe: (\d+) ok, (\d+) escape$")


def need_probe():
    if not PROBE.exists():
        pytest.skip(f"{PROBE} not built (ninja -C {BUILD})")


def need_root():
    if os.geteuid() != 0:
        pytest.skip("the security suite needs root (host uid ranges, native escapes)")


def need_cordon():
    need_root()
    need_probe()
    if not CORDON.exists():
        pytest.skip(f"{CORDON} not built")


class Report:
    """The parsed output of one probe run."""

    def __init__(self, proc):
        self.proc = proc
        self.lines = {}  # name -> (verdict, message)
        self.summary = None
        self.garbage = []
        for line in proc.stdout.splitlines():
            m = LINE_RE.match(line)
            s = SUMMARY_RE.match(line)
            if m:
                assert m.group(2) not in self.lines, f"probe {m.group(2)} reported twice"
                self.lines[m.group(2)] = (m.group(1), m.group(3))
            elif s:
                self.summary = (int(s.group(1)), int(s.group(2)))
            elif line.strip():
                self.garbage.append(line)

    def names(self, verdict):
        return sorted(n for n, (v, _) in self.lines.items() if v == verdict)

    def show(self, verdict):
        return "\n".join(f"  {verdict} {n}: {self.lines[n][1]}" for n in self.names(verdict))

    def context(self):
        return (f"exit {self.proc.returncode}\n--- stdout\n{self.proc.stdout}"
                f"--- stderr\n{self.proc.stderr}")


@pytest.fixture(scope="module")
def canaries():
    """Plant host-side canaries; yields the probe's --env values and cordon's environment."""
    tag = secrets.token_hex(6)
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(16)
    abstract_name = f"cordon-canary-{tag}"
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind("\0" + abstract_name)
    unix.listen(16)
    shm = Path("/dev/shm") / f"cordon-canary-{tag}"
    if shm.parent.is_dir():
        shm.write_text("host secret\n")
    probe_env = {
        "HOST_PID": str(os.getpid()),
        "HOST_HOSTNAME": socket.gethostname(),
        "HOST_NS": " ".join(os.readlink(f"/proc/self/ns/{t}") for t in NS_TYPES
                            if os.path.exists(f"/proc/self/ns/{t}")),
        "CANARY_TCP_PORT": str(tcp.getsockname()[1]),
        "CANARY_ABSTRACT": "@" + abstract_name,
    }
    host_env = dict(os.environ, CORDON_CANARY=f"leaked-{tag}")
    try:
        yield probe_env, host_env
    finally:
        tcp.close()
        unix.close()
        shm.unlink(missing_ok=True)


def run(cmd, env, pass_fds=()):
    return subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=RUN_TIMEOUT_S, pass_fds=pass_fds)


def run_in_sandbox(canaries, *cordon_opts, pass_fds=()):
    probe_env, host_env = canaries
    cmd = [str(CORDON), "run", "--ro-bind", f"{PROBE}:{PROBE_IN_SANDBOX}", "--timeout", "60s",
           *cordon_opts]
    for k, v in probe_env.items():
        cmd += ["--env", f"{k}={v}"]
    cmd += ["--", PROBE_IN_SANDBOX]
    return Report(run(cmd, host_env, pass_fds))


def run_native(canaries, *probe_args, pass_fds=()):
    probe_env, host_env = canaries
    return Report(run([str(PROBE), "--native", *probe_args], dict(host_env, **probe_env),
                      pass_fds))


def test_probe_list_matches_suite():
    """probe.c and this file agree on the probe names."""
    need_probe()
    out = subprocess.run([str(PROBE), "--list"], capture_output=True, text=True, check=True)
    listed = out.stdout.split()
    assert len(listed) == len(set(listed)), "duplicate probe names"
    assert sorted(listed) == sorted(EXPECTED_PROBES)
    assert len(listed) >= MIN_OK


# What root inside is given by design (README, security model): its own disk, written
# through an overlay that never reaches the template (`/` and the image), and the sandbox
# root's capability set (CAPS_SANDBOX_ROOT in src/lib/caps.h) in its own user namespace, for
# apt, dpkg and pip. Each is checked below to reach nothing of the host's.
ROOT_CAPS_HEX = "00000000800405fb"  # CHOWN DAC_OVERRIDE FOWNER FSETID KILL SETGID SETUID
#                                     SETPCAP NET_BIND_SERVICE SYS_CHROOT SETFCAP
GRANTED_TO_ROOT = """
ro-usr-bin ro-rootdir ro-bin-sh ro-libc caps-status capget setuid setgid setgroups chroot
""".split()
HOST_FILES = ("/bin/sh", "/lib/x86_64-linux-gnu/libc.so.6")


def file_digest(path):
    import hashlib
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest(), os.stat(path).st_mtime_ns


@pytest.mark.parametrize("user", ["user", "root"])
def test_sandbox_denies_every_probe(canaries, user):
    need_cordon()
    opts = ("--user", "root") if user == "root" else ()
    before = {p: file_digest(p) for p in HOST_FILES if os.path.exists(p)}
    rep = run_in_sandbox(canaries, *opts)
    ctx = rep.context()
    assert rep.summary is not None, f"probe did not finish\n{ctx}"
    granted = set(GRANTED_TO_ROOT) if user == "root" else set()
    escapes = [n for n in rep.names("ESCAPE") if n not in granted]
    assert not escapes, f"escapes as {user}:\n{rep.show('ESCAPE')}\n{ctx}"
    if user == "root":
        # Exactly the sandbox root's set: no NET_RAW, MKNOD, SYS_ADMIN, SYS_PTRACE, ...
        for name in ("caps-status", "capget"):
            line = rep.lines.get(name, ("", ""))[1]
            held = set(re.findall(r"[0-9a-f]{16}", line))
            assert held <= {ROOT_CAPS_HEX, "0000000000000000"}, line
        # What root wrote went to its own disk: the host's files are as they were.
        assert {p: file_digest(p) for p in before} == before
        assert not [n for n in os.listdir("/usr/bin") + os.listdir("/") if n.startswith(".cordon-probe-")]
        granted_seen = set(rep.names("ESCAPE"))
        rep_ok = len(rep.names("ok")) + len(granted_seen)
    else:
        rep_ok = len(rep.names("ok"))
    assert not rep.names("skip"), f"probes skipped inside the sandbox:\n{rep.show('skip')}"
    missing = sorted(set(EXPECTED_PROBES) - set(rep.lines))
    assert not missing, f"probes that did not report: {missing}\n{ctx}"
    assert len(rep.names("ok")) >= MIN_OK
    assert rep.summary == (len(rep.names("ok")), rep_ok - len(rep.names("ok"))), ctx
    assert not rep.garbage, f"unexpected output lines: {rep.garbage}"
    # The probe exits 1 on any ESCAPE: for root, only the granted ones got here.
    assert rep.proc.returncode == (1 if rep.names("ESCAPE") else 0), ctx


def test_sandbox_identity(canaries):
    """The default user is uid 1000 in a uid range that is not host root's."""
    need_cordon()
    rep = run_in_sandbox(canaries)
    verdict, msg = rep.lines.get("uid-map", (None, rep.context()))
    assert verdict == "ok", msg
    assert "self 1000 ->" in msg, msg


def test_native_probes_detect_escapes(canaries):
    """On the host, as root, the same probes see the escapes: they are not vacuous."""
    need_root()
    need_probe()
    rep = run_native(canaries)
    ctx = rep.context()
    assert rep.summary is not None, f"probe did not finish\n{ctx}"
    escapes = rep.names("ESCAPE")
    assert len(escapes) >= MIN_NATIVE_ESCAPES, f"only {len(escapes)} escapes natively\n{ctx}"
    not_seen = sorted(set(MUST_ESCAPE_NATIVELY) - set(escapes))
    assert not not_seen, f"probes blind to a real escape on the host: {not_seen}\n{ctx}"
    assert set(rep.names("skip")) == NATIVE_SKIPPED, ctx
    assert set(rep.lines) == set(EXPECTED_PROBES), ctx
    assert rep.proc.returncode == 1, ctx


def test_leaked_fd_is_detected(canaries):
    """An fd inherited without O_CLOEXEC is reported, with what it points to."""
    need_probe()
    fd = os.open("/dev/null", os.O_RDONLY)
    try:
        clean = run_native(canaries, "--only", "fd-leak")
        leaky = run_native(canaries, "--only", "fd-leak", pass_fds=(fd,))
    finally:
        os.close(fd)
    assert clean.lines.get("fd-leak", ("",))[0] == "ok", clean.context()
    verdict, msg = leaky.lines.get("fd-leak", (None, leaky.context()))
    assert verdict == "ESCAPE", msg
    assert f"{fd} -> /dev/null" in msg, msg
    assert leaky.proc.returncode == 1


def test_sandbox_closes_inherited_fds(canaries):
    """cordon run itself must not hand an inherited fd to the sandbox."""
    need_cordon()
    fd = os.open("/etc/hostname" if os.path.exists("/etc/hostname") else "/dev/null",
                 os.O_RDONLY)
    try:
        rep = run_in_sandbox(canaries, pass_fds=(fd,))
    finally:
        os.close(fd)
    verdict, msg = rep.lines.get("fd-leak", (None, rep.context()))
    assert verdict == "ok", msg


# ---- the same probe inside gVisor (runtime gvisor) ----
#
# There the application's system calls are served by the Sentry, gVisor's user-space kernel,
# not by the host's: unshare, mount, ptrace, keyctl, io_uring, netlink, /dev/fuse, /sys and
# the like answer from the Sentry's own objects, and cordon's seccomp filter and Landlock are
# not what stands in the way (runsc's filters around the Sentry and the gofer are). Those
# probes are reported as served by the Sentry, not as escapes. What must hold is everything
# that would touch the host: its files, processes, sockets, environment, devices, network,
# its binaries (writes stay in the sandbox's layer), and no fd of ours inside.
GVISOR_HOST_EXPOSURE = """
host-etc-shadow host-etc-ssh host-etc-apt-auth host-root host-home host-var host-run host-dev-shm
env-canary env-allowlist hostname net-host-tcp net-host-abstract net-only-loopback
host-pid-kill host-pid-proc process_vm_readv process_vm_writev pidfd_getfd fd-leak
proc-kcore proc-kallsyms proc-sysrq-trigger proc-core-pattern proc-modprobe proc-drop-caches
dev-sda dev-vda dev-mem dev-port dev-kmsg dev-kvm dev-loop-control mknod-block
proc1-exe-write ro-etc-passwd init_module finit_module kexec_load kexec_file_load bpf
iopl ioperm reboot swapon clock_settime settimeofday
""".split()
# Reached nothing: with `deny` the Sentry answers EHOSTUNREACH where the host says ENETUNREACH.
GVISOR_NO_ROUTE = ("net-metadata", "net-external")


def runsc_missing():
    return not os.access(os.environ.get("CORDON_RUNSC", "/usr/bin/runsc"), os.X_OK)


@pytest.mark.parametrize("user", ["user", "root"])
def test_gvisor_host_exposure(canaries, user):
    need_cordon()
    if runsc_missing():
        pytest.skip("runsc is not installed (apt-get install runsc)")
    opts = ("--runtime", "gvisor") + (("--user", "root") if user == "root" else ())
    before = {p: file_digest(p) for p in HOST_FILES if os.path.exists(p)}
    rep = run_in_sandbox(canaries, *opts)
    ctx = rep.context()
    assert rep.summary is not None, f"probe did not finish\n{ctx}"
    granted = set(GRANTED_TO_ROOT) if user == "root" else set()
    held = [n for n in GVISOR_HOST_EXPOSURE if n not in granted]
    broken = [n for n in held if rep.lines.get(n, ("missing",))[0] != "ok"]
    assert not broken, "host exposure inside gVisor:\n" + \
        "\n".join(f"{n}: {rep.lines.get(n)}" for n in broken) + f"\n{ctx}"
    for n in GVISOR_NO_ROUTE:
        verdict, msg = rep.lines[n]
        assert verdict == "ok" or "failed with EHOSTUNREACH" in msg, f"{n}: {msg}"
    assert {p: file_digest(p) for p in before} == before, "a host file changed"
    served = sorted(set(rep.names("ESCAPE")) - set(held) - set(GVISOR_NO_ROUTE))
    print(f"served by the Sentry ({len(served)}): {' '.join(served)}")
