#!/usr/bin/python3
"""The microvm runtime on a real cordond, in one run: cold boot to first exec against
snapshot restore to first exec, fork of 1 and 10 children, and the host memory an idle VM
costs (QEMU's /proc/PID/smaps_rollup: RSS and private pages), booted and restored.

    sudo CORDON_BUILD=$PWD/build /usr/bin/python3 bench/bench_microvm.py [--quick]

Milliseconds from the client (unix socket), medians; the accelerator (kvm or tcg) is printed
first: under TCG every figure is emulation's. One daemon of its own, no pool (each create is
a boot or a restore). The last line is one JSON object with every figure."""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "microvm"))
from conftest import dc, qemu_procs  # noqa: E402


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t) * 1000, out


def create_exec(c, body):
    """A create and a command, timed from the create that was answered 201 (one answered 503
    while cordond makes the template's image, the first time, is not a create)."""
    while True:
        t = time.monotonic()
        r = c.post("/v1/sandboxes", body)
        if r.status != 503 or "being made" not in r.text:
            break
        time.sleep(2)
    assert r.status == 201, r.describe()
    sid = r.json()["id"]
    assert c.sh(sid, "echo ok") == "ok\n"
    return (time.monotonic() - t) * 1000, sid


def smaps(pid):
    with open(f"/proc/{pid}/smaps_rollup") as f:
        kv = dict(l.split(":", 1) for l in f if ":" in l and not l.startswith(" "))
    kb = {k: int(v.split()[0]) for k, v in kv.items() if v.strip().endswith("kB")}
    # Private_Clean of a restored VM is mostly the snapshot's page cache, mapped by no one
    # else yet; Private_Dirty is what it copied on write, and QEMU's own heap.
    return {"rss_mib": kb["Rss"] / 1024, "private_dirty_mib": kb["Private_Dirty"] / 1024,
            "private_clean_mib": kb["Private_Clean"] / 1024}


def memory_of(vms, before, idle_s):
    """The new QEMU's (not in @before) smaps after @idle_s of idleness."""
    time.sleep(idle_s)
    new = [p for p in qemu_procs(vms) if p not in before]
    assert len(new) == 1, new
    return smaps(new[0])


def fork(c, sid, k):
    ms, r = timed(lambda: c.post(f"/v1/sandboxes/{sid}/fork", {"count": k}))
    kids = r.json()
    assert r.status == 200 and all("id" in x for x in kids), r.describe()
    snap = c.info(kids[0]["id"])["snapshot"]
    for kid in kids:
        c.destroy(kid["id"], missing_ok=True)
    c.delete(f"/v1/snapshots/{snap}")
    return ms


def med(xs):
    return round(statistics.median(xs), 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="3 restores, 1 fork of each size")
    ap.add_argument("--idle", type=float, default=5.0, help="seconds idle before reading memory")
    a = ap.parse_args()
    n = 3 if a.quick else 10
    vms = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"bench-microvm-{os.getpid()}")
    os.makedirs(vms)
    os.environ["CORDON_MICROVM_DIR"] = vms
    d = dc.start_daemon(pool=0, max_sandboxes=24, max_timeout=600)
    c = d.client(timeout=300)
    res = {}
    try:
        mode = {x["name"]: x for x in c.get("/v1/runtimes").json()["runtimes"]}["microvm"]["mode"]
        res["accel"] = mode["name"]
        print(f"accelerator: {mode['name']} ({mode.get('reason') or 'KVM'})")
        before = set(qemu_procs(vms))
        res["cold_ms"], parent = create_exec(c, {"runtime": "microvm", "timeout_s": 600})
        res["mem_booted"] = memory_of(vms, before, a.idle)
        ms, r = timed(lambda: c.post(f"/v1/sandboxes/{parent}/snapshots"))
        assert r.status in (200, 201), r.describe()
        res["snapshot_ms"], snap = ms, r.json()
        restores = []
        for i in range(n):
            before = set(qemu_procs(vms))
            ms, sid = create_exec(c, {"snapshot": snap["id"], "timeout_s": 600})
            restores.append(ms)
            if i == 0:
                res["mem_restored"] = memory_of(vms, before, a.idle)
            c.destroy(sid)
        res["restore_ms"] = med(restores)
        res["restore_min_ms"] = round(min(restores), 1)
        for k in (1, 10):
            res[f"fork{k}_ms"] = med([fork(c, parent, k) for _ in range(1 if a.quick else 3)])
        c.destroy(parent)
    finally:
        for s in c.get("/v1/snapshots").json()["snapshots"]:
            c.delete(f"/v1/snapshots/{s['id']}")
        d.cleanup()
    res["cold_ms"] = round(res["cold_ms"], 1)
    res["snapshot_ms"] = round(res["snapshot_ms"], 1)
    print(f"cold boot to first exec   {res['cold_ms']:9.1f} ms")
    print(f"snapshot (memory)         {res['snapshot_ms']:9.1f} ms  ({snap['size_bytes'] >> 20} MiB on disk)")
    print(f"restore to first exec     {res['restore_ms']:9.1f} ms  p50 of {n} (min {res['restore_min_ms']}),"
          f" {res['cold_ms'] / res['restore_ms']:.0f}x faster than the boot")
    print(f"fork of 1                 {res['fork1_ms']:9.1f} ms")
    print(f"fork of 10                {res['fork10_ms']:9.1f} ms")
    for k in ("mem_booted", "mem_restored"):
        m = res[k]
        print(f"idle VM, {k[4:]:9s}         RSS {m['rss_mib']:6.1f} MiB, private dirty {m['private_dirty_mib']:6.1f} MiB,"
              f" private clean {m['private_clean_mib']:6.1f} MiB")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
