"""Resource limits of `cordon run`: each test runs a workload that tries to exceed one limit
and checks that the limit holds, that the run reports it, and that nothing is left behind
(no cgroup directory under cordon/, no process of the test) when the run returns."""

import os
import signal
import subprocess
import time
import uuid

import pytest

from conftest import (EXIT_OOM, EXIT_TIMEOUT, cgroup_v2, cgroups_available, kill_matching, procs_matching,
                      requires_root, wait_until)

PY = "/usr/bin/python3"
SH = "/bin/sh"

pytestmark = pytest.mark.usefixtures("no_leftovers")

requires_cgroups = pytest.mark.skipif(not cgroups_available(),
                                      reason="needs root and the memory, pids and cpu cgroup controllers")


def host_responsive(limit=1.0):
    t0 = time.monotonic()
    subprocess.run(["/bin/true"], check=True, timeout=10)
    return time.monotonic() - t0 < limit


# ---------------------------------------------------------------------------------------------
# pids


@requires_root
def test_fork_loop_stops_at_pid_limit(cordon, marker):
    code = f"""# {marker}
import errno, os, sys, time
kids = []
err = None
for i in range(1000):
    try:
        pid = os.fork()
    except OSError as e:
        err = errno.errorcode[e.errno]
        break
    if pid == 0:
        time.sleep(20)
        os._exit(0)
    kids.append(pid)
print(len(kids), err, flush=True)
for k in kids:
    os.kill(k, 9)
for k in kids:
    os.waitpid(k, 0)
"""
    p = cordon.popen([PY, "-c", code], opts=["--pids", "64", "--timeout", "20s"], stdout=subprocess.PIPE)
    slow = []
    while p.poll() is None:
        if not host_responsive():
            slow.append(time.monotonic())
        time.sleep(0.1)
    out, err = p.communicate(timeout=30)
    assert not slow, "the host did not spawn /bin/true within 1s while the fork loop ran"
    assert p.returncode == 0, (p.returncode, out, err)
    n, why = out.decode().split()
    assert why == "EAGAIN", out
    # 64 pids in the sandbox, cordon-init and python included: the loop gets at most 62.
    assert 20 <= int(n) < 64, f"the fork loop got {n} children under --pids 64"


@requires_root
def test_shell_fork_bomb_is_contained(cordon, marker):
    """A real, unbounded fork bomb ends at --timeout and the host stays usable."""
    # The bomb's processes are orphans; the main shell spins (no forks) so the run lasts.
    bomb = f": {marker}; b() {{ b | b & }}; b; while :; do :; done"
    t0 = time.monotonic()
    p = cordon.popen(["bash", "-c", bomb], opts=["--pids", "64", "--timeout", "4s"], stderr=subprocess.DEVNULL)
    time.sleep(1.5)
    assert host_responsive(), "host could not spawn /bin/true within 1s during a fork bomb"
    try:
        rc = p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        pytest.fail("cordon run did not end at --timeout 4s with a fork bomb inside")
    assert rc == EXIT_TIMEOUT, rc
    assert time.monotonic() - t0 < 10


# ---------------------------------------------------------------------------------------------
# memory


@requires_cgroups
def test_memory_bomb_is_oom_killed(cordon, marker):
    code = f"""# {marker}
chunks = []
for i in range(200):
    chunks.append(b"\\xa5" * (1 << 20))
print("allocated 200 MB: the limit did not hold", flush=True)
"""
    r = cordon.run([PY, "-c", code], opts=["--memory", "64M", "--timeout", "30s"], json_result=True, timeout=60)
    assert r.returncode == EXIT_OOM, r.describe()
    assert "did not hold" not in r.out
    assert r.result["oom_killed"] is True, r.describe()
    assert r.result["timed_out"] is False, r.describe()
    assert 32 << 20 <= r.result["peak_memory_bytes"] <= 80 << 20, r.describe()


@requires_cgroups
def test_oom_of_a_child_is_reported(cordon, marker):
    """The command survives but something inside was OOM-killed: the JSON says so."""
    code = f"chunks = [b'x' * (1 << 20) for _ in range(200)]  # {marker}"
    r = cordon.run([SH, "-c", f'{PY} -c "{code}"; echo child=$?'], opts=["--memory", "64M", "--timeout", "30s"],
                   json_result=True, timeout=60)
    assert r.out == "child=137\n", r.describe()
    assert r.result["oom_killed"] is True, r.describe()


@requires_cgroups
def test_memory_limit_below_default_allows_normal_work(cordon, marker):
    code = f"x = b'y' * (20 << 20); print(len(x) >> 20)  # {marker}"
    r = cordon.run([PY, "-c", code], opts=["--memory", "64M"], json_result=True)
    assert r.returncode == 0, r.describe()
    assert r.out == "20\n"
    assert r.result["oom_killed"] is False, r.describe()
    assert r.result["peak_memory_bytes"] >= 20 << 20, r.describe()


