"""Fixtures for the microvm runtime's tests: a real QEMU (Debian's qemu-system-x86) booting
Debian's cloud kernel (contrib/microvm-kernel.sh) under a real cordon. Everything skips with a
reason where QEMU, the guest kernel, mkfs.erofs or busybox-static is missing or we are not root.

Guest boots are slow under TCG (about 4 s each on this 2-core host): the tests share few of
them. Each test session has its own image cache and VM directory (tmp), so that the leak
check sees only its own sandboxes."""

import contextlib
import importlib.util
import os
import shutil
import subprocess
import time

import pytest

HERE = os.path.dirname(__file__)
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
BUILD = os.environ.get("CORDON_BUILD", os.path.join(REPO, "build"))
CORDON = os.path.join(BUILD, "cordon")
KERNEL = os.environ.get("CORDON_MICROVM_KERNEL", "/var/cache/cordon-kernels/microvm")
BUSYBOX = "/bin/busybox"

_spec = importlib.util.spec_from_file_location("daemon_conftest", os.path.join(REPO, "tests", "daemon",
                                                                              "conftest.py"))
dc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dc)


def microvm_missing():
    if os.geteuid() != 0:
        return "the microvm runtime needs root"
    if not shutil.which("qemu-system-x86_64"):
        return "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)"
    if not os.path.exists(os.path.join(KERNEL, "vmlinuz")):
        return f"no guest kernel in {KERNEL} (run contrib/microvm-kernel.sh)"
    if not shutil.which("mkfs.erofs"):
        return "mkfs.erofs is not installed (apt-get install erofs-utils)"
    out = subprocess.run(["file", "-L", BUSYBOX], capture_output=True, text=True).stdout
    if "statically linked" not in out:
        return "no static busybox for the test's template (apt-get install busybox-static)"
    return None


requires_microvm = pytest.mark.skipif(microvm_missing() is not None, reason=microvm_missing() or "")


@pytest.fixture(scope="session")
def mvenv(tmp_path_factory):
    """The environment of every cordon call: a cache and a VM directory of this session."""
    base = tmp_path_factory.mktemp("microvm")
    env = dict(os.environ, CORDON_MICROVM_CACHE=str(base / "cache"), CORDON_MICROVM_DIR=str(base / "vms"))
    return env


@pytest.fixture(scope="session")
def rootfs(tmp_path_factory):
    """A small template: busybox and its applets, /etc, /tmp."""
    root = tmp_path_factory.mktemp("rootfs")
    os.makedirs(root / "bin")
    os.makedirs(root / "etc")
    shutil.copy(BUSYBOX, root / "bin" / "busybox")
    for applet in ("sh", "cat", "echo", "id", "wc", "head", "dd", "nproc", "grep", "uname",
                   "sleep", "ls", "mount", "true", "ip", "wget", "nslookup", "tr", "cut", "sed",
                   "od", "ping", "hostname", "date", "sha256sum", "kill", "ps"):
        os.symlink("busybox", root / "bin" / applet)
    (root / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n")
    return str(root)


def run(mvenv, rootfs, args, cmd, timeout=120, **kw):
    return subprocess.run([CORDON, "run", "--runtime", "microvm", "--rootfs", rootfs, *args, "--", *cmd],
                          capture_output=True, timeout=timeout, env=mvenv, **kw)


def qemu_procs(vms_dir):
    """QEMU processes of this session's VM directory: in its jail QEMU's command line names
    jail paths, but its log (opened by cordon before the jail) is a file of that directory."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/comm") as f:
                if not f.read().startswith("qemu-system"):
                    continue
            fds = [os.readlink(f"/proc/{pid}/fd/{n}") for n in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue
        if any(t.startswith(vms_dir + "/") for t in fds):
            out.append(int(pid))
    return out


@contextlib.contextmanager
def environ(**env):
    """os.environ with @env in it (a value None: unset) for the block, as it was after: what
    cordond started in the block inherits."""
    saved = {k: os.environ.get(k) for k in env}

    def put(kv):
        for k, v in kv.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    put(env)
    try:
        yield
    finally:
        put(saved)


def start_mvdaemon(vms, env=None, **kw):
    """dc.start_daemon(**kw) with its VMs in @vms and @env (see environ) in its environment."""
    with environ(**(env or {}), CORDON_MICROVM_DIR=vms):
        d = dc.start_daemon(**kw)
    d.vms = vms
    return d


def stop_mvdaemon(d):
    """@d stopped (it must not have died before), and none of its QEMUs or VM directories
    outlive it."""
    dc.check_alive_and_cleanup(d)
    assert dc.wait_until(lambda: qemu_procs(d.vms) == [] and os.listdir(d.vms) == [], 10), \
        (qemu_procs(d.vms), os.listdir(d.vms))


@pytest.fixture(scope="module")
def mvdaemon(tmp_path_factory, request):
    """One cordond for the module, its VMs in a directory of its own (the `host` template's
    erofs image is the shared cache's: made once, tens of seconds for a large /usr)."""
    d = start_mvdaemon(str(tmp_path_factory.mktemp("daemon-vms")),
                       pool=getattr(request.module, "POOL", 1), max_sandboxes=16, max_timeout=600)
    yield d
    stop_mvdaemon(d)


def mv_create(cl, body, wait_s=900):
    """cl.create(body), waiting while cordond makes the template's image: a create on its
    loop never does (503 unavailable, "being made", until the creator thread has made it:
    minutes for the host's /usr the first time)."""
    deadline = time.monotonic() + wait_s
    while True:
        r = cl.post("/v1/sandboxes", body)
        if r.status != 503 or "being made" not in r.text or time.monotonic() > deadline:
            assert r.status == 201, f"create failed: {r.describe()}"
            return r.json()
        time.sleep(2)
