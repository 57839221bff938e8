#!/usr/bin/python3
"""Pause/resume latency, snapshot, and fork of 1 and 10 children on a real cordond, for each
runtime with snapshots here (jail; gvisor where runsc works), in the same run.

    sudo CORDON_BUILD=$PWD/build /usr/bin/python3 bench/bench_snapshot.py [--quick] [--runtime R]

Medians in milliseconds, measured from the client (unix socket), one daemon of its own, a
sandbox with 8 MB written to /tmp; then gvisor's figures over the jail's. The last line is
one JSON object with every figure."""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "daemon"))
from conftest import start_daemon  # noqa: E402


def timed(fn):
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000


def pause_resume(c, sid, n):
    """@n pauses and resumes of sandbox @sid: {"pause": [ms...], "resume": [ms...]}."""
    res = {"pause": [], "resume": []}
    for _ in range(n):
        for verb in ("pause", "resume"):
            r = []
            res[verb].append(timed(lambda: r.append(c.post(f"/v1/sandboxes/{sid}/{verb}"))))
            assert r[0].status == 200, r[0].describe()
    return res


def fork(c, sid, k):
    out = []
    t = timed(lambda: out.append(c.post(f"/v1/sandboxes/{sid}/fork", {"count": k})))
    kids = out[0].json()
    assert out[0].status == 200 and all("id" in x for x in kids), out[0].describe()
    for kid in kids:
        c.destroy(kid["id"], missing_ok=True)
    return t


def measure(c, rt, n):
    sb = c.create({"runtime": rt})
    sid = sb["id"]
    try:
        c.sh(sid, "head -c 8000000 /dev/urandom > /tmp/data")
        res = pause_resume(c, sid, n)
        res["snapshot"] = [timed(lambda: c.post(f"/v1/sandboxes/{sid}/snapshots")) for _ in range(n)]
        for k in (1, 10):
            res[f"fork{k}"] = [fork(c, sid, k) for _ in range(max(2, n // 2))]
    finally:
        c.destroy(sid, missing_ok=True)
        for s in c.get("/v1/snapshots").json()["snapshots"]:
            c.delete(f"/v1/snapshots/{s['id']}")
    return {k: round(statistics.median(v), 2) for k, v in res.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runtime", action="append", help="jail, gvisor [every one with snapshots]")
    a = ap.parse_args()
    n = 5 if a.quick else 20
    load = os.getloadavg()[0]
    d = start_daemon(pool=0, max_sandboxes=64)
    try:
        c = d.client(timeout=120)
        listing = c.get("/v1/runtimes").json()["runtimes"]
        rts = a.runtime or [x["name"] for x in reversed(listing)
                            if x["available"] and "snapshot" in x["capabilities"]]
        res = {rt: measure(c, rt, n) for rt in rts}
    finally:
        d.cleanup()
    for rt, r in res.items():
        print(f"{rt:6} " + "  ".join(f"{k} {v:.2f}" for k, v in r.items()) + " ms")
    if "jail" in res and "gvisor" in res:
        res["ratios"] = {k: round(res["gvisor"][k] / res["jail"][k], 2) for k in res["jail"]}
        print("gvisor / jail: " + "  ".join(f"{k} {v}x" for k, v in res["ratios"].items()))
    print(json.dumps(dict(res, n=n, loadavg_before=load, loadavg_after=os.getloadavg()[0])))


if __name__ == "__main__":
    main()
