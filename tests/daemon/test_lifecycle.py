"""A sandbox's life around the API: TTL reaping, capacity, the warm pool, API keys over TCP,
a crashed daemon's leftovers, and the audit chain on disk."""

import json
import os
import re
import shutil
import socket
import subprocess
import time

import pytest

from conftest import (CORDON, CORDOND, Daemon, assert_error, get_metrics, host_procs, parse_time,
                      requires_daemon, sandbox_cgroups, slot_lock_files, start_daemon, unique_sleep, wait_until)

pytestmark = requires_daemon


@pytest.fixture
def make_daemon():
    made = []

    def make(**kw):
        d = start_daemon(**kw)
        made.append(d)
        return d

    yield make
    for d in made:
        d.cleanup()


def start_sleep(client, sid):
    """Starts `sleep <unique>` in the sandbox; returns (marker, host pid, cgroup dirs)."""
    marker = unique_sleep()
    s = client.start_process(sid, argv=["sleep", marker], timeout_s=0)
    s.close()
    pids = wait_until(lambda: host_procs(marker, argv0="sleep"), 5)
    assert pids, f"`sleep {marker}` of sandbox {sid} is not visible on the host"
    cgs = sandbox_cgroups(pids[0])
    assert cgs, f"sandbox {sid}'s process is in no cordon cgroup"
    return marker, pids[0], cgs


def audit_records(daemon, sid):
    with open(os.path.join(daemon.audit_dir, f"{sid}.jsonl"), "rb") as f:
        return [json.loads(x) for x in f.read().splitlines()]


def verify(path):
    return subprocess.run([CORDON, "audit", "verify", path], capture_output=True, text=True, timeout=30)


# ---------------------------------------------------------------------------------------------
# TTL


def test_ttl_reaps_everything(make_daemon):
    d = make_daemon(pool=0, max_sandboxes=8, max_timeout=600)
    c = d.client()
    t0 = time.monotonic()
    sb = c.create(timeout_s=2)
    marker, pid, cgs = start_sleep(c, sb["id"])
    assert c.info(sb["id"])["id"] == sb["id"]
    locks = slot_lock_files(d, cgs)
    assert locks, f"no uid slot lock file for the sandbox's cgroups {cgs}"
    gone = wait_until(lambda: c.get(f"/v1/sandboxes/{sb['id']}").status == 404, 6, 0.1)
    dt = time.monotonic() - t0
    assert gone, f"sandbox with timeout_s=2 still there after {dt:.1f}s: {c.info(sb['id'])}"
    assert 1.5 <= dt <= 4.5, f"reaped after {dt:.1f}s, not ~2s"
    assert wait_until(lambda: not host_procs(marker), 2), f"processes left after the TTL: {host_procs(marker)}"
    assert wait_until(lambda: not any(os.path.exists(x) for x in cgs), 2), \
        f"cgroup dirs left after the TTL: {[x for x in cgs if os.path.exists(x)]}"
    assert sb["id"] not in [s["id"] for s in c.list()]
    assert wait_until(lambda: not any(os.path.exists(x) for x in locks), 2), f"slot lock files left: {locks}"
    recs = audit_records(d, sb["id"])
    assert recs[-1]["event"] == "sandbox.destroy", [r["event"] for r in recs]
    assert recs[-1]["fields"].get("reason"), recs[-1]


@pytest.mark.any_runtime
def test_ttl_extended(make_daemon):
    d = make_daemon(pool=0, max_sandboxes=8, max_timeout=600)
    c = d.client()
    sb = c.create(timeout_s=2)
    r = c.post(f"/v1/sandboxes/{sb['id']}/timeout", {"timeout_s": 30})
    assert r.status == 200, r.describe()
    time.sleep(3)
    assert c.get(f"/v1/sandboxes/{sb['id']}").status == 200, "extended sandbox was reaped"
    assert c.exec(sb["id"], argv=["true"])["exit_code"] == 0
    # Shorten it: reaped at the new deadline.
    c.ok("POST", f"/v1/sandboxes/{sb['id']}/timeout", {"timeout_s": 1})
    assert wait_until(lambda: c.get(f"/v1/sandboxes/{sb['id']}").status == 404, 4, 0.1)


