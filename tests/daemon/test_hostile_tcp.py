"""Hostile clients of cordond's HTTP front: connection floods, unauthenticated uploads,
oversized and unframed bodies, wrong methods (issue 10).

Each test starts its own real cordond listening on 127.0.0.1 with an API key. The flood test
starts it under a low RLIMIT_NOFILE (1024) so that its caps are reached with a few thousand
sockets, not twenty thousand, and checks that the unix socket keeps answering quickly, that the
daemon does not spin and that its log does not grow.
"""

import grp
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time

import pytest

from conftest import (CORDOND, REPO, Daemon, assert_error, requires_daemon, wait_until)

pytestmark = requires_daemon

sys.path.insert(0, os.path.join(REPO, "sdk", "python"))
import cordon  # noqa: E402
from cordon import errors as sdk_errors  # noqa: E402

KEY = "hostile-test-key-0123456789"
KEYS = f"{KEY} tester 16\n"
MiB = 1 << 20


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def raise_own_nofile(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(n, hard), hard))


def start(extra=(), nofile=None):
    """A cordond with TCP on; @nofile: its RLIMIT_NOFILE (soft), inherited at fork."""
    d = Daemon(pool=0, max_sandboxes=4, listen=f"127.0.0.1:{free_port()}", api_keys=KEYS,
               extra=list(extra))
    old = resource.getrlimit(resource.RLIMIT_NOFILE)
    if nofile:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, old[1]))
    try:
        d.start()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, old)
    return d


@pytest.fixture
def daemons():
    made = []

    def make(*a, **kw):
        d = start(*a, **kw)
        made.append(d)
        return d
    yield make
    dead = [d.log_tail() for d in made if not d.alive()]
    for d in made:
        d.cleanup()
    assert not dead, f"cordond died during the test:\n{dead[0]}"


