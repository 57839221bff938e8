"""Fixtures for the `cordon run` integration tests.

Run with Debian's pytest:  /usr/bin/python3 -m pytest tests/integration
The binary is taken from $CORDON_BUILD (default: <repo>/build).

Every test starts real `cordon run` processes. Tests that need root (cgroup limits, host
uid ranges, leak accounting) or a host tool (gcc, node, git, make) skip with a reason;
a missing `cordon` binary is an error, not a skip, so a broken build never passes.
"""

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("CORDON_BUILD", os.path.join(REPO, "build"))
CORDON = os.path.join(BUILD, "cordon")

IS_ROOT = os.geteuid() == 0

requires_root = pytest.mark.skipif(not IS_ROOT, reason="needs root (cgroup limits, host uid ranges)")

# Exit statuses of `cordon run` (include/cordon/cordon.h).
EXIT_USAGE = 2
EXIT_OOM = 123
EXIT_TIMEOUT = 124
EXIT_SETUP = 125
EXIT_NOEXEC = 126
EXIT_NOTFOUND = 127

JSON_FIELDS = ("exit_code", "signal", "timed_out", "oom_killed", "wall_ms", "cpu_ms",
               "peak_memory_bytes")


def requires_tool(name):
    return pytest.mark.skipif(shutil.which(name) is None, reason=f"{name} is not installed on the host")


def cgroup_v1_controllers():
    """Mounted cgroup v1 hierarchies that cordon uses, as paths."""
    out = []
    for c in ("memory", "pids", "cpu", "cpuacct", "freezer"):
        p = os.path.join("/sys/fs/cgroup", c)
        if os.path.isfile(os.path.join(p, "cgroup.procs")) and \
                not os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            out.append(p)
    return out


def cgroup_v2():
    return os.path.exists("/sys/fs/cgroup/cgroup.controllers")


def cgroups_available():
    """True when cordon should apply cgroup limits: root and a memory+cpu controller."""
    if not IS_ROOT:
        return False
    if cgroup_v2():
        try:
            with open("/sys/fs/cgroup/cgroup.controllers") as f:
                ctl = f.read().split()
        except OSError:
            return False
        return "memory" in ctl and "cpu" in ctl and "pids" in ctl
    names = {os.path.basename(p) for p in cgroup_v1_controllers()}
    return {"memory", "pids", "cpu"} <= names


def cordon_cgroup_dirs():
    """Every directory below the cordon/ cgroup parents (v1: each controller; v2: unified)."""
    roots = [os.path.join(p, "cordon") for p in cgroup_v1_controllers()]
    if cgroup_v2():
        roots.append("/sys/fs/cgroup/cordon")
    found = set()
    for r in roots:
        if not os.path.isdir(r):
            continue
        for dirpath, dirnames, _ in os.walk(r):
            for d in dirnames:
                found.add(os.path.join(dirpath, d))
    return found


def wait_until(pred, timeout, interval=0.05):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(interval)


