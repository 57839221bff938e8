#!/usr/bin/python3
"""bench_sdk.py: the exec round trip of the TypeScript SDK against the Python SDK's, in one run.

Usage (as root, from the repository root, after `ninja -C build` and
`(cd sdk/typescript && npm ci && npx tsc -p tsconfig.json)`):

    /usr/bin/python3 bench/bench_sdk.py            # 20 rounds of 50 execs per SDK
    /usr/bin/python3 bench/bench_sdk.py --quick    # 2 rounds of 20: a smoke test
    /usr/bin/python3 bench/bench_sdk.py -n 500 --rounds 6

It starts its own `cordond` (`$CORDON_BUILD/cordond`, default `build/cordond`) in a temporary
directory, creates one sandbox, and times `exec(["true"])` on it: the Python SDK
(`sdk/python`, in this process) and the TypeScript SDK (`sdk/typescript/dist`, in one node
process that stays up), alternating rounds so that a drift of the machine hits both alike.
Each SDK keeps its connection alive, as in use. Goal (issue 17): the TypeScript SDK's p50
within 10% of the Python SDK's.

The last line is one JSON object:
    {"bench": "sdk-exec", "n": .., "python": {"p50_ms": .., "p99_ms": ..},
     "typescript": {"p50_ms": .., "p99_ms": ..}, "ratio": .., "target_met": true|false}
Exit status: 0 when it ran (target met or not), 1 on errors, 2 when it cannot run here.
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

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("CORDON_BUILD", os.path.join(REPO, "build"))
TS_DIST = os.path.join(REPO, "sdk", "typescript", "dist", "index.js")
sys.path.insert(0, os.path.join(REPO, "sdk", "python"))

import cordon  # noqa: E402

# A node process that times N execs on demand: reads "N\n", answers one JSON list of ms.
NODE_DRIVER = r"""
import { Sandbox, Client } from %s;
import * as readline from "node:readline";
const client = new Client({ socket: process.argv[2] });
const sbx = await Sandbox.connect(process.argv[3], { client });
await sbx.exec(["true"]);
const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  const n = Number(line);
  if (!n) break;
  const out = [];
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    const r = await sbx.exec(["true"]);
    out.push(Number(process.hrtime.bigint() - t0) / 1e6);
    if (r.exitCode !== 0) throw new Error("exec failed");
  }
  process.stdout.write(JSON.stringify(out) + "\n");
}
client.close();
"""


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def start_daemon(tmp):
    sock = os.path.join(tmp, "cordon.sock")
    for d in ("state", "run"):
        os.makedirs(os.path.join(tmp, d))
    log = open(os.path.join(tmp, "cordond.log"), "wb")
    proc = subprocess.Popen([os.path.join(BUILD, "cordond"), "--socket", sock, "--state-dir",
                             os.path.join(tmp, "state"), "--runtime-dir", os.path.join(tmp, "run"),
                             "--pool", "1", "--max-sandboxes", "4"],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"cordond exited with {proc.returncode}")
        try:
            if os.path.exists(sock) and cordon.health(socket=sock, timeout=2).get("status") == "ok":
                return proc, sock
        except cordon.CordonError:
            pass
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("cordond did not become ready in 30 s")


def python_round(sbx, n):
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = sbx.exec(["true"])
        out.append((time.perf_counter() - t0) * 1000)
        if r.exit_code != 0:
            raise RuntimeError("exec failed")
    return out


def ts_round(node, n):
    node.stdin.write(f"{n}\n")
    node.stdin.flush()
    line = node.stdout.readline()
    if not line:
        raise RuntimeError("the node driver ended")
    return json.loads(line)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=50, help="execs per round per SDK")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.n, a.rounds = 20, 2
    if os.geteuid() != 0 or not os.path.exists(os.path.join(BUILD, "cordond")):
        print("skipped: needs root and build/cordond")
        return 2
    if not shutil.which("node") or not os.path.exists(TS_DIST):
        print(f"skipped: needs node and {TS_DIST} (cd sdk/typescript && npm ci && npx tsc)")
        return 2
    tmp = tempfile.mkdtemp(prefix="cordon-bench-sdk-")
    daemon = node = None
    try:
        daemon, sock = start_daemon(tmp)
        client = cordon.Client(socket=sock)
        sbx = cordon.Sandbox.create(timeout=600, client=client)
        driver = os.path.join(tmp, "driver.mjs")
        with open(driver, "w") as f:
            f.write(NODE_DRIVER % json.dumps("file://" + TS_DIST))
        node = subprocess.Popen(["node", driver, sock, sbx.id], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        python_round(sbx, 10)  # warm up both
        ts_round(node, 10)
        py, ts = [], []
        for _ in range(a.rounds):
            py += python_round(sbx, a.n)
            ts += ts_round(node, a.n)
        res = {"bench": "sdk-exec", "n": len(py),
               "python": {"p50_ms": round(statistics.median(py), 3), "p99_ms": round(pct(py, 99), 3)},
               "typescript": {"p50_ms": round(statistics.median(ts), 3), "p99_ms": round(pct(ts, 99), 3)}}
        res["ratio"] = round(res["typescript"]["p50_ms"] / res["python"]["p50_ms"], 3)
        res["target_met"] = res["ratio"] <= 1.10
        print(f"exec round trip p50: python {res['python']['p50_ms']} ms, typescript "
              f"{res['typescript']['p50_ms']} ms (ratio {res['ratio']}, goal <= 1.10: "
              f"{'ok' if res['target_met'] else 'MISS'})")
        print(f"exec round trip p99: python {res['python']['p99_ms']} ms, typescript "
              f"{res['typescript']['p99_ms']} ms")
        sbx.kill()
        client.close()
        print(json.dumps(res))
        return 0
    except (RuntimeError, cordon.CordonError, OSError, ValueError) as e:
        print(f"error: {e}")
        return 1
    finally:
        if node is not None:
            try:
                node.stdin.close()
                node.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                node.kill()
        if daemon is not None:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(20)
            except subprocess.TimeoutExpired:
                daemon.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
