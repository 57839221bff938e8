"""Nothing is lost or corrupted (issue 10): one cordond per state directory, an audit log
that fails closed on a full disk and is repaired when space returns, and the small things a
user saw (the template in sandbox.create, a TTL firing before expires_at, a pooled
sandbox's created_at).

The full-disk tests mount a 4 MiB tmpfs as the daemon's state directory (state.db and
audit/), fill it with a file, and check that every action whose audit record cannot be
written is refused with 503 audit_unavailable and changes nothing; that a destroy, which is
never refused, gets its record when the space is back, or at the next start after a crash;
and that `cordon audit verify` passes on every log afterwards.
"""

import errno
import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
import threading
import time

import pytest

from conftest import (CORDON, CORDOND, Daemon, assert_error, parse_time, requires_daemon,
                      start_daemon, wait_until)

pytestmark = requires_daemon


def records(daemon, sid):
    path = os.path.join(daemon.audit_dir, sid + ".jsonl")
    with open(path, "rb") as f:
        data = f.read()
    return [json.loads(line) for line in data.splitlines(keepends=True) if line.endswith(b"\n")]


def verify(path):
    return subprocess.run([CORDON, "audit", "verify", path], capture_output=True, text=True,
                          timeout=30)


def verify_all(daemon):
    names = sorted(n for n in os.listdir(daemon.audit_dir) if n.endswith(".jsonl"))
    for n in names:
        v = verify(os.path.join(daemon.audit_dir, n))
        assert v.returncode == 0, f"cordon audit verify {n}: {v.stdout}{v.stderr}"
    return names


def state_rows(daemon):
    db = sqlite3.connect(f"file:{os.path.join(daemon.state_dir, 'state.db')}?mode=ro", uri=True)
    try:
        return {r[0] for r in db.execute("SELECT id FROM sandboxes")}
    finally:
        db.close()


# ---------------------------------------------------------------------------------------------
# One cordond per state directory


def test_second_daemon_on_the_same_state_dir_touches_nothing():
    d = start_daemon(pool=0, max_sandboxes=8)
    other = tempfile.mkdtemp(prefix="cordond-second-")
    try:
        c = d.client()
        ids = [c.create({"timeout_s": 600})["id"] for _ in range(2)]
        rows = state_rows(d)
        assert set(ids) <= rows
        before = {sid: len(records(d, sid)) for sid in ids}
        # As an operator would start it by mistake: same socket, same state dir.
        p = subprocess.run([CORDOND, "--socket", d.sock, "--state-dir", d.state_dir,
                            "--runtime-dir", os.path.join(other, "run"), "--pool", "0"],
                           capture_output=True, text=True, timeout=20)
        out = p.stdout + p.stderr
        assert p.returncode != 0, f"a second cordond started on a live state dir: {out}"
        assert f"pid {d.proc.pid}" in out, f"the refusal does not name the holder: {out!r}"
        assert "left by a previous cordond" not in out, out
        # Nothing was touched: rows, audit logs, and the sandboxes themselves.
        assert state_rows(d) == rows
        assert {sid: len(records(d, sid)) for sid in ids} == before
        for sid in ids:
            assert c.sh(sid, "echo alive").strip() == "alive"
        # A crash of the real daemon: its next start closes the sandboxes' logs.
        d.kill9()
        d.start()
        for sid in ids:
            last = records(d, sid)[-1]
            assert last["event"] == "sandbox.destroy", last
            assert last["fields"]["reason"] == "daemon_restart", last
        verify_all(d)
        assert d.client().list() == []
    finally:
        d.cleanup()
        shutil.rmtree(other, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# The audit log fails closed


class FullDisk:
    """A daemon whose state directory is a small tmpfs that the test can fill and free."""

    def __init__(self, pool=1):
        self.root = tempfile.mkdtemp(prefix="cordond-full-")
        self.d = Daemon(pool=pool, max_sandboxes=8, root=self.root)
        os.makedirs(self.d.state_dir)
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs",
                            self.d.state_dir], capture_output=True, text=True)
        if p.returncode != 0:
            shutil.rmtree(self.root, ignore_errors=True)
            pytest.skip(f"cannot mount a tmpfs: {p.stderr.strip()}")
        self.filler = os.path.join(self.d.state_dir, "filler")

    def fill(self):
        for name, chunk in ((self.filler, 1 << 16), (self.filler + "2", 512)):
            with open(name, "ab", buffering=0) as f:
                try:
                    while True:
                        f.write(b"\0" * chunk)
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e

    def free(self):
        for name in (self.filler, self.filler + "2"):
            if os.path.exists(name):
                os.unlink(name)

    def close(self):
        self.d.stop()
        print(self.d.log_tail())  # shown by pytest when the test failed
        subprocess.run(["umount", self.d.state_dir], check=False)
        self.d.cleanup()


@pytest.fixture
def full():
    f = FullDisk()
    try:
        yield f
    finally:
        f.close()


