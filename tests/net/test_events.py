"""Security events through cordond (GET /v1/events, followed and after the fact, filtered by
sandbox and kind, counted in /metrics) and the webhook: a scenario raises each kind once
for one sandbox, in order (egress.blocked, secret.misuse, oom, timeout, agent.violation,
approval.pending and approval.decided, sandbox.destroyed), a second sandbox reaches its
deadline, a third's agent channel carries a malformed frame (written into the socket cordon-init
holds, as a compromised agent would) and cordond stays up; a loopback server (in the
machine-under-test namespace, where cordond runs) receives every event, each signed with
HMAC-SHA256 under the webhook key, the first try refused (500) to show the retry. A follower
that does not read is not buffered without bound: it is told {"kind":"lagged"}."""

import hashlib
import hmac
import http.client
import json
import os
import secrets
import signal
import socket
import subprocess
import time

import pytest

from conftest import PY, RUNTIME, WEB1, wait_until
from test_daemon_egress import CORDOND, Daemon, UnixHTTP
from test_daemon_secrets import answering, put_client, run

WEBHOOK_SERVER = r'''
import http.server, json, sys
port, log = int(sys.argv[1]), sys.argv[2]
calls = [0]
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        calls[0] += 1
        if calls[0] == 1:  # the first try fails: cordond must retry
            self.send_response(500); self.send_header("Content-Length", "0"); self.end_headers()
            return
        with open(log, "a") as f:
            f.write(json.dumps({"sig": self.headers.get("X-Cordon-Signature"), "body": body.decode(),
                                "path": self.path}) + "\n")
        self.send_response(204); self.end_headers()
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
'''


@pytest.fixture
def hook(net, tmp_path):
    port = 18000 + secrets.randbelow(20000)  # the namespace is the test's: nothing else listens
    script, log = str(tmp_path / "hook.py"), str(tmp_path / "hook.jsonl")
    with open(script, "w") as f:
        f.write(WEBHOOK_SERVER)
    p = subprocess.Popen(["nsenter", f"--net=/run/netns/{net.host_ns}", "--", PY, script, str(port), log],
                         start_new_session=True)

    def up():
        r = net.host_exec(PY, "-c", f"import socket; socket.create_connection(('127.0.0.1', {port}), 1)")
        return r.returncode == 0
    assert wait_until(up, 10), "the webhook server did not start"
    yield f"http://127.0.0.1:{port}/hooks/cordon", log
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()


@pytest.fixture
def ed(net, hook, monkeypatch):
    if not os.path.exists(CORDOND):
        pytest.skip(f"{CORDOND} not built")
    monkeypatch.setenv("CORDON_EGRESS_UPSTREAM_CA", net.ca)
    d = answering(Daemon(net, ["--events-webhook", hook[0]]))
    yield d
    d.stop()


class Follow:
    def __init__(self, d, query=""):
        self.c = UnixHTTP(d.sock)
        self.c.request("GET", "/v1/events?follow=1" + query)
        self.r = self.c.getresponse()
        assert self.r.status == 200
        self.lines = []

    def read_until(self, pred, timeout=60):
        self.c.sock.settimeout(timeout)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                line = self.r.readline()
            except TimeoutError:
                break
            if not line:
                break
            if line.strip():
                self.lines.append(json.loads(line))
                if pred(self.lines[-1]):
                    return self.lines[-1]
        raise AssertionError(f"not seen in {timeout}s: {[(e['kind'], e['sandbox']) for e in self.lines]}")

    def close(self):
        self.c.close()


def init_pid_of(marker):
    """The host pid of the sandbox's PID 1: the parent of the process whose argv holds @marker."""
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                if marker.encode() not in f.read():
                    continue
            with open(f"/proc/{p}/stat") as f:
                return int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
    return None


def malformed_frame(d, sid, marker):
    """Garbage into the agent channel from the sandbox's side: the host duplicates each socket
    cordon-init holds (pidfd_getfd) and writes a header no frame has into it."""
    import ctypes
    import threading
    threading.Thread(target=d.call, daemon=True, args=("POST", f"/v1/sandboxes/{sid}/exec",
                     {"argv": [PY, "-c", "import time; time.sleep(60)", marker], "timeout_s": 60})).start()
    assert wait_until(lambda: init_pid_of(marker), 10)
    pid = init_pid_of(marker)
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    bad = b"\xff\xff\xff\xff\x99\x99\x01\x00" + b"\x00" * 56  # a length past the maximum, flags set
    wrote = 0
    try:
        for name in os.listdir(f"/proc/{pid}/fd"):
            try:
                if not os.readlink(f"/proc/{pid}/fd/{name}").startswith("socket:"):
                    continue
            except OSError:
                continue
            fd = libc.syscall(438, pidfd, int(name), 0)  # pidfd_getfd
            if fd < 0:
                continue
            try:
                os.write(fd, bad)
                wrote += 1
            except OSError:
                pass
            finally:
                os.close(fd)
    finally:
        os.close(pidfd)
    assert wrote, "no socket of cordon-init could be written"


