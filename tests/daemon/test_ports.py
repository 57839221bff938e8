"""GET /v1/sandboxes/{id}/ports/{port}: a raw tunnel (101 Switching Protocols, then the bytes
both ways) to 127.0.0.1:PORT inside the sandbox, carried by its agent (PORT_OPEN/PORT_WRITE/
PORT_DATA frames): the sandbox's network is never opened to the host. Bounded: 32 connections
per sandbox, 1 MiB in flight each way."""

import json
import socket
import time

import pytest

from conftest import daemon_fixture, requires_daemon, start_daemon

pytestmark = requires_daemon

ECHO = r"""
import socket, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 7007)); s.listen(64)
def serve(c):
    while True:
        b = c.recv(65536)
        if not b:
            break
        c.sendall(b)
    c.close()
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
"""
IDLE = r"""
import socket, time
s = socket.socket(); s.bind(("127.0.0.1", 7008)); s.listen(128)
time.sleep(600)
"""


daemon = daemon_fixture(pool=0, max_sandboxes=4, max_timeout=600)


def listening(client, sid, port):
    code = f"import socket; socket.create_connection(('127.0.0.1', {port}), 1)"
    return client.exec(sid, argv=["python3", "-c", code])["exit_code"] == 0


@pytest.fixture(scope="module")
def servers(client, sandbox):
    sid = sandbox["id"]
    client.sh(sid, "mkdir -p /tmp/www && printf 'hello from inside\\n' > /tmp/www/hello.txt")
    procs = [client.start_process(sid, argv=["python3", "-m", "http.server", "8000", "--bind",
                                             "127.0.0.1", "--directory", "/tmp/www"], timeout_s=0),
             client.start_process(sid, argv=["python3", "-c", ECHO], timeout_s=0),
             client.start_process(sid, argv=["python3", "-c", IDLE], timeout_s=0)]
    for port in (8000, 7007, 7008):
        deadline = time.monotonic() + 15
        while not listening(client, sid, port):
            assert time.monotonic() < deadline, f"nothing listens on {port} in the sandbox"
            time.sleep(0.2)
    yield sid
    for p in procs:
        client.post(f"/v1/sandboxes/{sid}/processes/{p.pid}/signal", {"signal": "KILL"})
        p.close()


def tunnel(daemon, sid, port, early=b""):
    """The socket after the answer's head, and the head (status, bytes)."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(15)
    s.connect(daemon.sock)
    s.sendall(f"GET /v1/sandboxes/{sid}/ports/{port} HTTP/1.1\r\nHost: cordon\r\n"
              f"Upgrade: tcp\r\nConnection: Upgrade\r\n\r\n".encode() + early)
    head = b""
    while b"\r\n\r\n" not in head:
        b = s.recv(1)
        assert b, f"closed before a whole head: {head!r}"
        head += b
    status = int(head.split(b" ", 2)[1])
    return s, status, head


def read_to_eof(s):
    out = b""
    while True:
        b = s.recv(65536)
        if not b:
            return out
        out += b


def error_of(s, head):
    body = read_to_eof(s)
    s.close()
    return json.loads(body)["error"]["code"]


def test_http_server_inside(daemon, servers):
    s, status, head = tunnel(daemon, servers, 8000)
    assert status == 101, head
    s.sendall(b"GET /hello.txt HTTP/1.0\r\nHost: x\r\n\r\n")
    resp = read_to_eof(s)
    s.close()
    assert resp.startswith(b"HTTP/1.0 200"), resp[:200]
    assert resp.endswith(b"hello from inside\n"), resp[-200:]


def test_early_bytes_go_along(daemon, servers):
    s, status, head = tunnel(daemon, servers, 8000, early=b"GET /hello.txt HTTP/1.0\r\n\r\n")
    assert status == 101, head
    resp = read_to_eof(s)
    s.close()
    assert resp.endswith(b"hello from inside\n"), resp[-200:]


def test_bulk_both_ways(daemon, servers):
    """8 MiB through an echo server: the window and PAUSE/RESUME, nothing lost or reordered."""
    s, status, head = tunnel(daemon, servers, 7007)
    assert status == 101, head
    data = bytes(range(256)) * (32 * 1024)
    got = bytearray()
    s.setblocking(False)
    sent = 0
    deadline = time.monotonic() + 60
    import select
    while len(got) < len(data):
        assert time.monotonic() < deadline, f"stalled at {sent} sent, {len(got)} back"
        w = [s] if sent < len(data) else []
        r, w, _ = select.select([s], w, [], 1)
        if w:
            try:
                sent += s.send(data[sent:sent + 262144])
            except BlockingIOError:
                pass
        if r:
            b = s.recv(262144)
            assert b, "closed early"
            got += b
    s.close()
    assert bytes(got) == data


@pytest.mark.parametrize("port,code", [(7999, "port_unreachable"), (0, "invalid_field"),
                                       (70000, "invalid_field"), ("x1", "invalid_field"),
                                       ("08000", "invalid_field")])
def test_refusals(daemon, servers, port, code):
    s, status, head = tunnel(daemon, servers, port)
    assert status != 101
    assert error_of(s, head) == code


def test_unknown_sandbox(daemon, servers):
    s, status, head = tunnel(daemon, "sb-aaaaaaaaaaaaaaaaaaaa", 8000)
    assert status == 404 and error_of(s, head) == "not_found"


def test_connection_cap(daemon, client, servers):
    held = []
    for i in range(32):
        s, status, head = tunnel(daemon, servers, 7008)
        assert status == 101, (i, head, read_to_eof(s))
        held.append(s)
    s, status, head = tunnel(daemon, servers, 7008)
    assert status == 429 and error_of(s, head) == "quota_exceeded"
    for h in held:
        h.close()
    deadline = time.monotonic() + 10
    while True:  # the closed ones are released
        s, status, head = tunnel(daemon, servers, 8000)
        s.close()
        if status == 101:
            break
        assert time.monotonic() < deadline, "closed tunnels were never released"
        time.sleep(0.2)
    assert client.sh(servers, "echo alive") == "alive\n"
    # the API still answers on the same daemon, and keep-alive requests are unaffected
    assert client.get("/healthz").status == 200


def test_tcp_keys_see_their_own_tunnels_only():
    """Over TCP a tunnel needs a key, and a key reaches its own sandboxes' ports only: another
    key's sandbox is 404 as it is on every route."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    port = lsock.getsockname()[1]
    lsock.close()
    d = start_daemon(pool=0, max_sandboxes=4, listen=f"127.0.0.1:{port}",
                     api_keys="key-a-0123456789abcdef a 4\nkey-b-0123456789abcdef b 4\n")
    try:
        a = d.tcp_client(token="key-a-0123456789abcdef")
        sid = a.create()["id"]

        def over_tcp(token):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            auth = f"Authorization: Bearer {token}\r\n" if token else ""
            s.sendall(f"GET /v1/sandboxes/{sid}/ports/7999 HTTP/1.1\r\nHost: x\r\n{auth}"
                      "Upgrade: tcp\r\nConnection: Upgrade\r\n\r\n".encode())
            resp = read_to_eof(s)
            s.close()
            return int(resp.split(b" ", 2)[1]), resp

        assert over_tcp(None)[0] == 401
        assert over_tcp("key-b-0123456789abcdef")[0] == 404
        status, resp = over_tcp("key-a-0123456789abcdef")
        assert status == 502 and b"port_unreachable" in resp, resp  # its own: reached, nothing there
    finally:
        d.cleanup()
