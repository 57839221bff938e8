"""Large uploads stream into a spool file, not cordond's memory (src/daemon/spool.c): the
files API's PUT of a file (and of an archive) reads its body into an unlinked file of the
state directory, then into the sandbox a few frames at a time.

Raw HTTP over the unix socket, the body sent from a generator, so the test's own memory
stays small too."""

import hashlib
import os
import socket
import time

import pytest

from conftest import daemon_fixture, is_sanitized, read_response, requires_daemon, skip_if_sanitized

pytestmark = requires_daemon

MAX_UPLOAD = 768 << 20
daemon = daemon_fixture(pool=0, max_sandboxes=4, extra=["--max-upload", "768M"])

BLOCK = bytes(range(256)) * 4096  # 1 MiB


def head(path, length):
    return (f"PUT {path} HTTP/1.1\r\nHost: cordon\r\nContent-Type: application/octet-stream\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def connect(d):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(300)
    s.connect(d.sock)
    return s


def send_blocks(s, n_bytes):
    sent = 0
    while sent < n_bytes:
        n = min(len(BLOCK), n_bytes - sent)
        s.sendall(BLOCK[:n])
        sent += n


def proc_status(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def spool_fds(d):
    """cordond's open files that are unlinked files of its state directory itself (an
    O_TMPFILE reads as "DIR/#INODE (deleted)"; the sandboxes' disk images are in scratch/)."""
    out = []
    fd_dir = f"/proc/{d.proc.pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            t = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if t.startswith(d.state_dir + "/#") and t.endswith("(deleted)"):
            out.append(t)
    return out


@pytest.fixture(scope="module")
def sid(daemon):
    c = daemon.client(timeout=120)
    s = c.create({"limits": {"disk_mb": 2048}})["id"]
    yield s
    c.destroy(s)


def test_512_mib_upload_keeps_cordond_small(daemon, sid):
    skip_if_sanitized()
    size = 512 << 20
    pid = daemon.proc.pid
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS
    before = proc_status(pid, "VmRSS")
    s = connect(daemon)
    try:
        s.sendall(head(f"/v1/sandboxes/{sid}/files?path=/tmp/big", size))
        send_blocks(s, size)
        status, body = read_response(s)
    finally:
        s.close()
    assert status == 200, body[:500]
    peak = proc_status(pid, "VmHWM")
    assert is_sanitized() or peak - before < 64 << 20, f"cordond's RSS grew by {(peak - before) >> 20} MiB"
    want = hashlib.sha256()
    for _ in range(size // len(BLOCK)):
        want.update(BLOCK)
    c = daemon.client(timeout=300)
    r = c.exec(sid, argv=["sh", "-c", "sha256sum /tmp/big; stat -c %s /tmp/big; rm /tmp/big"],
               timeout_s=240)
    digest, length = r["stdout"].split()[0], r["stdout"].split()[-1]
    assert (digest, int(length)) == (want.hexdigest(), size), r
    assert not spool_fds(daemon)


def test_over_the_max_is_413(daemon, sid):
    s = connect(daemon)
    try:
        s.sendall(head(f"/v1/sandboxes/{sid}/files?path=/tmp/x", MAX_UPLOAD + 1))
        status, body = read_response(s)
    finally:
        s.close()
    assert status == 413 and b"payload_too_large" in body, body


def test_spooled_archive(daemon, sid):
    """A tar over SPOOL_MIN_BYTES goes through the spool too, checked and unpacked."""
    import io
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        data = BLOCK * 3
        ti = tarfile.TarInfo("d/blob")
        ti.size = len(data)
        t.addfile(ti, io.BytesIO(data))
    raw = buf.getvalue()
    s = connect(daemon)
    try:
        s.sendall(head(f"/v1/sandboxes/{sid}/files/archive?path=/tmp/arc", len(raw)) + raw)
        status, body = read_response(s)
    finally:
        s.close()
    assert status == 200, body
    c = daemon.client()
    r = c.exec(sid, argv=["sh", "-c", "sha256sum /tmp/arc/d/blob"])
    assert r["stdout"].split()[0] == hashlib.sha256(BLOCK * 3).hexdigest(), r


def chunked_head(path):
    return (f"PUT {path} HTTP/1.1\r\nHost: cordon\r\nTransfer-Encoding: chunked\r\n"
            f"Expect: 100-continue\r\n\r\n").encode()


def test_chunked_upload_is_spooled_too(daemon, sid):
    """A chunked body is decoded into the spool (extensions and a trailer skipped), and the
    request pipelined after it on the same connection is answered after it."""
    size = 192 << 20
    pid = daemon.proc.pid
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")
    before = proc_status(pid, "VmRSS")
    want = hashlib.sha256()
    s = connect(daemon)
    try:
        s.sendall(chunked_head(f"/v1/sandboxes/{sid}/files?path=/tmp/chunked"))
        assert s.recv(64).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sent = 0
        while sent < size:
            piece = BLOCK[: (1 << 20) - (sent // (1 << 20)) % 7]  # odd sizes
            s.sendall(b"%x;ext=1\r\n" % len(piece) + piece + b"\r\n")
            want.update(piece)
            sent += len(piece)
        s.sendall(b"0\r\nX-Trailer: yes\r\n\r\n"
                  b"GET /v1/sandboxes/" + sid.encode() + b" HTTP/1.1\r\nHost: cordon\r\n\r\n")
        status, body = read_response(s)
        assert status == 200, body[:500]
        status2, body2 = read_response(s)
        assert status2 == 200 and sid.encode() in body2, body2[:300]
    finally:
        s.close()
    peak = proc_status(pid, "VmHWM")
    assert is_sanitized() or peak - before < 64 << 20, f"cordond's RSS grew by {(peak - before) >> 20} MiB"
    r = daemon.client(timeout=120).exec(
        sid, argv=["sh", "-c", "sha256sum /tmp/chunked; stat -c %s /tmp/chunked; rm /tmp/chunked"])
    assert r["stdout"].split()[0] == want.hexdigest() and int(r["stdout"].split()[-1]) == sent, r


@pytest.mark.parametrize("framing,status,code", [
    (b"zz\r\nab\r\n0\r\n\r\n", 400, b"bad_request"),
    (b"2\r\nabXX0\r\n\r\n", 400, b"bad_request"),
    (b"11111111111111111\r\n", 400, b"bad_request"),
])
def test_bad_chunked_framing_is_400(daemon, sid, framing, status, code):
    s = connect(daemon)
    try:
        s.sendall(chunked_head(f"/v1/sandboxes/{sid}/files?path=/tmp/bad"))
        assert s.recv(64).startswith(b"HTTP/1.1 100 Continue")
        s.sendall(framing)
        got, body = read_response(s)
    finally:
        s.close()
    assert got == status and code in body, body
    assert not spool_fds(daemon)


def test_chunked_over_the_max_is_413(daemon, sid):
    s = connect(daemon)
    try:
        s.sendall(chunked_head(f"/v1/sandboxes/{sid}/files?path=/tmp/over"))
        assert s.recv(64).startswith(b"HTTP/1.1 100 Continue")
        try:
            for _ in range((MAX_UPLOAD >> 20) + 2):
                s.sendall(b"%x\r\n" % len(BLOCK) + BLOCK + b"\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        got, body = read_response(s)
    finally:
        s.close()
    assert got == 413 and b"payload_too_large" in body, body
    assert not spool_fds(daemon)
    r = daemon.client().exec(sid, argv=["sh", "-c", "test -e /tmp/over && echo there || echo absent"])
    assert r["stdout"] == "absent\n", r


def send_half_sized(s, path):
    """8 MiB of a body that says 512 MiB."""
    s.sendall(head(path, 512 << 20))
    send_blocks(s, 8 << 20)


def send_half_chunked(s, path):
    """8 chunks of 1 MiB and no last chunk."""
    s.sendall(chunked_head(path))
    assert s.recv(64).startswith(b"HTTP/1.1 100 Continue")
    for _ in range(8):
        s.sendall(b"%x\r\n" % len(BLOCK) + BLOCK + b"\r\n")


@pytest.mark.parametrize("send_half", [send_half_sized, send_half_chunked], ids=["sized", "chunked"])
def test_client_leaving_mid_body_leaves_nothing(daemon, sid, send_half):
    """A client that closes mid-body leaves no spool file, nothing new in the state
    directory and no file in the sandbox."""
    before = set(os.listdir(daemon.state_dir))
    s = connect(daemon)
    send_half(s, f"/v1/sandboxes/{sid}/files?path=/tmp/half")
    s.close()
    deadline = time.monotonic() + 10
    while spool_fds(daemon) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not spool_fds(daemon)
    assert set(os.listdir(daemon.state_dir)) == before
    r = daemon.client().exec(sid, argv=["sh", "-c", "test -e /tmp/half && echo there || echo absent"])
    assert r["stdout"] == "absent\n", r