def burn_until_refused(c, sid):
    """POST .../timeout until the record no longer fits (the log's last page had room for a
    few); returns the refused answer and the sandbox's info just before it."""
    for i in range(64):
        before = c.info(sid)
        r = c.post(f"/v1/sandboxes/{sid}/timeout", {"timeout_s": 100 + i})
        if r.status != 200:
            return r, before
        assert r.json()["timeout_s"] == 100 + i
    raise AssertionError("64 timeout records fit on a full disk")


def test_full_disk_refuses_every_recorded_action_and_changes_nothing(full):
    d = full.d.start()
    c = d.client()
    sid = c.create({"timeout_s": 600})["id"]
    assert c.sh(sid, "echo ok").strip() == "ok"
    # The pool refilled first, so that the create below claims a made sandbox and is refused
    # by its record (a sandbox made on a full disk fails for want of its disk instead).
    assert wait_until(lambda: c.get("/healthz").json().get("pool_ready", 0) >= 1, 30)
    full.fill()

    r, before = burn_until_refused(c, sid)
    assert_error(r, 503, "audit_unavailable")
    info = c.info(sid)
    assert (info["timeout_s"], info["expires_at"]) == (before["timeout_s"], before["expires_at"])
    # From now on every action with a record is refused, and none changes anything.
    assert_error(c.post(f"/v1/sandboxes/{sid}/timeout", {"timeout_s": 30}), 503, "audit_unavailable")
    r = c.put(f"/v1/sandboxes/{sid}/network", {"policy": "allow", "allow": ["example.com"]})
    if r.status == 400:  # this daemon cannot give sandboxes a network (no nftables here)
        assert "cannot give sandboxes a network" in r.text, r.describe()
    else:
        assert_error(r, 503, "audit_unavailable")
    r = c.post(f"/v1/sandboxes/{sid}/exec", {"argv": ["/bin/sh", "-c", "echo x > /tmp/marker"]})
    assert_error(r, 503, "audit_unavailable")
    r = c.stream("POST", f"/v1/sandboxes/{sid}/processes", {"argv": ["/bin/sh", "-c", "echo y > /tmp/marker"]})
    assert_error(r, 503, "audit_unavailable")
    assert_error(c.put(f"/v1/sandboxes/{sid}/files?path=/tmp/up", b"data"), 503, "audit_unavailable")
    assert_error(c.post(f"/v1/sandboxes/{sid}/files/mkdir", {"path": "/tmp/dir"}), 503, "audit_unavailable")
    n_live = len(c.list())
    assert_error(c.post("/v1/sandboxes", {}), 503, "audit_unavailable")
    assert len(c.list()) == n_live
    after = c.info(sid)
    assert (after["timeout_s"], after["expires_at"], after["network"]) == \
        (info["timeout_s"], info["expires_at"], info["network"])

    # With space again: nothing of the refused requests happened inside.
    full.free()
    out = c.sh(sid, "ls /tmp/marker /tmp/up /tmp/dir 2>&1; true")
    assert out.count("No such file") == 3, out
    full.fill()
    r, _ = burn_until_refused(c, sid)
    assert_error(r, 503, "audit_unavailable")

    # A destroy is never refused; its record comes when there is space again.
    c.destroy(sid)
    assert c.list() == []
    full.free()
    assert wait_until(lambda: records(d, sid)[-1]["event"] == "sandbox.destroy", 10), records(d, sid)[-3:]
    last = records(d, sid)[-1]
    assert last["fields"]["reason"] == "api" and last["fields"].get("recorded_late") is True, last
    names = verify_all(d)
    assert f"{sid}.jsonl" in names
    # Nothing ran, nothing was written, nothing was changed while the log was unavailable.
    events = [(r["event"], r["fields"].get("kind"), r["fields"].get("argv")) for r in records(d, sid)]
    assert not any(e == "process.start" and "> /tmp/marker" in " ".join(a or []) for e, _, a in events), events
    assert not any(e.startswith("file.") for e, _, _ in events), events
    assert not any(k == "network" for _, k, _ in events), events
    assert os.stat(os.path.join(d.audit_dir, f"{sid}.jsonl")).st_mode & 0o777 == 0o400
    assert d.alive()


def test_create_made_on_a_full_disk_is_refused_by_its_record():
    """No pool: the sandbox is made for the request, then its record does not fit. The answer
    names the audit log (503 audit_unavailable), not a fault of ours (500), and nothing of the
    sandbox is left."""
    f = FullDisk(pool=0)
    try:
        d = f.d.start()
        c = d.client()
        f.fill()
        for _ in range(3):
            assert_error(c.post("/v1/sandboxes", {}), 503, "audit_unavailable")
        assert c.list() == []
        f.free()
        sid = c.create({})["id"]
        assert c.sh(sid, "echo ok").strip() == "ok"
        assert [s["id"] for s in c.list()] == [sid]
        assert d.alive()
    finally:
        f.close()


