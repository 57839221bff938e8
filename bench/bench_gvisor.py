#!/usr/bin/python3
"""bench_gvisor.py: the gvisor runtime against the jail, in the same run.

Usage (as root, from the repository root, after `ninja -C build`; needs runsc):

    /usr/bin/python3 bench/bench_gvisor.py            # 20 lifecycles per case, 5 loop runs
    /usr/bin/python3 bench/bench_gvisor.py --quick    # 5 and 3: a smoke test

Standard library only. The script starts its own `cordond` (`$CORDON_BUILD/cordond`, default
`build/cordond`) twice in fresh temporary directories, with `--pool 0` and with `--pool 1`
(the pool is kept per template and runtime), and measures for `jail` and `gvisor`:

a. **Lifecycle.** create -> exec `true` -> destroy, sequential: median ms of create, exec,
   destroy and the whole, unpooled and pooled (a pooled create waits for the pool to have
   refilled first, so that it measures the pool's hand-over, not runsc's boot)
   [pooled gvisor create within 2 ms of a pooled jail create].
b. **CPU loop.** `python3 -c` summing squares in a tight loop, inside each: median of the
   loop's own time as the program measures it, the two sandboxes' runs alternating, and
   the median of the pairs' ratios [gvisor within 5% of the jail].
c. **Syscall loop.** 100000 `os.stat` in a tight loop (the Sentry serves every call: the cost
   of a system call through gVisor's ptrace platform), inside each: median of the loop's time;
   and `git status` of a small repository (200 files, one changed), timed per call inside.
d. **Pause and resume.** POST .../pause and .../resume of a running sandbox, from the client:
   the cgroup freezer against `runsc pause`/`resume` (bench_snapshot.py's measure).

`cordon run --runtime R -- true` is timed too (one-shot mode, no daemon). The last line of the
output is one JSON object with every figure. Exit status: 0 when every run completed, 1 on
errors, 2 when it cannot run here (not root, no runsc, no cordond).
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
BUILD = os.environ.get("CORDON_BUILD", os.path.join(REPO, "build"))
sys.path.insert(0, os.path.join(REPO, "tests", "daemon"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_snapshot import pause_resume  # noqa: E402

RUNTIMES = ("jail", "gvisor")
# Each prints the loop's own time (python3's start, itself syscall-heavy, is left out).
CPU = ("python3 -c 'import time\nt=time.perf_counter()\ns=0\nfor i in range(3000000): s+=i*i\n"
       "print((time.perf_counter()-t)*1000)'")
GIT_SETUP = ("cd /tmp && git init -q g && cd g && for i in $(seq 200); do echo $i > f$i; done && "
             "git add . && git -c user.email=a@b -c user.name=n commit -qm m && echo x >> f1")
GIT = ("cd /tmp/g && python3 -c 'import subprocess, time\nt=time.perf_counter()\nfor i in range(10): "
       "subprocess.run([\"git\", \"status\", \"--porcelain\"], check=True, capture_output=True)\n"
       "print((time.perf_counter()-t)*100)'")
STAT = ("python3 -c 'import os, time\nt=time.perf_counter()\nfor i in range(100000): os.stat(\"/usr\")\n"
        "print((time.perf_counter()-t)*1000)'")


def ms(t0):
    return (time.monotonic() - t0) * 1000


def med(v):
    return round(statistics.median(v), 2) if v else None


def lifecycle(client, runtime):
    t0 = time.monotonic()
    sb = client.create({"runtime": runtime})
    t1 = time.monotonic()
    client.exec(sb["id"], cmd="true")
    t2 = time.monotonic()
    client.destroy(sb["id"])
    t3 = time.monotonic()
    return {"create": (t1 - t0) * 1000, "exec": (t2 - t1) * 1000, "destroy": (t3 - t2) * 1000,
            "total": (t3 - t0) * 1000}


def wait_pool(client, ready, timeout=20):
    """Until /metrics counts @ready ready pooled sandboxes (one per warm runtime)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in client.get("/metrics").text.splitlines():
            if line.startswith("cordon_pool_ready ") and float(line.split()[1]) >= ready:
                return
        time.sleep(0.02)
    raise RuntimeError(f"the pool did not refill to {ready} in {timeout} s")


def bench_lifecycles(dc, n, pool):
    d = dc.start_daemon(pool=pool, max_sandboxes=32)
    out = {}
    try:
        c = d.client(timeout=60)
        for k, rt in enumerate(RUNTIMES, 1):
            if pool:  # make the pool keep this runtime warm, then measure hand-overs
                c.destroy(c.create({"runtime": rt})["id"])
            rows = []
            for _ in range(n):
                if pool:
                    wait_pool(c, k)  # jail's warm entry, then gvisor's too
                rows.append(lifecycle(c, rt))
            out[rt] = {k: med([r[k] for r in rows]) for k in rows[0]}
    except Exception:
        print(f"cordond's log:\n{d.log_tail()}", file=sys.stderr)
        raise
    finally:
        d.cleanup()
    return out


