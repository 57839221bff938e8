"""E2B's POST /files streams through the gate's spool (src/daemon/e2b_transfer.c): a large
multipart/form-data body is read from the spool file a window at a time (multipart.c), each
part sent into the sandbox from its range of the spool; a gzip body is decoded into a file of
the state directory 64 KiB at a time. cordond's memory stays small whatever the body's size.

Raw HTTP to a real cordond's --e2b-listen on loopback (no SDK needed), the body sent from a
generator so that the test's own memory stays small too; the sandbox is checked through the
v1 API (--listen on loopback)."""

import gzip
import hashlib
import json
import os
import re
import socket
import sys
import tempfile
import time
import urllib.error
import urllib.request

import pytest

from test_e2b import CORDOND, REPO, free_port, start_cordond, stop_cordond

sys.path.insert(0, os.path.join(REPO, "tests", "daemon"))
from conftest import read_response  # noqa: E402  (tests/daemon's raw HTTP reader)

sys.path.pop(0)

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="cordond needs root"),
    pytest.mark.skipif(not os.access(CORDOND, os.X_OK), reason=f"no cordond at {CORDOND} (ninja -C build)"),
]

BLOCK = bytes(range(256)) * 4096  # 1 MiB
BOUNDARY = "cordonTestBoundary7f3a"


def call(url, data=None, headers=None, method=None, timeout=120):
    req = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.fixture(scope="module")
def env():
    d = tempfile.mkdtemp(prefix="cordon-e2b-up-")
    v1 = free_port()
    p, info = start_cordond(d, ["--e2b-base-template", "host", "--listen", f"127.0.0.1:{v1}",
                                "--max-upload", "768M"])
    try:
        key = info["keys"][0]
        st, b = call(info["url"] + "/sandboxes", json.dumps({"timeout": 600}).encode(),
                     {"X-API-KEY": key, "Content-Type": "application/json"})
        assert st in (200, 201), b
        sb = json.loads(b)
        info.update(p=p, v1=v1, sb=sb, state=os.path.join(d, "state"))
        yield info
    finally:
        stop_cordond(p, d)


def sh(env, cmd):
    st, out = call(f"http://127.0.0.1:{env['v1']}/v1/sandboxes/sb-{env['sb']['sandboxID']}/exec",
                   json.dumps({"argv": ["sh", "-c", cmd], "timeout_s": 240}).encode(),
                   {"Authorization": f"Bearer {env['keys'][0]}", "Content-Type": "application/json"},
                   timeout=300)
    assert st == 200, out
    return json.loads(out)["stdout"]


def head(env, length, ctype, extra="", path=""):
    sb = env["sb"]
    q = f"?path={path}" if path else ""
    return (f"POST /files{q} HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: {sb['sandboxID']}\r\n"
            f"X-Access-Token: {sb['envdAccessToken']}\r\nContent-Type: {ctype}\r\n{extra}"
            f"Content-Length: {length}\r\n\r\n").encode()


