"""Fixtures for the `cordond` integration tests.

Run with Debian's pytest:  /usr/bin/python3 -m pytest tests/daemon
The binaries are taken from $CORDON_BUILD (default: <repo>/build): `cordond` and `cordon`.

Each test module starts its own real `cordond` in a fresh `tempfile.mkdtemp()` directory
(socket, state dir, runtime dir), talks HTTP/1.1 + JSON to it over the unix socket with the
standard library only (http.client on an AF_UNIX socket), and stops it at the end. The
contract is docs/api/openapi.yaml. Everything skips, with a reason, when not root or when
`cordond` is not built.
"""

import base64
import http.client
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("CORDON_BUILD", os.path.join(REPO, "build"))
CORDOND = os.path.join(BUILD, "cordond")
CORDON = os.path.join(BUILD, "cordon")
OPENAPI = os.path.join(REPO, "docs", "api", "openapi.yaml")
# CORDON_TEST_RUNTIME=gvisor: cordond gets --default-runtime gvisor and Client.create() asks for
# that runtime when a test names none
# (run-all.sh runs the suites where it applies once more so).
TEST_RUNTIME = os.environ.get("CORDON_TEST_RUNTIME")



def pytest_configure(config):
    config.addinivalue_line("markers", "any_runtime: also run by CORDON_TEST_RUNTIME=gvisor (it "
                            "checks what every runtime does, not the jail's host side)")


def pytest_collection_modifyitems(config, items):
    """With CORDON_TEST_RUNTIME, only the any_runtime tests: the others look at the jail's
    processes, cgroups or coreutils' statx from the host side."""
    if not TEST_RUNTIME:
        return
    keep = [i for i in items if i.get_closest_marker("any_runtime")]
    config.hook.pytest_deselected(items=[i for i in items if i not in keep])
    items[:] = keep
    why = runtime_missing_reason()
    for i in keep if why else ():
        i.add_marker(pytest.mark.skip(reason=why))


def runtime_missing_reason():
    """Why CORDON_TEST_RUNTIME cannot run here, or None."""
    runsc = os.environ.get("CORDON_RUNSC", "/usr/bin/runsc")
    if TEST_RUNTIME == "gvisor" and not (os.geteuid() == 0 and os.access(runsc, os.X_OK)):
        return "CORDON_TEST_RUNTIME=gvisor: runsc is not installed or we are not root"
    if TEST_RUNTIME == "microvm":
        return _local_runtime_missing("microvm")
    return None


def _local_runtime_missing(name):
    """Why this host cannot run @name, as `cordon runtimes --local` probes it, or None."""
    try:
        p = subprocess.run([CORDON, "runtimes", "--local", "--json"], capture_output=True,
                           text=True, timeout=120)
        rt = {r["name"]: r for r in json.loads(p.stdout)["runtimes"]}[name]
    except (OSError, ValueError, KeyError, subprocess.TimeoutExpired) as e:
        return f"CORDON_TEST_RUNTIME={name}: cordon runtimes --local: {e}"
    if not rt.get("available"):
        return f"CORDON_TEST_RUNTIME={name}: {rt.get('reason', 'not available here')}"
    return None


IS_ROOT = os.geteuid() == 0
HAVE_CORDOND = os.path.isfile(CORDOND) and os.access(CORDOND, os.X_OK)

requires_daemon = [
    pytest.mark.skipif(not IS_ROOT, reason="cordond needs root"),
    pytest.mark.skipif(not HAVE_CORDOND, reason=f"no cordond binary at {CORDOND} (ninja -C build)"),
]

# Error codes of the contract (components.schemas.Error) and their HTTP statuses.
ERROR_STATUS = {
    "bad_request": 400, "invalid_field": 400, "unknown_field": 400, "payload_too_large": 413,
    "method_not_allowed": 405, "length_required": 411,
    "not_found": 404, "conflict": 409, "quota_exceeded": 429, "capacity": 503,
    "unauthorized": 401, "forbidden": 403, "internal": 500, "unavailable": 503, "timeout": 504,
    # what a file operation runs into inside the sandbox
    "read_only": 409, "invalid_path": 400, "no_space": 409, "not_a_directory": 409,
    "is_a_directory": 409, "cross_device": 409,
    "audit_unavailable": 503,
    "unsupported_runtime": 400,
    "sandbox_paused": 409, "sandbox_busy": 409, "snapshot_limit": 507,
    "volume_in_use": 409, "volume_exists": 409, "insufficient_storage": 507,
    "unsafe_archive": 400,
    "no_interpreter": 409, "not_a_terminal": 409, "port_unreachable": 502,
}

