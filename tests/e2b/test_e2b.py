"""The E2B conformance suite: E2B's own JS SDK (npm `e2b`, pinned in package.json and
package-lock.json) against a real cordond serving --e2b-listen on loopback.

Run with Debian's pytest:  /usr/bin/python3 -m pytest tests/e2b
Set-up: `npm ci` into tests/e2b/node_modules (git-ignored) from the npm registry; the suite
skips, saying why, when node or npm is missing or the registry cannot be reached. cordond
runs as root (it makes sandboxes), in its own temporary directories, with two API keys (the
second for the isolation checks) and templateID "base" naming the host template.
"""

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
BUILD = os.environ.get("CORDON_BUILD", os.path.join(REPO, "build"))
CORDOND = os.path.join(BUILD, "cordond")
DOMAIN = "e2b.test"

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="cordond needs root"),
    pytest.mark.skipif(not os.access(CORDOND, os.X_OK), reason=f"no cordond at {CORDOND} (ninja -C build)"),
    pytest.mark.skipif(not shutil.which("node") or not shutil.which("npm"), reason="node and npm are needed"),
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def installed_version():
    try:
        with open(os.path.join(HERE, "node_modules", "e2b", "package.json")) as f:
            return json.load(f)["version"]
    except (OSError, ValueError, KeyError):
        return None


@pytest.fixture(scope="module")
def sdk():
    """tests/e2b/node_modules as package-lock.json pins it (`npm ci`); a copy already there of
    the pinned version serves when the registry cannot be reached, else the suite skips."""
    with open(os.path.join(HERE, "package.json")) as f:
        pinned = json.load(f)["dependencies"]["e2b"]
    try:
        r = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=HERE, capture_output=True,
                           text=True, timeout=300)
        why = r.stderr.strip()[-300:] if r.returncode else None
    except subprocess.TimeoutExpired:
        why = "npm ci took over 300 s"
    if installed_version() != pinned:
        pytest.skip(f"e2b {pinned} could not be installed from the npm registry: {why}")
    return HERE


def start_cordond(d, extra=(), env=None):
    """A cordond in @d with two keys on an E2B listener; (process, info)."""
    keys = ["e2b_" + secrets.token_hex(20) for _ in range(2)]
    kpath = os.path.join(d, "keys")
    with open(kpath, "w") as f:
        f.write("".join(f"{k} tenant{i} 20\n" for i, k in enumerate(keys)))
    os.chmod(kpath, 0o600)
    port = free_port()
    log = open(os.path.join(d, "cordond.log"), "w")
    p = subprocess.Popen(
        [CORDOND, "--socket", f"{d}/cordon.sock", "--state-dir", f"{d}/state", "--runtime-dir", f"{d}/run",
         "--api-keys", kpath, "--e2b-listen", f"127.0.0.1:{port}", "--e2b-domain", DOMAIN,
         "--pool", "0", "--max-timeout", "3600", *extra],
        stdout=log, stderr=subprocess.STDOUT, env=env)
    log.close()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and p.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.05)
    if p.poll() is not None or time.monotonic() >= deadline:
        p.kill()
        pytest.fail("cordond did not start: " + open(os.path.join(d, "cordond.log")).read()[-2000:])
    return p, {"url": f"http://127.0.0.1:{port}", "keys": keys, "dir": d}


def stop_cordond(p, d):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(timeout=5)
    text = open(os.path.join(d, "cordond.log")).read()
    shutil.rmtree(d, ignore_errors=True)
    # Under the sanitizers (CORDON_BUILD=build-asan) a report fails the module.
    if "Sanitizer" in text:
        pytest.fail("cordond's sanitizers reported:\n" + text[text.index("Sanitizer") - 200:][:4000])


def sdk_env(info):
    return dict(os.environ, E2B_API_URL=info["url"], E2B_SANDBOX_URL=info["url"],
                E2B_API_KEY=info["keys"][0], CORDON_E2B_KEY2=info["keys"][1], CORDON_E2B_DOMAIN=DOMAIN)


