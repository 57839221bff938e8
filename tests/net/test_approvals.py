"""Approval gates through cordond: a sandbox's approve rule holds a matching request in
cordon-egress (HTTPS read through the Cordon CA's interception, plain HTTP's head read as it
is) until a person decides through /v1/approvals (or the CLI); allowed, the request reaches
the fake API as it was sent; denied or timed out, the sandbox gets a 403 from the proxy that
says it was denied by policy, and the API sees nothing. Each request, decision, decider and
timeout is in the sandbox's audit log and the events; the pending approvals are bounded per
sandbox; a sandbox destroyed while a request is held loses the connection and the approval."""

import json
import os
import secrets
import subprocess
import threading
import time

import pytest

from conftest import REPO, wait_until
from test_daemon_secrets import api_seen, audit, put_client, run, sd  # noqa: F401 (sd: the fixture)
from test_events import Follow

CORDON = os.path.join(os.environ.get("CORDON_BUILD", os.path.join(REPO, "build")), "cordon")
RULE = {"approve": "api.example.test", "methods": ["POST"], "paths": ["/v1/charges"], "timeout_s": 60}


def sandbox(d, rules=(RULE,), **extra):
    body = {"network": {"policy": "allow", "allow": [], "approve": list(rules)}}
    body.update(extra)
    sb = d.json("POST", "/v1/sandboxes", body, status=201)
    put_client(d, sb["id"])
    return sb["id"]


class Bg:
    """run() in a thread: the sandbox's requests wait while the test decides."""

    def __init__(self, d, sid, ops):
        self.out = None
        self.t = threading.Thread(target=self._go, args=(d, sid, ops), daemon=True)
        self.t.start()

    def _go(self, d, sid, ops):
        try:
            self.out = run(d, sid, ops)[0]
        except Exception as e:  # noqa: BLE001 - read by the test
            self.out = e

    def join(self, timeout=90):
        self.t.join(timeout)
        assert not self.t.is_alive(), "the sandbox's requests did not end"
        assert not isinstance(self.out, Exception), self.out
        return self.out


def pending(d, n=1, timeout=20):
    got = wait_until(lambda: len(d.json("GET", "/v1/approvals")["approvals"]) >= n and
                     d.json("GET", "/v1/approvals")["approvals"], timeout)
    if not got:
        print(d.tail())
        for s in d.json("GET", "/v1/sandboxes")["sandboxes"]:
            print(audit(d, s["id"]))
    assert got, "no approval pending"
    return got


def charge(mark, tls=True, body="amount=100", **kw):
    return dict({"op": "req", "method": "POST", "path": f"/v1/charges/{mark}", "body": body, "tls": tls,
                 "timeout": 60, "headers": {"Authorization": "Bearer {PH}"}}, **kw)


def records(d, sid, event):
    return [json.loads(line)["fields"] for line in audit(d, sid).splitlines() if json.loads(line)["event"] == event]


@pytest.mark.parametrize("tls", [True, False], ids=["https", "http"])
def test_held_then_allowed_reaches_the_api(sd, net, tls):
    sid = sandbox(sd, secrets={"API_KEY": {"value": "sk-ap-" + secrets.token_hex(8), "hosts": ["api.example.test"]}}) \
        if tls else sandbox(sd)
    mark = f"-{secrets.token_hex(4)}"
    bg = Bg(sd, sid, [charge(mark, tls=tls, headers={"Authorization": "Bearer {PH}"} if tls else {})])
    ap = pending(sd)[0]
    assert "cordon_approvals_pending 1\n" in sd.call("GET", "/metrics")[1].decode()
    assert ap["sandbox"] == sid and ap["method"] == "POST" and ap["host"] == "api.example.test"
    assert ap["path"] == f"/v1/charges/{mark}" and ap["timeout_s"] == 60 and ap["age_s"] >= 0
    assert ap["preview"]["body"] == "amount=100", ap
    if tls:  # the placeholder is shown by name, never as it is (nor the value)
        auth = [v for k, v in ap["preview"]["headers"] if k.lower() == "authorization"][0]
        assert auth == "Bearer [secret API_KEY]", ap["preview"]
    time.sleep(1.5)
    assert not api_seen(net, None, f"/v1/charges/{mark}"), "the held request went out"
    st, out = sd.call("POST", f"/v1/approvals/{ap['id']}", {"decision": "allow", "reason": "ok by ops"})
    assert st == 200 and json.loads(out)["decider"] == "local", out
    r = bg.join()[0]
    assert r["reached"] and r["status_line"].endswith("200 OK"), r
    assert r["elapsed"] >= 1.5, r  # a slow answer, not an error
    assert api_seen(net, None, f"/v1/charges/{mark}")
    assert sd.json("GET", "/v1/approvals")["approvals"] == []
    assert "cordon_approvals_pending 0\n" in sd.call("GET", "/metrics")[1].decode()
    req, dec = records(sd, sid, "approval.request"), records(sd, sid, "approval.decision")
    assert [(x["id"], x["method"], x["host"], x["path"]) for x in req] == [(ap["id"], "POST", "api.example.test", f"/v1/charges/{mark}")]
    assert [(x["decision"], x["decider"], x["reason"]) for x in dec] == [("allow", "local", "ok by ops")]
    # The connection itself was let through by the approve rule (the allow list is empty).
    assert {"approve api.example.test"} == {x["rule"] for x in records(sd, sid, "net.decision")
                                            if x["action"] == "allow" and x["proto"] != "dns"}
    st, out = sd.call("POST", f"/v1/approvals/{ap['id']}", {"decision": "deny"})  # decided already
    assert st == 404 and b"not_found" in out, out


