#!/usr/bin/python3
"""The microvm runtime on a real cordond, in one run: cold boot to first exec against
snapshot restore to first exec, fork of 1 and 10 children, and the host memory an idle VM
costs (QEMU's /proc/PID/smaps_rollup: RSS and private pages), booted and restored; then the
default, every create a restore: the template snapshot's first create, unpooled and pooled
creates restored from it, and the snapshot and forks of such a restored sandbox (whose RAM,
a private mapping, goes into the migration stream: the default's cost).

    sudo CORDON_BUILD=$PWD/build /usr/bin/python3 bench/bench_microvm.py [--quick]

Milliseconds from the client (unix socket), medians; the accelerator (kvm or tcg) is printed
first: under TCG every figure is emulation's. Three daemons of its own: booting
(CORDON_MICROVM_TEMPLATES=0, no pool), the default without a pool, the default with --pool 1.
The template snapshots a run made are removed at its end. The last line is one JSON object
with every figure."""
import glob
import re
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


TMPL_DISK_MB = 4000 + os.getpid() % 90  # a key of this run's
CACHE = os.environ.get("CORDON_MICROVM_CACHE", "/var/cache/cordon-microvm")


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


def daemon(vms, pool, templates):
    os.environ["CORDON_MICROVM_DIR"] = vms
    os.environ["CORDON_MICROVM_TEMPLATES"] = templates
    try:
        return dc.start_daemon(pool=pool, max_sandboxes=24, max_timeout=600)
    finally:
        del os.environ["CORDON_MICROVM_TEMPLATES"]


def pool_ready(c):
    """Ready pooled sandboxes of every runtime: the host template's jail one is among them."""
    m = re.search(r"^cordon_pool_ready (\d+)$", c.get("/metrics").text, re.M)
    return int(m.group(1)) if m else 0


def booted(c, vms, n, forks, idle, res):
    """Cold boot, its memory, its snapshot, restores from it, forks of the booted parent."""
    mode = {x["name"]: x for x in c.get("/v1/runtimes").json()["runtimes"]}["microvm"]["mode"]
    res["accel"] = mode["name"]
    print(f"accelerator: {mode['name']} ({mode.get('reason') or 'KVM'})")
    before = set(qemu_procs(vms))
    res["cold_ms"], parent = create_exec(c, {"runtime": "microvm", "timeout_s": 600})
    res["mem_booted"] = memory_of(vms, before, idle)
    ms, r = timed(lambda: c.post(f"/v1/sandboxes/{parent}/snapshots"))
    assert r.status in (200, 201), r.describe()
    res["snapshot_ms"], snap = ms, r.json()
    res["snapshot_mib"] = snap["size_bytes"] >> 20
    restores = []
    for i in range(n):
        before = set(qemu_procs(vms))
        ms, sid = create_exec(c, {"snapshot": snap["id"], "timeout_s": 600})
        restores.append(ms)
        if i == 0:
            res["mem_restored"] = memory_of(vms, before, idle)
        c.destroy(sid)
    res["restore_ms"] = med(restores)
    res["restore_min_ms"] = round(min(restores), 1)
    for k in (1, 10):
        res[f"fork{k}_ms"] = med([fork(c, parent, k) for _ in range(forks)])
    c.destroy(parent)


def templated(c, vms, n, forks, res):
    """The default without a pool: the first create (503 while the creator boots the template's
    VM and snapshots it), unpooled restores, a restored parent's snapshot and forks. A disk
    size of its own, so that its template snapshot is this run's, not one in the cache."""
    body = {"runtime": "microvm", "timeout_s": 600, "limits": {"disk_mb": TMPL_DISK_MB}}
    t = time.monotonic()
    _, first = create_exec(c, body)
    res["tmpl_first_ms"] = round((time.monotonic() - t) * 1000, 1)
    restores = []
    for _ in range(n):
        ms, sid = create_exec(c, body)
        restores.append(ms)
        c.destroy(sid)
    res["tmpl_restore_ms"] = med(restores)
    ms, r = timed(lambda: c.post(f"/v1/sandboxes/{first}/snapshots"))
    assert r.status in (200, 201), r.describe()
    res["restored_snapshot_ms"], res["restored_snapshot_mib"] = round(ms, 1), r.json()["size_bytes"] >> 20
    for k in (1, 10):
        res[f"restored_fork{k}_ms"] = med([fork(c, first, k) for _ in range(forks)])
    c.destroy(first)