# ---------------------------------------------------------------------------------------------
# disk


def test_disk_fill_hits_enospc(cordon, marker):
    r = cordon.run([SH, "-c", f": {marker}; dd if=/dev/zero of=/tmp/f bs=1M count=100; echo dd=$?; stat -c %s /tmp/f"],
                   opts=["--disk", "32M"], timeout=60)
    assert r.returncode == 0, r.describe()
    assert "No space left" in r.err, r.describe()
    lines = r.out.splitlines()
    assert lines[0] != "dd=0", r.describe()
    assert int(lines[1]) <= 32 << 20, r.describe()


def test_disk_is_shared_by_tmp_and_home(cordon, marker):
    script = (f": {marker}; dd if=/dev/zero of=/tmp/a bs=1M count=20 2>/dev/null; echo a=$?;"
              " dd if=/dev/zero of=/home/user/b bs=1M count=20 2>/dev/null; echo b=$?")
    r = cordon.run([SH, "-c", script], opts=["--disk", "32M"], timeout=60)
    assert r.returncode == 0, r.describe()
    assert r.out.splitlines() == ["a=0", "b=1"], r.describe()


# ---------------------------------------------------------------------------------------------
# time


def test_cpu_spin_killed_at_timeout(cordon, marker):
    script = f": {marker}; trap '' TERM INT HUP; while :; do :; done"
    r = cordon.run([SH, "-c", script], opts=["--timeout", "1s"], json_result=True, timeout=30)
    assert r.returncode == EXIT_TIMEOUT, r.describe()
    assert r.elapsed < 2.5, f"took {r.elapsed:.2f}s to end a --timeout 1s run"
    assert r.result["timed_out"] is True, r.describe()
    assert 900 <= r.result["wall_ms"] <= 2500, r.describe()
    assert r.result["cpu_ms"] >= 500, r.describe()


def test_timeout_kills_background_children_too(cordon, marker, sleep_arg):
    r = cordon.run([SH, "-c", f": {marker}; sleep {sleep_arg} & sleep {sleep_arg}"], opts=["--timeout", "1s"],
                   json_result=True, timeout=30)
    assert r.returncode == EXIT_TIMEOUT, r.describe()
    assert not procs_matching(sleep_arg), "sleep processes survived the timeout"


# ---------------------------------------------------------------------------------------------
# fds


def test_fd_exhaustion(cordon, marker):
    code = f"""# {marker}
import errno, os
fds = []
try:
    while len(fds) < 100000:
        fds.append(os.open("/dev/null", os.O_RDONLY))
    print(len(fds), "none")
except OSError as e:
    print(len(fds), errno.errorcode[e.errno])
"""
    r = cordon.run([PY, "-c", code], timeout=60)
    assert r.returncode == 0, r.describe()
    n, why = r.out.split()
    assert why == "EMFILE", r.describe()
    assert 100 <= int(n) < 1100, f"opened {n} files before EMFILE (host limit: {os.sysconf('SC_OPEN_MAX')})"


# ---------------------------------------------------------------------------------------------
# Processes that try to outlive the run


def test_setsid_daemon_killed_at_end(cordon, marker, sleep_arg):
    script = f": {marker}; setsid sh -c 'trap \"\" TERM HUP; sleep {sleep_arg} &'; sleep 1; echo main-done"
    p = cordon.popen([SH, "-c", script], stdout=subprocess.PIPE)
    try:
        seen = wait_until(lambda: procs_matching(sleep_arg, argv0="sleep"), 5)
        try:
            rc = p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            pytest.fail("cordon run did not return after its command exited (a daemon kept it alive?)")
        left = procs_matching(sleep_arg)  # right when it returned: no grace period
        assert seen, "the daemon never appeared on the host: the test did not test anything"
        assert not left, f"the setsid daemon survived the run: pids {left}"
        assert rc == 0, (rc, p.stderr.read())
        assert p.stdout.read() == b"main-done\n"
    finally:
        kill_matching(sleep_arg)


# ---------------------------------------------------------------------------------------------
# cpu


def _spin_ratio(cordon, marker, opts, procs, seconds=3):
    code = f"""# {marker}
import os, time
def spin():
    t = time.monotonic()
    while time.monotonic() - t < {seconds}:
        pass
kids = [os.fork() for _ in range({procs} - 1)]
if 0 in kids:
    spin(); os._exit(0)
spin()
for k in kids:
    os.waitpid(k, 0)
"""
    r = cordon.run([PY, "-c", code], opts=opts, json_result=True, timeout=60)
    assert r.returncode == 0, r.describe()
    return r.result["cpu_ms"] / r.result["wall_ms"], r