@pytest.mark.parametrize("decision", ["allow", "deny"])
def test_a_server_that_closes_while_the_request_waits(sd, net, decision):
    """The fake API on 8444 closes a connection idle for 1 s, as real servers do: an approval
    that takes longer dials it again (and verifies it again) rather than losing the request."""
    sid = sandbox(sd, rules=[dict(RULE, approve="api.example.test:8444")])
    mark = secrets.token_hex(4)
    bg = Bg(sd, sid, [charge(f"/{mark}", port=8444, host="api.example.test:8444")])
    ap = pending(sd)[0]
    time.sleep(2.5)  # the server has hung up by now
    st, out = sd.call("POST", f"/v1/approvals/{ap['id']}", {"decision": decision})
    assert st == 200, out
    r = bg.join()[0]
    if decision == "allow":
        assert r["reached"] and r["status_line"].endswith("200 OK"), r
        assert api_seen(net, None, f"/v1/charges//{mark}") or api_seen(net, None, f"/v1/charges/{mark}")
    else:
        assert r["status_line"].startswith("HTTP/1.1 403"), r


def test_requests_the_rule_does_not_name_are_not_held(sd, net):
    sid = sandbox(sd)
    mark = secrets.token_hex(4)
    res, _ = run(sd, sid, [{"op": "req", "path": f"/v1/charges-{mark}", "timeout": 20},  # GET
                           charge(f"x-{mark}", path=f"/v1/chargesx-{mark}"),  # /v1/chargesx: not under the prefix
                           {"op": "req", "method": "POST", "path": f"/v1/refunds-{mark}", "body": "a=1"}])
    assert all(r["reached"] for r in res), res
    assert all(r["elapsed"] < 10 for r in res), res
    assert records(sd, sid, "approval.request") == []


def test_a_path_written_another_way_is_held_too(sd, net):
    """The prefix is matched against the path as the server reads it; a path the proxy cannot
    read (a bad escape) is held rather than let through."""
    sid = sandbox(sd)
    held = ["/v1/%63harges/x", "//v1/charges/x", "/v1/a/../charges/x", "/v1/./charges", "/v1;a=b/charges/x",
            "/x%zz"]
    bg = Bg(sd, sid, [{"op": "par", "ops": [charge("", path=p) for p in held + ["/V1/charges/x"]]}])
    pending(sd, len(held))
    time.sleep(1)
    aps = sd.json("GET", "/v1/approvals")["approvals"]
    assert sorted(a["path"] for a in aps) == sorted(held), aps
    for a in aps:
        assert sd.call("POST", f"/v1/approvals/{a['id']}", {"decision": "deny"})[0] == 200
    res = bg.join()[0]["results"]
    assert all(r["status_line"].startswith("HTTP/1.1 403") for r in res[:-1]), res
    assert res[-1]["reached"], res[-1]  # another path (paths are case-sensitive): not held


