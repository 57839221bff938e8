"""The security probe (tests/security/probe.c) inside a microvm sandbox: one `cordon run`, one
boot. The guest is a kernel of its own, so the probes that compare with the host's kernel
objects (namespace inodes: a fresh kernel's initial namespaces have the host's well-known
numbers; its own /sys and /dev) do not apply; what must hold is that nothing of the host is
reachable from the guest: the host's canaries (a TCP listener on loopback, an abstract unix
socket, a file in /dev/shm, a variable in cordon's environment, our pid and hostname), the
host's files, the metadata address, and the default user being uid 1000.

What the jail adds inside its sandbox (seccomp, a capability bounding set, no_new_privs) the
guest's PID 1 applies as well, with the host's own filter (the last test), so that the code
inside meets the guest kernel through the same narrow syscall surface; QEMU, the host-side
surface, is confined on its own (test_microvm.py's test of QEMU's /proc/PID/status)."""

import importlib.util
import os
import shutil
import subprocess

import pytest

from conftest import BUSYBOX, CORDON, REPO, requires_microvm

pytestmark = requires_microvm

_spec = importlib.util.spec_from_file_location("security_suite", os.path.join(REPO, "tests", "security",
                                                                             "test_security.py"))
sec = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sec)
canaries = sec.canaries  # the fixture, planted for this module

# Probes that must say ok in the guest: the host's objects and files out of reach.
HOST_EXPOSURE = """
host-pid-kill host-pid-proc hostname env-canary env-allowlist net-host-tcp net-host-abstract
net-metadata host-etc-shadow host-etc-ssh host-etc-apt-auth host-root host-home host-var
host-run host-dev-shm mount-host-root ro-bin-sh ro-etc-passwd proc1-exe-write fd-leak
""".split()
# What the jail applies inside (src/lib/caps.h, seccomp, prctl), and the guest's PID 1 too.
IN_GUEST_HARDENING = "caps-status no-new-privs seccomp-mode".split()


@pytest.fixture(scope="module")
def report(canaries, tmp_path_factory, mvenv):
    sec.need_probe()
    root = tmp_path_factory.mktemp("probe-root")
    for d in ("bin", "etc", "tmp"):
        os.makedirs(root / d)
    shutil.copy(BUSYBOX, root / "bin" / "busybox")
    for applet in ("sh", "id", "env"):
        os.symlink("busybox", root / "bin" / applet)
    shutil.copy(sec.PROBE, root / "bin" / "cordon-probe")
    (root / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n")
    probe_env, host_env = canaries
    cmd = [str(CORDON), "run", "--runtime", "microvm", "--rootfs", str(root), "--timeout", "120s"]
    for k, v in probe_env.items():
        cmd += ["--env", f"{k}={v}"]
    env = dict(mvenv, **{k: v for k, v in host_env.items() if k == "CORDON_CANARY"})
    proc = subprocess.run([*cmd, "--", "/bin/sh", "-c", "echo uid=$(id -u); exec env -u SHLVL -u PWD /bin/cordon-probe"], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=300)
    rep = sec.Report(proc)
    assert rep.summary is not None, f"probe did not finish\n{rep.context()}"
    return rep


def test_host_unreachable_from_the_guest(report):
    names = set(report.lines)
    missing = [n for n in HOST_EXPOSURE if n not in names]
    assert not missing, f"probes that did not report: {missing}\n{report.context()}"
    bad = [f"{n}: {report.lines[n]}" for n in HOST_EXPOSURE if report.lines[n][0] != "ok"]
    assert not bad, "\n".join(bad)


def test_default_user_is_1000(report):
    assert report.garbage == ["uid=1000"], report.garbage


def test_in_guest_hardening(report):
    """What the jail applies inside, the guest's PID 1 applies too (src/init/vm.c, harden()):
    no capabilities, no_new_privs and the sandbox's seccomp filter, sent by the host."""
    bad = [f"{n}: {report.lines.get(n)}" for n in IN_GUEST_HARDENING if report.lines.get(n, ("",))[0] != "ok"]
    assert not bad, "\n".join(bad)