SANDBOX_KEYS = {"id", "template", "runtime", "state", "created_at", "expires_at", "timeout_s",
                "limits", "network", "metadata", "volumes"}
EXEC_REQUIRED = {"exit_code", "signal", "stdout", "stderr", "timed_out", "oom", "duration_ms"}
EXEC_KEYS = EXEC_REQUIRED | {"stdout_truncated", "stderr_truncated", "encoding"}
FILE_ENTRY_REQUIRED = {"name", "path", "type", "size", "mode", "mtime"}


def wait_until(pred, timeout, interval=0.05):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(interval)


def b64(data):
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode()


def unb64(s):
    return base64.b64decode(s, validate=True)


def parse_time(s):
    """RFC 3339 date-time -> epoch seconds (float)."""
    import datetime
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)", s)
    assert m, f"not an RFC 3339 date-time: {s!r}"
    tz = "+00:00" if m.group(3) == "Z" else m.group(3)
    dt = datetime.datetime.fromisoformat(m.group(1) + tz)
    return dt.timestamp() + (float(m.group(2)) if m.group(2) else 0.0)


# ---------------------------------------------------------------------------------------------
# HTTP over a unix socket (or TCP)


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=30):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


def read_response(s):
    """One HTTP/1.1 response read off the raw socket @s: (status, body), the body as long as
    its Content-Length (what came with the head where there is none). A close before the
    head fails the test."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        assert chunk, f"connection closed before a response: {data!r}"
        data += chunk
    h, body = data.split(b"\r\n\r\n", 1)
    m = re.search(rb"^Content-Length: *(\d+)", h, re.I | re.M)
    while m and len(body) < int(m[1]):
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(h.split()[1]), body


class Response:
    def __init__(self, method, path, status, reason, headers, body, req_body=None):
        self.method = method
        self.path = path
        self.status = status
        self.reason = reason
        self.headers = headers  # lower-case name -> value
        self.body = body
        self.req_body = req_body

    @property
    def text(self):
        return self.body.decode(errors="replace")

    @property
    def content_type(self):
        return self.headers.get("content-type", "")

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError as e:
            raise AssertionError(f"body is not JSON ({e}): {self.describe()}") from None

    def describe(self):
        req = self.req_body
        if isinstance(req, (bytes, bytearray)):
            req = bytes(req[:300])
        elif isinstance(req, (dict, list)):
            req = json.dumps(req)[:300]
        elif isinstance(req, str):
            req = req[:300]
        return (f"{self.method} {self.path[:300]} body={req!r} -> {self.status} {self.reason} "
                f"content-type={self.content_type!r} body={self.body[:600]!r}")

    def __repr__(self):
        return self.describe()


class Client:
    """A minimal client of cordond's API: a new connection per request unless keepalive."""

    def __init__(self, sock_path=None, tcp=None, token=None, timeout=30, keepalive=False):
        self.sock_path = sock_path
        self.tcp = tcp  # (host, port)
        self.token = token
        self.timeout = timeout
        self.keepalive = keepalive
        self._conn = None

    def connection(self, timeout=None):
        t = timeout or self.timeout
        if self.tcp:
            return http.client.HTTPConnection(self.tcp[0], self.tcp[1], timeout=t)
        return UnixHTTPConnection(self.sock_path, timeout=t)

    def with_token(self, token):
        return Client(self.sock_path, self.tcp, token, self.timeout)

    @staticmethod
    def encode(body):
        if body is None:
            return None, {}
        if isinstance(body, (dict, list)):
            return json.dumps(body).encode(), {"Content-Type": "application/json"}
        if isinstance(body, str):
            return body.encode(), {"Content-Type": "application/json"}
        return bytes(body), {"Content-Type": "application/octet-stream"}

    def request(self, method, path, body=None, headers=None, timeout=None):
        data, hdrs = self.encode(body)
        if self.token is not None:
            hdrs["Authorization"] = f"Bearer {self.token}"
        hdrs.update(headers or {})
        if data is None and method in ("POST", "PUT"):
            hdrs.setdefault("Content-Length", "0")
        for attempt in (0, 1):
            conn = self._conn if self.keepalive and self._conn else self.connection(timeout)
            reused = conn is self._conn
            try:
                conn.request(method, path, body=data, headers=hdrs)
                r = conn.getresponse()
                body_out = r.read()
            except (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine):
                conn.close()
                self._conn = None
                if reused and attempt == 0:
                    continue  # the server closed an idle keep-alive connection
                raise
            except Exception:
                conn.close()
                self._conn = None
                raise
            resp = Response(method, path, r.status, r.reason,
                            {k.lower(): v for k, v in r.getheaders()}, body_out, body)
            if self.keepalive and not r.will_close:
                self._conn = conn
            else:
                conn.close()
                self._conn = None
            return resp

    def close(self):
        if self._conn:
            self._conn.close()
            self._conn = None

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body, **kw)

    def put(self, path, body=None, **kw):
        return self.request("PUT", path, body, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)

    def ok(self, method, path, body=None, status=200, **kw):
        """The request, asserting its status; returns the parsed JSON body (or the Response)."""
        r = self.request(method, path, body, **kw)
        assert r.status == status, f"expected {status}: {r.describe()}"
        if r.body and r.content_type.startswith("application/json"):
            return r.json()
        return r

    # -- sandboxes
    def create(self, body=None, **fields):
        if body is None:
            body = fields
        if TEST_RUNTIME and isinstance(body, dict) and "runtime" not in body:
            body = dict(body, runtime=TEST_RUNTIME)
        r = self.post("/v1/sandboxes", body)
        deadline = time.monotonic() + 900
        # a microvm template's first image is made off cordond's loop: 503 until it is there
        while TEST_RUNTIME and r.status == 503 and "being made" in r.text and time.monotonic() < deadline:
            time.sleep(2)
            r = self.post("/v1/sandboxes", body)
        assert r.status == 201, f"create failed: {r.describe()}"
        sb = r.json()
        assert SANDBOX_KEYS <= set(sb), f"create answer lacks keys {SANDBOX_KEYS - set(sb)}: {sb}"
        return sb

    def destroy(self, sid, missing_ok=False):
        r = self.delete(f"/v1/sandboxes/{sid}")
        if missing_ok and r.status == 404:
            return r
        assert r.status == 204, f"destroy failed: {r.describe()}"
        return r

    def info(self, sid):
        return self.ok("GET", f"/v1/sandboxes/{sid}")

    def list(self, query=""):
        return self.ok("GET", "/v1/sandboxes" + query)["sandboxes"]

    def exec(self, sid, timeout=None, **body):
        r = self.post(f"/v1/sandboxes/{sid}/exec", body, timeout=timeout)
        assert r.status == 200, f"exec failed: {r.describe()}"
        res = r.json()
        assert EXEC_REQUIRED <= set(res), f"exec result lacks {EXEC_REQUIRED - set(res)}: {res}"
        assert set(res) <= EXEC_KEYS, f"exec result has unknown keys {set(res) - EXEC_KEYS}: {res}"
        return res

    def sh(self, sid, cmd, **kw):
        """Runs `cmd` with /bin/sh; asserts exit 0; returns stdout."""
        res = self.exec(sid, cmd=cmd, **kw)
        assert res["exit_code"] == 0, f"`{cmd}` failed in the sandbox: {res}"
        return res["stdout"]

    def stream(self, method, path, body=None, timeout=None):
        """Opens an NDJSON stream; returns an EventStream (or a Response if status != 200)."""
        conn = self.connection(timeout)
        data, hdrs = self.encode(body)
        if self.token is not None:
            hdrs["Authorization"] = f"Bearer {self.token}"
        conn.request(method, path, body=data, headers=hdrs)
        r = conn.getresponse()
        if r.status != 200:
            resp = Response(method, path, r.status, r.reason,
                            {k.lower(): v for k, v in r.getheaders()}, r.read(), body)
            conn.close()
            return resp
        return EventStream(conn, r, method, path)

    def start_process(self, sid, timeout=None, **body):
        s = self.stream("POST", f"/v1/sandboxes/{sid}/processes", body, timeout=timeout)
        assert isinstance(s, EventStream), f"start process failed: {s.describe()}"
        ev = s.next()
        assert ev is not None and ev.get("type") == "start", f"first event is not start: {ev!r}"
        assert isinstance(ev.get("pid"), int) and ev["pid"] >= 1, ev
        s.pid = ev["pid"]
        s.start = ev
        return s


