"""Fixtures for the gvisor runtime's tests: a real runsc (Debian's package) under a real
cordon and cordond. Everything skips with a reason where runsc is missing or we are not root
(runsc makes the sandbox's namespaces and mounts). The daemon helpers are tests/daemon's."""

import importlib.util
import os
import shutil
import subprocess

import pytest

HERE = os.path.dirname(__file__)
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
BUILD = os.environ.get("CORDON_BUILD", os.path.join(REPO, "build"))
CORDON = os.path.join(BUILD, "cordon")

_spec = importlib.util.spec_from_file_location("daemon_conftest", os.path.join(REPO, "tests", "daemon",
                                                                              "conftest.py"))
dc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dc)

RUNSC = os.environ.get("CORDON_RUNSC") or shutil.which("runsc") or "/usr/bin/runsc"
GVISOR_DIR = os.environ.get("CORDON_GVISOR_DIR", "/run/cordon/gvisor")


def gvisor_missing():
    if os.geteuid() != 0:
        return "the gvisor runtime needs root"
    if not os.access(RUNSC, os.X_OK):
        return "runsc is not installed (apt-get install runsc)"
    return None


requires_gvisor = pytest.mark.skipif(gvisor_missing() is not None, reason=gvisor_missing() or "")


def run(args, timeout=60, **kw):
    return subprocess.run([CORDON, "run", "--runtime", "gvisor", *args], capture_output=True,
                          timeout=timeout, **kw)


def gvisor_entries():
    """The per-sandbox directories under the gvisor base and runsc's state entries."""
    out = set()
    try:
        out |= {n for n in os.listdir(GVISOR_DIR) if n.startswith("s")}
    except FileNotFoundError:
        pass
    try:
        out |= {"runsc/" + n for n in os.listdir(os.path.join(GVISOR_DIR, "runsc"))}
    except FileNotFoundError:
        pass
    return out


def gvisor_mounts():
    with open("/proc/self/mountinfo") as f:
        return [l.split()[4] for l in f if GVISOR_DIR + "/" in l.split()[4]]


def runsc_procs():
    """runsc, gofer and Sentry processes of our base directory (not other users' runsc)."""
    return dc.host_procs(f"--root={GVISOR_DIR}/runsc")


def slot_by_memory(memory_mb):
    """The cgroup name ("sN") of the one gvisor sandbox whose memory limit is @memory_mb (the
    Sentry's part added): how a test finds its own sandbox among the pool's."""
    want = (memory_mb + 96) << 20
    names = set()
    for d in dc.cordon_cgroup_dirs():
        for f in ("memory.limit_in_bytes", "memory.max"):
            try:
                if int(dc.read_int(os.path.join(d, f))) == want:
                    names.add(os.path.basename(d))
            except (OSError, ValueError):
                pass
    assert len(names) == 1, f"sandboxes of {memory_mb} MiB: {names}"
    return names.pop()


def slot_procs(name):
    """runsc, gofer and Sentry of the sandbox of slot @name ("sN")."""
    return dc.host_procs(f"{GVISOR_DIR}/{name}/bundle")


def veths():
    return {n for n in os.listdir("/sys/class/net") if n.startswith("cdn")}


@pytest.fixture(scope="module")
def gdaemon():
    why = gvisor_missing()
    if why:
        pytest.skip(why)
    d = dc.start_daemon(pool=1, max_sandboxes=32, max_timeout=600)
    yield d
    alive = d.alive()
    d.cleanup()
    assert alive, f"cordond died during the module:\n{d.log_tail()}"


@pytest.fixture(scope="module")
def gclient(gdaemon):
    return gdaemon.client(timeout=60)