@pytest.mark.any_runtime
def test_default_timeout_capped_by_server_max(make_daemon):
    d = make_daemon(pool=0, max_sandboxes=4, max_timeout=100)
    sb = d.client().create()
    assert sb["timeout_s"] == 100, "the default timeout is the server's maximum when that is lower"
    assert abs(parse_time(sb["expires_at"]) - parse_time(sb["created_at"]) - 100) < 2


# ---------------------------------------------------------------------------------------------
# capacity


@pytest.mark.any_runtime
def test_max_sandboxes(make_daemon):
    d = make_daemon(pool=0, max_sandboxes=3, max_timeout=600)
    c = d.client()
    ids = [c.create()["id"] for _ in range(3)]
    r = c.post("/v1/sandboxes", {})
    e = assert_error(r, (429, 503), ("quota_exceeded", "capacity"))
    if r.status == 503:
        assert re.fullmatch(r"\d+", r.headers.get("retry-after", "")), \
            f"503 capacity without Retry-After: {r.describe()}"
    assert len(c.list()) == 3, "a refused create left a sandbox behind"
    c.destroy(ids[0])
    ids.append(c.create()["id"])
    assert len(c.list()) == 3
    del e


# ---------------------------------------------------------------------------------------------
# warm pool


def pool_metric(m):
    assert "cordon_pool_ready" in m.samples, f"no warm pool gauge in /metrics: {m.names()}"
    return "cordon_pool_ready"


def test_warm_pool(make_daemon):
    d = make_daemon(pool=2, max_sandboxes=10, max_timeout=600)
    c = d.client()
    name = pool_metric(get_metrics(c))
    assert wait_until(lambda: get_metrics(c).total(name) == 2, 15, 0.1), \
        f"{name} never reached 2: {get_metrics(c).total(name)}"
    assert c.list() == [], "pooled sandboxes are not the client's: list must be empty"
    times = []
    made = []
    for _ in range(2):
        t0 = time.perf_counter()
        made.append(c.create(metadata={"n": str(len(made))}))
        times.append((time.perf_counter() - t0) * 1000)
    assert max(times) < 50, f"create from a warm pool took {times} ms"
    # The pool refills.
    assert wait_until(lambda: get_metrics(c).total(name) == 2, 15, 0.1), \
        f"pool did not refill to 2: {get_metrics(c).total(name)}"
    # A pooled sandbox still gets the caller's env, limits and metadata.
    sb = c.create(env={"POOLED": "yes"}, limits={"memory_mb": 96, "pids": 100},
                  metadata={"who": "pool"})
    assert sb["limits"]["memory_mb"] == 96 and sb["metadata"] == {"who": "pool"}, sb
    assert c.sh(sb["id"], 'printf "%s" "$POOLED"') == "yes"
    _, _, cgs = start_sleep(c, sb["id"])
    for cg in cgs:
        p = os.path.join(cg, "memory.limit_in_bytes")
        if os.path.exists(p):
            assert int(open(p).read()) == 96 << 20, f"pooled sandbox has the wrong memory limit: {p}"
        p = os.path.join(cg, "pids.max")
        if os.path.exists(p):
            assert open(p).read().strip() == "100", f"pooled sandbox has the wrong pids limit: {p}"
    # Used once, never returned: destroying does not grow the pool beyond its size.
    for s in made + [sb]:
        c.destroy(s["id"])
    time.sleep(0.5)
    assert get_metrics(c).total(name) <= 2
    # The pooled sandboxes die with a clean stop: no slot files, no processes.
    locks = slot_lock_files(d, cgs)
    assert d.stop() == 0, f"cordond exit status on SIGTERM:\n{d.log_tail()}"
    assert wait_until(lambda: not any(os.path.exists(x) for x in locks), 3), f"slot files left after stop: {locks}"


