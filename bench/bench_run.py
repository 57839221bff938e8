#!/usr/bin/python3
"""Benchmark of `cordon run`: start-up cost against bubblewrap, and CPU-bound slowdown.

    /usr/bin/python3 bench/bench_run.py [--quick] [-n N] [--cordon PATH]

1. Start-up: interleaves `cordon run -- /bin/true` and
   `bwrap --unshare-all --die-with-parent --ro-bind / / --dev /dev --proc /proc /bin/true`,
   N runs each, wall time per run (perf_counter_ns around subprocess.run); median, p99, ratio.
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


def timed(argv):
    t = time.perf_counter_ns()
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ns = time.perf_counter_ns() - t
    if p.returncode != 0:
        sys.exit(f"bench: {argv[0]} exited {p.returncode}: {p.stderr.decode(errors='replace').strip()}")
    return ns, p.stdout


def ms(ns):
    return ns / 1e6


def bench_startup(cordon, bwrap, n):
    c, b = [], []
    for _ in range(n):
        c.append(timed([cordon, "run", "--", "/bin/true"])[0])
        b.append(timed([bwrap] + BWRAP_TRUE)[0])
    out = {
        "runs": n,
        "cordon_median_ms": ms(statistics.median(c)),
        "cordon_p99_ms": ms(percentile(c, 99)),
        "bwrap_median_ms": ms(statistics.median(b)),
        "bwrap_p99_ms": ms(percentile(b, 99)),
    }
    out["ratio_median"] = out["cordon_median_ms"] / out["bwrap_median_ms"]
    out["ratio_p99"] = out["cordon_p99_ms"] / out["bwrap_p99_ms"]
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
    a = ap.parse_args()
    n = a.n or (10 if a.quick else 200)
    cpu_n = a.cpu_runs or (2 if a.quick else 5)
    for exe in (a.cordon, a.bwrap):
        if not os.access(exe, os.X_OK):
            sys.exit(f"bench: {exe} is not executable")

    # One untimed run of each warms the page cache.
    timed([a.cordon, "run", "--", "/bin/true"])
    timed([a.bwrap] + BWRAP_TRUE)

    st = bench_startup(a.cordon, a.bwrap, n)
    print(f"start-up, {n} runs each (wall ms)   median      p99")
    print(f"  cordon run -- /bin/true     {st['cordon_median_ms']:9.2f} {st['cordon_p99_ms']:9.2f}")
    print(f"  bwrap ... /bin/true         {st['bwrap_median_ms']:9.2f} {st['bwrap_p99_ms']:9.2f}")
    print(f"  cordon / bwrap              {st['ratio_median']:9.2f}x {st['ratio_p99']:8.2f}x")

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
