"""Nothing outlives `cordon run`: many short runs, some with `cordon run` itself SIGKILLed
mid-run, leave no process, mount, cgroup, file or fd behind.

When `cordon run` is SIGKILLed it cannot clean up: its sandbox processes die with it
(parent-death signal), and the cgroup it leaves is swept by the next `cordon run`
(cordon_sweep_stale()). So the final checks come after one more normal run.
"""

import os
import signal
import subprocess
import time
import uuid

from conftest import (cordon_cgroup_dirs, cordon_litter, mountinfo_lines, open_fds, procs_matching,
                      requires_root, wait_until)

pytestmark = requires_root

RUNS = 200
KILLED = 20


def cordon_processes():
    """PIDs of processes that are cordon's own (cordon-init in sandboxes, `cordon run`)."""
    out = set()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        if comm.startswith("cordon") and comm != "cordond":  # cordond: another suite's daemon
            out.add(int(d))
    return out


def runtime_dir_entries():
    """Everything under cordon's runtime dir (/run/cordon: uid-range slot locks and the like)."""
    root = os.environ.get("CORDON_RUNTIME_DIR", "/run/cordon")
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        out.update(os.path.join(dirpath, n) for n in dirnames + filenames)
    return out


def test_no_leaks_after_many_runs(cordon_bin, tmp_path):
    private_tmp = tmp_path / "tmpdir"
    private_tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(private_tmp))

    def run_true():
        p = subprocess.run([cordon_bin, "run", "--", "/bin/true"], stdin=subprocess.DEVNULL,
                           capture_output=True, env=env, timeout=30)
        assert p.returncode == 0, (p.returncode, p.stderr)

    run_true()  # sweeps whatever earlier tests or crashes left, so the baseline is clean
    mounts0 = mountinfo_lines()
    fds0 = open_fds()
    cgroups0 = cordon_cgroup_dirs()
    litter0 = cordon_litter()
    procs0 = cordon_processes()
    rundir0 = runtime_dir_entries()

    t0 = time.monotonic()
    killed = []
    every = RUNS // KILLED
    for i in range(RUNS):
        run_true()
        if i % every != every - 1:
            continue
        arg = "1000." + str(uuid.uuid4().int % 10**9).rjust(9, "0")
        p = subprocess.Popen([cordon_bin, "run", "--", "sleep", arg], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                             start_new_session=True)
        seen = wait_until(lambda: procs_matching(arg, argv0="sleep"), 10)
        assert seen, f"the sandboxed `sleep {arg}` never appeared on the host"
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        gone = wait_until(lambda: not procs_matching(arg), 3)
        assert gone, (f"`cordon run` was SIGKILLed but its sandbox process {procs_matching(arg)} "
                      "is still alive 3s later (no parent-death signal?)")
        killed.append(arg)
    elapsed = time.monotonic() - t0

    run_true()  # sweeps the cgroups of the SIGKILLed runs

    left = [a for a in killed if procs_matching(a)]
    assert not left, f"sandbox processes remain: {left}"
    wait_until(lambda: not (cordon_processes() - procs0), 3)
    extra_procs = cordon_processes() - procs0
    assert not extra_procs, f"cordon processes remain: {sorted(extra_procs)}"

    mounts1 = mountinfo_lines()
    assert len(mounts1) == len(mounts0), \
        f"host mounts changed: +{sorted(set(mounts1) - set(mounts0))} -{sorted(set(mounts0) - set(mounts1))}"

    stale = wait_until(lambda: not (cordon_cgroup_dirs() - cgroups0), 5)
    assert stale, f"cgroup dirs remain after the sweep: {sorted(cordon_cgroup_dirs() - cgroups0)}"

    assert list(private_tmp.iterdir()) == [], f"files left in $TMPDIR: {list(private_tmp.iterdir())}"
    assert cordon_litter() - litter0 == set(), f"files left on the host: {sorted(cordon_litter() - litter0)}"
    # Slot lock files may be reused state, but they must not grow with the number of runs.
    grown = runtime_dir_entries() - rundir0
    assert len(grown) <= 4, f"{len(grown)} new entries in the runtime dir after {RUNS} runs: {sorted(grown)[:10]}"
    assert open_fds() == fds0, f"fds of the test process changed: {fds0} -> {open_fds()}"
    assert elapsed < 90, f"{RUNS} runs + {KILLED} killed runs took {elapsed:.1f}s"


def test_sigkilled_run_with_children_cleans_up(cordon_bin):
    """A sandbox with a process tree (including a setsid daemon) dies with `cordon run`."""
    tag = "1000." + str(uuid.uuid4().int % 10**9).rjust(9, "0")
    script = f"setsid sh -c 'sleep {tag} &'; sleep {tag} & sleep {tag} & wait"
    p = subprocess.Popen([cordon_bin, "run", "--", "/bin/sh", "-c", script], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert wait_until(lambda: len(procs_matching(tag, argv0="sleep")) >= 3, 10), \
            f"expected 3 sleeps on the host, saw {procs_matching(tag, argv0='sleep')}"
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        assert wait_until(lambda: not procs_matching(tag), 3), \
            f"processes of a SIGKILLed `cordon run` survive: {procs_matching(tag)}"
    finally:
        for pid in procs_matching(tag):
            os.kill(pid, signal.SIGKILL)