class EventStream:
    def __init__(self, conn, resp, method, path):
        self.conn = conn
        self.resp = resp
        self.method = method
        self.path = path
        self.status = resp.status
        self.headers = {k.lower(): v for k, v in resp.getheaders()}
        self.events = []
        self.pid = None
        self.start = None

    def next(self):
        """The next event, or None at the end of the stream."""
        line = self.resp.readline()
        if not line:
            return None
        assert line.endswith(b"\n"), f"NDJSON line without newline at end of stream: {line[:300]!r}"
        try:
            ev = json.loads(line)
        except ValueError as e:
            raise AssertionError(f"not a JSON line ({e}): {line[:300]!r}") from None
        assert isinstance(ev, dict), ev
        self.events.append(ev)
        return ev

    def until_exit(self):
        """Reads to the end; returns (stdout bytes, stderr bytes, exit event or None)."""
        out, err, ex = b"", b"", None
        while True:
            ev = self.next()
            if ev is None:
                break
            if ev["type"] == "stdout":
                out += unb64(ev["data"])
            elif ev["type"] == "stderr":
                err += unb64(ev["data"])
            elif ev["type"] == "exit":
                ex = ev
        self.close()
        return out, err, ex

    def read_until(self, pred, limit=1000):
        """Reads events until pred(event) is true; returns that event (None at the end)."""
        for _ in range(limit):
            ev = self.next()
            if ev is None or pred(ev):
                return ev
        return None

    def close(self):
        try:
            self.conn.close()
        except OSError:
            pass


