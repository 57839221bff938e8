#!/usr/bin/python3
"""Pause/resume latency, snapshot, and fork of 1 and 10 children on a real cordond (jail).

    sudo CORDON_BUILD=$PWD/build /usr/bin/python3 bench/bench_snapshot.py --quick

Medians in milliseconds, measured from the client (unix socket), one daemon of its own."""
import argparse
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runtime", default="jail")
    n = 5 if ap.parse_args().quick else 30
    rt = ap.parse_args().runtime
    d = start_daemon(pool=0, max_sandboxes=64)
    try:
        c = d.client(timeout=120)
        sb = c.create({"runtime": rt})
        sid = sb["id"]
        c.sh(sid, "head -c 8000000 /dev/urandom > /tmp/data")
        res = {"pause": [], "resume": [], "snapshot": [], "fork1": [], "fork10": []}
        for _ in range(n):
            res["pause"].append(timed(lambda: c.post(f"/v1/sandboxes/{sid}/pause")))
            res["resume"].append(timed(lambda: c.post(f"/v1/sandboxes/{sid}/resume")))
        for _ in range(n):
            res["snapshot"].append(timed(lambda: c.post(f"/v1/sandboxes/{sid}/snapshots")))
        for k, name in ((1, "fork1"), (10, "fork10")):
            for _ in range(max(2, n // 2)):
                out = []
                res[name].append(timed(lambda: out.append(c.post(f"/v1/sandboxes/{sid}/fork",
                                                                  {"count": k}).json())))
                for kid in out[0]:
                    c.destroy(kid["id"], missing_ok=True)
        for s in c.get("/v1/snapshots").json()["snapshots"]:
            c.delete(f"/v1/snapshots/{s['id']}")
        for k, v in res.items():
            print(f"{rt} {k:9s} median {statistics.median(v):8.2f} ms  (n={len(v)})")
    finally:
        d.cleanup()


if __name__ == "__main__":
    main()
