"""One vocabulary of sizes for `cordon run` (and create, cordond, the template builder): a bare
number is MiB, K/M/G/T suffixes are binary; and limits the host could never honour (more CPUs
or memory than it has) are a usage error naming the host's maximum, not accepted silently."""

import os

import pytest

from conftest import EXIT_OOM, EXIT_USAGE, cgroups_available

PY = "/usr/bin/python3"
SH = "/bin/sh"

requires_cgroups = pytest.mark.skipif(not cgroups_available(),
                                      reason="needs root and the memory, pids and cpu cgroup controllers")


def host_memory_mib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    pytest.skip("no MemTotal in /proc/meminfo")


def one_line(r, *mentions):
    lines = r.err_lines()
    assert len(lines) == 1 and lines[0].startswith("cordon"), r.describe()
    for m in mentions:
        assert m in lines[0], f"the message should say {m!r}\n" + r.describe()
    assert b"RAN" not in r.stdout, r.describe()


@requires_cgroups
def test_bare_memory_is_mib(cordon):
    """--memory 64 is 64 MiB: 20 MiB fit, 200 MiB are OOM-killed. (As bytes, the jail refused
    64 as below its 8M minimum.)"""
    r = cordon.run([PY, "-c", "x = b'y' * (20 << 20); print(len(x) >> 20)"],
                   opts=["--memory", "64", "--timeout", "30s"], json_result=True)
    assert r.returncode == 0 and r.out == "20\n", r.describe()
    r = cordon.run([PY, "-c", "c = [b'x' * (1 << 20) for _ in range(200)]; print('RAN')"],
                   opts=["--memory", "64", "--timeout", "30s"], json_result=True, timeout=60)
    assert r.returncode == EXIT_OOM and r.result["oom_killed"], r.describe()


@requires_cgroups
def test_bare_memory_is_the_same_as_m(cordon):
    """The OOM message names the limit in MiB: 64, 64M and 64MiB say the same."""
    for v in ("64", "64M", "64MiB", "65536K"):
        r = cordon.run([PY, "-c", "c = [b'x' * (1 << 20) for _ in range(200)]"],
                       opts=["--memory", v, "--timeout", "30s"], timeout=60)
        assert r.returncode == EXIT_OOM and "64 MiB" in r.err, (v, r.describe())


def test_bare_disk_is_mib(cordon):
    """--disk 16 is 16 MiB of /tmp: 8 MiB fit, 32 MiB do not."""
    script = ("dd if=/dev/zero of=/tmp/a bs=1M count=8 2>/dev/null && echo small-ok; "
              "dd if=/dev/zero of=/tmp/b bs=1M count=32 2>/dev/null && echo RAN-big; true")
    r = cordon.run([SH, "-c", script], opts=["--disk", "16"], timeout=60)
    assert r.returncode == 0, r.describe()
    assert r.out == "small-ok\n", r.describe()


@pytest.mark.parametrize("opt,value,minimum", [
    ("--memory", "4", "8M"),       # 4 MiB: under the jail's minimum
    ("--memory", "1024b", "8M"),   # bytes must say so, and are still too few
    ("--disk", "512K", "1M"),
    ("--memory", "0", "8M"),
])
def test_sizes_under_the_minimum_are_usage_errors(cordon, opt, value, minimum):
    r = cordon.raw(["run", opt, value, "--", SH, "-c", "echo RAN"])
    assert r.returncode == EXIT_USAGE, r.describe()
    one_line(r, opt, f"at least {minimum}")


def test_more_memory_than_the_host_is_refused(cordon):
    mib = host_memory_mib()
    for value in (f"{mib + 1}", "1T", f"{2 * mib}M"):
        r = cordon.raw(["run", "--memory", value, "--", SH, "-c", "echo RAN"])
        assert r.returncode == EXIT_USAGE, (value, r.describe())
        one_line(r, "--memory", f"this host has {mib} MiB")


def test_more_cpus_than_the_host_are_refused(cordon):
    n = len(os.sched_getaffinity(0))
    for value in (f"{n + 1}", f"{n}.5", "99" if n < 99 else f"{n * 2}"):
        r = cordon.raw(["run", "--cpus", value, "--", SH, "-c", "echo RAN"])
        assert r.returncode == EXIT_USAGE, (value, r.describe())
        one_line(r, "--cpus", f"this host has {n} CPUs")


def test_the_hosts_own_maximum_is_accepted(cordon):
    n, mib = len(os.sched_getaffinity(0)), host_memory_mib()
    r = cordon.run([SH, "-c", "echo ok"], opts=["--cpus", str(n), "--memory", str(mib)])
    assert r.returncode == 0 and r.out == "ok\n", r.describe()


def test_help_says_the_vocabulary(cordon):
    r = cordon.raw(["run", "--help"])
    assert r.returncode == 0, r.describe()
    text = r.stdout.decode()
    assert "--memory SIZE" in text and "MiB" in text, text
    assert "--disk SIZE" in text, text