def assert_error(r, status, codes=None):
    """r is an error answer: that status, JSON `{"error": {"code", "message"}}` with a
    contract code matching the status (and in @codes when given)."""
    if isinstance(codes, str):
        codes = (codes,)
    statuses = status if isinstance(status, (tuple, list, set)) else (status,)
    assert r.status in statuses, f"expected status {status}: {r.describe()}"
    assert r.content_type.split(";")[0].strip() == "application/json", \
        f"error answer is not application/json: {r.describe()}"
    body = r.json()
    assert isinstance(body, dict) and set(body) == {"error"}, f"error body shape: {r.describe()}"
    e = body["error"]
    assert isinstance(e, dict) and set(e) == {"code", "message"}, f"error object shape: {r.describe()}"
    assert e["code"] in ERROR_STATUS, f"code {e['code']!r} is not in the contract: {r.describe()}"
    assert ERROR_STATUS[e["code"]] == r.status, \
        f"code {e['code']!r} goes with status {ERROR_STATUS[e['code']]}: {r.describe()}"
    assert isinstance(e["message"], str) and e["message"].strip(), f"empty message: {r.describe()}"
    assert "\n" not in e["message"].strip(), f"message is not one line: {r.describe()}"
    if codes:
        assert e["code"] in codes, f"expected code in {codes}: {r.describe()}"
    return e


# ---------------------------------------------------------------------------------------------
# Prometheus text format


METRIC_LINE = re.compile(
    r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})?'
    r' (-?[0-9.eE+-]+|NaN|[+-]Inf)( -?[0-9]+)?$')


def parse_metrics(text):
    """Parses the exposition format strictly; returns (samples {name: [(labels, value)]},
    types {family: type})."""
    samples, types = {}, {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] == "TYPE":
                assert len(parts) == 4 and parts[3] in ("counter", "gauge", "histogram", "summary",
                                                         "untyped"), f"line {n}: {line!r}"
                types[parts[2]] = parts[3]
            continue
        m = METRIC_LINE.match(line)
        assert m, f"/metrics line {n} is not in the Prometheus text format: {line!r}"
        samples.setdefault(m.group(1), []).append((m.group(2) or "", float(m.group(3))))
    return samples, types


class Metrics:
    def __init__(self, text):
        self.text = text
        self.samples, self.types = parse_metrics(text)

    def names(self):
        return sorted(self.samples)

    def total(self, name):
        """Sum over every label set (0 when absent)."""
        return sum(v for _, v in self.samples.get(name, []))

    def find(self, pattern, kind=None):
        """Metric sample names matching the regex (and whose family has TYPE kind)."""
        out = []
        for n in self.names():
            fam = re.sub(r"_(bucket|sum|count|total|created)$", "", n)
            t = self.types.get(n) or self.types.get(fam)
            if re.search(pattern, n) and (kind is None or t == kind):
                out.append(n)
        return out

    def histograms(self, pattern=""):
        return [f for f, t in self.types.items() if t == "histogram" and re.search(pattern, f)]