def pooled(c, vms, n, idle, res):
    """The default with --pool 1: creates handed a restored VM from the pool (the first create
    asks for the microvm entry; the jail's `host` entry is the other ready one)."""
    _, sid = create_exec(c, {"runtime": "microvm", "timeout_s": 600})
    c.destroy(sid)
    times, posts = [], []
    for i in range(n):
        assert dc.wait_until(lambda: pool_ready(c) >= 2, 300), "the pool did not fill"
        before = set(qemu_procs(vms))
        ms, r = timed(lambda: c.post("/v1/sandboxes", {"runtime": "microvm", "timeout_s": 600}))
        assert r.status == 201, r.describe()
        sid = r.json()["id"]
        exec_ms, _ = timed(lambda: c.sh(sid, "echo ok"))
        times.append(ms + exec_ms)
        posts.append(ms)
        if i == 0:
            res["mem_pooled"] = smaps_of_claimed(vms, before, idle)
        c.destroy(sid)
    res["pooled_ms"] = med(times)
    res["pooled_create_ms"] = med(posts)


def smaps_of_claimed(vms, before, idle):
    """The claimed VM was in the pool (in @before); its smaps is one of those still alive."""
    time.sleep(idle)
    pids = [p for p in qemu_procs(vms) if p in before]
    return smaps(pids[0]) if pids else {}


def phase(name, pool, templates, fn, *args):
    vms = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"bench-microvm-{os.getpid()}-{name}")
    os.makedirs(vms)
    d = daemon(vms, pool, templates)
    c = d.client(timeout=300)
    try:
        fn(c, vms, *args)
    finally:
        for s in c.get("/v1/snapshots").json()["snapshots"]:
            c.delete(f"/v1/snapshots/{s['id']}")
        d.cleanup()


def report(res, n):
    print(f"cold boot to first exec   {res['cold_ms']:9.1f} ms")
    print(f"snapshot (memory)         {res['snapshot_ms']:9.1f} ms  ({res['snapshot_mib']} MiB on disk)")
    print(f"restore to first exec     {res['restore_ms']:9.1f} ms  p50 of {n} (min {res['restore_min_ms']}),"
          f" {res['cold_ms'] / res['restore_ms']:.0f}x faster than the boot")
    print(f"fork of 1 / 10            {res['fork1_ms']:9.1f} / {res['fork10_ms']:.1f} ms")
    print(f"default: first create     {res['tmpl_first_ms']:9.1f} ms  (the template's VM booted, snapshotted)")
    print(f"default: unpooled create  {res['tmpl_restore_ms']:9.1f} ms  p50 of {n}")
    print(f"default: pooled create    {res['pooled_ms']:9.1f} ms  p50 of {n} (the create alone"
          f" {res['pooled_create_ms']} ms)")
    print(f"restored: snapshot        {res['restored_snapshot_ms']:9.1f} ms  ({res['restored_snapshot_mib']} MiB on disk)")
    print(f"restored: fork of 1 / 10  {res['restored_fork1_ms']:9.1f} / {res['restored_fork10_ms']:.1f} ms")
    for k in ("mem_booted", "mem_restored", "mem_pooled"):
        m = res.get(k) or {}
        if m:
            print(f"idle VM, {k[4:]:9s}         RSS {m['rss_mib']:6.1f} MiB, private dirty {m['private_dirty_mib']:6.1f} MiB,"
                  f" private clean {m['private_clean_mib']:6.1f} MiB")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="3 restores, 1 fork of each size")
    ap.add_argument("--idle", type=float, default=5.0, help="seconds idle before reading memory")
    a = ap.parse_args()
    n, forks = (3, 1) if a.quick else (10, 3)
    before = set(glob.glob(os.path.join(CACHE, "vm-template-*")))
    res = {}
    try:
        phase("boot", 0, "0", booted, n, forks, a.idle, res)
        phase("tmpl", 0, "1", templated, n, forks, res)
        phase("pool", 1, "1", pooled, n, a.idle, res)
    finally:
        for t in set(glob.glob(os.path.join(CACHE, "vm-template-*"))) - before:
            for f in os.listdir(t):
                os.unlink(os.path.join(t, f))
            os.rmdir(t)
    for k in ("cold_ms", "snapshot_ms"):
        res[k] = round(res[k], 1)
    report(res, n)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
