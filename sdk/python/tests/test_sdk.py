"""The Python SDK against a real cordond (build/cordond), one daemon per module (plus one on
TCP with API keys). Skipped when not root or when the daemon is not built."""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

import cordon
from cordon import (BadRequest, Client, CordonError, CordonUnavailable, InvalidField, NotFound,
                    Sandbox, Unauthorized, UnknownField)

REPO = Path(__file__).resolve().parents[3]
CORDOND = Path(os.environ.get("CORDOND", REPO / "build" / "cordond"))

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="cordond needs root"),
    pytest.mark.skipif(not CORDOND.exists(), reason=f"{CORDOND} is not built"),
    pytest.mark.skipif(os.environ.get("CORDON_TEST_RUNTIME") == "gvisor" and not os.access(
        os.environ.get("CORDON_RUNSC", "/usr/bin/runsc"), os.X_OK),
        reason="CORDON_TEST_RUNTIME=gvisor: runsc is not installed"),
]


class Daemon:
    def __init__(self, tcp=False):
        self.tmp = tempfile.mkdtemp(prefix="cordon-sdk-")
        self.socket = os.path.join(self.tmp, "cordon.sock")
        self.state = os.path.join(self.tmp, "state")
        self.runtime = os.path.join(self.tmp, "run")
        os.makedirs(self.state)
        os.makedirs(self.runtime)
        self.log_path = os.path.join(self.tmp, "cordond.log")
        args = [str(CORDOND), "--socket", self.socket, "--state-dir", self.state,
                "--runtime-dir", self.runtime,
                "--pool", os.environ.get("CORDON_SDK_POOL", "1"), "--max-sandboxes", "8",
                "--max-timeout", "600"]
        if os.environ.get("CORDON_TEST_RUNTIME"):  # run-all.sh's rerun on gvisor
            args += ["--default-runtime", os.environ["CORDON_TEST_RUNTIME"]]
        self.url = None
        self.keys = {}
        if tcp:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            self.url = f"http://127.0.0.1:{port}"
            self.keys = {"alice": "k-alice-0123456789", "bob": "k-bob-0123456789"}
            keyfile = os.path.join(self.tmp, "api-keys")
            with open(keyfile, "w") as f:
                f.write("# test keys\n")
                for name, key in self.keys.items():
                    f.write(f"{key} {name} 4\n")
            os.chmod(keyfile, 0o600)
            args += ["--listen", f"127.0.0.1:{port}", "--api-keys", keyfile]
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        self._wait_ready()

    def logs(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")[-4000:]
        except OSError:
            return ""

    def _wait_ready(self, timeout=30.0):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.stop()
                pytest.fail(f"cordond exited with {self.proc.returncode}:\n{self.logs()}")
            if os.path.exists(self.socket):
                try:
                    if cordon.health(socket=self.socket, timeout=2).get("status") == "ok":
                        if self.url is None or self._tcp_up():
                            return
                except CordonError as e:
                    last = e
            time.sleep(0.05)
        self.stop()
        pytest.fail(f"cordond did not become ready in {timeout}s ({last}):\n{self.logs()}")

    def _tcp_up(self):
        try:
            cordon.health(url=self.url, timeout=2)
            return True
        except CordonUnavailable:
            return False
        except CordonError:
            return True  # it answers (healthz may want a key)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        keep = os.environ.get("CORDON_SDK_KEEP_LOG")  # e.g. /tmp/cordond-sdk.log
        if keep:
            shutil.copy(self.log_path, keep + (".tcp" if self.url else ""))
        shutil.rmtree(self.tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def daemon():
    d = Daemon()
    yield d
    rc_before = d.proc.poll()
    d.stop()
    assert rc_before is None, f"cordond died during the tests:\n{d.logs()}"


@pytest.fixture(scope="module")
def tcp_daemon():
    d = Daemon(tcp=True)
    yield d
    d.stop()


@pytest.fixture()
def sbx(daemon):
    s = Sandbox.create(template="host", timeout=120, env={"X": "1"},
                       metadata={"suite": "sdk"}, socket=daemon.socket)
    yield s
    s.kill()


# -- sandboxes ---------------------------------------------------------------------------------

def test_readme_example(daemon, monkeypatch):
    monkeypatch.setenv("CORDON_SOCKET", daemon.socket)
    monkeypatch.delenv("CORDON_URL", raising=False)
    with Sandbox.create(template="host", timeout=60, env={"X": "1"},
                        metadata={"task": "t1"}) as sbx:
        r = sbx.exec("python3 -c 'print(6*7)'")
        assert (r.exit_code, r.stdout, r.signal, r.timed_out, r.oom) == (0, "42\n", 0, False, False)
        assert r.ok and r.stderr == "" and r.duration_ms >= 0
        assert r.stdout_truncated is False

        out = []
        p = sbx.processes.start(["sh", "-c", "cat"], on_stdout=out.append)
        assert p.pid > 0
        p.send_stdin(b"hi\n")
        p.close_stdin()
        res = p.wait(timeout=30)
        assert res.exit_code == 0 and "".join(out) == "hi\n" and res.stdout == "hi\n"

        sbx.files.write("/home/user/a.txt", b"data")
        assert sbx.files.read("/home/user/a.txt") == b"data"
        assert "a.txt" in [e.name for e in sbx.files.list("/home/user")]
        info = sbx.set_timeout(120)
        assert info.id == sbx.id

        ids = [s.id for s in Sandbox.list(metadata={"task": "t1"})]
        assert ids == [sbx.id]
        sid = sbx.id
    # the context manager destroyed it
    with pytest.raises(NotFound):
        Sandbox.connect(sid)
    assert sid not in [s.id for s in Sandbox.list()]


def test_info_and_metadata(daemon, sbx):
    info = sbx.info()
    assert info.id == sbx.id
    assert info.template == "host"
    assert info.runtime == os.environ.get("CORDON_TEST_RUNTIME", "jail")
    assert info.state in ("ready", "running")
    assert info.metadata == {"suite": "sdk"}
    assert info.timeout_s == 120
    assert info.created_at and info.expires_at
    assert isinstance(info.limits, dict) and isinstance(info.network, dict)
    assert sbx.is_running()


def test_set_timeout_moves_deadline(sbx):
    before = sbx.info()
    after = sbx.set_timeout(300)
    assert after.timeout_s == 300
    assert after.expires_at >= before.expires_at  # RFC 3339 UTC strings sort by time


def test_list_filters(daemon):
    c = Client(socket=daemon.socket)
    a = Sandbox.create(metadata={"team": "a b+c", "job": "1"}, client=c)
    b = Sandbox.create(metadata={"team": "x", "job": "1"}, client=c)
    try:
        assert [s.id for s in Sandbox.list(metadata={"team": "a b+c"}, client=c)] == [a.id]
        # The list is in the daemon's order of making, and a pooled sandbox may have been made
        # before a fresh one that was created first: compare as sets.
        assert sorted(s.id for s in Sandbox.list(metadata={"job": "1"}, client=c)) == sorted([a.id, b.id])
        assert Sandbox.list(metadata={"job": "1", "team": "nope"}, client=c) == []
        everything = [s.id for s in Sandbox.list(client=c)]
        assert a.id in everything and b.id in everything
    finally:
        a.kill()
        b.kill()


def test_connect_and_kill(daemon):
    s = Sandbox.create(timeout=60, socket=daemon.socket)
    again = Sandbox.connect(s.id, socket=daemon.socket)
    assert again.exec("echo same").stdout == "same\n"
    assert again.kill() is True
    assert s.kill() is False  # already gone
    assert s.is_running() is False
    with pytest.raises(NotFound) as ei:
        s.info()
    assert ei.value.status == 404 and ei.value.code == "not_found"


# -- exec --------------------------------------------------------------------------------------

def test_exec_variants(sbx):
    assert sbx.exec(["echo", "a b", "c"]).stdout == "a b c\n"
    assert sbx.exec("echo $X").stdout == "1\n"  # sandbox env
    assert sbx.exec("echo $Y", env={"Y": "two"}).stdout == "two\n"
    assert sbx.exec("pwd", cwd="/tmp").stdout == "/tmp\n"
    assert sbx.exec("id -u").stdout == "1000\n"
    assert sbx.exec("id -u", user="root").stdout == "0\n"
    assert sbx.exec("cat", stdin="in put").stdout == "in put"
    assert sbx.exec(["cat"], stdin=b"bytes").stdout == "bytes"
    r = sbx.exec("echo err >&2; exit 3")
    assert (r.exit_code, r.stderr, r.ok) == (3, "err\n", False)
    assert sbx.exec("no-such-command-xyz").exit_code == 127
    assert sbx.exec(["/no/such/binary"]).exit_code in (126, 127)


def test_exec_signal_and_timeout(sbx):
    r = sbx.exec("kill -9 $$")
    assert (r.exit_code, r.signal) == (-1, 9)
    t0 = time.monotonic()
    r = sbx.exec("sleep 30", timeout=1)
    assert r.timed_out is True and r.exit_code == -1 and r.signal != 0
    assert time.monotonic() - t0 < 15
    assert r.duration_ms >= 900


def test_exec_non_utf8_output(sbx):
    r = sbx.exec(["printf", "a\\377b"])
    assert r.stdout == "a\ufffdb"


# -- processes ---------------------------------------------------------------------------------

def test_process_streams_and_callbacks(sbx):
    out, err, raw, exits = [], [], [], []
    p = sbx.processes.start("echo one; echo two >&2; printf '\\303\\251'",
                            on_stdout=out.append, on_stderr=err.append,
                            on_stdout_bytes=raw.append, on_exit=exits.append)
    res = p.wait(timeout=30)
    assert res.exit_code == 0 and res.signal == 0 and not res.timed_out
    assert "".join(out) == "one\n\u00e9"
    assert b"".join(raw) == b"one\n\xc3\xa9"
    assert "".join(err) == "two\n"
    assert res.stdout == "one\n\u00e9" and res.stderr == "two\n"
    assert exits and exits[0] is res
    assert p.exited and p.exit_code == 0


def test_process_list_signal_connect(sbx):
    p = sbx.processes.start(["sleep", "60"], tag="sleeper", timeout=0)
    try:
        procs = {q.pid: q for q in sbx.processes.list()}
        assert p.pid in procs
        assert procs[p.pid].tag == "sleeper"
        assert procs[p.pid].argv == ["sleep", "60"]
        assert procs[p.pid].user == "user"

        # reattach from a second handle, then stop the process
        seen = []
        q = sbx.processes.connect(p.pid, on_exit=seen.append)
        assert q.pid == p.pid and q.tag in (None, "sleeper")
        p.signal("TERM")
        r1, r2 = p.wait(30), q.wait(30)
        assert (r1.exit_code, r1.signal) == (-1, 15)
        assert (r2.exit_code, r2.signal) == (-1, 15)
        assert seen and seen[0].signal == 15
    finally:
        p.kill()
    assert p.pid not in [q.pid for q in sbx.processes.list()]


def test_process_kill_and_wait_timeout(sbx):
    p = sbx.processes.start("sleep 60")
    with pytest.raises(TimeoutError):
        p.wait(timeout=0.3)
    assert p.kill() is True
    r = p.wait(30)
    assert r.signal == 9 and r.exit_code == -1
    assert p.kill() is False  # already exited


def test_process_stdin_chunks_and_conflict(sbx):
    p = sbx.processes.start(["wc", "-c"])
    big = b"x" * (1024 * 1024 + 17)  # more than one request's worth
    p.send_stdin(big, eof=True)
    r = p.wait(60)
    assert r.stdout.strip() == str(len(big))
    q = sbx.processes.start(["cat"])
    q.close_stdin()
    q.wait(30)
    with pytest.raises((cordon.Conflict, NotFound)):
        q.send_stdin(b"late")


def test_process_timeout(sbx):
    r = sbx.processes.start("sleep 30", timeout=1).wait(20)
    assert r.timed_out is True


def test_process_connect_after_exit(sbx):
    p = sbx.processes.start("exit 4")
    assert p.wait(30).exit_code == 4
    try:
        q = sbx.processes.connect(p.pid)
    except NotFound:
        return  # the daemon forgot it already: allowed
    assert q.wait(10).exit_code == 4


def test_process_unknown_pid(sbx):
    with pytest.raises(NotFound):
        sbx.processes.connect(999999)
    with pytest.raises(NotFound):
        sbx.processes.signal(999999, "TERM")


# -- files -------------------------------------------------------------------------------------

def test_files(sbx):
    f = sbx.files
    e = f.write("/home/user/t.txt", "h\u00e9llo")
    assert e.name == "t.txt" and e.path == "/home/user/t.txt" and e.type == "file"
    assert e.size == len("h\u00e9llo".encode())
    assert f.read("/home/user/t.txt") == "h\u00e9llo".encode()
    assert f.read_text("/home/user/t.txt") == "h\u00e9llo"
    assert sbx.exec("cat /home/user/t.txt").stdout == "h\u00e9llo"

    binary = bytes(range(256)) * 300
    f.write("/tmp/bin", binary)
    assert f.read("/tmp/bin") == binary

    d = f.mkdir("/home/user/d1/d2", parents=True)
    assert d.type == "dir" and d.is_dir
    f.mkdir("/home/user/d1/d2", parents=True)  # mkdir -p again: fine
    with pytest.raises(cordon.Conflict):
        f.mkdir("/home/user/d1")
    with pytest.raises(NotFound):
        f.mkdir("/home/user/nope/x")
    f.write("/home/user/d1/d2/deep.txt", b"deep")

    names = {e.name: e for e in f.list("/home/user")}
    assert {"t.txt", "d1"} <= set(names)
    assert names["d1"].type == "dir" and names["t.txt"].size == 6
    assert names["t.txt"].mode == 0o644 or names["t.txt"].mode & 0o600 == 0o600
    deep = [e.path for e in f.list("/home/user", depth=3)]
    assert "/home/user/d1/d2/deep.txt" in deep
    assert "/home/user/d1/d2/deep.txt" not in [e.path for e in f.list("/home/user")]

    st = f.stat("/home/user/t.txt")
    assert st.type == "file" and st.size == 6 and st.mtime
    sbx.exec("ln -s /home/user/t.txt /home/user/link")
    listed = {e.name: e for e in f.list("/home/user")}
    assert listed["link"].type == "symlink"
    assert listed["link"].symlink_target == "/home/user/t.txt"

    f.move("/home/user/t.txt", "/home/user/d1/moved.txt")
    assert not f.exists("/home/user/t.txt")
    assert f.read("/home/user/d1/moved.txt") == "h\u00e9llo".encode()

    f.remove("/home/user/d1")
    assert not f.exists("/home/user/d1")
    with pytest.raises(NotFound):
        f.read("/home/user/d1/moved.txt")
    with pytest.raises(NotFound):
        f.remove("/home/user/d1")


def test_stat_does_not_follow_symlinks(sbx):
    sbx.files.write("/home/user/target", b"x")
    assert sbx.exec("ln -s /home/user/target /home/user/ln").exit_code == 0
    st = sbx.files.stat("/home/user/ln")
    assert st.type == "symlink" and st.symlink_target == "/home/user/target"


def test_files_errors(sbx):
    with pytest.raises(cordon.Conflict):
        sbx.files.read("/home/user")  # a directory
    sbx.files.write("/home/user/plain", b"")
    with pytest.raises(cordon.Conflict):
        sbx.files.list("/home/user/plain")  # not a directory
    with pytest.raises(NotFound):
        sbx.files.write("/home/user/missing-dir/x", b"1")
    with pytest.raises(NotFound):
        sbx.files.stat("/nonexistent")
    with pytest.raises(cordon.errors.InvalidPath):  # the SDK's own error, no request made
        sbx.files.read("relative/path")


def test_files_path_cannot_escape(sbx):
    # '..' is resolved inside the sandbox: this is the sandbox's /etc/hostname or nothing,
    # never the host's file of the same name outside the sandbox root.
    sbx.files.write("/tmp/marker", b"inside")
    assert sbx.files.read("/tmp/../../../tmp/marker") == b"inside"


# -- audit -------------------------------------------------------------------------------------

def test_audit(sbx):
    sbx.exec("echo audited")
    sbx.files.write("/tmp/audited", b"1")
    events = sbx.audit()
    assert events and all(isinstance(e, dict) for e in events)
    text = repr(events)
    assert "audited" in text or "exec" in text or "process" in text


# -- typed errors ------------------------------------------------------------------------------

def test_typed_errors(daemon, sbx):
    c = Client(socket=daemon.socket)
    with pytest.raises(NotFound) as ei:
        Sandbox.connect("no-such-sandbox", client=c)
    assert ei.value.status == 404 and ei.value.message

    with pytest.raises(InvalidField) as ei:
        Sandbox.create(limits={"memory_mb": 1}, client=c)
    assert "memory_mb" in ei.value.message and ei.value.status == 400
    assert isinstance(ei.value, BadRequest)

    with pytest.raises(UnknownField) as ei:
        Sandbox.create(limits={"memory": 512}, client=c)
    assert "memory" in ei.value.message

    with pytest.raises(InvalidField):
        sbx.exec("true", user="nobody")
    with pytest.raises(InvalidField):
        sbx.exec("true", timeout=0)
    with pytest.raises(InvalidField):
        sbx.set_timeout(0)
    with pytest.raises(BadRequest):
        sbx.exec("true", cwd="relative")
    with pytest.raises(UnknownField):
        c.request("GET", "/v1/sandboxes", query={"team": "x"})  # not metadata.team
    with pytest.raises(NotFound):
        Sandbox.create(template="no-such-template", client=c)
    with pytest.raises(cordon.PayloadTooLarge):
        sbx.exec("true", stdin="z" * (1024 * 1024 + 1))
    with pytest.raises(BadRequest) as ei:
        c.request("POST", "/v1/sandboxes", body=b"{not json", headers={"Content-Type": "application/json"})
    assert ei.value.code == "bad_request"


def test_unreachable_daemon(tmp_path):
    with pytest.raises(CordonUnavailable) as ei:
        Sandbox.create(socket=str(tmp_path / "none.sock"))
    assert str(tmp_path / "none.sock") in str(ei.value)
    assert isinstance(ei.value, ConnectionError)


def test_keepalive_and_threads(daemon, sbx):
    results = []

    def work(i):
        results.append(sbx.exec(["echo", str(i)]).stdout.strip())

    ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert sorted(results, key=int) == [str(i) for i in range(8)]


# -- TCP with API keys -------------------------------------------------------------------------

def test_tcp_api_key(tcp_daemon, monkeypatch):
    d = tcp_daemon
    key = d.keys["alice"]
    with Sandbox.create(timeout=60, url=d.url, api_key=key) as s:
        assert s.exec("echo tcp").stdout == "tcp\n"
        assert s.id in [x.id for x in Sandbox.list(url=d.url, api_key=key)]
        # from the environment
        monkeypatch.setenv("CORDON_URL", d.url)
        monkeypatch.setenv("CORDON_API_KEY", key)
        assert Sandbox.connect(s.id).info().id == s.id

    with pytest.raises(Unauthorized) as ei:
        Sandbox.list(url=d.url, api_key="wrong-key")
    assert ei.value.status == 401 and ei.value.code == "unauthorized"
    monkeypatch.delenv("CORDON_API_KEY")
    with pytest.raises(Unauthorized):
        Sandbox.create(url=d.url)
    # the unix socket of the same daemon needs no key
    assert isinstance(Sandbox.list(socket=d.socket), list)


def test_tcp_key_isolation(tcp_daemon):
    d = tcp_daemon
    a = Sandbox.create(timeout=60, url=d.url, api_key=d.keys["alice"])
    try:
        with pytest.raises((NotFound, cordon.Forbidden)):
            Sandbox.connect(a.id, url=d.url, api_key=d.keys["bob"]).kill()
        assert a.id not in [x.id for x in Sandbox.list(url=d.url, api_key=d.keys["bob"])]
    finally:
        a.kill()