class RequestStream:
    """Four clients listing the sandboxes back to back until stopped: requests with no pause
    of a second between them, on a machine however loaded. (A refill does not wait behind
    /healthz or /metrics: probes and scrapes are not a client's work.)"""

    def __init__(self, d):
        import threading
        self.stop = threading.Event()
        self.sent = [0] * 4
        self.errors = []
        self.threads = [threading.Thread(target=self.run, args=(d, i)) for i in range(4)]
        for t in self.threads:
            t.start()

    def run(self, d, i):
        h = d.client(keepalive=True)
        try:
            while not self.stop.is_set():
                if h.get("/v1/sandboxes").status != 200:
                    self.errors.append("list")
                self.sent[i] += 1
        except Exception as e:  # noqa: BLE001 - reported by end()
            self.errors.append(repr(e))
        h.close()

    def end(self):
        self.stop.set()
        for t in self.threads:
            t.join(10)
        assert not self.errors and all(self.sent), f"the stream failed: {self.errors[:3]}, {self.sent}"


def pool_daemon(make_daemon, quiet_ms, defer_ms):
    d = make_daemon(pool=4, max_sandboxes=12, max_timeout=600,
                    extra=["--pool-refill-quiet", str(quiet_ms), "--pool-refill-defer", str(defer_ms)])
    c = d.client()
    name = pool_metric(get_metrics(c))
    assert wait_until(lambda: get_metrics(c).total(name) == 4, 15, 0.1), \
        f"{name} never reached 4: {get_metrics(c).total(name)}"
    return d, c, lambda: get_metrics(c).total(name)


def test_a_refill_with_stock_waits_for_a_pause_in_the_requests(make_daemon):
    """While more than half of the pool is ready, the refill of a claimed sandbox waits until
    the requests pause (create.c, creator_defer): here a pause of 2.5 s, which a stream of
    requests never leaves, then the refill once the stream stops."""
    d, c, ready = pool_daemon(make_daemon, quiet_ms=2500, defer_ms=60000)
    stream = RequestStream(d)
    try:
        sb = c.create()
        time.sleep(2)
        during = ready()
    finally:
        stream.end()
    assert during == 3, f"the pool refilled ({during} ready) while requests kept coming"
    assert wait_until(lambda: ready() == 4, 30, 0.05), "the pool did not refill after the requests stopped"
    c.destroy(sb["id"])


def test_a_refill_waits_no_longer_than_its_bound(make_daemon):
    """--pool-refill-defer bounds the wait: a stream of requests that never pauses long enough
    does not keep the pool from refilling."""
    d, c, ready = pool_daemon(make_daemon, quiet_ms=5000, defer_ms=300)
    stream = RequestStream(d)
    try:
        sb = c.create()
        t0 = time.monotonic()
        refilled = wait_until(lambda: ready() == 4, 10, 0.02)
        took = time.monotonic() - t0
    finally:
        stream.end()
    assert refilled, "the pool did not refill under a stream of requests"
    assert took >= 0.25, f"the refill did not wait for its bound ({took:.2f} s)"
    c.destroy(sb["id"])


def test_a_burst_of_creates_ends_the_wait(make_daemon):
    """A second create while the first one's refill waits is a burst: the refills start at
    once, whatever the bound (a waiting refill must never hold up those behind it)."""
    d, c, ready = pool_daemon(make_daemon, quiet_ms=5000, defer_ms=60000)
    stream = RequestStream(d)
    try:
        made = [c.create() for _ in range(3)]
        refilled = wait_until(lambda: ready() == 4, 15, 0.02)
    finally:
        stream.end()
    assert refilled, f"a burst of creates left the pool at {ready()} under a stream of requests"
    for sb in made:
        c.destroy(sb["id"])