def test_destroy_on_a_full_disk_then_a_crash_is_repaired_at_start(full):
    d = full.d.start()
    c = d.client()
    sid = c.create({"timeout_s": 600})["id"]
    live = c.create({"timeout_s": 600})["id"]
    assert wait_until(lambda: c.get("/healthz").json().get("pool_ready", 0) >= 1, 20)
    full.fill()
    r, _ = burn_until_refused(c, sid)
    assert_error(r, 503, "audit_unavailable")
    c.destroy(sid)  # its record cannot be written
    empty = {n for n in os.listdir(d.audit_dir)
             if os.path.getsize(os.path.join(d.audit_dir, n)) == 0}
    assert empty, "the warm pool's sandbox has an empty audit log"
    d.kill9()  # the late record dies with the daemon
    full.free()
    d.pool = 0
    d.start()
    left = set(os.listdir(d.audit_dir))
    assert not (empty & left), f"empty audit logs of pool sandboxes survived the restart: {empty & left}"
    for s in (sid, live):
        last = records(d, s)[-1]
        assert last["event"] == "sandbox.destroy", (s, last)
    assert records(d, live)[-1]["fields"]["reason"] == "daemon_restart"
    names = verify_all(d)
    assert {f"{sid}.jsonl", f"{live}.jsonl"} <= set(names)
    # A second start finds every log sealed and writes nothing more.
    sizes = {n: os.path.getsize(os.path.join(d.audit_dir, n)) for n in names}
    d.stop()
    d.start()
    assert {n: os.path.getsize(os.path.join(d.audit_dir, n)) for n in names} == sizes


# ---------------------------------------------------------------------------------------------
# Small things


@pytest.fixture(scope="module")
def tiny_store(tmp_path_factory):
    if not os.path.isfile("/bin/busybox"):
        pytest.skip("needs /bin/busybox")
    root = tmp_path_factory.mktemp("tiny")
    ctx = root / "ctx"
    ctx.mkdir()
    shutil.copy("/bin/busybox", ctx / "busybox")
    (ctx / "Cordonfile").write_text("FROM scratch\nCOPY busybox /bin/busybox\n")
    env = dict(os.environ, CORDON_TEMPLATES=str(root / "store"))
    p = subprocess.run([CORDON, "template", "build", "tiny", "-f", str(ctx / "Cordonfile")],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    return str(root / "store")


def test_create_record_names_the_template(tiny_store, monkeypatch):
    monkeypatch.setenv("CORDON_TEMPLATES", tiny_store)
    d = start_daemon(pool=0, max_sandboxes=4)
    try:
        c = d.client()
        for tpl in ("tiny", "host"):
            sid = c.create({"template": tpl})["id"]
            create = [r for r in records(d, sid) if r["event"] == "sandbox.create"]
            assert len(create) == 1 and create[0]["fields"]["template"] == tpl, create
            c.destroy(sid)
    finally:
        d.cleanup()


def test_ttl_never_fires_before_expires_at():
    d = start_daemon(pool=0, max_sandboxes=20)
    try:
        made, lock = [], threading.Lock()

        def one():
            sb = d.client().create({"timeout_s": 1})
            with lock:
                made.append(sb)

        ths = [threading.Thread(target=one) for _ in range(16)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        assert len(made) == 16
        assert wait_until(lambda: d.client().list() == [], 15)
        early = []
        for sb in made:
            last = records(d, sb["id"])[-1]
            assert last["event"] == "sandbox.destroy" and last["fields"]["reason"] == "timeout", last
            if parse_time(last["t"]) < parse_time(sb["expires_at"]):
                early.append((sb["id"], sb["expires_at"], last["t"]))
        assert not early, f"destroyed before expires_at: {early}"
    finally:
        d.cleanup()


def test_pooled_sandbox_created_at_is_its_claim_time():
    d = start_daemon(pool=1, max_sandboxes=4)
    try:
        c = d.client()
        assert wait_until(lambda: c.get("/healthz").json().get("pool_ready", 0) >= 1, 10)
        time.sleep(1.5)
        t0 = time.time()
        sb = c.create({})
        assert parse_time(sb["created_at"]) >= t0 - 0.05, (sb["created_at"], t0)
        assert parse_time(c.list()[0]["created_at"]) == parse_time(sb["created_at"])
        c.destroy(sb["id"])
    finally:
        d.cleanup()


def test_state_db_is_checkpointed_and_its_wal_stays_bounded():
    """SQLite's automatic checkpoint ran on the event loop (a stall of milliseconds every few
    hundred lifecycles); cordond checkpoints state.db on its teardown thread instead (state.c).
    400 lifecycles write ~1,600 WAL frames, past the 1,000 at which a checkpoint starts: the
    WAL must have been checkpointed and reused (it stays near 1,000 frames of 4 KiB), and the
    rows must be those of the live sandboxes."""
    d = start_daemon(pool=2, max_sandboxes=8)
    try:
        c = d.client(keepalive=True)
        for _ in range(400):
            c.destroy(c.create({})["id"])
        keep = c.create({})["id"]
        size = os.path.getsize(os.path.join(d.state_dir, "state.db-wal"))
        assert size < 5 << 20, f"state.db's WAL is {size} bytes after 400 lifecycles: never checkpointed"
        assert wait_until(lambda: state_rows(d) == {keep}, 5), state_rows(d)
        c.destroy(keep)
    finally:
        d.cleanup()