def bench_loops(dc, runs):
    """The loops in a jail and a gvisor sandbox side by side, run after run alternating
    (jail, gvisor, jail, ...): on a shared machine a burst of other work then falls on both
    rather than on one. The CPU loop's ratio is also taken per pair."""
    d = dc.start_daemon(pool=0, max_sandboxes=8)
    rows = {rt: {"cpu_ms": [], "stat_ms": [], "git_status_ms": []} for rt in RUNTIMES}
    out = {}
    try:
        c = d.client(timeout=120)
        sbs = {rt: c.create({"runtime": rt, "limits": {"cpus": 1.0}})["id"] for rt in RUNTIMES}
        try:
            for sid in sbs.values():
                c.sh(sid, GIT_SETUP)
            for key, cmd in (("cpu_ms", CPU), ("stat_ms", STAT), ("git_status_ms", GIT)):
                for _ in range(runs):
                    for rt, sid in sbs.items():
                        rows[rt][key].append(float(c.exec(sid, cmd=cmd, timeout=120)["stdout"]))
            for rt, sid in sbs.items():
                pr = pause_resume(c, sid, runs * 4)
                out[rt] = {k: med(v) for k, v in rows[rt].items()}
                out[rt].update(pause_ms=med(pr["pause"]), resume_ms=med(pr["resume"]))
        finally:
            for sid in sbs.values():
                c.destroy(sid, missing_ok=True)
    except Exception:
        print(f"cordond's log:\n{d.log_tail()}", file=sys.stderr)
        raise
    finally:
        d.cleanup()
    pairs = zip(rows["jail"]["cpu_ms"], rows["gvisor"]["cpu_ms"])
    out["cpu_pair_ratio"] = med([g / j for j, g in pairs])
    return out


def bench_oneshot(n):
    out = {}
    for rt in RUNTIMES:
        v = []
        for _ in range(n):
            t0 = time.monotonic()
            subprocess.run([os.path.join(BUILD, "cordon"), "run", "--runtime", rt, "--", "true"],
                           check=True, timeout=60, capture_output=True)
            v.append(ms(t0))
        out[rt] = med(v)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="5 lifecycles, 3 loop runs (else 7)")
    ap.add_argument("-n", type=int, default=None, help="lifecycles per case (default 20)")
    args = ap.parse_args()
    n = args.n or (5 if args.quick else 20)
    runs = 3 if args.quick else 7
    if os.geteuid() != 0:
        print("bench_gvisor: needs root", file=sys.stderr)
        return 2
    if not shutil.which("runsc") and not os.access("/usr/bin/runsc", os.X_OK):
        print("bench_gvisor: runsc is not installed (apt-get install runsc)", file=sys.stderr)
        return 2
    if not os.access(os.path.join(BUILD, "cordond"), os.X_OK):
        print(f"bench_gvisor: no cordond in {BUILD}", file=sys.stderr)
        return 2
    import conftest as dc  # tests/daemon's Daemon and Client
    res = {"bench": "gvisor", "n": n, "loadavg_before": os.getloadavg()[0]}
    try:
        res["oneshot_ms"] = bench_oneshot(n)
        res["unpooled"] = bench_lifecycles(dc, n, 0)
        res["pooled"] = bench_lifecycles(dc, n, 1)
        res["loops"] = bench_loops(dc, runs)
    except Exception as e:  # a failed run is a result too, and its exit status says so
        print(f"bench_gvisor: {e}", file=sys.stderr)
        print(json.dumps(dict(res, error=str(e))))
        return 1
    for mode in ("unpooled", "pooled"):
        for rt in RUNTIMES:
            r = res[mode][rt]
            print(f"{mode:9} {rt:6}  create {r['create']:8.2f}  exec {r['exec']:7.2f}  "
                  f"destroy {r['destroy']:7.2f}  total {r['total']:8.2f} ms")
    for rt in RUNTIMES:
        lp = res["loops"][rt]
        print(f"one-shot  {rt:6}  cordon run -- true {res['oneshot_ms'][rt]:8.2f} ms")
        print(f"loops     {rt:6}  cpu {lp['cpu_ms']} ms  stat x100k {lp['stat_ms']} ms  "
              f"git status {lp['git_status_ms']} ms")
        print(f"pause     {rt:6}  pause {lp['pause_ms']} ms  resume {lp['resume_ms']} ms")
    lj, lg = res["loops"]["jail"], res["loops"]["gvisor"]
    res["ratios"] = {k: round(lg[k] / lj[k], 3) for k in lj if lj[k]}
    res["ratios"]["cpu_ms_per_pair"] = res["loops"]["cpu_pair_ratio"]
    res["ratios"].update({f"{m}_{k}": round(res[m]["gvisor"][k] / res[m]["jail"][k], 3)
                          for m in ("unpooled", "pooled") for k in ("create", "exec", "destroy")
                          if res[m]["jail"][k]})
    print("gvisor / jail: " + "  ".join(f"{k} {v}x" for k, v in res["ratios"].items()))
    pj, pg = res["pooled"]["jail"]["create"], res["pooled"]["gvisor"]["create"]
    cpu = res["loops"]["cpu_pair_ratio"]
    res["targets"] = {"pooled_create_within_2ms": pg - pj <= 2.0,
                      "cpu_within_5pct": cpu <= 1.05}
    print(f"pooled gvisor create - pooled jail create: {pg - pj:+.2f} ms (target <= 2 ms): "
          f"{'ok' if res['targets']['pooled_create_within_2ms'] else 'MISS'}")
    print(f"cpu loop gvisor / jail, median of the alternating pairs: {cpu:.3f} (target <= 1.05): "
          f"{'ok' if res['targets']['cpu_within_5pct'] else 'MISS'}")
    res["loadavg_after"] = os.getloadavg()[0]  # 2 cores: above ~2, other work shares them
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
