#!/usr/bin/python3
"""bench_daemon.py: latency, throughput and memory of `cordond` over its unix socket.

Usage (as root, from the repository root, after `ninja -C build`):

    /usr/bin/python3 bench/bench_daemon.py            # 500 iterations, 16 threads, 1000 idle
    /usr/bin/python3 bench/bench_daemon.py --quick    # 50 iterations, 20 idle: CI's gate
    /usr/bin/python3 bench/bench_daemon.py -n 2000 --threads 32 --idle 500 --pool 16
    /usr/bin/python3 bench/bench_daemon.py --cordond /path/to/cordond
    /usr/bin/python3 bench/bench_daemon.py --lifecycles 20000   # b. alone, at scale: errors

Standard library only. The script starts its own `cordond` (default `$CORDON_BUILD/cordond`,
`build/cordond`) in a fresh temporary directory with `--pool 8` (warm pool) and a
`--max-sandboxes` large enough for the idle test, waits until the pool is full, runs the
measurements below and stops the daemon. Every client uses HTTP/1.1 keep-alive on its own
connection, as an SDK would.

What it measures (issue 18's goals in brackets):

e. **Start.** cordond's exec to its first answered `/healthz` [<= 50 ms], and to a full
   pool [<= pool x (one build) / cores: one build is the wall time from a claim on the full
   pool to the pool full again, the refill alone, median of 5, on a daemon whose refills
   never wait (`--pool-refill-defer 0`); the pool and spawner threads' CPU per build, and
   pool x that / cores, are printed beside it]; both for a first start on a new state
   directory (which makes its keys, state.db and the scratch's golden image) and for a
   restart on one that a cordond has run on.
a. **Lifecycle, sequential.** create -> exec `["true"]` -> destroy, N times (default 500),
   wall time of each lifecycle: p50 and p99 ms [p50 <= 2 ms, p99 <= 5 ms], each call's own
   p50, and the CPU each cordond thread (`cordond` the loop, `cordond-pool`,
   `cordond-teardn`) spent per lifecycle, from /proc/PID/task/*/schedstat. Back to back,
   each lifecycle runs beside the refills the ones before it caused.
a'. **Lifecycle at an agent's pace.** The same, each lifecycle started on a full pool with
   the last one's teardown done (what an agent that thinks between tool calls gets), through
   the lean client (below) and through http.client alternately [p50 <= 2 ms, p99 <= 5 ms].
b. **Lifecycle, concurrent.** The same with 16 client threads sharing N lifecycles:
   lifecycles per second over the whole run and p99 ms of one lifecycle
   [>= 500 lifecycles/s with p99 <= 50 ms].
c. **Exec round trip.** exec `["true"]` on one live sandbox, N times, interleaved with a
   native start of /bin/true from the benchmark (posix_spawn and wait): both p50s and the
   difference [<= 0.3 ms], and the loop's CPU per exec; through http.client and through a
   lean client (one keep-alive socket, the request made by one format, the answer read for
   its status and Content-Length: what a client in C, Go or Rust costs), whose difference is
   the goal's: http.client's parse of each answer is the client's cost, not Cordon's.
d. **Idle sandboxes.** `MemAvailable` from /proc/meminfo before and after creating M idle
   sandboxes (default 1000) and letting them settle, divided by M: host memory per idle
   sandbox, measured, not estimated [<= 0.5 MiB]. Other activity on the machine moves this
   figure; run it on an idle host.

`--lifecycles N` runs b. alone with N lifecycles (16 threads unless `--threads`) and reports
the rate and the number of errors, which must be 0 (issue 10: a stale event destroyed 0.1-0.7%
of sandboxes at 16-way); its JSON line is
`{"bench": "cordond-lifecycles", "n": .., "threads": .., "per_s": .., "p99_ms": .., "errors": N}`.

Each figure is printed with its goal and `ok`/`MISS`; the last line of the output is one
JSON object with every figure, for CI to keep (`startup`, `lifecycle_seq`,
`lifecycle_concurrent`, `exec`, `idle`, `targets_met`, `errors`, `regressions`).

**The regression gate** (on with `--quick`, as CI runs it; `--check`/`--no-check`): each
figure named in `bench/thresholds.json` (`--thresholds FILE`) is compared with its
threshold and the run fails when it is more than 50% worse (above max x 1.5, below
min / 1.5). Missed goals alone do not fail a run.

Exit status: 0 when every run completed (goals missed or not), 1 on errors or a regression
past the gate, 2 on setup.
"""

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BUILD = os.environ.get("CORDON_BUILD", os.path.join(REPO, "build"))


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=60):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