@pytest.fixture(scope="module")
def cordond():
    d = tempfile.mkdtemp(prefix="cordon-e2b-")
    p, info = start_cordond(d, ["--e2b-base-template", "host", "--max-upload", "128M"])
    yield info
    stop_cordond(p, d)


def run_node_suite(sdk, info, script, timeout=600, env=None):
    """node --test @script (in tests/e2b) against the cordond of @info (@env added to its
    environment); fails with cordond's log."""
    r = subprocess.run(["node", "--test", "--test-reporter=spec", script], cwd=sdk,
                       env=dict(sdk_env(info), **(env or {})), capture_output=True, text=True,
                       timeout=timeout)
    print(r.stdout[-20000:])
    print(r.stderr[-5000:])
    if r.returncode != 0:
        log = open(os.path.join(info["dir"], "cordond.log")).read()
        pytest.fail(f"{script} failed (rc {r.returncode}); cordond's log:\n{log[-3000:]}")


def test_conformance(sdk, cordond):
    run_node_suite(sdk, cordond, "conformance.test.mjs")


def test_v1_listener_has_no_e2b_routes(cordond):
    """The E2B routes are on --e2b-listen only: the unix socket answers them 404."""
    import http.client

    class UnixConn(http.client.HTTPConnection):
        def connect(self):
            self.sock = socket.socket(socket.AF_UNIX)
            self.sock.settimeout(10)
            self.sock.connect(f"{cordond['dir']}/cordon.sock")

    c = UnixConn("localhost", timeout=10)
    c.request("GET", "/v2/sandboxes")
    r = c.getresponse()
    body = json.loads(r.read())
    assert r.status == 404
    assert body["error"]["code"] == "not_found", "rendered as /v1 renders its errors"
    c.close()


BASE_CHECK = """
import { Sandbox } from 'e2b'
import assert from 'node:assert/strict'
const sbx = await Sandbox.create()
try {
  assert.equal((await sbx.getInfo()).templateId, 'base')
  const r = await sbx.commands.run('python3 -c "print(6*7)"; git --version >/dev/null && bash --version >/dev/null && id -un; pwd')
  assert.equal(r.stdout, '42\\nuser\\n/home/user\\n')
  assert.equal((await sbx.commands.run('id -u && touch /etc/e2b-root', { user: 'root' })).stdout, '0\\n')
  await sbx.files.write('in-home.txt', 'x')
  assert.equal((await sbx.commands.run('stat -c %U ~/in-home.txt')).stdout, 'user\\n')
} finally {
  await sbx.kill()
}
"""


