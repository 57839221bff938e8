#!/usr/bin/python3
"""bench_scale.py: does cordond's cost grow with the number of sandboxes alive? (issue 18, goal 5)

Usage (as root, from the repository root, after `ninja -C build`):

    /usr/bin/python3 bench/bench_scale.py                 # 10, 100, 1000 and 5000 idle; destroy 1000
    /usr/bin/python3 bench/bench_scale.py --quick         # 10 and 100 idle; destroy 100
    /usr/bin/python3 bench/bench_scale.py --levels 10,500 --destroy 500 -n 50

Standard library only; the daemon, client and percentile are bench_daemon.py's. The script
starts its own `cordond` (`--pool 4`, `--max-sandboxes` above the largest level) in a fresh
temporary directory. It then brings the number of idle sandboxes alive up to each level in
turn (idle: created with a long timeout, nothing running in them) and at each level measures:

a. **create**: create -> destroy of one more sandbox, N times (default 100), the create's wall
   time alone, each from a full warm pool (a claim, as a client of cordond sees it; the build
   that refills the pool runs between two creates, not during one);
b. **exec round trip**: exec `["true"]` on one idle sandbox, N times;
c. **memory**, three ways, each a difference from before the first sandbox, divided by the
   number alive: `MemAvailable` (/proc/meminfo: everything the host gave, the headline
   figure), `Slab` + `PageTables` + `KernelStack` (the kernel's part: namespaces, mounts,
   sockets, page tables of the sandboxes' processes), cordond's own `VmRSS`, and the sum of
   the proportional set size (`Pss` of /proc/PID/smaps_rollup) of every process under
   cordond (cordon-init and what the sandbox runs).

Then **destroy at once**: `--destroy` of the idle sandboxes (default 1000) deleted by 32 client
threads together, the wall time until the last answer, while one more client sends
`GET /v1/sandboxes/{id}` on another sandbox in a loop: its worst latency during the destroy
is what "blocks no other request" is measured by.

Targets (issue 18): create p50 and exec p50 flat within 20% from the smallest level to the
largest; host memory per idle sandbox <= 0.5 MiB; destroy of 1000 within 2 s, the probe's worst
latency <= 100 ms. Each level is capped by what the host can give (uid slots are 2048 per
host, src/lib/idmap.h, shared with every other sandbox on it): a level that cannot be reached
is reported as the number reached.

The last line of the output is one JSON object with every figure:

    {"bench": "cordond-scale", "levels": [{"alive": .., "create_p50_ms": .., "exec_p50_ms": ..,
     "mem_available_mib_per": .., "kernel_mib_per": .., "cordond_rss_mib_per": ..,
     "pss_mib_per": ..}, ...], "destroy": {"n": .., "wall_s": .., "probe_max_ms": ..},
     "flat_create": .., "flat_exec": .., "cordond_kib_per": .., "targets_met": true|false,
     "errors": N}

**The regression gate** (on with `--quick`, as CI runs it; `--check`/`--no-check`): the
figures named in `bench/thresholds.json`'s "bench_scale" table (the flatness ratios, the
destroy's time, the read's worst wait, and cordond's own memory per idle sandbox at the last
level, `cordond_kib_per`) fail the run when more than 50% worse than their
thresholds, as bench_daemon.py's do. At the quick levels an O(n) step per create shows only
when it is gross; the full levels are the measure.

Exit status: 0 when every run completed (targets missed or not), 1 on errors or a regression
past the gate, 2 on setup.
"""

import argparse
import concurrent.futures
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_daemon import BUILD, Client, Daemon, check_thresholds, pct, wait_pool  # noqa: E402

POOL = 4
# Idle sandboxes ask for a small disk: at the default 4 GiB each, a few hundred overcommit the
# host's free space past what cordond admits (507 insufficient_storage). 64 MiB is still an
# ext4 scratch (SCRATCH_MIN_BYTES is 16 MiB), so each costs what a default one costs idle.
IDLE_BODY = {"timeout_s": 3600, "limits": {"disk_mb": 64}}
KERNEL_FIELDS = ("Slab", "PageTables", "KernelStack")


def meminfo_kib():
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":", 1)
            out[k] = int(v.split()[0])
    return out


def descendants(pid):
    """Every process under @pid (one pass over /proc: PPid links)."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def status_kib(pid, field):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def memory_cgroup_file(pid):
    """The memory cgroup's usage file of @pid: v1's memory.usage_in_bytes, else v2's
    memory.current."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, ctls, path = line.split(":", 2)
        if "memory" in ctls.split(","):
            return f"/sys/fs/cgroup/memory{path}/memory.usage_in_bytes"
    for line in lines:
        if line.startswith("0::"):
            return f"/sys/fs/cgroup{line[3:]}/memory.current"
    return None