def part_head(name):
    return (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n").encode()


def connect(env):
    port = int(env["url"].rsplit(":", 1)[1])
    s = socket.create_connection(("127.0.0.1", port), timeout=300)
    return s


def send_blocks(s, n):
    while n > 0:
        k = min(len(BLOCK), n)
        s.sendall(BLOCK[:k])
        n -= k


def post(env, h, body):
    """@h then @body on a new connection: the answer's status and body."""
    s = connect(env)
    try:
        s.sendall(h + body)
        return read_response(s)
    finally:
        s.close()


def gzip_post(env, n, path):
    z = gzip.compress(BLOCK * (n // len(BLOCK)), compresslevel=1)
    return post(env, head(env, len(z), "application/octet-stream", "Content-Encoding: gzip\r\n",
                          path=path), z)


def hwm_reset(pid):
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")
    return status_kib(pid, "VmRSS")


def status_kib(pid, key):
    return int(re.search(rf"{key}:\s+(\d+) kB", open(f"/proc/{pid}/status").read())[1])


def spool_fds(env):
    fd_dir = f"/proc/{env['p'].pid}/fd"
    out = []
    for fd in os.listdir(fd_dir):
        try:
            t = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if t.startswith(env["state"] + "/#") and t.endswith("(deleted)"):
            out.append(t)
    return out


def no_spool_soon(env):
    """The gate closes a spool once the answer is sent: a moment after the client has it."""
    deadline = time.monotonic() + 10
    while spool_fds(env) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not spool_fds(env)


def digest(n):
    h = hashlib.sha256()
    for _ in range(n // len(BLOCK)):
        h.update(BLOCK)
    return h.hexdigest()


def test_512_mib_multipart_keeps_cordond_small(env):
    """Two parts, 512 MiB and a small one after it: both files right, cordond's peak RSS
    grows by less than 64 MiB (the body is in the spool, each part read from its range)."""
    size = 512 << 20
    first, second = part_head("/tmp/big"), part_head("/tmp/after")
    tail = b"\r\n" + second + b"small part" + f"\r\n--{BOUNDARY}--\r\n".encode()
    length = len(first) + size + len(tail)
    asan = b"__asan_init" in open(CORDOND, "rb").read()
    before = hwm_reset(env["p"].pid)
    s = connect(env)
    try:
        s.sendall(head(env, length, f"multipart/form-data; boundary={BOUNDARY}") + first)
        send_blocks(s, size)
        s.sendall(tail)
        st, body = read_response(s)
    finally:
        s.close()
    assert st == 200, body[:500]
    grew = (status_kib(env["p"].pid, "VmHWM") - before) >> 10
    print(f"512 MiB multipart: cordond's peak RSS grew {grew} MiB")
    assert asan or grew < 64, f"cordond's RSS grew by {grew} MiB for a 512 MiB multipart upload"
    names = sorted(e["path"] for e in json.loads(body))
    assert names == ["/tmp/after", "/tmp/big"], body
    out = sh(env, "sha256sum /tmp/big | cut -d' ' -f1; stat -c %s /tmp/big; cat /tmp/after; rm /tmp/big")
    got, n, small = out.split("\n")[:3]
    assert (got, int(n), small) == (digest(size), size, "small part")
    assert no_spool_soon(env)


def test_client_leaving_mid_multipart_leaves_nothing(env):
    before = set(os.listdir(env["state"]))
    s = connect(env)
    s.sendall(head(env, 256 << 20, f"multipart/form-data; boundary={BOUNDARY}") + part_head("/tmp/half"))
    send_blocks(s, 8 << 20)
    s.close()
    assert no_spool_soon(env)
    assert set(os.listdir(env["state"])) == before
    assert sh(env, "test -e /tmp/half && echo there || echo absent") == "absent\n"


def test_spooled_multipart_without_its_end_is_400(env):
    """A spooled body (over 1 MiB) whose part never ends: 400, nothing written."""
    body = part_head("/tmp/unended") + BLOCK * 2
    st, resp = post(env, head(env, len(body), f"multipart/form-data; boundary={BOUNDARY}"), body)
    assert st == 400 and b"malformed" in resp, (st, resp[:300])
    assert sh(env, "test -e /tmp/unended && echo there || echo absent") == "absent\n"


def test_gzip_upload_decoded_in_pieces(env):
    """A 256 MiB file sent gzip'd (a small body that inflates 100x): decoded into a file of
    the state directory, not memory; right bytes inside; nothing left after."""
    size = 256 << 20
    before = hwm_reset(env["p"].pid)
    st, body = gzip_post(env, size, "/tmp/unzipped")
    assert st == 200, body[:500]
    grew = (status_kib(env["p"].pid, "VmHWM") - before) >> 10
    asan = b"__asan_init" in open(CORDOND, "rb").read()
    print(f"256 MiB gzip'd: cordond's peak RSS grew {grew} MiB")
    assert asan or grew < 64, f"cordond's RSS grew by {grew} MiB for a 256 MiB gzip upload"
    out = sh(env, "sha256sum /tmp/unzipped | cut -d' ' -f1; stat -c %s /tmp/unzipped; rm /tmp/unzipped")
    got, n = out.split("\n")[:2]
    assert (got, int(n)) == (digest(size), size)
    assert no_spool_soon(env)


def test_gzip_over_the_max_is_413(env):
    st, body = gzip_post(env, 800 << 20, "/tmp/bomb")  # past --max-upload 768M once decoded
    assert st == 413 and b"max-upload" in body, (st, body[:300])
    assert no_spool_soon(env)
    assert sh(env, "test -e /tmp/bomb && echo there || echo absent") == "absent\n"


def test_multipart_over_the_max_is_413_at_its_head(env):
    """A body announced past --max-upload is refused before a byte of it is read."""
    t0 = time.monotonic()
    st, body = post(env, head(env, 800 << 20, f"multipart/form-data; boundary={BOUNDARY}"), b"")
    assert st == 413, (st, body[:300])
    assert time.monotonic() - t0 < 5