def test_denied_and_timed_out_get_403_from_the_proxy(sd, net):
    sid = sandbox(sd, rules=[RULE, dict(RULE, paths=["/v1/slow"], timeout_s=2)])
    mark = secrets.token_hex(4)
    fol = Follow(sd, f"&sandbox={sid}")
    bg = Bg(sd, sid, [charge(f"-{mark}")])
    ap = pending(sd)[0]
    st, out = sd.call("POST", f"/v1/approvals/{ap['id']}", {"decision": "deny", "reason": "not today"})
    assert st == 200, out
    r = bg.join()[0]
    assert r["status_line"].startswith("HTTP/1.1 403") and not r["reached"], r
    assert "denied by policy" in r["raw"] and "not today" in r["raw"], r["raw"]
    t0 = time.monotonic()
    r = run(sd, sid, [charge(f"-{mark}", path=f"/v1/slow/{mark}")])[0][0]
    assert r["status_line"].startswith("HTTP/1.1 403") and "denied by policy" in r["raw"], r
    assert 1.5 < time.monotonic() - t0 < 20
    assert not api_seen(net, None, f"/v1/charges/-{mark}") and not api_seen(net, None, f"/v1/slow/{mark}")
    dec = records(sd, sid, "approval.decision")
    assert [(x["decision"], x["decider"]) for x in dec] == [("deny", "local"), ("deny", "timeout")], dec
    kinds = []
    fol.read_until(lambda e: kinds.append(e["kind"]) or (kinds.count("approval.decided") == 2), 20)
    fol.close()
    assert kinds == ["approval.pending", "approval.decided"] * 2, kinds
    metrics = sd.call("GET", "/metrics")[1].decode()
    assert 'cordon_events_total{kind="approval.pending"} 2' in metrics
    assert 'cordon_events_total{kind="approval.decided"} 2' in metrics


def test_pending_approvals_are_bounded_per_sandbox(sd, net):
    sid = sandbox(sd)
    mark = secrets.token_hex(4)
    bg = Bg(sd, sid, [{"op": "par", "ops": [charge(f"-{mark}-{i}") for i in range(9)]}])
    aps = pending(sd, 8)
    time.sleep(1)
    assert len(sd.json("GET", "/v1/approvals")["approvals"]) == 8
    refused = [x for x in records(sd, sid, "approval.decision") if x["decider"] == "limit"]
    assert len(refused) == 1 and "too many" in refused[0]["reason"], refused
    for ap in aps:
        assert sd.call("POST", f"/v1/approvals/{ap['id']}", {"decision": "deny"})[0] == 200
    res = bg.join()[0]["results"]
    assert all(r["status_line"].startswith("HTTP/1.1 403") for r in res), res
    assert sum("too many" in r["raw"] for r in res) == 1, [r["raw"] for r in res]


def test_a_sandbox_destroyed_while_a_request_is_held(sd, net):
    sid = sandbox(sd)
    bg = Bg(sd, sid, [charge("-gone")])
    pending(sd)
    assert sd.call("DELETE", f"/v1/sandboxes/{sid}")[0] == 204
    assert wait_until(lambda: sd.json("GET", "/v1/approvals")["approvals"] == [], 10)
    bg.t.join(30)  # its exec ends with the sandbox
    assert not bg.t.is_alive()
    assert not api_seen(net, None, "/v1/charges/-gone")
    # cordond and its proxy go on: a new sandbox's request is held and answered.
    sid2 = sandbox(sd)
    bg = Bg(sd, sid2, [charge("-after")])
    ap = pending(sd)[0]
    assert ap["sandbox"] == sid2
    assert sd.call("POST", f"/v1/approvals/{ap['id']}", {"decision": "allow"})[0] == 200
    assert bg.join()[0]["reached"]


def test_a_client_that_gives_up_ends_its_approval(sd, net):
    sid = sandbox(sd)
    r = run(sd, sid, [charge("-quit", timeout=2)])[0][0]  # reads for 2 s, then closes
    assert not r["reached"], r
    assert wait_until(lambda: sd.json("GET", "/v1/approvals")["approvals"] == [], 10)
    dec = records(sd, sid, "approval.decision")
    assert [(x["decision"], x["decider"]) for x in dec] == [("closed", "sandbox")], dec
    assert not api_seen(net, None, "/v1/charges/-quit")


