#!/usr/bin/python3
"""bench_code.py: the code interpreter's latency (issue 17's performance goals).

Usage (as root, from the repository root, after `ninja -C build`):

    /usr/bin/python3 bench/bench_code.py                 # 300 round trips, 5 fresh sandboxes
    /usr/bin/python3 bench/bench_code.py --quick         # 30 and 2: a smoke test
    /usr/bin/python3 bench/bench_code.py --store DIR     # a template store to use (or fill)

Standard library only. It starts its own `cordond` (`$CORDON_BUILD/cordond`) with `--pool 1`
in a temporary directory, against a template store holding `code-interpreter` (built into a
temporary store from recipes/code-interpreter unless `--store` has one; that needs Debian's
mirror and a few minutes). Every client keeps its HTTP/1.1 connection alive, as an SDK would.

What it measures (goal from the issue in brackets):

a. **Exec round trip.** POST .../exec `["true"]` on a live sandbox: p50 and p99 ms.
b. **Code round trip.** POST .../code `1+1` on a warm context of the same sandbox, the
   whole NDJSON answer read: p50 and p99 ms, and p50 minus a.'s p50 [<= 5 ms over exec],
   interleaved with a. so both see the same machine.
c. **First result from a fresh pooled sandbox.** create (claimed from the warm pool, whose
   sandboxes start their interpreter and default kernel before they are claimed) and the
   first `1+1`, wall time of both: median, over R sandboxes (each waits for the pool to
   refill and its kernel to start).
d. **First result without the pool.** The same for a sandbox the pool cannot serve (a
   non-default disk): its kernel starts on the first cell.

The last line is one JSON object with every figure:
    {"bench": "code", "exec": {...}, "code": {...}, "over_exec_ms": .., "pooled_first": {...},
     "cold_first": {...}, "targets_met": true|false}
Exit status: 0 when every run completed, 1 on errors, 2 on setup (not root, or no template
to be had: the mirror unreachable).
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BUILD = os.environ.get("CORDON_BUILD", os.path.join(REPO, "build"))
RECIPE = os.path.join(REPO, "recipes", "code-interpreter")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_daemon  # noqa: E402  (its keep-alive client)


class Client(bench_daemon.Client):
    """bench_daemon's keep-alive client, answers as bytes (a cell's is NDJSON)."""

    def ok(self, method, path, body=None, status=200):
        st, out = self.call(method, path, body)
        if st != status:
            raise RuntimeError(f"{method} {path}: {st} {out[:300]!r}")
        return out


def ms(ns):
    return ns / 1e6


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p))]


def ensure_store(store):
    env = dict(os.environ, CORDON_TEMPLATES=store)
    cordon = os.path.join(BUILD, "cordon")
    if subprocess.run([cordon, "template", "inspect", "code-interpreter"], env=env,
                      capture_output=True, timeout=60).returncode == 0:
        return
    print("building the code-interpreter template (Debian's mirror; a few minutes)...", flush=True)
    subprocess.run([cordon, "template", "build", "code-interpreter", "-f",
                    os.path.join(RECIPE, "Cordonfile"), "--context", RECIPE],
                   env=env, check=True, timeout=1800, stdout=subprocess.DEVNULL)


def start_daemon(root, store):
    sock = os.path.join(root, "s.sock")
    os.makedirs(os.path.join(root, "state"))
    os.makedirs(os.path.join(root, "run"))
    log = open(os.path.join(root, "cordond.log"), "wb")
    p = subprocess.Popen([os.path.join(BUILD, "cordond"), "--socket", sock, "--state-dir",
                          os.path.join(root, "state"), "--runtime-dir", os.path.join(root, "run"),
                          "--pool", "1", "--max-sandboxes", "16"],
                         env=dict(os.environ, CORDON_TEMPLATES=store), stdout=log, stderr=log,
                         start_new_session=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if Client(sock).call("GET", "/healthz")[0] == 200:
                return p, sock
        except OSError:
            pass
        time.sleep(0.05)
    p.kill()
    raise RuntimeError("cordond did not start")


def create(c, body):
    return json.loads(c.ok("POST", "/v1/sandboxes", body, status=201))["id"]


def code(c, sid, src):
    out = c.ok("POST", f"/v1/sandboxes/{sid}/code", {"code": src})
    evs = [json.loads(line) for line in out.splitlines()]
    if evs[-1]["type"] != "end" or any(e["type"] == "error" for e in evs):
        raise RuntimeError(f"cell {src!r}: {evs}")
    return evs


def round_trips(c, sid, n):
    ex, cd = [], []
    code(c, sid, "1+1")  # the default context made and warm
    for _ in range(n):
        t0 = time.perf_counter_ns()
        c.ok("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["true"]})
        t1 = time.perf_counter_ns()
        code(c, sid, "1+1")
        t2 = time.perf_counter_ns()
        ex.append(ms(t1 - t0))
        cd.append(ms(t2 - t1))
    return ex, cd


def wait_pool_warm(c, settle):
    """Until the pool holds a code-interpreter sandbox, then @settle s for its kernel."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        text = c.ok("GET", "/metrics").decode()
        if any(line == "cordon_pool_ready 2" for line in text.splitlines()):
            time.sleep(settle)
            return
        time.sleep(0.2)
    raise RuntimeError("the pool did not refill")