def tcp_addr(d):
    host, port = d.listen.rsplit(":", 1)
    return host, int(port)


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def status_kb(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def unix_healthz_ms(d):
    t = time.monotonic()
    r = d.client(timeout=5).get("/healthz")
    ms = (time.monotonic() - t) * 1000
    assert r.status == 200, r.describe()
    return ms


def read_answer(s, timeout=10):
    """Everything the server sends until it closes (or @timeout): status, headers, body."""
    s.settimeout(timeout)
    data = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    except (socket.timeout, ConnectionResetError):
        pass
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode(errors="replace").split("\r\n")
    if not lines[0].startswith("HTTP/1."):
        return None, {}, data
    hdrs = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return int(lines[0].split()[1]), hdrs, body


def assert_json_error(status, hdrs, body, want_status, code):
    assert status == want_status, (status, hdrs, body[:300])
    assert hdrs.get("content-type", "").startswith("application/json"), (hdrs, body[:300])
    doc = json.loads(body.split(b"\n")[0])
    assert doc["error"]["code"] == code, doc
    assert doc["error"]["message"], doc
    return doc


def exchange(addr, data, timeout=10, family=socket.AF_INET):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(addr)
    try:
        s.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass
    try:
        return read_answer(s, timeout)
    finally:
        s.close()


# ---------------------------------------------------------------------------------------------
# Floods


def test_connection_flood_leaves_the_unix_socket_answering(daemons):
    """3,000 idle TCP connections against a daemon with 1,024 fds: it caps them, drops the
    silent ones after --header-timeout, and the unix socket answers throughout."""
    d = daemons(["--max-peer-connections", "0", "--header-timeout", "2"], nofile=1024)
    raise_own_nofile(8192)
    addr = tcp_addr(d)
    log0 = os.path.getsize(d.log_path)
    cpu0, t0 = cpu_ticks(d.proc.pid), time.monotonic()
    socks = []
    try:
        for _ in range(3000):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            s.connect_ex(addr)  # EINPROGRESS beyond the backlog: half-open from our side
            socks.append(s)
        times = []
        end = time.monotonic() + 6  # three header deadlines: accepted, dropped, accepted...
        while time.monotonic() < end:
            times.append(unix_healthz_ms(d))
            time.sleep(0.05)
        cpu = (cpu_ticks(d.proc.pid) - cpu0) / os.sysconf("SC_CLK_TCK")
        wall = time.monotonic() - t0
        fds = len(os.listdir(f"/proc/{d.proc.pid}/fd"))
        times.sort()
        med, p95 = statistics.median(times), times[int(len(times) * 0.95)]
        print(f"\nunix /healthz during the flood: median {med:.1f} ms, p95 {p95:.1f} ms, "
              f"max {times[-1]:.1f} ms over {len(times)}; cordond cpu {cpu:.2f} s in {wall:.1f} s; "
              f"{fds} fds open")
        assert d.alive(), d.log_tail()
        assert med < 50 and p95 < 200, f"unix socket slow under the flood: {times}"
        assert cpu < 0.5 * wall, f"cordond spins: {cpu:.2f} s of CPU in {wall:.1f} s"
        assert fds < 1000, f"cordond holds {fds} fds: the caps leave no reserve"
        grown = os.path.getsize(d.log_path) - log0
        assert grown < 64 * 1024, f"the log grew {grown} bytes:\n{d.log_tail()}"
    finally:
        for s in socks:
            s.close()
    # Once the flood is gone, TCP serves again.
    assert wait_until(lambda: d.tcp_client(KEY, timeout=5).get("/v1/sandboxes").status == 200, 10)


def test_per_peer_cap(daemons):
    d = daemons(["--max-peer-connections", "8"])
    addr = tcp_addr(d)
    idle = [socket.create_connection(addr) for _ in range(8)]
    try:
        time.sleep(0.3)
        st, h, body = exchange(addr, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", timeout=5)
        assert_json_error(st, h, body, 429, "quota_exceeded")
        assert d.client().get("/healthz").status == 200
    finally:
        for s in idle:
            s.close()
    time.sleep(0.3)
    st, h, body = exchange(addr, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert st == 200, (st, body)


def test_incomplete_headers_get_a_short_deadline(daemons):
    d = daemons(["--header-timeout", "2"])
    for payload in (b"", b"GET /healthz HTTP/1.1\r\nHost: x\r\n"):
        s = socket.create_connection(tcp_addr(d))
        s.sendall(payload)
        t = time.monotonic()
        s.settimeout(10)
        try:
            while s.recv(4096):
                pass
        except ConnectionResetError:
            pass
        took = time.monotonic() - t
        s.close()
        print(f"\nclosed after {took:.2f} s (payload {len(payload)} bytes)")
        assert 1.5 < took < 5, f"a connection with {len(payload)} bytes of head lived {took:.1f} s"


# ---------------------------------------------------------------------------------------------
# Bodies


def upload(addr, head, total, result, i, family=socket.AF_INET):
    """Sends @head and then up to @total body bytes; stores the answer."""
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(20)
    s.connect(addr)
    chunk = b"\0" * MiB
    try:
        s.sendall(head)
        for _ in range(total // MiB):
            s.sendall(chunk)
    except (BrokenPipeError, ConnectionResetError, socket.timeout):
        pass
    result[i] = read_answer(s, 10)
    s.close()


def test_unauthenticated_uploads_refused_before_the_body(daemons):
    d = daemons()
    addr = tcp_addr(d)
    n, size = 12, 48 * MiB
    hwm0 = status_kb(d.proc.pid, "VmHWM")
    head = (b"PUT /v1/sandboxes/sb-aaaaaaaaaaaaaaaaaaaa/files?path=/tmp/x HTTP/1.1\r\nHost: x\r\n"
            b"Content-Length: %d\r\n\r\n" % size)
    results = [None] * n
    th = [threading.Thread(target=upload, args=(addr, head, size, results, i)) for i in range(n)]
    for t in th:
        t.start()
    for t in th:
        t.join(60)
    grown = (status_kb(d.proc.pid, "VmHWM") - hwm0) // 1024
    print(f"\ncordond peak RSS grew {grown} MiB for {n} x {size // MiB} MiB unauthenticated uploads")
    for st, h, body in results:
        assert_json_error(st, h, body, 401, "unauthorized")
    assert grown < 64, f"unauthenticated bodies were buffered: peak RSS +{grown} MiB"
    assert d.client().get("/healthz").status == 200


# A body held in memory counts in --max-inflight (a template build's); a file upload, spooled
# to the state directory (src/daemon/spool.c), in --max-spool.
@pytest.mark.parametrize("opts,request_line,final", [
    (["--max-inflight", "32M"], b"POST /v1/templates HTTP/1.1", (403, "forbidden")),
    (["--max-spool", "32M"], b"PUT /v1/sandboxes/sb-aaaaaaaaaaaaaaaaaaaa/files?path=/tmp/x HTTP/1.1",
     (404, "not_found")),
])
def test_body_bytes_in_flight_are_bounded(daemons, opts, request_line, final):
    d = daemons(["--max-upload", "16M"] + opts)
    addr = tcp_addr(d)
    head = (request_line + b"\r\nHost: x\r\n"
            b"Authorization: Bearer " + KEY.encode() + b"\r\nContent-Length: %d\r\n\r\n" % (15 * MiB))
    held = []
    for _ in range(2):  # two bodies of 15 MiB, announced and begun: 30 of 32 MiB
        s = socket.create_connection(addr)
        s.sendall(head + b"x" * 1000)
        held.append(s)
    time.sleep(0.3)
    st, h, body = exchange(addr, head, timeout=5)
    assert_json_error(st, h, body, 503, "capacity")
    assert h.get("retry-after"), h
    held.pop().close()
    time.sleep(0.3)
    # Room again: this one is read whole and reaches the handler (no builds over TCP; no such
    # sandbox).
    res = [None]
    upload(addr, head, 15 * MiB, res, 0)
    st, h, body = res[0]
    assert_json_error(st, h, body, *final)
    for s in held:
        s.close()


@pytest.mark.parametrize("over_tcp", [False, True])
def test_upload_over_max_upload_is_json_413(daemons, over_tcp):
    d = daemons(["--max-upload", "4M"])
    addr, fam = (tcp_addr(d), socket.AF_INET) if over_tcp else (d.sock, socket.AF_UNIX)
    auth = b"Authorization: Bearer " + KEY.encode() + b"\r\n"
    path = b"/v1/sandboxes/sb-aaaaaaaaaaaaaaaaaaaa/files?path=/tmp/x"
    # Content-Length over the limit: refused at the headers, in JSON.
    st, h, body = exchange(addr, b"PUT " + path + b" HTTP/1.1\r\nHost: x\r\n" + auth +
                           b"Content-Length: %d\r\n\r\n" % (5 * MiB), family=fam)
    assert_json_error(st, h, body, 413, "payload_too_large")
    # Chunked: refused once the body passes the limit, in JSON, and the client reads it.
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(addr)
    s.sendall(b"PUT " + path + b" HTTP/1.1\r\nHost: x\r\n" + auth +
              b"Transfer-Encoding: chunked\r\n\r\n")
    chunk = b"%x\r\n" % 65536 + b"y" * 65536 + b"\r\n"
    try:
        for _ in range(160):  # 10 MiB
            s.sendall(chunk)
    except (BrokenPipeError, ConnectionResetError):
        pass
    st, h, body = read_answer(s)
    s.close()
    assert_json_error(st, h, body, 413, "payload_too_large")
    # A JSON route's limit (1 MiB) holds for chunked bodies too.
    big = b"7" * (2 * MiB)
    st, h, body = exchange(addr, b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n" + auth +
                           b"Transfer-Encoding: chunked\r\n\r\n%x\r\n" % len(big) + big +
                           b"\r\n0\r\n\r\n", family=fam)
    assert_json_error(st, h, body, 413, "payload_too_large")
    assert d.client().get("/healthz").status == 200


def test_sdk_reads_413_while_still_sending(daemons):
    d = daemons(["--max-upload", "4M"])
    c = cordon.Client(socket=d.sock)
    with pytest.raises(sdk_errors.PayloadTooLarge) as ei:
        c.request("PUT", "/v1/sandboxes/sb-aaaaaaaaaaaaaaaaaaaa/files", query={"path": "/tmp/x"},
                  body=b"z" * (64 * MiB))
    assert ei.value.status == 413
    tc = cordon.Client(url=f"http://{d.listen}", api_key=KEY)
    with pytest.raises(sdk_errors.PayloadTooLarge):
        tc.request("PUT", "/v1/sandboxes/sb-aaaaaaaaaaaaaaaaaaaa/files", query={"path": "/tmp/x"},
                   body=b"z" * (64 * MiB))


@pytest.mark.parametrize("method", [b"POST", b"PUT"])
def test_body_without_length_is_refused(daemons, method):
    d = daemons()
    # Without framing, the "body" would be read as the next request: a /healthz here.
    smuggled = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    target = b"/v1/sandboxes" if method == b"POST" else \
        b"/v1/sandboxes/sb-aaaaaaaaaaaaaaaaaaaa/files?path=/tmp/x"
    st, h, body = exchange(d.sock, method + b" " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n" + smuggled,
                           family=socket.AF_UNIX, timeout=5)
    doc = assert_json_error(st, h, body, 411, "length_required")
    assert b"HTTP/1.1 200" not in body, f"the body was served as a request: {body!r}"
    assert doc


# ---------------------------------------------------------------------------------------------
# Methods, --help, --socket-group


@pytest.mark.parametrize("method,path,allow", [
    ("PATCH", "/v1/sandboxes", {"GET", "POST"}), ("PUT", "/v1/sandboxes/{id}", {"GET", "DELETE"}),
    ("POST", "/healthz", {"GET"}), ("GET", "/v1/sandboxes/{id}/exec", {"POST"}),
    ("DELETE", "/v1/sandboxes/{id}/files/list", {"GET"}),
])
def test_wrong_method_is_405(daemons, method, path, allow):
    d = daemons()
    r = d.client().request(method, path.replace("{id}", "sb-aaaaaaaaaaaaaaaaaaaa"),
                           b"{}" if method in ("POST", "PUT", "PATCH") else None)
    assert r.status == 405, r.describe()
    assert r.json()["error"]["code"] == "method_not_allowed", r.describe()
    assert {m.strip() for m in r.headers["allow"].split(",")} == allow, r.describe()
    # Over TCP, with a key, the same; without one, 401 first.
    r = d.tcp_client(KEY).request(method, path.replace("{id}", "sb-aaaaaaaaaaaaaaaaaaaa"),
                                  b"{}" if method in ("POST", "PUT", "PATCH") else None)
    assert r.status == 405, r.describe()
    if path != "/healthz":
        assert_error(d.tcp_client().request(method, path), 401, "unauthorized")


def test_help_is_stdout_and_exit_0():
    p = subprocess.run([CORDOND, "--help"], capture_output=True, text=True, timeout=10)
    assert p.returncode == 0, p
    assert "usage: cordond" in p.stdout and "--socket-group" in p.stdout, p
    assert p.stderr == "", p
    p = subprocess.run([CORDOND, "--no-such-flag"], capture_output=True, text=True, timeout=10)
    assert p.returncode != 0 and "usage" in p.stderr, p


def test_socket_group(daemons):
    g = next((g for g in grp.getgrall() if g.gr_gid != 0), None)
    if g is None:
        pytest.skip("no group but root on this host")
    d = daemons(["--socket-group", g.gr_name])
    st = os.stat(d.sock)
    assert st.st_gid == g.gr_gid and (st.st_mode & 0o777) == 0o660, (st.st_gid, oct(st.st_mode))
    other = Daemon(listen=None)
    try:
        p = subprocess.run(other.argv() + ["--socket-group", "no-such-group-x"],
                           capture_output=True, text=True, timeout=10)
    finally:
        other.cleanup()
    assert p.returncode != 0 and "no-such-group-x" in p.stderr, p


def test_meson_install_has_the_unit_and_its_config(tmp_path):
    """`meson install` puts the systemd unit (pointing at the installed cordond and config)
    and the config itself in place."""
    from conftest import BUILD
    import shutil
    if not shutil.which("meson") or not os.path.isfile(os.path.join(BUILD, "build.ninja")):
        pytest.skip("no meson or no meson build directory at $CORDON_BUILD")
    env = dict(os.environ, DESTDIR=str(tmp_path))
    p = subprocess.run(["meson", "install", "-C", BUILD, "--no-rebuild", "--quiet"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p
    found = {}
    for root, _, files in os.walk(tmp_path):
        for f in files:
            found[f] = os.path.join(root, f)
    assert "cordond.service" in found and "cordond.conf" in found, sorted(found)
    assert "/lib/systemd/system/" in found["cordond.service"], found["cordond.service"]
    assert found["cordond.conf"].endswith("/etc/cordon/cordond.conf"), found["cordond.conf"]
    unit = open(found["cordond.service"]).read()
    exec_line = next(ln for ln in unit.splitlines() if ln.startswith("ExecStart="))
    binary, _, conf = exec_line[len("ExecStart="):].split()
    assert os.path.isfile(str(tmp_path) + binary), (exec_line, sorted(found))
    assert os.path.isfile(str(tmp_path) + conf), (exec_line, sorted(found))


def test_keepalive_requests_with_bodies_sent_apart(daemons):
    """Many requests on one kept-alive connection, each head and body in separate writes (the
    front hands the head to evhttp, which then reads the body itself), over both sockets."""
    d = daemons()
    for addr, fam, auth in ((d.sock, socket.AF_UNIX, b""),
                            (tcp_addr(d), socket.AF_INET, b"Authorization: Bearer " + KEY.encode() + b"\r\n")):
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.settimeout(5)
        s.connect(addr)
        f = s.makefile("rb")
        for i in range(40):
            body = json.dumps({"timeout_s": 10 + i}).encode()
            s.sendall(b"POST /v1/sandboxes/sb-aaaaaaaaaaaaaaaaaaaa/timeout HTTP/1.1\r\nHost: x\r\n" + auth +
                      b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
            time.sleep(0.005)
            s.sendall(body)
            status = f.readline()
            assert status.startswith(b"HTTP/1.1 404"), (i, status)
            length = 0
            while True:
                ln = f.readline()
                if ln in (b"\r\n", b""):
                    break
                if ln.lower().startswith(b"content-length:"):
                    length = int(ln.split(b":")[1])
            assert json.loads(f.read(length))["error"]["code"] == "not_found"
        s.close()


def test_accept_failures_do_not_spin(daemons):
    """With no fd left (its RLIMIT_NOFILE lowered under it, and idle unix clients holding the
    rest), accept() fails with EMFILE: the daemon pauses the listener instead of spinning,
    warns about once a second, and recovers once the idle clients are dropped."""
    d = daemons(["--header-timeout", "2"])
    pid = d.proc.pid
    base = len(os.listdir(f"/proc/{pid}/fd"))
    old = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (base + 20, old[1]))
    log0 = os.path.getsize(d.log_path)
    socks = []
    try:
        cpu0, t0 = cpu_ticks(pid), time.monotonic()
        for _ in range(200):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                s.connect(d.sock)
            except (BlockingIOError, OSError):
                pass
            socks.append(s)
        time.sleep(4)
        cpu = (cpu_ticks(pid) - cpu0) / os.sysconf("SC_CLK_TCK")
        wall = time.monotonic() - t0
        log = open(d.log_path, "rb").read()[log0:].decode(errors="replace")
        warnings = [ln for ln in log.splitlines() if "Too many open files" in ln]
        print(f"\ncordond cpu {cpu:.2f} s in {wall:.1f} s with accept() failing; "
              f"{len(warnings)} warnings: {warnings[:2]}")
        assert d.alive(), d.log_tail()
        assert cpu < 0.5 * wall, f"cordond spins on accept(): {cpu:.2f} s of CPU in {wall:.1f} s"
        assert 1 <= len(warnings) <= wall + 2, log[-2000:]
        assert len(log) < 16 * 1024, f"the log grew {len(log)} bytes"
    finally:
        for s in socks:
            s.close()
        resource.prlimit(pid, resource.RLIMIT_NOFILE, old)
    assert wait_until(lambda: unix_healthz_ms(d) < 1000, 10)


def test_tcp_leaves_fds_for_the_unix_socket(daemons):
    """Fds are scarce (RLIMIT_NOFILE lowered under the running daemon, below what its caps
    assumed): TCP stops taking connections while the unix socket still has fds to answer."""
    d = daemons(["--max-peer-connections", "0", "--header-timeout", "2"])
    pid = d.proc.pid
    base = len(os.listdir(f"/proc/{pid}/fd"))
    old = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (base + 64, old[1]))
    socks = []
    try:
        for _ in range(300):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            s.connect_ex(tcp_addr(d))
            socks.append(s)
        times = []
        end = time.monotonic() + 4
        while time.monotonic() < end:
            times.append(unix_healthz_ms(d))
            time.sleep(0.05)
        times.sort()
        print(f"\nunix /healthz with fds scarce: median {statistics.median(times):.1f} ms, "
              f"max {times[-1]:.1f} ms over {len(times)}")
        assert times[-1] < 500, f"the unix socket waited for fds: {times}"
    finally:
        for s in socks:
            s.close()
        resource.prlimit(pid, resource.RLIMIT_NOFILE, old)
    assert wait_until(lambda: d.tcp_client(KEY, timeout=5).get("/v1/sandboxes").status == 200, 10)
