#!/usr/bin/python3
"""Benchmark of `cordon run`: start-up cost against bubblewrap, and CPU-bound slowdown.

    /usr/bin/python3 bench/bench_run.py [--quick] [-n N] [--cordon PATH]

1. Start-up: interleaves `cordon run -- /bin/true`, the same on a tmpfs root
   (`--disk 8M`: the jail without the ext4 scratch, whose cost is the difference),
   `bwrap --unshare-all --die-with-parent --ro-bind / / --dev /dev --proc /proc /bin/true`
   and, with `--baseline PATH`, another cordon build; N runs each, wall time per run
   (perf_counter_ns around the process) and its CPU time (user + system of it and what it
   waited for, from wait4: stable where the wall time is not); median, p99, ratios. A bwrap
   run that another process's unmount broke (its `--ro-bind / /` remounts every host mount)
   is run again, up to 3 times; the failed try is not timed.
2. CPU: a fixed Python loop timed inside `cordon run` and natively, interleaved; median and
   slowdown in %. The loop is timed by the process itself (inside), so start-up is excluded.

The last line of output is one JSON object with every figure. Standard library only.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
DEFAULT_CORDON = os.path.join(os.environ.get("CORDON_BUILD", os.path.join(REPO, "build")), "cordon")

BWRAP_TRUE = ["--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev",
              "--proc", "/proc", "/bin/true"]

CPU_LOOP = 30_000_000
CPU_CODE = (
    "import time\n"
    "t = time.perf_counter_ns()\n"
    f"s = sum(range({CPU_LOOP}))\n"
    "print(time.perf_counter_ns() - t)\n"
)
PYTHON = "/usr/bin/python3"


def percentile(xs, p):
    """Nearest-rank percentile of @xs (0 < p <= 100)."""
    s = sorted(xs)
    k = max(0, min(len(s) - 1, -(-len(s) * p // 100) - 1))
    return s[int(k)]


def timed(argv, cpu=None, retries=0):
    """Wall ns and stdout of @argv; with @cpu (a list), appends the CPU ns (user + system) the
    process and every descendant it waited for used: the figure this shared, noisy machine
    moves least, since another helper's load stretches the wall time, not the work."""
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        t = time.perf_counter_ns()
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fo, stderr=fe)
        _, status, ru = os.wait4(p.pid, 0)
        ns = time.perf_counter_ns() - t
        p.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        fo.seek(0)
        fe.seek(0)
        out, err = fo.read(), fe.read()
    if p.returncode != 0 and retries > 0:
        # bwrap's --ro-bind / / remounts every mount of the host read-only, one by one: a
        # mount that another process removes meanwhile (a sandbox's scratch) fails the run.
        # Such a run is not timed; the next try is.
        return timed(argv, cpu, retries - 1)
    if p.returncode != 0:
        sys.exit(f"bench: {argv[0]} exited {p.returncode}: {err.decode(errors='replace').strip()}")
    if cpu is not None:
        cpu.append(int((ru.ru_utime + ru.ru_stime) * 1e9))
    return ns, out


def ms(ns):
    return ns / 1e6


def startup_variants(cordon, bwrap, baseline):
    """name -> argv, interleaved in this order. "cordon-tmpfs" is the same jail on a tmpfs
    root (a disk under 16 MiB keeps it): the difference is the cost of the ext4 scratch."""
    v = {"cordon": [cordon, "run", "--", "/bin/true"],
         "cordon-tmpfs": [cordon, "run", "--disk", "8M", "--", "/bin/true"],
         "bwrap": [bwrap] + BWRAP_TRUE}
    if baseline:
        v["baseline"] = [baseline, "run", "--", "/bin/true"]
    return v


def bench_startup(variants, n):
    wall = {k: [] for k in variants}
    cpu = {k: [] for k in variants}
    for _ in range(n):
        for k, argv in variants.items():
            wall[k].append(timed(argv, cpu[k], retries=3 if k == "bwrap" else 0)[0])
    out = {"runs": n}
    for k in variants:
        key = k.replace("-", "_")
        out[f"{key}_median_ms"] = ms(statistics.median(wall[k]))
        out[f"{key}_p99_ms"] = ms(percentile(wall[k], 99))
        out[f"{key}_cpu_median_ms"] = ms(statistics.median(cpu[k]))
    out["ratio_median"] = out["cordon_median_ms"] / out["bwrap_median_ms"]
    out["ratio_p99"] = out["cordon_p99_ms"] / out["bwrap_p99_ms"]
    out["ratio_cpu"] = out["cordon_cpu_median_ms"] / out["bwrap_cpu_median_ms"]
    return out


def bench_cpu(cordon, n):
    inside, native = [], []
    for _ in range(n):
        _, o = timed([cordon, "run", "--", PYTHON, "-c", CPU_CODE])
        inside.append(int(o.split()[-1]))
        _, o = timed([PYTHON, "-c", CPU_CODE])
        native.append(int(o.split()[-1]))
    out = {
        "runs": n,
        "loop": f"sum(range({CPU_LOOP}))",
        "cordon_median_ms": ms(statistics.median(inside)),
        "native_median_ms": ms(statistics.median(native)),
    }
    out["slowdown_pct"] = (out["cordon_median_ms"] / out["native_median_ms"] - 1) * 100
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="10 start-up runs and 2 CPU runs each")
    ap.add_argument("-n", type=int, help="start-up runs of each (default 200)")
    ap.add_argument("--cpu-runs", type=int, help="CPU runs of each (default 5)")
    ap.add_argument("--cordon", default=DEFAULT_CORDON, help=f"cordon binary (default {DEFAULT_CORDON})")
    ap.add_argument("--bwrap", default=shutil.which("bwrap") or "/usr/bin/bwrap")
    ap.add_argument("--baseline", help="another cordon binary (an older build) timed in the same "
                    "interleaving, for a before/after in one run")
    a = ap.parse_args()
    n = a.n or (10 if a.quick else 200)
    cpu_n = a.cpu_runs or (2 if a.quick else 5)
    for exe in [a.cordon, a.bwrap] + ([a.baseline] if a.baseline else []):
        if not os.access(exe, os.X_OK):
            sys.exit(f"bench: {exe} is not executable")

    variants = startup_variants(a.cordon, a.bwrap, a.baseline)
    for argv in variants.values():  # one untimed run of each warms the page cache
        timed(argv)

    st = bench_startup(variants, n)
    print(f"start-up, {n} runs each, interleaved     wall median   p99   cpu median (ms)")
    for k in variants:
        key = k.replace("-", "_")
        print(f"  {k + ' ... /bin/true':<36} {st[key + '_median_ms']:9.2f} {st[key + '_p99_ms']:7.2f} "
              f"{st[key + '_cpu_median_ms']:9.2f}")
    print(f"  cordon / bwrap                       {st['ratio_median']:9.2f}x {st['ratio_p99']:6.2f}x "
          f"{st['ratio_cpu']:8.2f}x")

    cpu = bench_cpu(a.cordon, cpu_n)
    print(f"cpu, {cpu['loop']}, {cpu_n} runs each (ms, timed inside the process)")
    print(f"  inside cordon run           {cpu['cordon_median_ms']:9.1f}")
    print(f"  native                      {cpu['native_median_ms']:9.1f}")
    print(f"  slowdown                    {cpu['slowdown_pct']:+8.1f}%")

    print(json.dumps({
        "bench": "cordon_run",
        "uid": os.geteuid(),
        "cpus": os.cpu_count(),
        "kernel": os.uname().release,
        "startup": st,
        "cpu": cpu,
    }, sort_keys=True))


if __name__ == "__main__":
    main()
