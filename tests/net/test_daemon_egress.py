"""Egress through cordond: the policy given at create, a live change with
PUT /v1/sandboxes/{id}/network, and every decision in the sandbox's audit log with its verdict
and rule. cordond runs in the machine-under-test namespace of the fake internet (conftest),
so nothing it lets out can reach anything but the test's own servers.
"""

import http.client
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

from conftest import PY, REPO, RUNTIME, WEB1, WEB2, token, wait_until

CORDOND = os.path.join(os.environ.get("CORDON_BUILD", os.path.join(REPO, "build")), "cordond")


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=60)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(60)
        self.sock.connect(self.unix_path)


class Daemon:
    def __init__(self, net, extra=()):
        self.root = tempfile.mkdtemp(prefix="cordtest-daemon-")
        self.sock = os.path.join(self.root, "cordon.sock")
        self.log = open(os.path.join(self.root, "cordond.log"), "wb")
        argv = net.argv([])[:-1] + [CORDOND, "--socket", self.sock, "--state-dir",
                                     os.path.join(self.root, "state"), "--runtime-dir",
                                     os.path.join(self.root, "run"), "--pool", "1"] + list(extra)
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=self.log, start_new_session=True)
        assert wait_until(lambda: os.path.exists(self.sock), 15), self.tail()

    def tail(self):
        with open(os.path.join(self.root, "cordond.log"), "rb") as f:
            return f.read()[-3000:].decode(errors="replace")

    def call(self, method, path, body=None, raw=None):
        c = UnixHTTP(self.sock)
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        c.request(method, path, body=data)
        r = c.getresponse()
        out = r.read()
        c.close()
        return r.status, out

    def json(self, method, path, body=None, status=200):
        if method == "POST" and path == "/v1/sandboxes" and isinstance(body, dict):
            body = dict(body, runtime=RUNTIME)  # the runtime this run of the suite is on
        st, out = self.call(method, path, body)
        assert st == status, f"{method} {path} -> {st} {out[:500]!r}\n{self.tail()}"
        return json.loads(out) if out else None

    def stop(self):
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def daemon(net):
    if not os.path.exists(CORDOND):
        pytest.skip(f"{CORDOND} not built")
    d = Daemon(net)
    yield d
    d.stop()


def put_client(d, net, sid):
    """Uploads the probe and the test CA into the sandbox (cordond sandboxes get no binds)."""
    for src, dst in ((net.client, "/home/user/netclient.py"), (net.ca, "/home/user/ca.pem")):
        with open(src, "rb") as f:
            st, out = d.call("PUT", f"/v1/sandboxes/{sid}/files?path={dst}", raw=f.read())
        assert st == 200, out


def probe(d, sid, ops):
    r = d.json("POST", f"/v1/sandboxes/{sid}/exec",
               {"argv": [PY, "/home/user/netclient.py", json.dumps(ops)], "timeout_s": 60,
                "env": {"NETCLIENT_CA": "/home/user/ca.pem"}})
    assert r["exit_code"] == 0, r
    return json.loads(r["stdout"].strip().splitlines()[-1])


def decisions(d, sid):
    st, out = d.call("GET", f"/v1/sandboxes/{sid}/audit")
    assert st == 200
    recs = [json.loads(l) for l in out.decode().splitlines() if l.strip()]
    return [r["fields"] for r in recs if r["event"] == "net.decision"]


def test_create_policy_live_change_and_audit(net, daemon):
    sb = daemon.json("POST", "/v1/sandboxes", {"network": {"policy": "allow", "allow": ["api.example.test"]}},
                     status=201)
    sid = sb["id"]
    assert sb["network"] == {"policy": "allow", "allow": ["api.example.test"]}, sb
    put_client(daemon, net, sid)
    p1, p2 = token(), token()
    res = probe(daemon, sid, [
        {"op": "http", "connect": "api.example.test", "host": "api.example.test", "path": p1},
        {"op": "http", "connect": WEB1, "host": "evil.test", "path": p2},
    ])
    assert res[0].get("reached") and res[0]["body"]["path"] == p1, res[0]
    assert not res[1].get("reached"), res[1]

    # Every attempt is in the audit log, with its verdict and the rule that decided it.
    got = decisions(daemon, sid)
    allowed = [f for f in got if f["action"] == "allow" and f["host"] == "api.example.test" and f["port"] == 80]
    denied = [f for f in got if f["action"] == "deny" and f["host"] == "evil.test" and f["port"] == 80]
    assert allowed and allowed[0]["rule"] == "api.example.test", got
    assert denied and not denied[0].get("rule"), got
    dns = [f for f in got if f.get("proto") == "dns" and f["host"] == "api.example.test"]
    assert dns and dns[0]["action"] == "allow", f"the DNS query is a decision too: {got}"

    # A live change applies to the next connection: now evil.test only.
    pol = daemon.json("PUT", f"/v1/sandboxes/{sid}/network", {"policy": "allow", "allow": ["evil.test"]})
    assert pol == {"policy": "allow", "allow": ["evil.test"]}, pol
    p3, p4 = token(), token()
    res = probe(daemon, sid, [
        {"op": "http", "connect": WEB1, "host": "evil.test", "path": p3},
        {"op": "http", "connect": WEB2, "host": "api.example.test", "path": p4},
    ])
    assert res[0].get("reached") and res[0]["body"]["path"] == p3, res[0]
    assert not res[1].get("reached"), res[1]
    st, out = daemon.call("GET", f"/v1/sandboxes/{sid}/audit")
    changes = [json.loads(l) for l in out.decode().splitlines() if '"policy.change"' in l]
    assert changes and changes[-1]["fields"]["allow"] == ["evil.test"], changes

    # Blocked attempts are counted in /metrics.
    st, out = daemon.call("GET", "/metrics")
    blocked = [l for l in out.decode().splitlines() if l.startswith("cordon_net_blocked_total ")]
    assert blocked and float(blocked[0].split()[1]) >= 2, blocked


