#!/usr/bin/python3
"""bench_e2b.py: E2B's own SDK against cordond's E2B surface, and Cordon's own API in the
same run, from the same node process (bench_e2b.mjs).

Usage (as root, from the repository root, after `ninja -C build` and `npm ci` in tests/e2b,
which tests/e2b/test_e2b.py does):

    /usr/bin/python3 bench/bench_e2b.py            # 50 iterations, files of 1 MiB and 100 MiB
    /usr/bin/python3 bench/bench_e2b.py --quick    # 5 iterations, no big file
    /usr/bin/python3 bench/bench_e2b.py --code-store DIR [-n 300]   # d. alone
    /usr/bin/python3 bench/bench_e2b.py --trace -n 3   # the requests of a., one line each

What it measures, p50 and p99 of each:

a. `Sandbox.create()` to the end of the first `commands.run('true')`, against
   `POST /v1/sandboxes` then `POST .../exec ["true"]` over --listen (both from the pool).
b. Command round trip: `commands.run('true')` against `POST .../exec` on a live sandbox.
   a. and b. give the fair peer too: exec of the argv the SDK runs (`/bin/bash -l -c true`).
   Each figure has the client's CPU per operation (node: the SDK or fetch) and cordond's
   main thread's (its schedstat), to tell whose work the difference is.
c. `files.write` and `files.read` of 1 MiB, and of 100 MiB (`--max-upload 128M`; reads past
   8 MiB are spooled by cordond, up to `--max-download`), against PUT and GET
   /v1/.../files of the same bytes.
d. PTY round trip: `pty.sendInput` of a line to `bash -i` until its output is back in
   `onData` (the marker is split by '' in the input, so the terminal's echo does not count),
   against `POST .../processes/{pid}/stdin` to a `POST .../processes {"pty": ...}`.

d. With --code-store DIR (a template store with `code-interpreter` built, as
   tests/daemon/test_code.py's CORDON_TEST_CODE_STORE): @e2b/code-interpreter's
   `runCode('1+1')` against Cordon's own `POST .../code {"code": "1+1"}` (the whole NDJSON
   answer read) on the same sandbox and context, interleaved, after a warm-up cell.

It starts its own cordond (`--pool 4`, templateID "base" naming the host template) in a
fresh temporary directory and prints the node script's JSON line last.
"""

import argparse
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BUILD = os.environ.get("CORDON_BUILD", os.path.join(REPO, "build"))
SDK = os.path.join(REPO, "tests", "e2b")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, p, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and p.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("-n", type=int, default=50)
    ap.add_argument("--cordond", default=os.path.join(BUILD, "cordond"))
    ap.add_argument("--code-store", help="a template store with code-interpreter: measure d. only")
    ap.add_argument("--trace", action="store_true", help="print the requests of -n creates to first command of each API")
    a = ap.parse_args()
    if os.geteuid() != 0 or not shutil.which("node"):
        print("bench_e2b: needs root and node", file=sys.stderr)
        return 2
    if not os.path.isfile(os.path.join(SDK, "node_modules", "e2b", "package.json")):
        r = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=SDK, timeout=300)
        if r.returncode:
            print("bench_e2b: npm ci failed in tests/e2b", file=sys.stderr)
            return 2
    d = tempfile.mkdtemp(prefix="cordon-bench-e2b-")
    key = "e2b_" + secrets.token_hex(20)
    with open(f"{d}/keys", "w") as f:
        f.write(f"{key} bench 100\n")
    os.chmod(f"{d}/keys", 0o600)
    e2b_port, v1_port = free_port(), free_port()
    log = open(f"{d}/cordond.log", "w")
    p = subprocess.Popen([a.cordond, "--socket", f"{d}/c.sock", "--state-dir", f"{d}/state",
                          "--runtime-dir", f"{d}/run", "--api-keys", f"{d}/keys",
                          "--listen", f"127.0.0.1:{v1_port}", "--e2b-listen", f"127.0.0.1:{e2b_port}",
                          "--e2b-base-template", "host", "--pool", "4", "--max-upload", "128M",
                          "--max-peer-connections", "0"],
                         stdout=log, stderr=subprocess.STDOUT,
                         env=dict(os.environ, **({"CORDON_TEMPLATES": a.code_store} if a.code_store else {})))
    try:
        if not wait_port(e2b_port, p) or not wait_port(v1_port, p):
            print("bench_e2b: cordond did not start:", open(f"{d}/cordond.log").read()[-2000:], file=sys.stderr)
            return 2
        time.sleep(1)  # the pool fills
        url = f"http://127.0.0.1:{e2b_port}"
        env = dict(os.environ, E2B_API_URL=url, E2B_SANDBOX_URL=url, E2B_API_KEY=key,
                   CORDON_URL=f"http://127.0.0.1:{v1_port}", CORDOND_PID=str(p.pid),
                   BENCH_N=str(5 if a.quick else a.n),
                   BENCH_BIG="0" if a.quick else str(100 << 20), BENCH_CODE_ONLY="1" if a.code_store else "",
                   BENCH_TRACE="1" if a.trace else "")
        r = subprocess.run(["node", os.path.join(REPO, "bench", "bench_e2b.mjs")], cwd=SDK, env=env,
                           capture_output=True, text=True, timeout=1800)
        sys.stderr.write(r.stderr[-3000:])
        out = r.stdout.strip().splitlines() or ["{}"]
        print("\n".join(out if a.trace else out[-1:]))
        return 0 if r.returncode == 0 else 1
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
        log.close()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