class Client:
    """One keep-alive connection; reconnects when the server closes it."""

    def __init__(self, sock):
        self.sock = sock
        self.conn = None

    def call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else {}
        if data is None and method == "POST":
            headers["Content-Length"] = "0"
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = UnixHTTPConnection(self.sock)
            try:
                self.conn.request(method, path, body=data, headers=headers)
                r = self.conn.getresponse()
                out = r.read()
                if r.will_close:
                    self.conn.close()
                    self.conn = None
                return r.status, out
            except (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
            except Exception:
                self.conn.close()  # never reuse a connection in an unknown state
                self.conn = None
                raise
        raise AssertionError("unreachable")

    def expect(self, method, path, body, status):
        st, out = self.call(method, path, body)
        if st != status:
            raise RuntimeError(f"{method} {path} -> {st} {out[:300]!r}")
        return json.loads(out) if out else None

    def create(self, body=None):
        return self.expect("POST", "/v1/sandboxes", body or {}, 201)["id"]

    def exec_true(self, sid):
        res = self.expect("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["true"]}, 200)
        if res.get("exit_code") != 0:
            raise RuntimeError(f"exec true: {res}")

    def destroy(self, sid):
        self.expect("DELETE", f"/v1/sandboxes/{sid}", None, 204)

    def close(self):
        if self.conn:
            self.conn.close()


class LeanClient(Client):
    """The same calls without http.client: the request's bytes made by one format, the answer
    read for its status and Content-Length only, on one keep-alive connection. What a client
    in C, Go or Rust costs; Python's http.client parses each answer's header with the email
    package and costs ~0.1 ms a call here, which goals 2 and 4 would otherwise count as
    Cordon's (bench/RESULTS.md)."""

    def __init__(self, sock):
        super().__init__(sock)
        self.s = None
        self.buf = b""

    def call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else b""
        head = f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {len(data)}\r\n"
        if body is not None:
            head += "Content-Type: application/json\r\n"
        req = (head + "\r\n").encode() + data
        for attempt in (0, 1):
            if self.s is None:
                self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.s.settimeout(60)
                self.s.connect(self.sock)
            try:
                self.s.sendall(req)
                return self._answer()
            except (ConnectionError, EOFError):  # a keep-alive the server closed: once more
                self.close()
                if attempt:
                    raise
            except Exception:
                self.close()  # never reuse a connection in an unknown state
                raise
        raise AssertionError("unreachable")

    def _fill(self):
        chunk = self.s.recv(65536)
        if not chunk:
            raise EOFError("cordond closed the connection")
        self.buf += chunk

    def _answer(self):
        while (end := self.buf.find(b"\r\n\r\n")) < 0:
            self._fill()
        lines = self.buf[:end].decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        fields = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            fields[k.strip().lower()] = v.strip().lower()
        if "transfer-encoding" in fields:
            raise RuntimeError(f"LeanClient reads Content-Length bodies only: {lines[0]}")
        n = int(fields.get("content-length", "0"))
        while len(self.buf) < end + 4 + n:
            self._fill()
        body, self.buf = self.buf[end + 4:end + 4 + n], self.buf[end + 4 + n:]
        if fields.get("connection") == "close":
            self.close()
        return status, body

    def close(self):
        if self.s:
            self.s.close()
        self.s, self.buf = None, b""


def pct(values, p):
    """Nearest-rank percentile."""
    if not values:
        return float("nan")
    v = sorted(values)
    k = max(0, min(len(v) - 1, int(round(p / 100 * len(v) + 0.5)) - 1))
    return v[k]


def thread_cpu_ns(pid):
    """{thread name: ns on a CPU} from /proc/PID/task/*/schedstat: the CPU a step costs,
    which the other work on a shared machine moves far less than it moves wall time."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
        except OSError:
            continue
        if str(pid) != tid and name == "cordond":
            name = "cordond-other"  # a build whose threads have no names of their own
        out[name] = out.get(name, 0) + ns
    return out


def cpu_per_op(before, after, n):
    """ms of CPU per operation of each thread between two thread_cpu_ns() readings."""
    return {k: round((after.get(k, 0) - before.get(k, 0)) / n / 1e6, 3) for k in after}


def native_true_ms():
    """One start of /bin/true from here, as lean as Python can: posix_spawn (vfork) and wait."""
    t0 = time.perf_counter()
    pid = os.posix_spawn("/bin/true", ["true"], {})
    os.waitpid(pid, 0)
    return (time.perf_counter() - t0) * 1000


def mem_available_kib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def pool_size(client):
    """The warm pool gauge from /metrics, or None when there is none."""
    st, out = client.call("GET", "/metrics")
    if st != 200:
        return None
    types = {}
    vals = {}
    for line in out.decode(errors="replace").splitlines():
        if line.startswith("# TYPE"):
            p = line.split()
            if len(p) == 4:
                types[p[2]] = p[3]
        elif line and not line.startswith("#"):
            m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)", line)
            if m:
                vals[m.group(1)] = vals.get(m.group(1), 0) + float(m.group(3))
    for name, v in sorted(vals.items()):
        if re.search(r"^cordon\w*pool\w*(size|ready|available|sandboxes)?$", name) and \
                types.get(name) == "gauge":
            return v
    return None


class Daemon:
    def __init__(self, binary, pool, max_sandboxes, extra=()):
        self.root = tempfile.mkdtemp(prefix="cordond-bench-")
        self.sock = os.path.join(self.root, "cordon.sock")
        self.log = os.path.join(self.root, "cordond.log")
        self.argv = [binary, "--socket", self.sock, "--state-dir", os.path.join(self.root, "state"),
                     "--runtime-dir", os.path.join(self.root, "run"), "--pool", str(pool),
                     "--max-sandboxes", str(max_sandboxes), "--max-timeout", "3600", *extra]
        self.proc = None

    def start(self):
        """Starts cordond; sets self.started_ms, exec to the first /healthz answered (goal 6)."""
        with open(self.log, "wb") as log:
            t0 = time.perf_counter()
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         start_new_session=True)
        self.t0 = t0
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"cordond exited with {self.proc.returncode}: {self.tail()}")
            if os.path.exists(self.sock):
                try:
                    if Client(self.sock).call("GET", "/healthz")[0] == 200:
                        self.started_ms = (time.perf_counter() - t0) * 1000
                        return
                except OSError:
                    pass
            time.sleep(0.001)
        raise RuntimeError(f"cordond did not answer /healthz: {self.tail()}")

    def threads(self):
        """CPU ns each of cordond's threads has run, by name (cordond, cordond-pool, ...)."""
        return thread_cpu_ns(self.proc.pid)

    def tail(self):
        try:
            with open(self.log, "rb") as f:
                return f.read()[-3000:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self):
        if os.environ.get("CORDON_BENCH_LOG"):  # keep the daemon's log for a post-mortem
            shutil.copy(self.log, os.environ["CORDON_BENCH_LOG"])
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        with open("/proc/self/mountinfo") as f:
            if any(line.split()[4].startswith(self.root) for line in f):
                print(f"warning: mounts left under {self.root}; not removing it", file=sys.stderr)
                return
        shutil.rmtree(self.root, ignore_errors=True)


def wait_pool(client, size, timeout=15, step=0.05):
    """Waits until the warm pool holds @size ready sandboxes (at most @timeout s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pool_size(client)
        if v is None:
            time.sleep(2)  # no gauge to watch: give the pool a moment
            return None
        if v >= size:
            return v
        time.sleep(step)
    v = pool_size(client)
    print(f"warning: warm pool at {v} of {size} after {timeout}s", file=sys.stderr)
    return v


def lifecycle(client, phases=None):
    """One create -> exec `true` -> destroy: its wall ms; each call's own in @phases."""
    t0 = time.perf_counter()
    sid = client.create()
    t1 = time.perf_counter()
    client.exec_true(sid)
    t2 = time.perf_counter()
    client.destroy(sid)
    t3 = time.perf_counter()
    if phases is not None:
        for k, a, b in (("create", t0, t1), ("exec", t1, t2), ("destroy", t2, t3)):
            phases.setdefault(k, []).append((b - a) * 1000)
    return (t3 - t0) * 1000


def bench_sequential(d, n, pool):
    """a.: wall per lifecycle, and the CPU each of cordond's threads spent per lifecycle
    (the pool's refills counted once the pool is full again)."""
    c = Client(d.sock)
    wait_pool(c, pool)
    before = d.threads()
    phases = {}
    times = [lifecycle(c, phases) for _ in range(n)]
    wait_pool(c, pool, step=0.005)
    cpu = cpu_per_op(before, d.threads(), n)
    c.close()
    return {"p50_ms": round(pct(times, 50), 3), "p99_ms": round(pct(times, 99), 3), "n": n,
            "cpu_ms": cpu, "phase_p50_ms": {k: round(pct(v, 50), 3) for k, v in phases.items()}}


def bench_concurrent(sock, n, threads, pool):
    wait_pool(Client(sock), pool)
    times, errors = [], []
    lock = threading.Lock()
    counter = iter(range(n))

    def worker():
        c = Client(sock)
        mine = []
        while True:
            with lock:
                if next(counter, None) is None:
                    break
            try:
                mine.append(lifecycle(c))
            except Exception as e:  # noqa: BLE001 - counted and reported
                with lock:
                    errors.append(str(e))
        c.close()
        with lock:
            times.extend(mine)

    t0 = time.perf_counter()
    ths = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    wall = time.perf_counter() - t0
    return {"per_s": round(len(times) / wall, 1), "p99_ms": round(pct(times, 99), 3),
            "p50_ms": round(pct(times, 50), 3), "threads": threads, "n": len(times)}, errors


def bench_exec(d, n, pool):
    """c.: exec `true` on one live sandbox, through http.client and through the lean client in
    turn, each interleaved with starting /bin/true natively from this process (goal 4 is the
    difference: what Cordon adds to the program's own start; the lean client's is the goal's,
    http.client's adds Python's parse of each answer, `client_ms` the two clients' difference
    on `/healthz`). Timed once the pool has refilled behind the sandbox's own create and the
    burst before it: an exec measured beside a build is the build's figure (a and b have it)."""
    c, lean = Client(d.sock), LeanClient(d.sock)
    sid = c.create()
    c.exec_true(sid)  # warm
    lean.exec_true(sid)
    wait_pool(c, pool)
    native_true_ms()
    times, lean_times, native, health = [], [], [], {c: [], lean: []}
    before = d.threads()
    for _ in range(n):
        for client, out in ((c, times), (lean, lean_times)):
            t0 = time.perf_counter()
            client.exec_true(sid)
            out.append((time.perf_counter() - t0) * 1000)
            native.append(native_true_ms())
    cpu = cpu_per_op(before, d.threads(), 2 * n)
    for _ in range(min(n, 200)):
        for client in (c, lean):
            t0 = time.perf_counter()
            client.expect("GET", "/healthz", None, 200)
            health[client].append((time.perf_counter() - t0) * 1000)
    c.destroy(sid)
    c.close()
    lean.close()
    p50, l50, n50 = pct(times, 50), pct(lean_times, 50), pct(native, 50)
    return {"p50_ms": round(p50, 3), "p99_ms": round(pct(times, 99), 3), "n": n,
            "native_p50_ms": round(n50, 3), "native_p99_ms": round(pct(native, 99), 3),
            "over_native_ms": round(p50 - n50, 3), "cpu_ms": cpu,
            "lean": {"p50_ms": round(l50, 3), "p99_ms": round(pct(lean_times, 99), 3),
                     "over_native_ms": round(l50 - n50, 3)},
            "client_ms": round(pct(health[c], 50) - pct(health[lean], 50), 3)}


def bench_paced(d, n, pool):
    """a'.: create -> exec `true` -> destroy one at a time at an agent's pace: each lifecycle
    starts on a full pool with the last one's teardown done, so that it is not measured
    beside the refill it caused (a. is, back to back). Through the lean client and
    http.client alternately."""
    c, lean = Client(d.sock), LeanClient(d.sock)
    times, phases = {"lean": [], "http.client": []}, {}
    for i in range(n):
        wait_pool(c, pool, step=0.002)
        time.sleep(0.02)  # the teardown thread's free and the kernel's namespace cleanup
        name, client = ("lean", lean) if i % 2 == 0 else ("http.client", c)
        times[name].append(lifecycle(client, phases if name == "lean" else None))
    c.close()
    lean.close()
    r = {"p50_ms": round(pct(times["lean"], 50), 3), "p99_ms": round(pct(times["lean"], 99), 3),
         "n": len(times["lean"]), "phase_p50_ms": {k: round(pct(v, 50), 3) for k, v in phases.items()},
         "http_client": {"p50_ms": round(pct(times["http.client"], 50), 3),
                         "p99_ms": round(pct(times["http.client"], 99), 3)}}
    return r


def bench_startup(d, pool):
    """Goal 6: cordond's start to its first answered request, and to a full pool, against
    pool x (one build's CPU on the pool's and spawner threads) / cores."""
    c = Client(d.sock)
    full = wait_pool(c, pool, timeout=60, step=0.002)
    full_ms = (time.perf_counter() - d.t0) * 1000
    th = d.threads()
    # the pool's thread and, since the jail's child runs in cordond's memory, the threads that
    # clone it (runtime/jail/spawn.c: its clone3() is the build's, as the fork was before)
    builder = (th.get("cordond-pool", th.get("cordond-other", 0)) + th.get("cordon-spawn", 0)) / 1e6
    one = builder / max(1, pool)
    c.close()
    # One build alone, the goal's "(one build)": a claim from a full pool and the time until
    # the pool is full again, its refill the only build running (the claim included); the
    # median of 5, each after the last one's sandbox is gone. On a daemon of its own whose
    # refills never wait for a pause in the requests (--pool-refill-defer 0): the wait is not
    # the build's.
    alone = []
    one_d = Daemon(d.argv[0], 1, 8, extra=["--pool-refill-defer", "0"])
    try:
        one_d.start()
        oc = Client(one_d.sock)
        for _ in range(5 if full is not None and wait_pool(oc, 1, timeout=30) else 0):
            t0 = time.perf_counter()
            sid = oc.create()
            wait_pool(oc, 1, timeout=30, step=0.002)
            alone.append((time.perf_counter() - t0) * 1000)
            oc.destroy(sid)
            time.sleep(0.1)
        oc.close()
    finally:
        one_d.stop()
    # A restart: the same start on a state directory that a cordond has run on before (its
    # keys, its state.db and the scratch's golden image made), which is what a host's every
    # start after its first is; the start above is a first one, and makes them.
    rd = Daemon(d.argv[0], pool, max(2 * pool + 8, 64))
    restart = {}
    try:
        rd.start()
        rc = Client(rd.sock)
        wait_pool(rc, pool, timeout=60)
        rc.close()
        rd.proc.send_signal(signal.SIGTERM)
        rd.proc.wait(30)
        rd.start()
        rc = Client(rd.sock)
        if wait_pool(rc, pool, timeout=60, step=0.002) is not None:
            restart = {"restart_first_request_ms": round(rd.started_ms, 3),
                       "restart_pool_full_ms": round((time.perf_counter() - rd.t0) * 1000, 1)}
        rc.close()
    finally:
        rd.stop()
    cores = os.cpu_count() or 1
    build_ms = statistics.median(alone) if alone else None
    return {**restart, "first_request_ms": round(d.started_ms, 3), "pool": pool,
            "pool_full_ms": round(full_ms, 1) if full is not None else None,
            "one_build_cpu_ms": round(one, 3),
            "pool_target_ms": round(pool * one / cores, 1), "cores": cores,
            "one_build_ms": round(build_ms, 2) if build_ms else None,
            "pool_target_wall_ms": round(pool * build_ms / cores, 1) if build_ms else None}


def bench_idle(sock, count, pool):
    c = Client(sock)
    wait_pool(c, pool)
    time.sleep(1)
    subprocess.run(["sync"], check=False)
    before = mem_available_kib()
    ids = []
    try:
        for _ in range(count):
            ids.append(c.create({"timeout_s": 3600}))
        wait_pool(c, pool)  # the pool refilled: the difference is the idle sandboxes alone
        time.sleep(2)
        after = mem_available_kib()
    finally:
        for sid in ids:
            try:
                c.destroy(sid)
            except Exception:  # noqa: BLE001 - best effort
                pass
        c.close()
    per = (before - after) / 1024 / max(1, len(ids))
    return {"sandboxes": len(ids), "mib_per_sandbox": round(per, 3),
            "mem_available_before_kib": before, "mem_available_after_kib": after}


# Issue 18's goals: (label, figure's path in the result, unit, "<=" or ">=", goal). A goal
# given as a path is another figure of the same run (the pool's own target).
TARGETS = (
    ("a. lifecycle sequential p50", "lifecycle_seq.p50_ms", "ms", "<=", 2),
    ("a. lifecycle sequential p99", "lifecycle_seq.p99_ms", "ms", "<=", 5),
    ("a. of which create (claim) p50", "lifecycle_seq.phase_p50_ms.create", "ms", None, None),
    ("a. of which exec p50", "lifecycle_seq.phase_p50_ms.exec", "ms", None, None),
    ("a. of which destroy p50", "lifecycle_seq.phase_p50_ms.destroy", "ms", None, None),
    ("a. loop thread CPU per lifecycle", "lifecycle_seq.cpu_ms.cordond", "ms", None, None),
    ("a. pool thread CPU per lifecycle", "lifecycle_seq.cpu_ms.cordond-pool", "ms", None, None),
    ("a. teardown thread CPU per lifecycle", "lifecycle_seq.cpu_ms.cordond-teardn", "ms", None, None),
    ("a. spawner threads CPU per lifecycle", "lifecycle_seq.cpu_ms.cordon-spawn", "ms", None, None),
    ("a'. lifecycle at an agent's pace p50, lean", "lifecycle_paced.p50_ms", "ms", "<=", 2),
    ("a'. lifecycle at an agent's pace p99, lean", "lifecycle_paced.p99_ms", "ms", "<=", 5),
    ("a'. of which create p50", "lifecycle_paced.phase_p50_ms.create", "ms", None, None),
    ("a'. of which exec p50", "lifecycle_paced.phase_p50_ms.exec", "ms", None, None),
    ("a'. of which destroy p50", "lifecycle_paced.phase_p50_ms.destroy", "ms", None, None),
    ("a'. the same through http.client, p50", "lifecycle_paced.http_client.p50_ms", "ms", None, None),
    ("a'. the same through http.client, p99", "lifecycle_paced.http_client.p99_ms", "ms", None, None),
    ("b. lifecycles/s (16 threads)", "lifecycle_concurrent.per_s", "/s", ">=", 500),
    ("b. lifecycle concurrent p99", "lifecycle_concurrent.p99_ms", "ms", "<=", 50),
    ("c. exec round trip p50, http.client", "exec.p50_ms", "ms", None, None),
    ("c. exec round trip p50, lean client", "exec.lean.p50_ms", "ms", None, None),
    ("c. /bin/true natively p50 (same run)", "exec.native_p50_ms", "ms", None, None),
    ("c. exec over native p50, http.client", "exec.over_native_ms", "ms", None, None),
    ("c. exec over native p50, lean client", "exec.lean.over_native_ms", "ms", "<=", 0.3),
    ("c. http.client over lean, /healthz p50", "exec.client_ms", "ms", None, None),
    ("c. loop thread CPU per exec", "exec.cpu_ms.cordond", "ms", None, None),
    ("d. memory per idle sandbox", "idle.mib_per_sandbox", "MiB", "<=", 0.5),
    ("e. first start to first answered request", "startup.first_request_ms", "ms", "<=", 50),
    ("e. first start to a full pool", "startup.pool_full_ms", "ms", "<=", "startup.pool_target_wall_ms"),
    ("e. restart to first answered request", "startup.restart_first_request_ms", "ms", "<=", 50),
    ("e. restart to a full pool", "startup.restart_pool_full_ms", "ms", "<=", "startup.pool_target_wall_ms"),
    ("e. one build alone (claim to a full pool)", "startup.one_build_ms", "ms", None, None),
    ("e. pool x one build / cores (the goal)", "startup.pool_target_wall_ms", "ms", None, None),
    ("e. pool and spawner CPU per build", "startup.one_build_cpu_ms", "ms", None, None),
    ("e. pool x that CPU / cores", "startup.pool_target_ms", "ms", None, None),
)


def figure(result, path):
    """The figure at dotted @path of @result, or None."""
    v = result
    for k in path.split("."):
        v = v.get(k) if isinstance(v, dict) else None
    return v if isinstance(v, (int, float)) else None


def print_targets(result):
    """Prints every figure with its goal; True when each goal with a figure is met."""
    ok = True
    for label, path, unit, op, goal in TARGETS:
        v = figure(result, path)
        if v is None:
            continue
        g = figure(result, goal) if isinstance(goal, str) else goal
        if op is None or g is None:
            print(f"{label:<42} {v:>10.3f} {unit}")
            continue
        met = v <= g if op == "<=" else v >= g
        ok &= report(label, v, unit, f"{op} {g:g} {unit}", met)
    return ok


def check_thresholds(result, path, slack=1.5, table_name="bench_daemon"):
    """The regression gate: each figure in @path's @table_name table against its
    threshold; a "max" figure fails above max x @slack, a "min" one below min / @slack (50%
    either way: loose for a noisy shared machine, a 2x regression still fails). Returns the
    failures, printed."""
    with open(path) as f:
        table = json.load(f)[table_name]
    failed = []
    for key, lim in sorted(table.items()):
        v = figure(result, key)
        if v is None:
            continue
        if "max" in lim:
            bad, bound = v > lim["max"] * slack, f"<= {lim['max'] * slack:g} (1.5 x {lim['max']:g})"
        else:
            bad, bound = v < lim["min"] / slack, f">= {lim['min'] / slack:g} ({lim['min']:g} / 1.5)"
        print(f"threshold {key:<38} {v:>10.3f}  {bound:<26} {'REGRESSED' if bad else 'ok'}")
        if bad:
            failed.append(key)
    return failed


def report(label, value, unit, target, ok):
    print(f"{label:<42} {value:>10.3f} {unit:<14} target {target:<16} {'ok' if ok else 'MISS'}")
    return ok


def run_lifecycles(args):
    """--lifecycles N: many lifecycles at --threads-way, and every error shown."""
    d = Daemon(args.cordond, args.pool, max(2 * args.pool + args.threads + 8, 64))
    try:
        d.start()
    except RuntimeError as e:
        print(f"bench_daemon: {e}", file=sys.stderr)
        d.stop()
        return 2
    try:
        print(f"cordond {d.argv[0]} --pool {args.pool}; {args.lifecycles} lifecycles, "
              f"{args.threads} threads")
        t0 = time.monotonic()
        r, errors = bench_concurrent(d.sock, args.lifecycles, args.threads, args.pool)
        wall = time.monotonic() - t0
        if d.proc.poll() is not None:
            errors.append(f"cordond exited with {d.proc.returncode}: {d.tail()}")
    finally:
        d.stop()
    for e in errors[:20]:
        print(f"error: {e}", file=sys.stderr)
    print(f"{r['n']} lifecycles in {wall:.1f} s: {r['per_s']} /s, p50 {r['p50_ms']} ms, "
          f"p99 {r['p99_ms']} ms, {len(errors)} errors")
    print(json.dumps({"bench": "cordond-lifecycles", "n": args.lifecycles, "threads": args.threads,
                      "per_s": r["per_s"], "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"],
                      "wall_s": round(wall, 1), "errors": len(errors)}, sort_keys=True))
    return 1 if errors else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="50 iterations, 20 idle sandboxes, the gate")
    ap.add_argument("-n", type=int, default=None, help="iterations of a, b and c (default 500)")
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--idle", type=int, default=None, help="idle sandboxes for d (default 1000)")
    ap.add_argument("--pool", type=int, default=8, help="cordond --pool (default 8)")
    ap.add_argument("--cordond", default=os.path.join(BUILD, "cordond"))
    ap.add_argument("--lifecycles", type=int, default=None, metavar="N",
                    help="only b., with N lifecycles: rate and errors")
    ap.add_argument("--thresholds", default=os.path.join(REPO, "bench", "thresholds.json"),
                    help="the regression gate's figures (default bench/thresholds.json)")
    ap.add_argument("--check", action=argparse.BooleanOptionalAction, default=None,
                    help="fail (exit 1) when a figure regressed by more than 50%% against the "
                         "thresholds (default: on with --quick, as CI runs it)")
    args = ap.parse_args()
    if args.check is None:
        args.check = args.quick
    n = args.n or (50 if args.quick else 500)
    idle = args.idle if args.idle is not None else (20 if args.quick else 1000)

    if os.geteuid() != 0:
        print("bench_daemon: cordond needs root", file=sys.stderr)
        return 2
    if not os.access(args.cordond, os.X_OK):
        print(f"bench_daemon: no cordond at {args.cordond} (ninja -C build)", file=sys.stderr)
        return 2

    if args.lifecycles:
        return run_lifecycles(args)
    d = Daemon(args.cordond, args.pool, max(idle + 2 * args.pool + args.threads + 8, 64))
    try:
        d.start()
    except RuntimeError as e:
        print(f"bench_daemon: {e}", file=sys.stderr)
        d.stop()
        return 2
    result = {"bench": "cordond", "errors": 0}
    errors = []
    try:
        print(f"cordond {d.argv[0]} --pool {args.pool}; n={n} threads={args.threads} idle={idle}")
        steps = (("startup", lambda: bench_startup(d, args.pool)),
                 ("lifecycle_seq", lambda: bench_sequential(d, n, args.pool)),
                 ("lifecycle_paced", lambda: bench_paced(d, n, args.pool)),
                 ("lifecycle_concurrent", lambda: bench_concurrent(d.sock, n, args.threads, args.pool)),
                 ("exec", lambda: bench_exec(d, n, args.pool)),
                 ("idle", lambda: bench_idle(d.sock, idle, args.pool)))
        for name, fn in steps:
            try:
                r = fn()
                if isinstance(r, tuple):
                    r, errs = r
                    errors += errs
                result[name] = r
            except Exception as e:  # noqa: BLE001 - reported, the next step still runs
                errors.append(f"{name}: {e}")
                result[name] = None
        if d.proc.poll() is not None:
            errors.append(f"cordond exited with {d.proc.returncode}: {d.tail()}")
    finally:
        d.stop()

    ok = print_targets(result)
    for e in errors[:20]:
        print(f"error: {e}", file=sys.stderr)
    result["errors"] = len(errors)
    result["targets_met"] = bool(ok) and all(result.get(k) for k in
                                             ("lifecycle_seq", "lifecycle_paced", "lifecycle_concurrent", "exec", "idle"))
    regressed = check_thresholds(result, args.thresholds) if args.check else []
    result["regressions"] = regressed
    print(json.dumps(result, sort_keys=True))
    return 1 if errors or regressed else 0


if __name__ == "__main__":
    sys.exit(main())