# ---------------------------------------------------------------------------------------------
# API keys over TCP


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


KEYS = """# cordond api keys: KEY NAME MAX_SANDBOXES
alpha-key-0123456789abcdef alice 2

beta-key-fedcba9876543210 bob 5
   # indented comment
"""
ALICE = "alpha-key-0123456789abcdef"
BOB = "beta-key-fedcba9876543210"


def test_api_keys(make_daemon):
    d = make_daemon(pool=0, max_sandboxes=16, max_timeout=600,
                    listen=f"127.0.0.1:{free_port()}", api_keys=KEYS)
    anon = d.tcp_client()
    for token in (None, "wrong", ALICE[:-1], ALICE + "x", "alice", "#", ""):
        cl = d.tcp_client(token)
        for method, path in (("GET", "/v1/sandboxes"), ("POST", "/v1/sandboxes"), ("GET", "/metrics")):
            r = cl.request(method, path, {} if method == "POST" else None)
            assert_error(r, 401, "unauthorized")
    r = anon.request("GET", "/v1/sandboxes", headers={"Authorization": f"Basic {ALICE}"})
    assert_error(r, 401, "unauthorized")
    r = anon.get("/healthz")
    assert r.status == 200, f"/healthz needs no key: {r.describe()}"
    alice, bob = d.tcp_client(ALICE), d.tcp_client(BOB)
    assert alice.get("/metrics").status == 200
    a1 = alice.create(metadata={"owner": "alice"})
    b1 = bob.create()
    assert [s["id"] for s in alice.list()] == [a1["id"]]
    assert [s["id"] for s in bob.list()] == [b1["id"]]
    # Bob cannot see, touch or even confirm the existence of alice's sandbox.
    for method, suffix, body in (("GET", "", None), ("POST", "/exec", {"argv": ["true"]}),
                                 ("POST", "/timeout", {"timeout_s": 5}), ("GET", "/audit", None),
                                 ("GET", "/files?path=/tmp", None), ("GET", "/processes", None),
                                 ("DELETE", "", None)):
        r = bob.request(method, f"/v1/sandboxes/{a1['id']}{suffix}", body)
        assert_error(r, 404, "not_found")
    assert alice.info(a1["id"])["id"] == a1["id"], "bob's DELETE destroyed alice's sandbox"
    assert bob.list("?metadata.owner=alice") == []
    # The unix socket is the operator: it sees both.
    ids = {s["id"] for s in d.client().list()}
    assert {a1["id"], b1["id"]} <= ids
    # Quota: alice has 2.
    a2 = alice.create()
    assert_error(alice.post("/v1/sandboxes", {}), 429, "quota_exceeded")
    assert len(alice.list()) == 2, "a refused create left a sandbox"
    bob.create()  # bob's own quota is not alice's
    alice.destroy(a2["id"])
    alice.create()
    # The principal is recorded.
    with open(os.path.join(d.audit_dir, f"{a1['id']}.jsonl")) as f:
        text = f.read()
    assert "alice" in text, "alice's principal is not in her sandbox's audit log"
    assert ALICE not in text, "an API key reached the audit log"
    assert ALICE not in d.log_tail(1 << 20), "an API key reached cordond's log"


# ---------------------------------------------------------------------------------------------
# crash safety and the audit chain


