"""sbx.pty, sbx.files.watch() and sbx.metrics() against a real cordond."""

import os
import threading
import time

import pytest

from cordon import CordonError, NotATerminal, Sandbox
from test_sdk import CORDOND, Daemon

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="cordond needs root"),
    pytest.mark.skipif(not CORDOND.exists(), reason=f"{CORDOND} is not built"),
]


@pytest.fixture(scope="module")
def daemon():
    d = Daemon()
    yield d
    d.stop()


@pytest.fixture(scope="module")
def sbx(daemon):
    with Sandbox.create(socket=daemon.socket) as s:
        yield s


def read_until(it, needle, got):
    """Reads @it into @got until @needle is in it (it may be already: one chunk can hold the
    answers of two commands); False if the output ended first."""
    if needle in got:
        return True
    for chunk in it:
        got.extend(chunk)
        if needle in got:
            return True
    return False


def test_pty_roundtrip(sbx):
    t = sbx.pty.create(90, 30, ["bash", "--norc", "--noprofile", "-i"], env={"PS1": "$ "})
    got = bytearray()
    it = iter(t)
    t.send_input("stty size; echo TERM=$TERM\n")
    assert read_until(it, b"30 90", got), bytes(got)
    assert read_until(it, b"TERM=xterm-256color", got), bytes(got)
    t.resize(100, 40)
    t.send_input("stty size\n")
    assert read_until(it, b"40 100", got), bytes(got)
    t.send_input("sleep 50\n")
    time.sleep(0.5)
    t.send_input("\x03")
    t.send_input("echo after-$((6*7))\n")
    assert read_until(it, b"after-42", got), bytes(got)
    assert t.kill()
    assert t.wait(10).signal == 9
    b"".join(it)  # returns: the iterator ends after the exit


def test_pty_iterator_ends_when_its_sandbox_goes(daemon):
    """The output iterator ends (raising why) when the events end without an exit: it used to
    wait for ever on a stream that had broken with the sandbox."""
    s = Sandbox.create(socket=daemon.socket)
    t = s.pty.create(cmd=["sleep", "600"])
    out = {}

    def drain():
        try:
            out["chunks"] = list(t)
        except CordonError as e:
            out["error"] = e

    th = threading.Thread(target=drain, daemon=True)
    th.start()
    s.kill()
    th.join(20)
    assert not th.is_alive(), "the iterator still waits after the sandbox is gone"
    assert "chunks" in out or "error" in out, out


def test_pty_on_data_and_exit(sbx):
    seen = bytearray()
    done = threading.Event()
    t = sbx.pty.create(cmd="tty; exit 3", on_data=lambda b: (seen.extend(b), done.set()))
    assert t.wait(20).exit_code == 3
    assert b"/dev/pts/" in bytes(seen)


def test_resize_of_plain_process(sbx):
    p = sbx.processes.start(["sleep", "30"])
    with pytest.raises(NotATerminal):
        sbx._client.request("POST", sbx._path("processes", p.pid, "resize"),
                            json_body={"cols": 80, "rows": 24})
    p.kill()


def test_watch(sbx):
    sbx.exec("rm -rf /home/user/sdkw && mkdir /home/user/sdkw")
    with sbx.files.watch("/home/user/sdkw", recursive=True) as w:
        sbx.exec("mkdir /home/user/sdkw/d && sleep 0.2 && echo x > /home/user/sdkw/d/f")
        got = []
        for ev in w:
            got.append((ev["type"], ev["path"]))
            if ev["path"] == "/home/user/sdkw/d/f" and ev["type"] == "write":
                break
    assert ("create", "/home/user/sdkw/d") in got
    assert ("create", "/home/user/sdkw/d/f") in got


def test_metrics(sbx):
    m = sbx.metrics()
    assert m["interval_s"] == 5
    assert set(m["current"]) >= {"cpu_ms", "memory_bytes", "disk_used_bytes", "disk_total_bytes"}


def test_connect_port(sbx):
    from cordon import PortUnreachable
    sbx.exec("mkdir -p /tmp/sdkport && echo via-sdk > /tmp/sdkport/i.txt")
    p = sbx.processes.start(["python3", "-m", "http.server", "8765", "--bind", "127.0.0.1",
                             "--directory", "/tmp/sdkport"], timeout=0)
    try:
        for _ in range(50):
            try:
                s = sbx.connect_port(8765)
                break
            except PortUnreachable:
                time.sleep(0.2)
        s.sendall(b"GET /i.txt HTTP/1.0\r\n\r\n")
        data = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
        s.close()
        assert data.endswith(b"via-sdk\n"), data[-200:]
        with pytest.raises(PortUnreachable):
            sbx.connect_port(8766)
    finally:
        p.kill()