def get_metrics(client):
    r = client.get("/metrics")
    assert r.status == 200, f"/metrics: {r.describe()}"
    assert r.content_type.startswith("text/plain"), f"/metrics content type: {r.describe()}"
    return Metrics(r.text)


# ---------------------------------------------------------------------------------------------
# The host side of sandboxes


def host_procs(marker, argv0=None):
    """PIDs of live host processes whose command line contains @marker."""
    me = os.getpid()
    m = marker.encode()
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
            if m not in cmd:
                continue
            if argv0 and os.path.basename(cmd.split(b"\0", 1)[0]).decode(errors="replace") != argv0:
                continue
            with open(f"/proc/{d}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            out.append(int(d))
    return out


def proc_cgroup_dirs(pid):
    """The cgroup directories of a host process (v1: one per controller; v2: one)."""
    out = []
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, ctls, path = line.rstrip("\n").split(":", 2)
            if ctls == "":
                out.append(os.path.join("/sys/fs/cgroup", path.lstrip("/")))
                continue
            for c in ctls.split(","):
                if c.startswith("name="):
                    c = c[5:]
                base = os.path.join("/sys/fs/cgroup", c)
                if os.path.isdir(base):
                    out.append(os.path.join(base, path.lstrip("/")))
    return out


def slot_held(n):
    """Whether someone holds uid slot @n's lock in the host-wide registry (a live sandbox's,
    maybe another daemon's): what is left of a slot nobody holds is a leak."""
    try:
        fd = os.open(f"/run/cordon/slots/{n}", os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def cordon_cgroup_dirs(prefix="s"):
    """Every /sys/fs/cgroup/*/cordon/<prefix>* dir (and v2's /sys/fs/cgroup/cordon/<prefix>*)."""
    out = set()
    for root in [os.path.join("/sys/fs/cgroup", c, "cordon") for c in os.listdir("/sys/fs/cgroup")] + \
            ["/sys/fs/cgroup/cordon"]:
        try:
            for n in os.listdir(root):
                p = os.path.join(root, n)
                if n.startswith(prefix) and os.path.isdir(p):
                    out.add(p)
        except OSError:
            pass
    return out


def sandbox_cgroups(pid):
    """The cordon cgroup dirs of a host pid (those with /cordon/ in the path)."""
    return [d for d in proc_cgroup_dirs(pid) if "/cordon/" in d]


def slot_lock_files(daemon, cgroup_dirs):
    """Existing uid slot lock files of the slots whose cgroups are @cgroup_dirs (cgroup sN holds
    slot N), looked for under <runtime-dir>/slots and the host-wide /run/cordon/slots."""
    nums = {os.path.basename(cg)[1:] for cg in cgroup_dirs if re.fullmatch(r"s\d+", os.path.basename(cg))}
    out = set()
    for sd in (daemon.slots_dir, "/run/cordon/slots"):
        out |= {os.path.join(sd, n) for n in nums if os.path.exists(os.path.join(sd, n))}
    return out


def read_int(path):
    with open(path) as f:
        return f.read().strip()


def unique_sleep():
    """A `sleep` argument findable on the host by its command line."""
    return "1000." + str(uuid.uuid4().int % 10**9).rjust(9, "0")


def mounts_under(root):
    root = os.path.realpath(root)
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4]
            if mp == root or mp.startswith(root + "/"):
                out.append(mp)
    return out


# ---------------------------------------------------------------------------------------------
# The daemon


class Daemon:
    """One real cordond in its own temporary directory."""

    def __init__(self, pool=0, max_sandboxes=16, max_timeout=600, listen=None, api_keys=None,
                 extra=(), root=None):
        self.pool = pool
        self.max_sandboxes = max_sandboxes
        self.max_timeout = max_timeout
        self.listen = listen
        self.api_keys = api_keys  # text of the api-keys file
        self.extra = list(extra)
        self.root = root or tempfile.mkdtemp(prefix="cordond-test-")
        self.sock = os.path.join(self.root, "cordon.sock")
        self.state_dir = os.path.join(self.root, "state")
        self.runtime_dir = os.path.join(self.root, "run")
        self.log_path = os.path.join(self.root, "cordond.log")
        self.proc = None
        self.starts = 0

    @property
    def audit_dir(self):
        return os.path.join(self.state_dir, "audit")

    @property
    def slots_dir(self):
        return os.path.join(self.runtime_dir, "slots")

    def slot_files(self):
        try:
            return set(os.listdir(self.slots_dir))
        except FileNotFoundError:
            return set()

    def argv(self):
        a = [CORDOND, "--socket", self.sock, "--state-dir", self.state_dir,
             "--runtime-dir", self.runtime_dir, "--pool", str(self.pool),
             "--max-sandboxes", str(self.max_sandboxes), "--max-timeout", str(self.max_timeout)]
        if self.listen:
            a += ["--listen", self.listen]
        if self.api_keys is not None:
            kf = os.path.join(self.root, "api-keys")
            with open(kf, "w") as f:
                f.write(self.api_keys)
            os.chmod(kf, 0o600)
            a += ["--api-keys", kf]
        if TEST_RUNTIME:  # also what a raw POST that names no runtime gets
            a += ["--default-runtime", TEST_RUNTIME]
        return a + self.extra

    def start(self, timeout=15):
        os.makedirs(self.state_dir, exist_ok=True)
        os.makedirs(self.runtime_dir, exist_ok=True)
        argv = self.argv()
        log = open(self.log_path, "ab")
        log.write(f"==== start {self.starts}: {' '.join(argv)}\n".encode())
        log.flush()
        self.starts += 1
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                     start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"cordond exited with {self.proc.returncode} at start:\n{self.log_tail()}",
                            pytrace=False)
            if os.path.exists(self.sock):
                try:
                    r = self.client(timeout=2).get("/healthz")
                    if r.status == 200:
                        return self
                except OSError:
                    pass
            time.sleep(0.05)
        self.kill9()
        pytest.fail(f"cordond did not answer /healthz on {self.sock} within {timeout}s:\n"
                    f"{self.log_tail()}", pytrace=False)

    def client(self, timeout=30, keepalive=False):
        return Client(self.sock, timeout=timeout, keepalive=keepalive)

    def tcp_client(self, token=None, timeout=30):
        host, port = self.listen.rsplit(":", 1)
        return Client(tcp=(host, int(port)), token=token, timeout=timeout)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n=4000):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout=15):
        """SIGTERM, then SIGKILL; returns the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def kill9(self):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def cleanup(self):
        self.stop()
        left = mounts_under(self.root)
        if left:
            # Never rm -rf across a mount: it could reach host files through a bind mount.
            print(f"cordond left mounts under {self.root}: {left}; not removing it")
            return
        shutil.rmtree(self.root, ignore_errors=True)


def is_sanitized():
    """Whether this build's cordond runs under ASan."""
    with open(CORDOND, "rb") as f:
        return b"__asan_init" in f.read()