def test_the_cli(sd, net):
    sid = sandbox(sd)
    env = dict(os.environ, CORDON_SOCKET=sd.sock)
    fol = subprocess.Popen([CORDON, "approvals", "--follow", "--socket", sd.sock], stdout=subprocess.PIPE,
                           text=True, env=env, start_new_session=True)
    bg = Bg(sd, sid, [charge("-cli")])
    ap = pending(sd)[0]
    line = fol.stdout.readline()
    assert ap["id"] in line and "pending" in line, line

    def cli(*args):
        return subprocess.run([CORDON, *args, "--socket", sd.sock], capture_output=True, text=True, timeout=30, env=env)
    r = cli("approvals")
    assert r.returncode == 0 and ap["id"] in r.stdout and "POST" in r.stdout and "/v1/charges/-cli" in r.stdout, r
    r = cli("deny", ap["id"], "--reason", "by the cli")
    assert r.returncode == 0, r
    out = bg.join()[0]
    assert "by the cli" in out["raw"], out
    line = fol.stdout.readline()
    assert ap["id"] in line and "deny by local" in line, line
    fol.kill()
    fol.wait()
    r = cli("approve", ap["id"])
    assert r.returncode != 0 and "not_found" in (r.stderr + r.stdout), r


def test_bad_bodies_and_rules(sd):
    st, out = sd.call("POST", "/v1/approvals/ap-1", {"decision": "maybe"})
    assert st == 400 and b"invalid_field" in out, out
    st, out = sd.call("POST", "/v1/approvals/ap-1", {"reason": "x"})
    assert st == 400, out
    st, out = sd.call("POST", "/v1/approvals/ap-1", {"decision": "allow", "extra": 1})
    assert st == 400 and b"unknown_field" in out, out
    st, out = sd.call("POST", "/v1/approvals/ap-1", {"decision": "allow", "reason": "a\nb"})
    assert st == 400, out
    st, out = sd.call("POST", "/v1/approvals/ap-1", {"decision": "allow"})
    assert st == 404 and b"not_found" in out, out
    for bad in ({"approve": "10.0.0.0/8"}, {"approve": "api.example.test", "methods": ["post"]},
                {"approve": "api.example.test", "paths": ["v1"]}, {"methods": ["POST"]},
                {"approve": "api.example.test", "timeout_s": 0}, {"approve": "*"}):
        try:
            st, out = sd.call("POST", "/v1/sandboxes", {"network": {"policy": "allow", "approve": [bad]}})
        except OSError:
            print(bad, sd.tail())
            raise
        assert st == 400, (bad, out)


def test_the_sdk(sd, net):
    import sys
    sys.path.insert(0, os.path.join(REPO, "sdk", "python"))
    from cordon import Approvals, Sandbox
    seen = []

    def review(ap):
        seen.append(ap)
        if ap.path.startswith("/v1/other/"):
            return None  # left to someone else
        return "/ok/" in ap.path  # allow those, deny the rest
    sbx = Sandbox.create(network={"policy": "allow", "allow": [], "approve": [dict(RULE, paths=["/v1/charges", "/v1/other"])]},
                         on_approval=review, socket=sd.sock)
    try:
        put_client(sd, sbx.id)
        mark = secrets.token_hex(4)
        res, _ = run(sd, sbx.id, [charge(f"ok/{mark}"), charge(f"no/{mark}")])
        assert res[0]["reached"], res
        assert res[1]["status_line"].startswith("HTTP/1.1 403"), res
        assert [(a.method, a.path, a.sandbox) for a in seen] == [
            ("POST", f"/v1/charges/ok/{mark}", sbx.id), ("POST", f"/v1/charges/no/{mark}", sbx.id)]
        # By hand, through Approvals.
        bg = Bg(sd, sbx.id, [charge(f"x/{mark}", path=f"/v1/other/{mark}")])
        aps = Approvals(socket=sd.sock)
        got = wait_until(lambda: [a for a in aps.list(sandbox=sbx.id) if a.path == f"/v1/other/{mark}"], 20)
        assert got, seen
        assert got[0].allow(reason="by hand")["decider"] == "local"
        assert bg.join()[0]["reached"]
    finally:
        sbx.kill()
    assert not sbx._watcher.is_alive() or sbx._watcher.join(10) is None