def test_crash_leaves_nothing(make_daemon):
    d = make_daemon(pool=0, max_sandboxes=8, max_timeout=600)
    c = d.client()
    sbs, markers, cgroups = [], [], []
    for i in range(3):
        sb = c.create(metadata={"crash": str(i)})
        c.put(f"/v1/sandboxes/{sb['id']}/files?path=/home/user/f", b"data")
        marker, _, cgs = start_sleep(c, sb["id"])
        sbs.append(sb["id"])
        markers.append(marker)
        cgroups += cgs
    locks = slot_lock_files(d, cgroups)
    problems = []
    if len(locks) != 3:
        problems.append(f"{len(locks)} uid slot lock files for 3 live sandboxes: {locks}")
    d.kill9()
    t0 = time.monotonic()
    left = wait_until(lambda: not any(host_procs(m) for m in markers), 2, 0.05)
    assert left, (f"sandbox processes outlived a SIGKILLed cordond by "
                  f"{time.monotonic() - t0:.1f}s: {[host_procs(m) for m in markers]}")
    d.start()
    c = d.client()
    listed = c.list()
    stale = [s for s in listed if s["id"] in sbs and s["state"] != "destroyed"]
    assert not stale, f"restarted cordond lists the dead sandboxes as live: {stale}"
    for sid in sbs:
        r = c.get(f"/v1/sandboxes/{sid}")
        assert r.status == 404 or r.json()["state"] == "destroyed", r.describe()
        r = c.post(f"/v1/sandboxes/{sid}/exec", {"argv": ["true"]})
        assert r.status in (404, 409), r.describe()
    assert wait_until(lambda: not any(os.path.exists(x) for x in cgroups), 3), \
        f"cgroup dirs of the crashed daemon's sandboxes: {[x for x in cgroups if os.path.exists(x)]}"
    assert wait_until(lambda: not slot_lock_files(d, cgroups), 3), \
        f"slot lock files of the crashed daemon's sandboxes: {slot_lock_files(d, cgroups)}"
    # The restarted daemon works, and its sandboxes do not collide with the old ones' files.
    sb = c.create()
    assert c.exec(sb["id"], argv=["echo", "ok"])["stdout"] == "ok\n"
    c.destroy(sb["id"])
    assert d.stop() == 0, d.log_tail()
    # Every audit file is an intact chain, and the old sandboxes' ends are recorded.
    files = sorted(os.listdir(d.audit_dir))
    for sid in sbs:
        assert f"{sid}.jsonl" in files, files
        events = [r["event"] for r in audit_records(d, sid)]
        assert "sandbox.destroy" in events, f"{sid}: the restart did not record its end: {events}"
        assert "file.write" in events and "process.start" in events, events
    for name in files:
        p = os.path.join(d.audit_dir, name)
        v = verify(p)
        assert v.returncode == 0, f"cordon audit verify {p}: rc={v.returncode} {v.stdout}{v.stderr}"
    assert not problems, problems


def test_audit_tamper_detected(make_daemon, tmp_path):
    d = make_daemon(pool=0, max_sandboxes=4, max_timeout=600)
    c = d.client()
    sb = c.create()
    for i in range(3):
        c.exec(sb["id"], argv=["echo", str(i)])
    c.destroy(sb["id"])
    src = os.path.join(d.audit_dir, f"{sb['id']}.jsonl")
    v = verify(src)
    assert v.returncode == 0, f"untouched file fails verify: {v.stdout}{v.stderr}"
    with open(src, "rb") as f:
        lines = f.read().split(b"\n")
    assert len(lines) >= 5, lines
    # Flip one byte of line 2's timestamp, keeping it valid JSON.
    line = lines[1]
    i = line.index(b'"t":"') + 8
    lines[1] = line[:i] + (b"0" if line[i:i + 1] != b"0" else b"1") + line[i + 1:]
    bad = tmp_path / "tampered.jsonl"
    bad.write_bytes(b"\n".join(lines))
    v = verify(str(bad))
    out = v.stdout + v.stderr
    assert v.returncode != 0, f"a tampered audit file passes verify: {out}"
    assert re.search(r"\bline 2\b", out), f"verify does not name line 2: {out!r}"
    # Removing a middle record is caught too.
    orig = list(lines)
    orig[1] = line
    bad.write_bytes(b"\n".join(orig[:2] + orig[3:]))
    v = verify(str(bad))
    assert v.returncode != 0 and re.search(r"\bline 3\b", v.stdout + v.stderr), v.stdout + v.stderr
    shutil.copy(src, tmp_path / "copy.jsonl")
    assert verify(str(tmp_path / "copy.jsonl")).returncode == 0