def skip_if_sanitized():
    """Skips a test of cordond's peak RSS when this build's cordond runs under ASan (its
    allocator's quarantine keeps freed memory, so RSS says nothing of what cordond holds)."""
    if is_sanitized():
        pytest.skip("cordond under ASan: its allocator's quarantine keeps freed memory, so "
                    "peak RSS does not measure what cordond holds (the build without it does)")


class Background:
    """@daemon's POST @path (a snapshot, a fork) on a thread of its own, on its own
    connection: .r is the answer (or .exc what the client raised), .seconds its time."""

    def __init__(self, daemon, path, body=None, timeout=300):
        self.r = self.exc = self.seconds = None
        self._t = threading.Thread(target=self._run, args=(daemon, path, body, timeout), daemon=True)
        self._t.start()

    def _run(self, daemon, path, body, timeout):
        t = time.monotonic()
        try:
            self.r = daemon.client(timeout=timeout).post(path, body)
        except Exception as e:  # noqa: BLE001 - a daemon that stopped closes the connection
            self.exc = e
        self.seconds = time.monotonic() - t

    def alive(self):
        return self._t.is_alive()

    def join(self, timeout=300):
        self._t.join(timeout)
        assert not self._t.is_alive(), f"no answer in {timeout} s"
        return self


def wait_busy(client, sid, job, timeout=60):
    """Until sandbox @sid answers 409 sandbox_busy (its snapshot under way) while @job
    runs: True; False if @job ended first."""
    deadline = time.monotonic() + timeout
    while job.alive() and time.monotonic() < deadline:
        r = client.get(f"/v1/sandboxes/{sid}/metrics")
        if r.status == 409 and r.json()["error"]["code"] == "sandbox_busy":
            return True
        time.sleep(0.005)
    return False


