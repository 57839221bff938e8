"""Clients that hang up before their answer (a create waiting for its sandbox, an exec waiting
for its exit): the daemon finishes what it was asked, writes the same audit records, forgets
the client and stays up. Each of these answers goes through a svc_reply whose gone() the
HTTP layer calls when the connection closes (src/daemon/service.h)."""
import json
import os
import socket
import time

import pytest

from conftest import start_daemon, wait_until


@pytest.fixture(scope="module")
def d():
    # No pool: every create is built now and waits for its sandbox's HELLO_OK.
    daemon = start_daemon(pool=0, max_sandboxes=8)
    yield daemon
    daemon.cleanup()


def send_and_hang_up(d, method, path, body):
    data = json.dumps(body).encode()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(d.sock)
    s.sendall(f"{method} {path} HTTP/1.1\r\nHost: cordon\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    time.sleep(0.05)  # read by the daemon, not answered yet
    s.close()


def events(d, sid):
    with open(os.path.join(d.audit_dir, f"{sid}.jsonl")) as f:
        return [json.loads(line)["event"] for line in f if line.strip()]


def test_create_whose_client_left_is_made_and_recorded(d):
    # Best effort: the hang-up comes 50 ms after the request, before a fresh sandbox is up
    # on a loaded host, not always on an idle one (then this is an ordinary create).
    c = d.client()
    tag = f"gone-{os.getpid()}"
    send_and_hang_up(d, "POST", "/v1/sandboxes", {"metadata": {"t": tag}})
    assert wait_until(lambda: c.list(f"?metadata.t={tag}"), 15), d.log_tail()
    sid = c.list(f"?metadata.t={tag}")[0]["id"]
    assert wait_until(lambda: "sandbox.ready" in events(d, sid), 15), events(d, sid)
    assert events(d, sid)[:2] == ["sandbox.create", "sandbox.ready"]
    # The sandbox is a client's like any other: it runs, and goes when asked.
    assert c.exec(sid, argv=["true"])["exit_code"] == 0
    c.destroy(sid)
    assert d.alive()


def test_exec_whose_client_left_runs_to_its_end(d):
    c = d.client()
    sid = c.create()["id"]
    send_and_hang_up(d, "POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["sleep", "0.3"]})
    assert wait_until(lambda: "process.exit" in events(d, sid), 10), events(d, sid)
    assert c.exec(sid, argv=["true"])["exit_code"] == 0
    assert d.alive()
    c.destroy(sid)
