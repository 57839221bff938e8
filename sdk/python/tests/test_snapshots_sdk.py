"""The SDK's pause, resume, snapshot and fork against a real cordond (issue 12)."""
import time

import pytest

import cordon
from cordon import NotFound, Sandbox, SandboxPaused, Snapshot, Snapshots

from test_sdk import Daemon, pytestmark  # noqa: F401  (same daemon, same skips)


@pytest.fixture(scope="module")
def daemon():
    d = Daemon()
    yield d
    d.stop()


def test_pause_resume(daemon):
    with Sandbox.create(socket=daemon.socket, timeout=60) as sbx:
        p = sbx.processes.start("i=0; while :; do i=$((i+1)); echo $i > /tmp/n; sleep 0.02; done")
        time.sleep(0.5)
        assert sbx.pause().state == "paused"
        with pytest.raises(SandboxPaused):
            sbx.exec("true")
        time.sleep(1)
        assert sbx.resume().state != "paused"
        a = int(sbx.exec("cat /tmp/n").stdout)
        time.sleep(0.5)
        assert int(sbx.exec("cat /tmp/n").stdout) > a
        p.kill()


def test_snapshot_create_and_fork(daemon):
    with Sandbox.create(socket=daemon.socket, timeout=60) as sbx:
        sbx.exec("echo from-parent > /tmp/f")
        snap = sbx.snapshot()
        assert isinstance(snap, Snapshot) and snap.memory is False and snap.sandbox == sbx.id
        assert snap.id in [s.id for s in Snapshots.list(socket=daemon.socket)]
        assert Snapshots.get(snap.id, socket=daemon.socket).size_bytes == snap.size_bytes
        with Sandbox.create(snapshot=snap, socket=daemon.socket) as child:
            assert child.exec("cat /tmp/f").stdout == "from-parent\n"
        kids = sbx.fork(2, timeout=30)
        try:
            assert len(kids) == 2 and all(isinstance(k, Sandbox) for k in kids)
            assert kids[0].id != kids[1].id
            kids[0].exec("echo k0 > /tmp/f")
            assert kids[1].exec("cat /tmp/f").stdout == "from-parent\n"
            assert kids[0].info().timeout_s == 30
        finally:
            for k in kids:
                if isinstance(k, Sandbox):
                    k.kill()
        Snapshots.delete(snap.id, socket=daemon.socket)
        with pytest.raises(NotFound):
            Snapshots.get(snap.id, socket=daemon.socket)
        for s in Snapshots.list(socket=daemon.socket):
            Snapshots.delete(s.id, socket=daemon.socket)


def test_bad_fork(daemon):
    with Sandbox.create(socket=daemon.socket, timeout=60) as sbx:
        with pytest.raises(cordon.InvalidField):
            sbx.fork(0)
        with pytest.raises(cordon.InvalidField):
            sbx.fork(101)
    with pytest.raises(NotFound):
        Sandbox.create(snapshot="sn-" + "a" * 20, socket=daemon.socket)