def first_result(c, body, pooled, settle):
    if pooled:
        wait_pool_warm(c, settle)
    t0 = time.perf_counter_ns()
    sid = create(c, body)
    code(c, sid, "1+1")
    t = ms(time.perf_counter_ns() - t0)
    c.ok("DELETE", f"/v1/sandboxes/{sid}", status=204)
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=300)
    ap.add_argument("-r", "--fresh", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--store")
    ap.add_argument("--settle", type=float, default=8.0, help="seconds for a pooled kernel")
    a = ap.parse_args()
    if a.quick:
        a.n, a.fresh = 30, 2
    if os.geteuid() != 0:
        print("bench_code: needs root", file=sys.stderr)
        return 2
    root = tempfile.mkdtemp(prefix="cordon-bench-code-")
    store = a.store or os.path.join(root, "store")
    proc = None
    try:
        ensure_store(store)
    except (OSError, subprocess.SubprocessError) as e:
        print(f"bench_code: no code-interpreter template ({e})", file=sys.stderr)
        shutil.rmtree(root, ignore_errors=True)
        return 2
    try:
        proc, sock = start_daemon(os.path.join(root, "d"), store)
        c = Client(sock)
        ci = {"template": "code-interpreter", "timeout_s": 3600}
        c.ok("DELETE", f"/v1/sandboxes/{create(c, ci)}", status=204)  # warm from now on
        sid = create(c, ci)
        ex, cd = round_trips(c, sid, a.n)
        c.ok("DELETE", f"/v1/sandboxes/{sid}", status=204)
        pooled = [first_result(c, ci, True, a.settle) for _ in range(a.fresh)]
        cold = [first_result(c, dict(ci, limits={"disk_mb": 2048}), False, 0)
                for _ in range(a.fresh)]
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        print(f"bench_code: {e}", file=sys.stderr)
        return 1
    finally:
        if proc:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(root, ignore_errors=True)
    over = statistics.median(cd) - statistics.median(ex)
    res = {"bench": "code",
           "exec": {"p50_ms": round(statistics.median(ex), 3), "p99_ms": round(pct(ex, 0.99), 3), "n": a.n},
           "code": {"p50_ms": round(statistics.median(cd), 3), "p99_ms": round(pct(cd, 0.99), 3), "n": a.n},
           "over_exec_ms": round(over, 3),
           "pooled_first": {"median_ms": round(statistics.median(pooled), 1), "n": a.fresh},
           "cold_first": {"median_ms": round(statistics.median(cold), 1), "n": a.fresh},
           "targets_met": over <= 5.0}
    print(f"exec round trip       p50 {res['exec']['p50_ms']:8.3f} ms  p99 {res['exec']['p99_ms']:8.3f} ms")
    print(f"run_code('1+1')       p50 {res['code']['p50_ms']:8.3f} ms  p99 {res['code']['p99_ms']:8.3f} ms")
    print(f"code over exec        p50 {over:8.3f} ms  [goal <= 5 ms] {'ok' if over <= 5 else 'MISS'}")
    print(f"first result, pooled  median {res['pooled_first']['median_ms']:8.1f} ms (create + first cell)")
    print(f"first result, no pool median {res['cold_first']['median_ms']:8.1f} ms (kernel starts on it)")
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
