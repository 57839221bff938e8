"""`cordon create|ls|info|exec|kill|cp|logs|timeout|audit verify`: the CLI as a client of cordond.

Run with Debian's pytest:  /usr/bin/python3 -m pytest tests/integration/test_cli_client.py

A real `cordond` is started in a temporary directory (its own socket, state and runtime dirs)
and the real `cordon` binary is run against it with $CORDON_SOCKET. Tests that need the daemon
skip, with a reason, when not root or when build/cordond is missing. The tests of `audit
verify`, of an unreachable daemon and of usage errors need neither and always run; a small
in-process fake daemon checks the HTTP client against framings cordond may not produce
(chunks split mid-line, non-JSON error bodies).
"""

import base64
import datetime
import hashlib
import json
import os
import re
import select
import signal
import socket
import subprocess
import tempfile
import threading
import time

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("CORDON_BUILD", os.path.join(REPO, "build"))
CORDON = os.path.join(BUILD, "cordon")
CORDOND = os.path.join(BUILD, "cordond")

IS_ROOT = os.geteuid() == 0
HAVE_CORDOND = os.path.isfile(CORDOND) and os.access(CORDOND, os.X_OK)

EXIT_API, EXIT_USAGE, EXIT_UNREACHABLE = 1, 2, 3

needs_daemon = [
    pytest.mark.skipif(not IS_ROOT, reason="cordond needs root"),
    pytest.mark.skipif(not HAVE_CORDOND, reason=f"no cordond binary at {CORDOND} (ninja -C build)"),
]

ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@pytest.fixture(scope="module")
def cordon_bin():
    if not (os.path.isfile(CORDON) and os.access(CORDON, os.X_OK)):
        pytest.fail(f"no cordon binary at {CORDON} (build it, or set CORDON_BUILD)", pytrace=False)
    return CORDON


def run(args, sock=None, input=None, timeout=60, env=None, stdin=None):
    """`cordon ARGS...` with $CORDON_SOCKET=@sock; returns the CompletedProcess (bytes)."""
    e = dict(os.environ if env is None else env)
    e.pop("CORDON_URL", None)
    if sock is not None:
        e["CORDON_SOCKET"] = sock
    kw = {"input": input} if input is not None else {"stdin": stdin or subprocess.DEVNULL}
    return subprocess.run([CORDON] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env=e, timeout=timeout, **kw)


def describe(p):
    return (f"argv={p.args!r} rc={p.returncode}\nstdout={p.stdout[:2000]!r}\n"
            f"stderr={p.stderr[:2000]!r}")


# ---------------------------------------------------------------------------------------------
# A real cordond