def assert_busy_refusals(client, sid):
    """Every other request on a sandbox whose snapshot is being made: 409 sandbox_busy for
    exec, files, pause, resume, a snapshot, a fork; its info answers."""
    for method, path, body in (("POST", "exec", {"cmd": "true"}), ("GET", "files?path=/tmp", None),
                               ("POST", "pause", None), ("POST", "resume", None),
                               ("POST", "snapshots", None), ("POST", "fork", {"count": 1})):
        r = client.request(method, f"/v1/sandboxes/{sid}/{path}", body)
        assert_error(r, 409, "sandbox_busy")
    assert client.get(f"/v1/sandboxes/{sid}").status == 200


def latencies_while(job, calls):
    """Each of @calls (name -> fn) again and again while @job runs: name -> the seconds of
    each call that both started and ended while @job ran."""
    out = {name: [] for name in calls}
    while job.alive():
        for name, fn in calls.items():
            t = time.monotonic()
            fn()
            if job.alive():
                out[name].append(time.monotonic() - t)
    return out


def assert_served_while(job, client, other, label):
    """cordond serves while @job (a snapshot) runs: /healthz and an exec on sandbox @other,
    again and again, answer meanwhile, /healthz within a quarter of @job's own time."""
    lat = latencies_while(job, {"health": lambda: client.get("/healthz"),
                                "exec": lambda: client.sh(other, "echo ok")})
    job.join()
    print(f"{label}: snapshot {job.seconds:.2f} s; during it /healthz max "
          f"{max(lat['health'], default=0) * 1000:.1f} ms of {len(lat['health'])}, exec on "
          f"another sandbox max {max(lat['exec'], default=0) * 1000:.1f} ms of {len(lat['exec'])}")
    assert len(lat["health"]) >= 3 and len(lat["exec"]) >= 1, (lat, job.seconds)
    assert max(lat["health"]) < job.seconds / 4, (lat["health"], job.seconds)


def start_daemon(**kw):
    d = Daemon(**kw)
    d.start()
    return d


FG_PROBE = r'''
import os, sys
for p in filter(str.isdigit, os.listdir("/proc")):
    try:
        cmd = open(f"/proc/{p}/cmdline", "rb").read().replace(b"\0", b" ").strip()
        st = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        continue
    if cmd == sys.argv[1].encode() and st[2] == st[5]:  # pgrp == tpgid: it has the terminal
        print("fg")
'''


def wait_foreground(client, sid, cmdline, timeout=15):
    """Until the process running @cmdline is its terminal's foreground group: a key sent
    before that reaches the shell, not the job (bash prints the job before it hands over)."""
    deadline = time.monotonic() + timeout
    while client.exec(sid, argv=["python3", "-c", FG_PROBE, cmdline])["stdout"] != "fg\n":
        assert time.monotonic() < deadline, f"{cmdline!r} never had the terminal"
        time.sleep(0.1)


def daemon_fixture(**kw):
    """A module's own `daemon` fixture: start_daemon(**kw), checked alive at the end."""
    @pytest.fixture(scope="module")
    def daemon():
        d = start_daemon(**kw)
        yield d
        check_alive_and_cleanup(d)
    return daemon


def check_alive_and_cleanup(d):
    """The module's cordond stopped and removed; it must not have died before (its log's
    tail, read before its directory goes, says how)."""
    alive, tail = d.alive(), d.log_tail()
    status = d.proc.poll() if d.proc else None
    d.cleanup()
    assert alive, f"cordond died during the module (status {status}):\n{tail}"


@pytest.fixture(scope="module")
def daemon():
    d = start_daemon(pool=2, max_sandboxes=32, max_timeout=600)
    yield d
    check_alive_and_cleanup(d)


@pytest.fixture(scope="module")
def client(daemon):
    return daemon.client()


@pytest.fixture(scope="module")
def sandbox(client):
    """One sandbox shared by a module's tests (default template and limits)."""
    sb = client.create({"metadata": {"fixture": "shared"}})
    yield sb
    client.destroy(sb["id"], missing_ok=True)


@pytest.fixture
def fresh(client):
    """A factory of sandboxes destroyed at the end of the test."""
    made = []

    def make(body=None, **fields):
        sb = client.create(body if body is not None else fields)
        made.append(sb["id"])
        return sb

    yield make
    for sid in made:
        client.destroy(sid, missing_ok=True)