@pytest.mark.skipif(not shutil.which("debootstrap"), reason="needs debootstrap (make deps installs it)")
def test_base_recipe(sdk):
    """recipes/e2b-base builds, and is what E2B's SDK expects of `base`: python3, git, bash,
    the user `user` in /home/user, root per command."""
    d = tempfile.mkdtemp(prefix="cordon-e2b-base-")
    env = dict(os.environ, CORDON_TEMPLATES=os.path.join(d, "templates"))
    b = subprocess.run([os.path.join(BUILD, "cordon-template"), "build", "base", "-f",
                        os.path.join(REPO, "recipes", "e2b-base", "Cordonfile")],
                       env=env, capture_output=True, text=True, timeout=1200)
    if b.returncode != 0:
        shutil.rmtree(d, ignore_errors=True)
        pytest.fail("the e2b-base recipe did not build: " + (b.stdout + b.stderr)[-3000:])
    p, info = start_cordond(d, env=env)
    try:
        r = subprocess.run(["node", "--input-type=module", "-e", BASE_CHECK], cwd=sdk, env=sdk_env(info),
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        stop_cordond(p, d)


def raw_head(info, head, timeout=5):
    """@head sent as it is (no body follows); the status line of the answer."""
    port = int(info["url"].rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head.encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        return data.split(b"\r\n", 1)[0].decode(), data


def test_control_plane_key_checked_before_the_body(cordond):
    """A control-plane request without a valid X-API-KEY is refused as soon as its head is
    in, in E2B's error shape, never waiting for the megabyte it announced."""
    for key in ("", "X-API-KEY: e2b_" + "0" * 40 + "\r\n"):
        t0 = time.monotonic()
        status, data = raw_head(cordond, "POST /sandboxes HTTP/1.1\r\nHost: x\r\n" + key +
                                "Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n")
        assert status.startswith("HTTP/1.1 401"), status
        assert time.monotonic() - t0 < 3
        assert b'"code":401' in data
    # with a valid key, the front waits for the body (here: a short one, then the answer)
    status, _ = raw_head(cordond, "GET /v2/sandboxes HTTP/1.1\r\nHost: x\r\nX-API-KEY: " +
                         cordond["keys"][0] + "\r\n\r\n")
    assert status.startswith("HTTP/1.1 200"), status


def test_upload_admitted_before_the_body(cordond):
    """An upload (a body that may be over 1 MiB) is refused as soon as its head is in when it
    names no live sandbox (502) or lacks the sandbox's token or signature (401), so that a
    stranger cannot make cordond hold megabytes; with the token, the body is read."""
    import urllib.request
    req = urllib.request.Request(cordond["url"] + "/sandboxes", method="POST", data=b'{"timeout": 60}',
                                 headers={"X-API-KEY": cordond["keys"][0], "Content-Type": "application/json"})
    sb = json.loads(urllib.request.urlopen(req, timeout=30).read())
    big = "Content-Type: application/octet-stream\r\nContent-Length: 50000000\r\n\r\n"
    cases = [("E2b-Sandbox-Id: " + "a" * 20, "502"),
             ("E2b-Sandbox-Id: " + sb["sandboxID"], "401"),
             ("E2b-Sandbox-Id: " + sb["sandboxID"] + "\r\nX-Access-Token: " + "0" * 64, "401"),
             ("Host: 49983-" + sb["sandboxID"] + "." + DOMAIN, "401"),
             # another port's: the code interpreter's has no /files; any other is a tunnel
             # into the sandbox, which wants the sandbox's token before anything is read
             ("Host: 49999-" + sb["sandboxID"] + "." + DOMAIN, "404"),
             ("Host: 8080-" + sb["sandboxID"] + "." + DOMAIN, "401")]
    for hdr, want in cases:
        t0 = time.monotonic()
        status, data = raw_head(cordond, "POST /files?path=/tmp/big&signature=v1_x HTTP/1.1\r\n" + hdr + "\r\n" + big)
        assert status.split()[1] == want, (hdr, status)
        assert time.monotonic() - t0 < 3
        assert f'"code":{want}'.encode() in data
    # the token admits it: the front then waits for the body rather than answer
    port = int(cordond["url"].rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(("POST /files?path=/tmp/small HTTP/1.1\r\nE2b-Sandbox-Id: " + sb["sandboxID"] +
                   "\r\nX-Access-Token: " + sb["envdAccessToken"] +
                   "\r\nContent-Type: application/octet-stream\r\nContent-Length: 5\r\n\r\n").encode())
        time.sleep(0.3)
        s.sendall(b"hello")
        assert s.recv(4096).split(b"\r\n", 1)[0] == b"HTTP/1.1 200 OK"


def test_ports_by_host_taken_before_routes(cordond):
    """A request whose Host names a port of a sandbox other than envd's is the tunnel's
    whatever its path, method or body: it is answered as soon as its head is in (502 for a
    sandbox that is not there, E2B's body), never by the routes' 404 or 413; a Host that
    names no port 1..65535 is no tunnel: envd's routes answer it, 502 too."""
    big = "Content-Type: application/octet-stream\r\nContent-Length: 50000000\r\n"
    for host, line, extra in (("8000-" + "a" * 20, "POST /no/such/route", big),
                              ("99999-" + "a" * 20, "GET /health", "")):
        t0 = time.monotonic()
        status, data = raw_head(cordond, f"{line} HTTP/1.1\r\nHost: {host}.{DOMAIN}\r\n{extra}\r\n")
        assert status.split()[1] == "502", (host, status)
        assert time.monotonic() - t0 < 3
        assert b'"code":502' in data


def test_download_spooled_bounded_and_gzip_only_when_asked():
    """GET /files of a 100 MiB file: spooled by the files service past 8 MiB and sent as it
    is even when gzip is asked for (deflating it would hold it whole), so cordond's peak RSS
    grows far less than the file; one byte over --max-download is E2B's 413 naming the limit.
    A small file is gzip'd when the client asks for gzip alone (the SDK's `gzip: true`), not
    for a library's default list (node's fetch sends "gzip, deflate" with every request)."""
    import gzip
    import hashlib
    import re
    import urllib.error
    import urllib.request
    d = tempfile.mkdtemp(prefix="cordon-e2b-dl-")
    v1 = free_port()
    p, info = start_cordond(d, ["--e2b-base-template", "host", "--listen", f"127.0.0.1:{v1}",
                                "--max-download", "100M"])
    try:
        def call(url, data=None, headers=None, method=None):
            req = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
            try:
                with urllib.request.urlopen(req, timeout=120) as r:
                    return r.status, dict(r.headers), r.read()
            except urllib.error.HTTPError as e:
                return e.code, dict(e.headers), e.read()

        key = info["keys"][0]
        _, _, b = call(info["url"] + "/sandboxes", b'{"timeout": 300}',
                       {"X-API-KEY": key, "Content-Type": "application/json"})
        sb = json.loads(b)

        def sh(cmd):
            st, _, out = call(f"http://127.0.0.1:{v1}/v1/sandboxes/sb-{sb['sandboxID']}/exec",
                              json.dumps({"argv": ["sh", "-c", cmd]}).encode(),
                              {"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
            assert st == 200, out
            return json.loads(out)["stdout"]

        sh("head -c 100M /dev/urandom > /tmp/big && printf %s small > /tmp/small")
        want = sh("sha256sum /tmp/big").split()[0]
        envd = {"E2b-Sandbox-Id": sb["sandboxID"], "X-Access-Token": sb["envdAccessToken"]}
        hwm = lambda: int(re.search(r"VmHWM:\s+(\d+) kB", open(f"/proc/{p.pid}/status").read())[1]) >> 10
        before = hwm()
        st, h, body = call(info["url"] + "/files?path=/tmp/big", headers={**envd, "Accept-Encoding": "gzip"})
        grew = hwm() - before
        assert st == 200 and "Content-Encoding" not in h, (st, h)
        assert len(body) == 100 << 20 and hashlib.sha256(body).hexdigest() == want
        asan = b"__asan_init" in open(CORDOND, "rb").read()
        assert asan or grew < 32, f"cordond's peak RSS grew {grew} MiB for a 100 MiB download"
        del body
        sh("head -c 1 /dev/zero >> /tmp/big")
        st, h, body = call(info["url"] + "/files?path=/tmp/big", headers=envd)
        assert st == 413, (st, body[:200])
        e = json.loads(body)
        assert e["code"] == 413 and "--max-download" in e["message"], e
        for ae, zipped in (("gzip", True), ("gzip;q=1", True), ("gzip, deflate", False),
                           ("gzip;q=0", False), ("identity", False)):
            st, h, body = call(info["url"] + "/files?path=/tmp/small", headers={**envd, "Accept-Encoding": ae})
            assert st == 200 and (h.get("Content-Encoding") == "gzip") == zipped, (ae, h)
            assert (gzip.decompress(body) if zipped else body) == b"small", ae
    finally:
        stop_cordond(p, d)