@requires_cgroups
def test_half_a_cpu(cordon, marker):
    ratio, r = _spin_ratio(cordon, marker, ["--cpus", "0.5"], 1)
    assert 0.3 <= ratio <= 0.7, f"cpu_ms/wall_ms = {ratio:.2f} under --cpus 0.5\n{r.describe()}"


@requires_cgroups
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs 2 CPUs")
def test_one_cpu_by_default(cordon, marker):
    ratio, r = _spin_ratio(cordon, marker, [], 2)
    assert 0.6 <= ratio <= 1.25, f"two spinning processes used {ratio:.2f} CPUs under the default --cpus 1\n{r.describe()}"


# ---------------------------------------------------------------------------------------------
# Where the limits live


def _cgroup_paths(pid):
    out = {}
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, ctl, path = line.rstrip("\n").split(":", 2)
            for c in ctl.split(",") if ctl else [""]:
                out[c] = path
    return out


def _read(path):
    with open(path) as f:
        return f.read().strip()


@requires_cgroups
def test_limits_land_in_a_cordon_cgroup(cordon, marker, sleep_arg):
    p = cordon.popen(["sleep", sleep_arg], opts=["--memory", "100M", "--pids", "50", "--cpus", "0.5"])
    try:
        pids = wait_until(lambda: procs_matching(sleep_arg, argv0="sleep"), 10)
        assert pids, "the sandboxed sleep never appeared on the host"
        cg = _cgroup_paths(pids[0])
        if cgroup_v2():
            path = "/sys/fs/cgroup" + cg[""]
            assert cg[""].startswith("/cordon/"), cg
            assert _read(f"{path}/memory.max") == str(100 << 20)
            assert _read(f"{path}/pids.max") == "50"
            quota, period = _read(f"{path}/cpu.max").split()
            assert int(quota) * 2 == int(period)
            if os.path.exists(f"{path}/memory.swap.max"):
                assert _read(f"{path}/memory.swap.max") == "0"
        else:
            for c in ("memory", "pids", "cpu", "cpuacct"):
                if c in cg:
                    assert cg[c].startswith("/cordon/"), f"{c} cgroup of the sandbox: {cg[c]}"
            mem = f"/sys/fs/cgroup/memory{cg['memory']}"
            assert int(_read(f"{mem}/memory.limit_in_bytes")) == 100 << 20
            if os.path.exists(f"{mem}/memory.memsw.limit_in_bytes"):
                assert int(_read(f"{mem}/memory.memsw.limit_in_bytes")) == 100 << 20
            assert _read(f"/sys/fs/cgroup/pids{cg['pids']}/pids.max") == "50"
            cpu = f"/sys/fs/cgroup/cpu{cg['cpu']}"
            assert int(_read(f"{cpu}/cpu.cfs_quota_us")) * 2 == int(_read(f"{cpu}/cpu.cfs_period_us"))
        os.kill(pids[0], signal.SIGKILL)
        assert p.wait(timeout=10) == 128 + 9
    finally:
        if p.poll() is None:
            kill_matching(sleep_arg)  # not `cordon run` itself: that would leave its cgroup to the sweep
            p.wait(timeout=10)


@requires_root
def test_each_sandbox_gets_its_own_host_uid(cordon, marker, sleep_arg):
    args = [sleep_arg, "1000." + str(uuid.uuid4().int % 10**9).rjust(9, "0")]
    procs = [cordon.popen(["sleep", a]) for a in args]
    try:
        pids = [wait_until(lambda a=a: procs_matching(a, argv0="sleep"), 10) for a in args]
        assert all(pids), "the sandboxed sleeps never appeared on the host"
        uids = []
        for ps in pids:
            with open(f"/proc/{ps[0]}/status") as f:
                uid = next(l.split()[1:] for l in f if l.startswith("Uid:"))
            uids.append(int(uid[0]))
        with open("/etc/passwd") as f:
            host_uids = {int(l.split(":")[2]) for l in f if l.count(":") >= 3}
        assert 0 not in uids, f"sandboxed processes run as host root: {uids}"
        assert uids[0] != uids[1], f"two live sandboxes share host uid {uids[0]}"
        assert not (set(uids) & host_uids), f"sandbox host uids {uids} belong to host accounts"
        for ps in pids:
            os.kill(ps[0], signal.SIGKILL)
        for p in procs:
            assert p.wait(timeout=10) == 137
    finally:
        for a in args:
            kill_matching(a)
        for p in procs:
            p.wait(timeout=10)