@pytest.mark.skipif(RUNTIME == "gvisor", reason="gvisor: an OOM ends the whole sandbox (the "
                    "Sentry is the cgroup's biggest task; README), so the scenario's later kinds "
                    "cannot follow it there")
def test_each_kind_in_order_and_the_webhook(ed, net, hook):
    fol = Follow(ed)
    sb = ed.json("POST", "/v1/sandboxes", {
        "secrets": {"API_KEY": {"value": "sk-ev-" + secrets.token_hex(8), "hosts": ["api.example.test"]}},
        "network": {"policy": "allow", "allow": ["api.example.test"],
                    "approve": [{"approve": "api.example.test", "methods": ["POST"], "paths": ["/v1/charges"]}]},
        "limits": {"memory_mb": 64}}, status=201)
    sid = sb["id"]
    put_client(ed, sid)
    t = secrets.token_hex(4)
    run(ed, sid, [{"op": "resolve", "name": "evil.test"},  # egress.blocked: the name, then TLS by address
                  {"op": "req", "connect": WEB1, "sni": "evil.test", "path": f"/blocked-{t}"}])
    run(ed, sid, [{"op": "req", "tls": False, "port": 80, "path": f"/plain-{t}",  # secret.misuse
                   "headers": {"Authorization": "Bearer {PH}"}}])
    # approval.pending, then approval.decided: a POST held, denied from here.
    import threading
    held = threading.Thread(target=run, daemon=True, args=(ed, sid, [
        {"op": "req", "method": "POST", "path": f"/v1/charges/{t}", "body": "a=1", "timeout": 30}]))
    held.start()
    ap = fol.read_until(lambda e: e["kind"] == "approval.pending" and e["sandbox"] == sid, 20)
    assert ed.call("POST", f"/v1/approvals/{ap['id']}", {"decision": "deny", "reason": "events"})[0] == 200
    held.join(30)
    st, out = ed.call("POST", f"/v1/sandboxes/{sid}/exec",  # oom
                      {"argv": [PY, "-c", "b = bytearray(256 << 20)"], "timeout_s": 30})
    assert st == 200 and json.loads(out)["oom"], out
    st, out = ed.call("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["sleep", "30"], "timeout_s": 1})  # timeout
    assert st == 200 and json.loads(out)["timed_out"], out
    # agent.violation: the agent stops answering (SIGSTOP on the sandbox's PID 1, from the
    # host); a process it should have ended at its timeout outlives it, and the daemon gives up.
    marker = f"evmark{t}"
    bg = threading.Thread(target=ed.call, daemon=True, args=("POST", f"/v1/sandboxes/{sid}/exec",
                          {"argv": [PY, "-c", "import time; time.sleep(300)", marker], "timeout_s": 300}))
    bg.start()
    assert wait_until(lambda: init_pid_of(marker), 10)
    os.kill(init_pid_of(marker), signal.SIGSTOP)
    ed.call("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["true"], "timeout_s": 1})
    fol.read_until(lambda e: e["kind"] == "sandbox.destroyed" and e["sandbox"] == sid, 40)
    # a second sandbox reaches its deadline
    sb2 = ed.json("POST", "/v1/sandboxes", {"timeout_s": 1}, status=201)
    fol.read_until(lambda e: e["kind"] == "sandbox.destroyed" and e["sandbox"] == sb2["id"], 20)
    # a third's agent channel sends garbage: agent.violation, the sandbox destroyed, cordond up
    sb3 = ed.json("POST", "/v1/sandboxes", {}, status=201)
    malformed_frame(ed, sb3["id"], f"evbad{t}")
    fol.read_until(lambda e: e["kind"] == "sandbox.destroyed" and e["sandbox"] == sb3["id"], 20)
    assert ed.call("GET", "/healthz")[0] == 200
    fol.close()

    mine = [e for e in fol.lines if e["sandbox"] == sid]
    firsts = []
    for e in mine:
        if e["kind"] not in firsts:
            firsts.append(e["kind"])
    assert firsts == ["egress.blocked", "secret.misuse", "approval.pending", "approval.decided", "oom",
                      "timeout", "agent.violation", "sandbox.destroyed"], \
        [(e["kind"], e.get("reason"), e.get("why")) for e in mine]
    decided = [e for e in mine if e["kind"] == "approval.decided"][0]
    assert (decided["id"], decided["decision"], decided["decider"]) == (ap["id"], "deny", "local"), decided
    assert [e["seq"] for e in fol.lines] == sorted(e["seq"] for e in fol.lines)
    blocked = [(e["host"], e["port"], e["proto"]) for e in mine if e["kind"] == "egress.blocked"]
    assert ("evil.test", 53, "dns") in blocked and ("evil.test", 443, "tls") in blocked, blocked
    misuse = [e for e in mine if e["kind"] == "secret.misuse"][0]
    assert misuse["secret"] == "API_KEY" and "value" not in misuse, misuse
    assert [e["what"] for e in mine if e["kind"] == "timeout"][0] == "process"
    assert [e for e in mine if e["kind"] == "sandbox.destroyed"][0]["reason"] == "agent_failed"
    other = [e["kind"] for e in fol.lines if e["sandbox"] == sb2["id"]]
    assert other == ["timeout", "sandbox.destroyed"], other
    third = [(e["kind"], e.get("why") or e.get("reason")) for e in fol.lines if e["sandbox"] == sb3["id"]]
    assert third == [("agent.violation", "an unreadable frame"), ("sandbox.destroyed", "agent_failed")], third

    # After the fact, filtered: the same events.
    st, out = ed.call("GET", f"/v1/events?sandbox={sid}&kind=oom,agent.violation")
    got = [json.loads(l) for l in out.decode().splitlines()]
    assert [e["kind"] for e in got] == ["oom", "agent.violation"], got
    st, out = ed.call("GET", "/v1/events?kind=nope")
    assert st == 400 and b"invalid_field" in out, out
    metrics = ed.call("GET", "/metrics")[1].decode()
    for kind in ("egress.blocked", "secret.misuse", "approval.pending", "approval.decided", "oom", "timeout",
                 "agent.violation", "sandbox.destroyed"):
        line = [l for l in metrics.splitlines() if l.startswith(f'cordon_events_total{{kind="{kind}"}}')]
        assert line and float(line[0].split()[1]) >= 1, (kind, line)

    # The webhook got every event, in order, each signed; its first try was refused and retried.
    key = open(os.path.join(ed.root, "state", "events-webhook.key"), "rb").read()
    assert len(key) == 32

    def delivered():
        try:
            with open(hook[1]) as f:
                return [json.loads(l) for l in f if l.strip()]
        except FileNotFoundError:
            return []
    assert wait_until(lambda: {e["seq"] for e in fol.lines} <= {json.loads(h["body"])["seq"] for h in delivered()}, 30), \
        (len(delivered()), len(fol.lines))
    hooks = delivered()
    for h in hooks:
        want = hmac.new(key, h["body"].encode(), hashlib.sha256).hexdigest()
        assert h["sig"] == f"sha256={want}", h
        assert h["path"] == "/hooks/cordon"
    seqs = [json.loads(h["body"])["seq"] for h in hooks]
    assert seqs == sorted(seqs), seqs
    metrics = ed.call("GET", "/metrics")[1].decode()
    assert 'cordon_events_webhook_total{outcome="failed_attempt"} 1' in metrics, [l for l in metrics.splitlines() if 'webhook' in l]


def test_a_follower_that_does_not_read_is_told_it_lagged(net):
    if not os.path.exists(CORDOND):
        pytest.skip(f"{CORDOND} not built")
    d = answering(Daemon(net))
    try:
        sb = d.json("POST", "/v1/sandboxes", {"network": {"policy": "allow", "allow": ["api.example.test"]}},
                    status=201)
        # A reader with a small receive buffer that reads nothing for now.
        c = UnixHTTP(d.sock)
        c.connect()
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c.request("GET", f"/v1/events?follow=1&sandbox={sb['id']}")
        names = ";".join(f"b{i}-{secrets.token_hex(3)}.evil.test" for i in range(1500))
        st, out = d.call("POST", f"/v1/sandboxes/{sb['id']}/exec", {"argv": [PY, "-c", (
            "import socket,sys\n"
            "for n in sys.argv[1].split(';'):\n"
            "    try: socket.getaddrinfo(n, 80, socket.AF_INET)\n"
            "    except OSError: pass\n"), names], "timeout_s": 120})
        assert st == 200, out
        rss = int(open(f"/proc/{d.proc.pid}/status").read().split("VmRSS:")[1].split()[0])
        r = c.getresponse()
        lagged = None
        c.sock.settimeout(30)
        for _ in range(5000):
            line = r.readline()
            if not line:
                break
            e = json.loads(line)
            if e["kind"] == "lagged":
                lagged = e
                break
        # The gap is told once there is room again, before the next event.
        assert lagged and lagged["dropped"] > 0, lagged
        assert rss < 200_000, f"cordond grew to {rss} kB"
        c.close()
    finally:
        d.stop()