def charged_kib(daemon_pid, pids):
    """What the sandboxes' memory cgroups were charged (user pages and, v1 and v2 alike, the
    kernel objects their tasks allocated), each cgroup once; not cordond's own (the root
    here: the whole host's), where its helpers (cordon-egress) stay."""
    total = 0
    for path in {memory_cgroup_file(p) for p in pids} - {None, memory_cgroup_file(daemon_pid)}:
        try:
            with open(path) as f:
                total += int(f.read()) // 1024
        except (OSError, ValueError):
            pass
    return total


def memory_snapshot(daemon_pid):
    mi = meminfo_kib()
    procs = descendants(daemon_pid)
    return {"available": mi["MemAvailable"], "kernel": sum(mi.get(k, 0) for k in KERNEL_FIELDS),
            "rss": status_kib(daemon_pid, "VmRSS"), "pss": sum(pss_kib(p) for p in procs),
            "charged": charged_kib(daemon_pid, procs), "procs": len(procs)}


def per_sandbox_mib(before, after, n):
    n = max(1, n)
    return {"mem_available_mib_per": round((before["available"] - after["available"]) / 1024 / n, 3),
            "kernel_mib_per": round((after["kernel"] - before["kernel"]) / 1024 / n, 3),
            "cordond_rss_mib_per": round((after["rss"] - before["rss"]) / 1024 / n, 3),
            "pss_mib_per": round((after["pss"] - before["pss"]) / 1024 / n, 3),
            "cgroup_mib_per": round((after["charged"] - before["charged"]) / 1024 / n, 3),
            "procs_per": round((after["procs"] - before["procs"]) / n, 2)}


def fill(client, ids, level, errors):
    """Creates idle sandboxes until @level are alive (or the host refuses more)."""
    while len(ids) < level:
        try:
            ids.append(client.create(IDLE_BODY))
        except RuntimeError as e:
            errors.append(f"create at {len(ids)} alive: {e}")
            return


def ms_of(call):
    """Runs @call; returns (its wall time in ms, its result)."""
    t0 = time.perf_counter()
    out = call()
    return (time.perf_counter() - t0) * 1000, out


def time_create(client, n):
    """Creates from a full warm pool, as a client that does not outrun the refill sees them."""
    times = []
    for _ in range(n):
        wait_pool(client, POOL)
        t, sid = ms_of(lambda: client.create({"timeout_s": 3600}))
        times.append(t)
        client.destroy(sid)
    return times


def time_exec(client, sid, n):
    client.exec_true(sid)  # warm
    return [ms_of(lambda: client.exec_true(sid))[0] for _ in range(n)]


def measure_level(client, daemon, ids, level, n, base, errors):
    fill(client, ids, level, errors)
    wait_pool(client, POOL)  # the pool refilled: the difference is the idle sandboxes alone
    time.sleep(1)
    mem = per_sandbox_mib(base, memory_snapshot(daemon.proc.pid), len(ids))
    create = time_create(client, n)
    execs = time_exec(client, ids[0], n)
    row = {"asked": level, "alive": len(ids),
           "create_p50_ms": round(pct(create, 50), 3), "create_p99_ms": round(pct(create, 99), 3),
           "exec_p50_ms": round(pct(execs, 50), 3), "exec_p99_ms": round(pct(execs, 99), 3)}
    row.update(mem)
    return row


def destroy_at_once(sock, ids, probe_id, threads=32):
    """Deletes @ids from @threads clients together; a probe client reads another sandbox."""
    lock = threading.Lock()
    todo = list(ids)
    errors, probe = [], []
    done = threading.Event()

    def worker():
        c = Client(sock)
        while True:
            with lock:
                if not todo:
                    break
                sid = todo.pop()
            try:
                c.destroy(sid)
            except Exception as e:  # noqa: BLE001 - counted and reported
                with lock:
                    errors.append(f"destroy: {e}")
        c.close()

    def prober():
        c = Client(sock)
        while not done.is_set():
            t0 = time.perf_counter()
            c.expect("GET", f"/v1/sandboxes/{probe_id}", None, 200)
            probe.append((time.perf_counter() - t0) * 1000)
        c.close()

    p = threading.Thread(target=prober)
    p.start()
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=threads) as ex:
        list(ex.map(lambda _: worker(), range(threads)))
    wall = time.perf_counter() - t0
    done.set()
    p.join()
    return {"n": len(ids), "wall_s": round(wall, 3), "probe_n": len(probe),
            "probe_p50_ms": round(pct(probe, 50), 3), "probe_max_ms": round(max(probe or [0]), 3)}, errors


def flat(rows, key):
    """The largest level's figure over the smallest's."""
    return round(rows[-1][key] / rows[0][key], 3) if rows and rows[0][key] else float("nan")


