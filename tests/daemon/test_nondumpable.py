"""cordond is not dumpable (PR_SET_DUMPABLE 0 at start): secrets' values live in its memory, so
no core dump of it is written and a process of its own uid can neither ptrace it nor read its
/proc/PID/{mem,environ}. Run as an unprivileged uid so that the kernel's ownership rule shows:
the /proc files of a non-dumpable process belong to root, those of a dumpable one (the control,
started the same way) to its uid."""

import ctypes
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from conftest import CORDOND, wait_until

UID = 65534


def as_nobody(argv, **kw):
    return subprocess.Popen(["setpriv", f"--reuid={UID}", f"--regid={UID}", "--clear-groups", "--"] + argv,
                            start_new_session=True, **kw)


def stop(p):
    os.killpg(p.pid, signal.SIGTERM)
    try:
        p.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def ptrace_attach_as_nobody(pid):
    """errno of PTRACE_ATTACH to @pid from a child running as UID (0: attached)."""
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(r)
        os.setgroups([])
        os.setresgid(UID, UID, UID)
        os.setresuid(UID, UID, UID)
        libc = ctypes.CDLL(None, use_errno=True)
        rc = libc.ptrace(16, pid, None, None)  # PTRACE_ATTACH
        os.write(w, str(0 if rc == 0 else ctypes.get_errno()).encode())
        os._exit(0)
    os.close(w)
    out = os.read(r, 16)
    os.close(r)
    os.waitpid(child, 0)
    return int(out or b"-1")


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_cordond_is_not_dumpable():
    root = tempfile.mkdtemp(prefix="cordtest-dump-")
    os.chown(root, UID, UID)
    sock = os.path.join(root, "cordon.sock")
    log = open(os.path.join(root, "log"), "wb")
    d = as_nobody([CORDOND, "--socket", sock, "--state-dir", os.path.join(root, "state"),
                   "--runtime-dir", os.path.join(root, "run"), "--pool", "0"], stdout=log, stderr=log)
    control = as_nobody(["sleep", "60"])
    try:
        assert wait_until(lambda: os.path.exists(sock), 15), open(os.path.join(root, "log")).read()
        pid = d.pid  # setpriv execs cordond in place
        assert os.readlink(f"/proc/{pid}/exe").endswith("cordond")
        time.sleep(0.2)
        # The control: a dumpable process of the same uid owns its /proc files...
        assert wait_until(lambda: os.stat(f"/proc/{control.pid}/environ").st_uid == UID, 5)
        # ...cordond's are root's: it is not dumpable.
        for f in ("environ", "mem", "status"):
            assert os.stat(f"/proc/{pid}/{f}").st_uid == 0, f
        try:
            with open(f"/proc/{pid}/status") as f:
                status = f.read()
            assert f"Uid:\t{UID}" in status
        except PermissionError:
            pass
        yama = "/proc/sys/kernel/yama/ptrace_scope"
        scope = open(yama).read().strip() if os.path.exists(yama) else "0"
        if scope == "0":  # else yama refuses both, and the check would show nothing
            assert ptrace_attach_as_nobody(control.pid) == 0
            assert ptrace_attach_as_nobody(pid) == 1  # EPERM
    finally:
        stop(control)
        stop(d)
        log.close()
        shutil.rmtree(root, ignore_errors=True)