def procs_matching(marker, argv0=None):
    """PIDs of host processes (not zombies) whose command line contains @marker.

    `cordon run` and cordon-init carry the command in their own command lines; with @argv0,
    only processes whose argv[0] has that basename count (the sandboxed command itself)."""
    me = os.getpid()
    m = marker.encode()
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
            if m not in cmd:
                continue
            if argv0 is not None and os.path.basename(cmd.split(b"\0", 1)[0]).decode(errors="replace") != argv0:
                continue
            with open(f"/proc/{d}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            pids.append(int(d))
    return pids


def mountinfo_lines():
    with open("/proc/self/mountinfo") as f:
        return f.read().splitlines()


def open_fds():
    return sorted(int(x) for x in os.listdir("/proc/self/fd"))


# Places where a careless runtime leaves things behind on the host.
LITTER_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run", "/var/run", "/run/user")


def cordon_litter():
    """Host paths that look like cordon's (name mentions cordon) in the usual scratch dirs."""
    out = set()
    for d in LITTER_DIRS:
        try:
            for n in os.listdir(d):
                if "cordon" in n.lower():
                    out.add(os.path.join(d, n))
        except OSError:
            pass
    return out


@dataclasses.dataclass
class Result:
    argv: list
    returncode: int
    stdout: bytes
    stderr: bytes
    elapsed: float
    result: dict | None = None  # parsed --json-result

    @property
    def out(self):
        return self.stdout.decode(errors="replace")

    @property
    def err(self):
        return self.stderr.decode(errors="replace")

    def err_lines(self):
        """stderr lines, minus the one unprivileged warning when not root."""
        lines = self.err.splitlines()
        if not IS_ROOT and lines and lines[0].startswith("cordon:") and "cgroup" in lines[0]:
            lines = lines[1:]
        return lines

    def describe(self):
        return (f"argv={self.argv!r}\nrc={self.returncode} elapsed={self.elapsed:.2f}s\n"
                f"stdout={self.stdout[:2000]!r}\nstderr={self.stderr[:2000]!r}\n"
                f"json={self.result!r}")


class Cordon:
    def __init__(self, binary, tmp_path):
        self.binary = binary
        self.tmp_path = tmp_path

    def raw(self, args, input=None, timeout=60, env=None, pass_fds=()):
        """`cordon ARGS...` exactly as given; returns a Result."""
        argv = [self.binary] + list(args)
        t0 = time.monotonic()
        p = subprocess.Popen(argv, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                             pass_fds=pass_fds, start_new_session=True)
        try:
            out, err = p.communicate(input=input, timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            pytest.fail(f"cordon did not return within {timeout}s: {argv!r}\nstderr={err[:2000]!r}")
        return Result(argv, p.returncode, out, err, time.monotonic() - t0)

    def run(self, cmd, opts=(), input=None, timeout=60, env=None, json_result=False):
        """`cordon run OPTS... -- CMD...`; with json_result, --json-result FD is added and parsed."""
        opts = list(opts)
        if not json_result:
            return self.raw(["run"] + opts + ["--"] + list(cmd), input=input, timeout=timeout, env=env)
        with tempfile.TemporaryFile(dir=self.tmp_path) as jf:
            fd = jf.fileno()
            r = self.raw(["run", "--json-result", str(fd)] + opts + ["--"] + list(cmd),
                         input=input, timeout=timeout, env=env, pass_fds=(fd,))
            jf.seek(0)
            data = jf.read()
        try:
            r.result = json.loads(data.decode())
        except (ValueError, UnicodeDecodeError) as e:
            pytest.fail(f"--json-result did not write one JSON object ({e}): {data[:500]!r}\n{r.describe()}")
        return r

    def popen(self, cmd, opts=(), **kw):
        """Starts `cordon run OPTS... -- CMD...` in its own session; the caller waits."""
        argv = [self.binary, "run"] + list(opts) + ["--"] + list(cmd)
        kw.setdefault("stdin", subprocess.DEVNULL)
        kw.setdefault("stdout", subprocess.DEVNULL)
        kw.setdefault("stderr", subprocess.PIPE)
        return subprocess.Popen(argv, start_new_session=True, **kw)


@pytest.fixture(scope="session")
def cordon_bin():
    if not (os.path.isfile(CORDON) and os.access(CORDON, os.X_OK)):
        pytest.fail(f"no cordon binary at {CORDON} (build it, or set CORDON_BUILD)", pytrace=False)
    return CORDON


@pytest.fixture
def cordon(cordon_bin, tmp_path):
    return Cordon(cordon_bin, tmp_path)


@pytest.fixture
def marker():
    """A unique string to find this test's processes on the host by their command line."""
    return "cordonmark" + uuid.uuid4().hex[:12]


@pytest.fixture
def sleep_arg():
    """A unique `sleep` duration (GNU sleep takes fractions): its process is findable by cmdline."""
    return "1000." + str(uuid.uuid4().int % 10**9).rjust(9, "0")


def kill_matching(marker):
    for pid in procs_matching(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


@pytest.fixture
def no_leftovers(marker):
    """After the test: no new cordon cgroup dirs and no process mentioning the marker remain.

    Concurrent sandboxes of other users of this machine can come and go; a new cgroup dir
    only counts as left behind if it is still there after a short grace period.
    """
    before = cordon_cgroup_dirs()
    yield marker
    procs = procs_matching(marker)
    kill_matching(marker)
    wait_until(lambda: not (cordon_cgroup_dirs() - before), 5)
    stale = cordon_cgroup_dirs() - before
    assert not procs, f"processes left behind after the run: {procs}"
    assert not stale, f"cgroup dirs left behind: {sorted(stale)}"


@pytest.fixture
def busybox_rootfs(tmp_path):
    """A tiny rootfs: bin/busybox (static) and bin/sh -> busybox."""
    bb = shutil.which("busybox") or "/usr/bin/busybox"
    if not os.path.isfile(bb):
        pytest.skip("busybox-static is not installed")
    with open(bb, "rb") as f:
        if b"ld-linux" in f.read(4096 * 4):
            pytest.skip("busybox on the host is not static (install busybox-static)")
    root = tmp_path / "rootfs"
    (root / "bin").mkdir(parents=True)
    shutil.copy2(bb, root / "bin" / "busybox")
    os.symlink("busybox", root / "bin" / "sh")
    os.chmod(root, 0o755)
    return root