def print_rows(rows):
    print(f"{'alive':>6} {'create p50':>11} {'p99':>8} {'exec p50':>9} {'p99':>8} "
          f"{'MemAvail/sb':>12} {'kernel/sb':>10} {'cgroup/sb':>10} {'cordond/sb':>11} "
          f"{'PSS/sb':>8} {'procs/sb':>9}  (ms, MiB)")
    for r in rows:
        print(f"{r['alive']:>6} {r['create_p50_ms']:>11.2f} {r['create_p99_ms']:>8.2f} "
              f"{r['exec_p50_ms']:>9.2f} {r['exec_p99_ms']:>8.2f} {r['mem_available_mib_per']:>12.3f} "
              f"{r['kernel_mib_per']:>10.3f} {r['cgroup_mib_per']:>10.3f} "
              f"{r['cordond_rss_mib_per']:>11.3f} {r['pss_mib_per']:>8.3f} {r['procs_per']:>9.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="levels 10 and 100, destroy 100, n 30")
    ap.add_argument("--levels", help="comma-separated numbers alive (default 10,100,1000,5000)")
    ap.add_argument("--destroy", type=int, help="sandboxes destroyed at once (default 1000)")
    ap.add_argument("-n", type=int, help="creates and execs timed per level (default 100)")
    ap.add_argument("--cordond", default=os.path.join(BUILD, "cordond"))
    ap.add_argument("--thresholds", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                         "thresholds.json"),
                    help="the regression gate's figures (default bench/thresholds.json)")
    ap.add_argument("--check", action=argparse.BooleanOptionalAction, default=None,
                    help="fail (exit 1) when a figure regressed by more than 50%% against the "
                         "thresholds (default: on with --quick, as CI runs it)")
    a = ap.parse_args()
    levels = [int(x) for x in (a.levels or ("10,100" if a.quick else "10,100,1000,5000")).split(",")]
    n_destroy = a.destroy or (100 if a.quick else 1000)
    n = a.n or (30 if a.quick else 100)
    if os.geteuid() != 0:
        print("bench_scale: skipped, needs root (cgroups, uid ranges)", file=sys.stderr)
        sys.exit(2)
    if not os.access(a.cordond, os.X_OK):
        print(f"bench_scale: {a.cordond} is not executable", file=sys.stderr)
        sys.exit(2)

    daemon = Daemon(a.cordond, POOL, max(levels + [n_destroy]) + POOL + 8)
    errors, rows, ids = [], [], []
    destroy = None
    try:
        daemon.start()
        client = Client(daemon.sock)
        time.sleep(1)
        base = memory_snapshot(daemon.proc.pid)
        for level in levels:
            rows.append(measure_level(client, daemon, ids, level, n, base, errors))
            print(f"level {level}: {rows[-1]}", file=sys.stderr, flush=True)
        fill(client, ids, n_destroy + 1, errors)
        victims = ids[1:n_destroy + 1]
        destroy, derr = destroy_at_once(daemon.sock, victims, ids[0])
        errors += derr
        del ids[1:n_destroy + 1]
        client.close()
    except Exception as e:  # noqa: BLE001 - reported, then the daemon is stopped
        errors.append(f"{type(e).__name__}: {e}")
    finally:
        daemon.stop()

    print_rows(rows)
    out = {"bench": "cordond-scale", "levels": rows, "destroy": destroy, "errors": len(errors)}
    if rows:
        out["flat_create"] = flat(rows, "create_p50_ms")
        out["flat_exec"] = flat(rows, "exec_p50_ms")
        out["cordond_kib_per"] = round(rows[-1]["cordond_rss_mib_per"] * 1024, 1)
        mem_ok = rows[-1]["mem_available_mib_per"] <= 0.5
        destroy_ok = bool(destroy) and destroy["wall_s"] <= 2 * destroy["n"] / 1000 and \
            destroy["probe_max_ms"] <= 100
        out["targets_met"] = out["flat_create"] <= 1.2 and out["flat_exec"] <= 1.2 and mem_ok and destroy_ok
        print(f"create p50, largest/smallest level: {out['flat_create']:.2f}x (target <= 1.20)")
        print(f"exec p50, largest/smallest level:   {out['flat_exec']:.2f}x (target <= 1.20)")
        print(f"host memory per idle sandbox at {rows[-1]['alive']}: "
              f"{rows[-1]['mem_available_mib_per']:.3f} MiB (target <= 0.5), of which cordond's "
              f"own {out['cordond_kib_per']:.1f} KiB")
    if destroy:
        print(f"destroy of {destroy['n']} at once: {destroy['wall_s']:.2f} s, a read meanwhile "
              f"p50 {destroy['probe_p50_ms']:.1f} ms, worst {destroy['probe_max_ms']:.1f} ms "
              f"(targets <= 2 s per 1000, <= 100 ms)")
    for e in errors[:10]:
        print(f"error: {e}", file=sys.stderr)
    regressions = []
    if (a.quick if a.check is None else a.check) and rows:
        regressions = check_thresholds(out, a.thresholds, table_name="bench_scale")
    out["regressions"] = regressions
    print(json.dumps(out, sort_keys=True))
    sys.exit(1 if errors or regressions else 0)


if __name__ == "__main__":
    main()