def test_clean_stop_destroys_and_verifies(make_daemon):
    d = make_daemon(pool=1, max_sandboxes=4, max_timeout=600)
    c = d.client()
    sb = c.create()
    marker, _, cgs = start_sleep(c, sb["id"])
    locks = slot_lock_files(d, cgs)
    assert d.stop() == 0, f"cordond exit status on SIGTERM:\n{d.log_tail()}"
    assert wait_until(lambda: not host_procs(marker), 2), "a sandbox process outlived cordond's stop"
    assert wait_until(lambda: not any(os.path.exists(x) for x in cgs), 2), "cgroups outlived the stop"
    assert not any(os.path.exists(x) for x in locks), locks
    for name in os.listdir(d.audit_dir):
        v = verify(os.path.join(d.audit_dir, name))
        assert v.returncode == 0, f"{name}: {v.stdout}{v.stderr}"


def test_stop_right_after_destroys_leaves_nothing(make_daemon):
    """A destroyed sandbox's cgroups, disk and uid slot are freed on cordond's teardown thread
    (teardown.c), after the DELETE has been answered: a stop that follows at once still waits
    for every one of them (main.c's settled()), so nothing is left the moment cordond has exited
    (no wait_until). Only the last free can race the exit, so a missing wait fails this
    sometimes, not always: one run without it passed."""
    d = make_daemon(pool=2, max_sandboxes=16, max_timeout=600)
    c = d.client()
    ids = [c.create()["id"] for _ in range(8)]
    cgs, markers = [], []
    for sid in ids:
        marker, _, dirs = start_sleep(c, sid)
        markers.append(marker)
        cgs += dirs
    locks = slot_lock_files(d, cgs)
    assert locks, "no slot lock file found for the sandboxes' cgroups"
    for sid in ids:
        c.destroy(sid)
    assert d.stop() == 0, f"cordond exit status on SIGTERM:\n{d.log_tail()}"
    left = [x for x in cgs if os.path.exists(x)]
    assert not left, f"cgroups left when cordond had exited: {left}"
    assert not any(os.path.exists(x) for x in locks), locks
    assert "not yet reaped" not in d.log_tail(), d.log_tail()
    assert wait_until(lambda: not any(host_procs(m) for m in markers), 2)


def test_config_file(tmp_path):
    """--config FILE: `key = value` lines named like the long flags; comments allowed."""
    d = Daemon(pool=0, max_sandboxes=2, max_timeout=50)
    conf = os.path.join(d.root, "cordond.conf")
    with open(conf, "w") as f:
        f.write(f"# cordond test config\nsocket = {d.sock}\nstate-dir = {d.state_dir}\n"
                f"runtime-dir={d.runtime_dir}\n\npool = 0\nmax-sandboxes = 2\nmax-timeout = 50\n")
    d.argv = lambda: [CORDOND, "--config", conf]
    try:
        d.start()
        c = d.client()
        sb = c.create()
        assert sb["timeout_s"] == 50, "max-timeout from the config file is not applied"
        c.create()
        assert_error(c.post("/v1/sandboxes", {}), (429, 503), ("quota_exceeded", "capacity"))
    finally:
        d.cleanup()
    # An unknown key is refused at start, not ignored.
    bad = os.path.join(tmp_path, "bad.conf")
    with open(bad, "w") as f:
        f.write(f"socket = {tmp_path}/x.sock\nmax-sandboxs = 3\n")
    p = subprocess.run([CORDOND, "--config", bad], capture_output=True, text=True,
                       timeout=10)
    assert p.returncode != 0 and "max-sandboxs" in p.stderr, (p.returncode, p.stderr)