class Daemon:
    def __init__(self, extra=()):
        self.extra = list(extra)
        self.dir = tempfile.mkdtemp(prefix="cordon-cli-test.")
        self.sock = os.path.join(self.dir, "cordon.sock")
        self.state_dir = os.path.join(self.dir, "state")
        self.runtime_dir = os.path.join(self.dir, "run")
        self.log = os.path.join(self.dir, "cordond.log")
        self.proc = None

    def start(self, timeout=20):
        os.makedirs(self.state_dir)
        os.makedirs(self.runtime_dir)
        argv = [CORDOND, "--socket", self.sock, "--state-dir", self.state_dir,
                "--runtime-dir", self.runtime_dir, "--pool", "1", "--max-sandboxes", "8",
                "--max-timeout", str(MAX_TIMEOUT_S)] + self.extra
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            if os.path.exists(self.sock) and self.healthy():
                return
            time.sleep(0.1)
        self.stop()
        pytest.fail(f"cordond did not answer /healthz on {self.sock} within {timeout}s:\n"
                    f"{self.log_text()[-3000:]}", pytrace=False)

    def healthy(self):
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(2)
                s.connect(self.sock)
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                return s.recv(64).startswith(b"HTTP/1.1 200")
        except OSError:
            return False

    def log_text(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        subprocess.run(["rm", "-rf", "--one-file-system", self.dir], check=False)


@pytest.fixture(scope="module")
def daemon(cordon_bin):
    if not IS_ROOT:
        pytest.skip("cordond needs root")
    if not HAVE_CORDOND:
        pytest.skip(f"no cordond binary at {CORDOND} (ninja -C build)")
    d = Daemon()
    d.start()
    yield d
    d.stop()


# The daemon's --max-timeout, and the shared sandbox's TTL: the whole module must run within
# it on a slow machine, so no test may shorten it (test_timeout works on a sandbox of its own;
# it once set the shared one's to 120 s, and the tests after it found the sandbox gone).
MAX_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def sandbox(daemon):
    """One sandbox for the module, made with `cordon create`, destroyed at the end. Tests
    that change its life (timeout, kill) or its network use a sandbox of their own."""
    p = run(["create", "--meta", "suite=cli", "--meta", "who=test_cli_client", "--timeout",
             str(MAX_TIMEOUT_S)], daemon.sock)
    assert p.returncode == 0, describe(p)
    sid = p.stdout.decode().strip()
    assert ID_RE.match(sid), f"create must print only the id:\n{describe(p)}"
    yield sid
    p = run(["kill", sid], daemon.sock)
    if p.returncode != 0:  # it went before the module ended: say how, for the failures above
        audit = os.path.join(daemon.state_dir, "audit", f"{sid}.jsonl")
        try:
            with open(audit, errors="replace") as f:
                tail = f.readlines()[-4:]
        except OSError as e:
            tail = [str(e)]
        pytest.fail(f"the module's sandbox {sid} was gone before the end ({describe(p)});\n"
                    f"its audit log ends with:\n{''.join(tail)}\ncordond's log ends with:\n"
                    f"{daemon.log_text()[-3000:]}", pytrace=False)


@pytest.fixture
def own_sandbox(daemon):
    """A sandbox for one test, destroyed after it."""
    p = run(["create", "--meta", "who=own_sandbox"], daemon.sock)
    assert p.returncode == 0, describe(p)
    sid = p.stdout.decode().strip()
    yield sid
    run(["kill", sid], daemon.sock)


def info_json(daemon, sid):
    p = run(["info", "--json", sid], daemon.sock)
    assert p.returncode == 0, describe(p)
    return json.loads(p.stdout)


def parse_time(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


# ---------------------------------------------------------------------------------------------
# Sandboxes


class TestSandboxes:
    pytestmark = needs_daemon

    def test_create_json(self, daemon):
        p = run(["create", "--json", "--memory", "256", "--cpus", "0.5", "--env", "A=1",
                 "--meta", "k=v", "--timeout", "60"], daemon.sock)
        assert p.returncode == 0, describe(p)
        sb = json.loads(p.stdout)
        try:
            assert ID_RE.match(sb["id"])
            assert sb["limits"]["memory_mb"] == 256, sb
            assert sb["limits"]["cpus"] == 0.5, sb
            assert sb["metadata"] == {"k": "v"}, sb
            assert sb["timeout_s"] == 60, sb
        finally:
            run(["kill", sb["id"]], daemon.sock)

    def test_ls_shows_it(self, daemon, sandbox):
        p = run(["ls"], daemon.sock)
        assert p.returncode == 0, describe(p)
        lines = p.stdout.decode().splitlines()
        assert lines[0].split() == ["ID", "TEMPLATE", "STATE", "CREATED", "EXPIRES", "METADATA"], lines
        row = [l for l in lines if l.split("\t")[0] == sandbox]
        assert row, f"{sandbox} not listed:\n{describe(p)}"
        cells = row[0].split("\t")
        assert len(cells) == 6, cells
        assert "suite=cli" in cells[5] and "who=test_cli_client" in cells[5], cells

    def test_ls_filters_by_metadata(self, daemon, sandbox):
        p = run(["ls", "--json", "--meta", "suite=cli"], daemon.sock)
        assert p.returncode == 0, describe(p)
        assert sandbox in [s["id"] for s in json.loads(p.stdout)]
        p = run(["ls", "--json", "--meta", "suite=no such suite"], daemon.sock)
        assert p.returncode == 0, describe(p)
        assert sandbox not in [s["id"] for s in json.loads(p.stdout)]

    def test_info(self, daemon, sandbox):
        p = run(["info", sandbox], daemon.sock)
        assert p.returncode == 0, describe(p)
        text = p.stdout.decode()
        assert re.search(rf"^id\s+{re.escape(sandbox)}$", text, re.M), text
        assert re.search(r"^state\s+(ready|running)$", text, re.M), text
        sb = info_json(daemon, sandbox)
        assert sb["id"] == sandbox
        assert sb["metadata"] == {"suite": "cli", "who": "test_cli_client"}

    def test_timeout(self, daemon, own_sandbox):
        p = run(["timeout", own_sandbox, "120"], daemon.sock)
        assert p.returncode == 0, describe(p)
        exp = parse_time(info_json(daemon, own_sandbox)["expires_at"])
        assert abs(exp - (time.time() + 120)) < 10, exp - time.time()

    def test_shared_sandbox_outlives_the_module(self, daemon, sandbox):
        """The shared sandbox has the daemon's longest TTL, and nothing shortened it."""
        sb = info_json(daemon, sandbox)
        assert sb["timeout_s"] == MAX_TIMEOUT_S, sb
        assert parse_time(sb["expires_at"]) - time.time() > MAX_TIMEOUT_S / 2, sb

    def test_kill_then_info_is_not_found(self, daemon):
        p = run(["create"], daemon.sock)
        assert p.returncode == 0, describe(p)
        sid = p.stdout.decode().strip()
        p = run(["kill", sid], daemon.sock)
        assert p.returncode == 0, describe(p)
        assert p.stdout.decode().split() == [sid]
        p = run(["info", sid], daemon.sock)
        assert p.returncode == EXIT_API, describe(p)
        assert p.stderr.decode().startswith("cordon: not_found: "), describe(p)
        p = run(["kill", sid], daemon.sock)
        assert p.returncode == EXIT_API, describe(p)

    def test_create_sizes(self, daemon):
        """The one vocabulary of sizes: a bare number is MiB, suffixes are binary."""
        p = run(["create", "--json", "--memory", "1G", "--disk", "256", "--timeout", "60"], daemon.sock)
        assert p.returncode == 0, describe(p)
        sb = json.loads(p.stdout)
        run(["kill", sb["id"]], daemon.sock)
        assert sb["limits"]["memory_mb"] == 1024 and sb["limits"]["disk_mb"] == 256, sb
        for bad in ("1500K", "0", "2.5G", "lots"):
            p = run(["create", "--memory", bad], daemon.sock)
            assert p.returncode == EXIT_USAGE, describe(p)
            assert "--memory" in p.stderr.decode() and "MiB" in p.stderr.decode(), describe(p)

    def test_create_over_the_host_is_refused(self, daemon):
        n = len(os.sched_getaffinity(0))
        before = run(["ls", "--json"], daemon.sock).stdout
        p = run(["create", "--cpus", str(n + 1)], daemon.sock)
        assert p.returncode == EXIT_API, describe(p)
        assert re.match(rf"cordon: invalid_field: limits\.cpus: must be at most {n}\b",
                        p.stderr.decode()), describe(p)
        assert run(["ls", "--json"], daemon.sock).stdout == before

    def test_api_error_is_code_and_message(self, daemon):
        p = run(["create", "--memory", "1"], daemon.sock)
        assert p.returncode == EXIT_API, describe(p)
        assert re.match(r"cordon: invalid_field: .*memory_mb", p.stderr.decode()), describe(p)


# ---------------------------------------------------------------------------------------------
# Processes


class TestExec:
    pytestmark = needs_daemon

    def test_streams_and_exit_code(self, daemon, sandbox):
        p = run(["exec", sandbox, "--", "sh", "-c", "echo a; echo b >&2; exit 3"], daemon.sock)
        assert p.returncode == 3, describe(p)
        assert p.stdout == b"a\n", describe(p)
        assert p.stderr == b"b\n", describe(p)

    def test_output_is_live(self, daemon, sandbox):
        e = dict(os.environ, CORDON_SOCKET=daemon.sock)
        proc = subprocess.Popen([CORDON, "exec", sandbox, "--", "sh", "-c",
                                 "echo first; sleep 4; echo second"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=e)
        try:
            ready, _, _ = select.select([proc.stdout], [], [], 3)
            assert ready, "no output within 3 s although the command printed at once"
            assert proc.stdout.readline() == b"first\n"
            assert proc.poll() is None, "cordon exec returned before the command ended"
        finally:
            out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, (out, err)
        assert out == b"second\n"

    def test_stdin_is_forwarded(self, daemon, sandbox):
        p = run(["exec", sandbox, "--", "cat"], daemon.sock, input=b"hi\n")
        assert p.returncode == 0, describe(p)
        assert p.stdout == b"hi\n", describe(p)

    def test_large_stdin(self, daemon, sandbox):
        data = os.urandom(300 * 1024)
        p = run(["exec", sandbox, "--", "sha256sum"], daemon.sock, input=data)
        assert p.returncode == 0, describe(p)
        assert p.stdout.split()[0].decode() == hashlib.sha256(data).hexdigest()

    def test_devnull_stdin_is_eof(self, daemon, sandbox):
        p = run(["exec", sandbox, "--", "cat"], daemon.sock, timeout=20)
        assert p.returncode == 0 and p.stdout == b"", describe(p)

    def test_options(self, daemon, sandbox):
        p = run(["exec", "--user", "root", "--cwd", "/tmp", "--env", "X=42", sandbox,
                 "sh", "-c", 'echo "$(id -u) $(pwd) $X"'], daemon.sock)
        assert p.returncode == 0, describe(p)
        assert p.stdout == b"0 /tmp 42\n", describe(p)

    def test_options_after_the_id(self, daemon, sandbox):
        """`exec ID --timeout 1 -- sleep 5`: --timeout is exec's, not the command (which ran
        as `--timeout` and failed with 127)."""
        t0 = time.monotonic()
        p = run(["exec", sandbox, "--timeout", "1", "--", "sleep", "5"], daemon.sock)
        assert p.returncode == 124, describe(p)
        assert "timed out" in p.stderr.decode(), describe(p)
        assert time.monotonic() - t0 < 4.5, "the 1 s timeout did not apply"
        p = run(["exec", sandbox, "--env", "X=42", "--cwd", "/tmp", "sh", "-c", 'echo "$X $(pwd)"'],
                daemon.sock)
        assert p.returncode == 0 and p.stdout == b"42 /tmp\n", describe(p)

    def test_options_after_the_command_are_its_own(self, daemon, sandbox):
        p = run(["exec", sandbox, "echo", "--timeout", "1", "--"], daemon.sock)
        assert p.returncode == 0 and p.stdout == b"--timeout 1 --\n", describe(p)
        p = run(["exec", sandbox, "--", "echo", "--env", "X=1"], daemon.sock)
        assert p.returncode == 0 and p.stdout == b"--env X=1\n", describe(p)

    def test_signal_exit_status(self, daemon, sandbox):
        p = run(["exec", sandbox, "--", "sh", "-c", "kill -USR1 $$"], daemon.sock)
        assert p.returncode == 128 + signal.SIGUSR1, describe(p)

    def test_sigterm_is_forwarded(self, daemon, sandbox):
        e = dict(os.environ, CORDON_SOCKET=daemon.sock)
        proc = subprocess.Popen([CORDON, "exec", sandbox, "--", "sh", "-c", "echo up; exec sleep 60"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=e)
        try:
            assert select.select([proc.stdout], [], [], 10)[0], "the command did not start"
            assert proc.stdout.readline() == b"up\n"
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=15)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 128 + signal.SIGTERM, (proc.returncode, err)

    def test_command_not_found(self, daemon, sandbox):
        p = run(["exec", sandbox, "--", "/no/such/program"], daemon.sock)
        assert p.returncode == 127, describe(p)

    def test_unknown_sandbox(self, daemon):
        p = run(["exec", "nosuchsandbox", "--", "true"], daemon.sock)
        assert p.returncode == EXIT_API, describe(p)
        assert p.stderr.decode().startswith("cordon: not_found: "), describe(p)


# ---------------------------------------------------------------------------------------------
# Network policy


def network_json(daemon, sid, *args):
    p = run(["network", "--json", sid] + list(args), daemon.sock)
    assert p.returncode == 0, describe(p)
    return json.loads(p.stdout)


class TestNetwork:
    pytestmark = needs_daemon

    @pytest.fixture
    def net_sandbox(self, daemon, own_sandbox):
        p = run(["network", own_sandbox, "--net", "allow"], daemon.sock)
        if p.returncode != 0 and "cannot give sandboxes a network" in p.stderr.decode():
            pytest.skip("this cordond cannot give sandboxes a network")
        assert p.returncode == 0, describe(p)
        return own_sandbox

    def test_add_and_remove_edit_the_rules(self, daemon, net_sandbox):
        sid = net_sandbox
        assert network_json(daemon, sid, "--add", "example.com") == \
            {"policy": "allow", "allow": ["example.com"]}
        # Adding what is there already is a no-op; the order of the rules is kept.
        assert network_json(daemon, sid, "--add", "pypi.org", "--add", "example.com") == \
            {"policy": "allow", "allow": ["example.com", "pypi.org"]}
        assert network_json(daemon, sid, "--remove", "example.com") == \
            {"policy": "allow", "allow": ["pypi.org"]}
        assert info_json(daemon, sid)["network"] == {"policy": "allow", "allow": ["pypi.org"]}
        # --allow still replaces the whole list.
        assert network_json(daemon, sid, "--allow", "a.example.org") == \
            {"policy": "allow", "allow": ["a.example.org"]}

    def test_add_to_no_network_allows_it(self, daemon, own_sandbox):
        p = run(["network", own_sandbox, "--add", "example.com"], daemon.sock)
        if p.returncode != 0 and "cannot give sandboxes a network" in p.stderr.decode():
            pytest.skip("this cordond cannot give sandboxes a network")
        assert p.returncode == 0, describe(p)
        assert p.stdout == b"policy: allow\nallow:  example.com\n", describe(p)

    def test_refusals_change_nothing(self, daemon, net_sandbox):
        sid = net_sandbox
        network_json(daemon, sid, "--add", "example.com")
        before = info_json(daemon, sid)["network"]
        p = run(["network", sid, "--remove", "not-there.example"], daemon.sock)
        assert p.returncode == EXIT_API and "not-there.example" in p.stderr.decode(), describe(p)
        p = run(["network", sid, "--allow", "x.example", "--add", "y.example"], daemon.sock)
        assert p.returncode == EXIT_USAGE, describe(p)
        p = run(["network", sid, "--net", "none", "--add", "y.example"], daemon.sock)
        assert p.returncode == EXIT_API and "takes no rules" in p.stderr.decode(), describe(p)
        network_json(daemon, sid, "--allow", "example.com")
        p = run(["network", sid, "--net", "public"], daemon.sock)
        assert p.returncode == 0, describe(p)
        p = run(["network", sid, "--add", "y.example"], daemon.sock)
        assert p.returncode == EXIT_API and "public" in p.stderr.decode(), describe(p)
        assert info_json(daemon, sid)["network"]["policy"] == "public"
        assert before == {"policy": "allow", "allow": ["example.com"]}


# ---------------------------------------------------------------------------------------------
# Files and logs


class TestFilesAndLogs:
    pytestmark = needs_daemon

    def test_cp_both_ways(self, daemon, sandbox, tmp_path):
        blob = bytes(range(256)) * 64 + os.urandom(100_000) + b"\0\r\n\0"
        src = tmp_path / "blob.bin"
        src.write_bytes(blob)
        p = run(["cp", str(src), f"{sandbox}:/tmp/blob.bin"], daemon.sock)
        assert p.returncode == 0, describe(p)
        p = run(["exec", sandbox, "--", "sha256sum", "/tmp/blob.bin"], daemon.sock)
        assert p.stdout.split()[0].decode() == hashlib.sha256(blob).hexdigest(), describe(p)
        dst = tmp_path / "back.bin"
        p = run(["cp", f"{sandbox}:/tmp/blob.bin", str(dst)], daemon.sock)
        assert p.returncode == 0, describe(p)
        assert dst.read_bytes() == blob

    def test_cp_stdin_stdout_and_directories(self, daemon, sandbox, tmp_path):
        p = run(["cp", "-", f"{sandbox}:/tmp/piped"], daemon.sock, input=b"through a pipe\n")
        assert p.returncode == 0, describe(p)
        p = run(["cp", f"{sandbox}:/tmp/piped", "-"], daemon.sock)
        assert p.returncode == 0 and p.stdout == b"through a pipe\n", describe(p)
        p = run(["cp", f"{sandbox}:/tmp/piped", str(tmp_path)], daemon.sock)
        assert p.returncode == 0, describe(p)
        assert (tmp_path / "piped").read_bytes() == b"through a pipe\n"
        (tmp_path / "named.txt").write_bytes(b"x")
        p = run(["cp", str(tmp_path / "named.txt"), f"{sandbox}:/tmp/"], daemon.sock)
        assert p.returncode == 0, describe(p)
        p = run(["cp", f"{sandbox}:/tmp/named.txt", "-"], daemon.sock)
        assert p.stdout == b"x", describe(p)

    def test_cp_missing_file_keeps_local(self, daemon, sandbox, tmp_path):
        keep = tmp_path / "keep"
        keep.write_bytes(b"precious")
        p = run(["cp", f"{sandbox}:/tmp/no-such-file", str(keep)], daemon.sock)
        assert p.returncode == EXIT_API, describe(p)
        assert p.stderr.decode().startswith("cordon: not_found: "), describe(p)
        assert keep.read_bytes() == b"precious"

    def test_logs(self, daemon, sandbox):
        run(["exec", sandbox, "--", "true"], daemon.sock)
        p = run(["logs", sandbox], daemon.sock)
        assert p.returncode == 0, describe(p)
        lines = p.stdout.decode().splitlines()
        assert any(l.split()[1:2] == ["process.start"] for l in lines), describe(p)
        assert any("argv=[true]" in l for l in lines), describe(p)
        p = run(["logs", "--json", sandbox], daemon.sock)
        recs = [json.loads(l) for l in p.stdout.decode().splitlines()]
        assert recs and all("event" in r and "seq" in r for r in recs), describe(p)
        assert [r["seq"] for r in recs] == list(range(1, len(recs) + 1))

    def test_logs_follow(self, daemon, sandbox):
        e = dict(os.environ, CORDON_SOCKET=daemon.sock)
        proc = subprocess.Popen([CORDON, "logs", "--follow", sandbox], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e)
        try:
            time.sleep(1)
            run(["exec", sandbox, "--", "echo", "followed-marker"], daemon.sock)
            buf = b""
            deadline = time.monotonic() + 10
            while b"followed-marker" not in buf and time.monotonic() < deadline:
                if select.select([proc.stdout], [], [], 0.5)[0]:
                    chunk = os.read(proc.stdout.fileno(), 65536)
                    if not chunk:
                        break
                    buf += chunk
            assert b"followed-marker" in buf, buf
            assert proc.poll() is None, "logs --follow returned"
        finally:
            proc.kill()
            proc.wait()

    def test_daemon_audit_file_verifies(self, daemon, sandbox):
        path = os.path.join(daemon.state_dir, "audit", f"{sandbox}.jsonl")
        assert os.path.exists(path), os.listdir(os.path.join(daemon.state_dir, "audit"))
        p = run(["audit", "verify", path])
        assert p.returncode == 0, describe(p)
        assert re.fullmatch(rb"ok: [1-9][0-9]* records\n", p.stdout), describe(p)


@pytest.mark.skipif(not IS_ROOT, reason="cordond needs root")
@pytest.mark.skipif(not HAVE_CORDOND, reason=f"no cordond binary at {CORDOND} (ninja -C build)")
def test_tcp_with_api_key(cordon_bin, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    keys = tmp_path / "keys"
    keys.write_text("k-cli-test-0123456789abcdef cli 4\n")
    os.chmod(keys, 0o600)
    d = Daemon(["--listen", f"127.0.0.1:{port}", "--api-keys", str(keys)])
    try:
        d.start()
        env = dict(os.environ, CORDON_URL=f"http://127.0.0.1:{port}",
                   CORDON_API_KEY="k-cli-test-0123456789abcdef")
        env.pop("CORDON_SOCKET", None)
        p = subprocess.run([CORDON, "ls", "--json"], env=env, capture_output=True, timeout=30)
        assert p.returncode == 0 and json.loads(p.stdout) == [], describe(p)
        env["CORDON_API_KEY"] = "wrong"
        p = subprocess.run([CORDON, "ls"], env=env, capture_output=True, timeout=30)
        assert p.returncode == EXIT_API, describe(p)
        assert p.stderr.decode().startswith("cordon: unauthorized: "), describe(p)
    finally:
        d.stop()


# ---------------------------------------------------------------------------------------------
# Without a daemon


def write_audit(path, n=4):
    """A valid hash-chained audit file of @n records (docs/audit.md)."""
    prev = "0" * 64
    lines = []
    for seq in range(1, n + 1):
        rec = {"event": "file.write", "fields": {"path": f"/tmp/f{seq}", "bytes": seq},
               "prev": prev, "sandbox": "sb-test", "seq": seq,
               "t": "2025-01-31T12:00:00.123Z", "v": 1}
        line = (json.dumps(rec, separators=(",", ":"), sort_keys=True) + "\n").encode()
        lines.append(line)
        prev = hashlib.sha256(line).hexdigest()
    with open(path, "wb") as f:
        f.write(b"".join(lines))
    return lines


def test_audit_verify_ok(cordon_bin, tmp_path):
    write_audit(tmp_path / "a.jsonl", 4)
    p = run(["audit", "verify", str(tmp_path / "a.jsonl")])
    assert p.returncode == 0, describe(p)
    assert p.stdout == b"ok: 4 records\n", describe(p)


def test_audit_verify_tampered(cordon_bin, tmp_path):
    lines = write_audit(tmp_path / "a.jsonl", 4)
    lines[1] = lines[1].replace(b'"/tmp/f2"', b'"/tmp/XX"')
    (tmp_path / "a.jsonl").write_bytes(b"".join(lines))
    p = run(["audit", "verify", str(tmp_path / "a.jsonl")])
    assert p.returncode == 1, describe(p)
    # The edit shows at the record whose prev no longer matches: line 3.
    assert re.search(r"\bline 3\b", p.stderr.decode()), describe(p)
    assert p.stdout == b"", describe(p)


def test_audit_verify_missing_file(cordon_bin, tmp_path):
    p = run(["audit", "verify", str(tmp_path / "nope.jsonl")])
    assert p.returncode == 1, describe(p)
    assert "nope.jsonl" in p.stderr.decode(), describe(p)


def test_daemon_unreachable(cordon_bin, tmp_path):
    sock = str(tmp_path / "no-daemon.sock")
    for args in (["ls"], ["create"], ["info", "x"], ["exec", "x", "--", "true"],
                 ["cp", "x:/a", str(tmp_path / "b")], ["logs", "x"], ["kill", "x"],
                 ["timeout", "x", "10"]):
        p = run(args, sock)
        assert p.returncode == EXIT_UNREACHABLE, describe(p)
        assert sock in p.stderr.decode(), describe(p)
    p = run(["--socket", sock, "ls"])
    assert p.returncode == EXIT_UNREACHABLE and sock in p.stderr.decode(), describe(p)
    p = run(["ls", "--socket", sock], "/elsewhere.sock")
    assert p.returncode == EXIT_UNREACHABLE and sock in p.stderr.decode(), describe(p)


@pytest.mark.parametrize("args", [
    ["exec", "sb1"], ["exec", "--", "sh"], ["cp", "a", "b"], ["cp", "sb:/a", "sb:/b"],
    ["info"], ["kill"], ["timeout", "sb1"], ["timeout", "sb1", "soon"], ["ls", "--bogus"],
    ["create", "--memory", "lots"], ["audit"], ["audit", "check", "f"], ["info", "bad/id"],
    ["exec", "sb1", "--bogus", "--", "true"], ["exec", "sb1", "--timeout"],
    ["exec", "sb1", "--timeout", "soon", "--", "true"], ["network", "sb1", "--allow", "a", "--add", "b"],
])
def test_usage_errors(cordon_bin, args):
    p = run(args, "/nonexistent.sock")
    assert p.returncode == EXIT_USAGE, describe(p)


# ---------------------------------------------------------------------------------------------
# The HTTP client against a fake daemon: framings cordond may not produce


class FakeDaemon:
    """Answers each request on a unix socket with @respond(method, target, body) -> bytes."""

    def __init__(self, path, respond):
        self.path = path
        self.respond = respond
        self.requests = []
        self.srv = socket.socket(socket.AF_UNIX)
        self.srv.bind(path)
        self.srv.listen(16)
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            threading.Thread(target=self.handle, args=(c,), daemon=True).start()

    def handle(self, c):
        with c:
            data = b""
            while b"\r\n\r\n" not in data:
                data += c.recv(65536)
            head, body = data.split(b"\r\n\r\n", 1)
            lines = head.decode().split("\r\n")
            method, target, _ = lines[0].split()
            n = 0
            for l in lines[1:]:
                k, v = l.split(":", 1)
                if k.lower() == "content-length":
                    n = int(v)
            while len(body) < n:
                body += c.recv(65536)
            self.requests.append((method, target, body))
            for part in self.respond(method, target, body):
                c.sendall(part)
                time.sleep(0.01)

    def close(self):
        self.srv.close()


def chunked(*parts):
    return [b"%x\r\n%s\r\n" % (len(p), p) for p in parts] + [b"0\r\n\r\n"]


def test_client_chunks_split_mid_line(cordon_bin, tmp_path):
    out = base64.b64encode(b"hello\n")
    events = (b'{"type":"start","pid":5}\n{"type":"stdout","pid":5,"data":"' + out +
              b'"}\n{"type":"exit","pid":5,"exit_code":7,"signal":0,"timed_out":false,'
              b'"oom":false,"duration_ms":1}\n')

    def respond(method, target, body):
        if target.endswith("/processes"):
            head = [b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n"]
            return head + chunked(*[events[i:i + 7] for i in range(0, len(events), 7)])
        return [b"HTTP/1.1 204 No Content\r\n\r\n"]

    fake = FakeDaemon(str(tmp_path / "s"), respond)
    try:
        p = run(["exec", "sb1", "--", "echo", "hello"], fake.path)
    finally:
        fake.close()
    assert p.returncode == 7, describe(p)
    assert p.stdout == b"hello\n", describe(p)
    assert json.loads(fake.requests[0][2]) == {"argv": ["echo", "hello"]}
    # Its stdin was /dev/null: the process gets EOF at once.
    assert [(m, t) for m, t, _ in fake.requests[1:]] == [("POST", "/v1/sandboxes/sb1/processes/5/stdin")]
    assert json.loads(fake.requests[1][2]) == {"eof": True}


def test_client_non_json_error(cordon_bin, tmp_path):
    fake = FakeDaemon(str(tmp_path / "s"), lambda m, t, b: [
        b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 11\r\n\r\nupstream\r\nx"])
    try:
        p = run(["ls"], fake.path)
    finally:
        fake.close()
    assert p.returncode == EXIT_API, describe(p)
    assert p.stderr == b"cordon: http_502: upstream\n", describe(p)


def test_client_metadata_query_is_encoded(cordon_bin, tmp_path):
    body = b'{"sandboxes":[]}'
    fake = FakeDaemon(str(tmp_path / "s"), lambda m, t, b: [
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
        % (len(body), body)])
    try:
        p = run(["ls", "--meta", "user=alice smith", "--meta", "a&b=1=2"], fake.path)
    finally:
        fake.close()
    assert p.returncode == 0, describe(p)
    assert fake.requests[0][1] == "/v1/sandboxes?metadata.user=alice%20smith&metadata.a%26b=1%3D2"
