"""Issue 10 through the SDK against a real cordond: nothing cut silently (50 MiB to a slow
callback arrives whole; a `lagged` event raises StreamLagged), listings page and keep names
that are not UTF-8, file errors are typed, exec base64 and line mode. Skipped when not root
or when the daemon is not built."""

import base64
import time

import pytest

import cordon
from cordon import Sandbox, errors
from cordon.processes import Process

from test_sdk import CORDOND, Daemon  # noqa: F401  (the same real daemon the SDK suite uses)

pytestmark = [
    pytest.mark.skipif(__import__("os").geteuid() != 0, reason="cordond needs root"),
    pytest.mark.skipif(not CORDOND.exists(), reason=f"{CORDOND} is not built"),
]

MIB = 1 << 20


@pytest.fixture(scope="module")
def daemon():
    d = Daemon()
    yield d
    rc_before = d.proc.poll()
    d.stop()
    assert rc_before is None, f"cordond died during the tests:\n{d.logs()}"


@pytest.fixture()
def sbx(daemon):
    s = Sandbox.create(template="host", timeout=300, socket=daemon.socket)
    yield s
    s.kill()


def test_slow_callback_gets_all_50_mib(sbx):
    got = [0]

    def slow(b):
        if got[0] == 0:
            time.sleep(3)  # far behind: 50 MiB are written meanwhile
        got[0] += len(b)

    p = sbx.processes.start(f"head -c {50 * MIB} /dev/zero", on_stdout_bytes=slow, timeout=120,
                            max_output=0)
    res = p.wait(timeout=120)
    assert res.exit_code == 0
    assert got[0] == 50 * MIB, f"exit 0 after {got[0]} of {50 * MIB} bytes"
    assert res.stdout_truncated is True  # max_output=0 kept none, and says so


def test_lagged_event_raises(sbx):
    """A `lagged` event (a reader past the daemon's backlog) is a typed error from wait(),
    never a result. Fed through a real stream's reader."""

    class FakeStream:
        def __init__(self, lines):
            self.lines = list(lines)

        def readline(self):
            return self.lines.pop(0) if self.lines else b""

        def close(self):
            pass

    lines = [b'{"type":"start","pid":7}\n',
             b'{"type":"stdout","pid":7,"data":"' + base64.b64encode(b"abc") + b'"}\n',
             b'{"type":"lagged","pid":7,"message":"this reader fell behind"}\n']
    p = Process(sbx, FakeStream(lines))
    with pytest.raises(errors.StreamLagged) as ei:
        p.wait(timeout=10)
    assert "fell behind" in str(ei.value) and "3 bytes of stdout" in str(ei.value)
    assert p.result is None


def test_line_mode(sbx):
    out, chunks = [], []
    p = sbx.processes.start("printf 'a\\nbb\\n'; sleep 0.2; printf 'c'; sleep 0.2; printf 'd\\ne'",
                            on_stdout=out.append, lines=True)
    p.wait(timeout=30)
    assert out == ["a", "bb", "cd", "e"], out
    p = sbx.processes.start("printf 'a\\nb'", on_stdout=chunks.append)
    p.wait(timeout=30)
    assert "".join(chunks) == "a\nb"  # chunk mode: the text as written


def test_listing_pages_and_non_utf8(sbx):
    sbx.exec("mkdir -p /tmp/L && cd /tmp/L && seq 1 10050 | xargs touch && "
             "touch \"$(printf 'x\\377y')\"", timeout=120)
    full = sbx.files.list("/tmp/L")
    assert len(full) == 10051 and full.truncated is False and full.next_cursor is None
    names = {e.name_bytes for e in full}
    assert b"x\xffy" in names and b"10050" in names
    one = sbx.files.list("/tmp/L", pages=1)
    assert one.truncated is True and one.next_cursor and 0 < len(one) < 10051
    rest = sbx.files.list("/tmp/L", cursor=one.next_cursor)
    assert {e.name_bytes for e in one} | {e.name_bytes for e in rest} == names
    odd = next(e for e in full if e.name_bytes == b"x\xffy")
    assert odd.path_b64 and odd.path_bytes == b"/tmp/L/x\xffy" and "\ufffd" in odd.name
    sbx.files.write(odd.path_bytes, b"odd")
    assert sbx.files.read(odd.path_bytes) == b"odd"
    assert sbx.files.stat(odd.path_bytes).name_bytes == b"x\xffy"
    sbx.files.move(odd.path_bytes, b"/tmp/L/moved-\xfe")
    assert sbx.files.read(b"/tmp/L/moved-\xfe") == b"odd"
    sbx.files.mkdir(b"/tmp/L/dir-\xfd")
    assert sbx.files.stat(b"/tmp/L/dir-\xfd").is_dir
    sbx.files.remove(b"/tmp/L/moved-\xfe")
    assert not sbx.files.exists(b"/tmp/L/moved-\xfe")


def test_typed_file_errors(sbx):
    with pytest.raises(errors.ReadOnly):
        sbx.files.write("/etc/cordon-ro-x", b"1")  # /etc is sealed read-only
    with pytest.raises(errors.IsADirectory):
        sbx.files.read("/tmp")
    sbx.files.write("/tmp/plain", b"")
    with pytest.raises(errors.NotADirectory):
        sbx.files.list("/tmp/plain")
    with pytest.raises(errors.Conflict):  # the general class still catches it
        sbx.files.read("/tmp/plain/x")
    sbx.exec("ln -s loop1 /tmp/loop2; ln -s loop2 /tmp/loop1")
    with pytest.raises(errors.InvalidPath):
        sbx.files.read("/tmp/loop1")
    with pytest.raises(errors.CrossDevice):
        sbx.files.move("/tmp/plain", "/dev/shm/plain")
    with pytest.raises(errors.InvalidPath) as ei:
        sbx.files.read("relative")
    assert not isinstance(ei.value, ValueError) and ei.value.status == 400


def test_no_space(daemon):
    with Sandbox.create(template="host", limits={"disk_mb": 16}, socket=daemon.socket) as s:
        with pytest.raises(errors.NoSpace) as ei:
            s.files.write("/tmp/big", b"\0" * (20 * MIB))
        assert ei.value.retry_after is None


def test_exec_base64_and_named_missing_command(sbx):
    r = sbx.exec("printf 'a\\000\\377'", encoding="base64")
    assert r.stdout_bytes == b"a\0\xff" and r.stdout == "a\0\ufffd"
    t = sbx.exec("printf 'a\\000'")
    assert t.stdout == "a\ufffd" and t.stdout_bytes == "a\ufffd".encode()
    r = sbx.exec(["no-such-command-q"])
    assert r.exit_code == 127 and "command not found: no-such-command-q" in r.stderr


def test_process_quota_is_typed(daemon):
    with Sandbox.create(template="host", limits={"pids": 16}, socket=daemon.socket) as s:
        procs = []
        with pytest.raises(errors.QuotaExceeded):
            for _ in range(20):
                procs.append(s.processes.start(["sleep", "60"]))
        for p in procs:
            p.kill()