def test_deny_sandbox_gets_a_network_live(net, daemon):
    sb = daemon.json("POST", "/v1/sandboxes", {}, status=201)
    sid = sb["id"]
    put_client(daemon, net, sid)
    p1, p2 = token(), token()
    res = probe(daemon, sid, [{"op": "http", "connect": WEB2, "host": "api.example.test", "path": p1}])
    assert not res[0].get("reached"), f"a deny sandbox reached the internet: {res[0]}"
    daemon.json("PUT", f"/v1/sandboxes/{sid}/network", {"policy": "public"})
    res = probe(daemon, sid, [{"op": "http", "connect": "api.example.test", "host": "api.example.test", "path": p2}])
    assert res[0].get("reached") and res[0]["body"]["path"] == p2, res[0]


def test_refused_rule_changes_nothing(net, daemon):
    sb = daemon.json("POST", "/v1/sandboxes", {"network": {"policy": "allow", "allow": ["api.example.test"]}},
                     status=201)
    st, out = daemon.call("PUT", f"/v1/sandboxes/{sb['id']}/network",
                          {"policy": "allow", "allow": ["169.254.169.254"]})
    assert st == 400 and b"invalid_field" in out, out
    info = daemon.json("GET", f"/v1/sandboxes/{sb['id']}")
    assert info["network"] == {"policy": "allow", "allow": ["api.example.test"]}, info
    st, out = daemon.call("POST", "/v1/sandboxes", {"network": {"policy": "allow", "allow": ["10.0.0.0/8"]}})
    assert st == 400 and b"10.0.0.0/8" in out, out


def test_egress_limits_are_configurable(net):
    """--egress-limits reaches the proxy: with 2 new connections per second, a burst of 8 is
    mostly refused, and the audit log says why."""
    if not os.path.exists(CORDOND):
        pytest.skip(f"{CORDOND} not built")
    d = Daemon(net, ["--egress-limits", "256,2,16777216"])
    try:
        sb = d.json("POST", "/v1/sandboxes", {"network": {"policy": "allow", "allow": ["api.example.test"]}},
                    status=201)
        put_client(d, net, sb["id"])
        t0 = time.monotonic()
        res = probe(d, sb["id"], [{"op": "http", "connect": WEB2, "host": "api.example.test", "path": token()}
                                  for _ in range(8)])
        elapsed = time.monotonic() - t0
        reached = sum(1 for r in res if r.get("reached"))
        # 2 a second, and a slow (loaded) machine spreads the burst over more seconds
        most = 2 * (math.ceil(elapsed) + 1)
        assert 1 <= reached <= min(most, 7), \
            f"{reached} of 8 got through a 2-per-second limit in {elapsed:.1f}s: {res}"
        why = [f.get("reason") for f in decisions(d, sb["id"]) if f["action"] == "deny"]
        assert "too many new connections per second" in why, why
    finally:
        d.stop()
    tmp = tempfile.mkdtemp(prefix="cordtest-daemon-")
    try:
        st = subprocess.run(net.argv([])[:-1] + [CORDOND, "--egress-limits", "0,1,2", "--socket",
                                                 os.path.join(tmp, "s.sock"), "--state-dir",
                                                 os.path.join(tmp, "state"), "--pool", "0"],
                            capture_output=True, timeout=30)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert st.returncode != 0 and b"EGRESS_LIMITS" in st.stderr, st.stderr[-2000:]
