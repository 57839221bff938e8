"""Egress profiles: named networks in cordond's configuration (--network-profiles), listed by
GET /v1/network-profiles and named at create ({"network": {"profile": "packages"}}). A client
may narrow its profile (a smaller policy, fewer hosts, more approvals) but widen it only from
the unix socket or with an API key that has the widen-network permission; secrets only for
the profile's secret_hosts. TCP clients are reached inside the machine-under-test namespace,
where cordond listens."""

import json
import os
import secrets

import pytest

from conftest import PY, wait_until
from test_daemon_egress import CORDOND, Daemon
from test_daemon_secrets import answering, put_client, run

PROFILES = {
    "packages": {"description": "the package registries only", "policy": "allow",
                 "allow": ["api.example.test", "*.cdn.test"], "secret_hosts": ["api.example.test"],
                 "limits": {"connections": 3}},
    "research": {"description": "the public web, approvals on POST", "policy": "public",
                 "approve": [{"approve": "api.example.test", "methods": ["POST"], "timeout_s": 30}]},
}
KEY, WIDE = "k-" + secrets.token_hex(12), "w-" + secrets.token_hex(12)

TCP_CLIENT = r'''
import http.client, json, sys
port, key, method, path, body = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=30)
c.request(method, path, body=body or None, headers={"Authorization": "Bearer " + key})
r = c.getresponse()
print(json.dumps({"status": r.status, "body": r.read().decode()}))
'''


@pytest.fixture
def pd(net, tmp_path, monkeypatch):
    if not os.path.exists(CORDOND):
        pytest.skip(f"{CORDOND} not built")
    monkeypatch.setenv("CORDON_EGRESS_UPSTREAM_CA", net.ca)
    prof, keys, apt = tmp_path / "profiles.json", tmp_path / "keys", tmp_path / "sources.list"
    apt.write_text("deb [arch=amd64] http://api.example.test/debian bookworm main\n"
                   "deb https://evil.test/debian-security bookworm-security main\n"
                   "# deb http://commented.test/debian bookworm main\n")
    monkeypatch.setenv("CORDON_APT_SOURCES", str(apt))  # the builder's mirrors, as cordond reads them
    prof.write_text(json.dumps(PROFILES))
    keys.write_text(f"{KEY} tenant 10\n{WIDE} admin 10 widen-network\n")
    port = 19000 + secrets.randbelow(20000)
    d = answering(Daemon(net, ["--network-profiles", str(prof), "--api-keys", str(keys),
                               "--listen", f"127.0.0.1:{port}"]))
    d.port = port
    d.script = str(tmp_path / "tcp.py")
    with open(d.script, "w") as f:
        f.write(TCP_CLIENT)
    yield d
    d.stop()


def tcp(net, d, key, method, path, body=None):
    r = net.host_exec(PY, d.script, str(d.port), key, method, path, json.dumps(body) if body is not None else "")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    return out["status"], out["body"]


def test_the_list_and_a_create_that_names_one(pd, net):
    got = pd.json("GET", "/v1/network-profiles")["profiles"]
    assert [p["name"] for p in got] == ["packages", "research", "build"], got
    assert got[0]["allow"] == ["api.example.test", "*.cdn.test"] and got[0]["policy"] == "allow"
    assert got[1]["approve"][0]["methods"] == ["POST"]
    sb = pd.json("POST", "/v1/sandboxes", {"network": {"profile": "packages"}}, status=201)
    assert sb["network"]["profile"] == "packages" and sb["network"]["allow"] == ["api.example.test", "*.cdn.test"], sb
    put_client(pd, sb["id"])
    t = secrets.token_hex(4)
    res, _ = run(pd, sb["id"], [{"op": "req", "tls": False, "port": 80, "path": f"/p-{t}"},
                                {"op": "req", "tls": False, "port": 80, "sni": "evil.test", "path": f"/e-{t}"}])
    assert res[0]["reached"] and not res[1]["reached"], res
    # The profile's egress limits: 3 connections at once, the server's 256 otherwise.
    assert sb["network"]["limits"] == {"connections": 3}
    held = run(pd, sb["id"], [{"op": "hold", "n": 6, "port": 80}])[0][0]
    assert held["open"] == 3 and held["refused"] == 3, held
    # "build", built in: the builder's registry-only network, the host's apt mirrors
    assert got[2]["allow"] == ["api.example.test:80", "evil.test:443"] and got[2]["policy"] == "allow", got[2]
    sb = pd.json("POST", "/v1/sandboxes", {"network": {"profile": "build"}}, status=201)
    put_client(pd, sb["id"])
    res, _ = run(pd, sb["id"], [{"op": "req", "tls": False, "port": 80, "path": f"/b-{t}"},
                                {"op": "req", "path": f"/b443-{t}"}])
    assert res[0]["reached"] and not res[1]["reached"], res
    st, out = pd.call("POST", "/v1/sandboxes", {"network": {"profile": "nope"}})
    assert st == 400 and b"invalid_field" in out and b"nope" in out, out


def test_narrowing_is_anyones_widening_needs_the_permission(pd, net):
    narrower = [{"profile": "packages", "allow": ["api.example.test:443"]},
                {"profile": "packages", "policy": "deny"},
                {"profile": "research", "allow": ["evil.test"]},  # public narrowed to one host
                {"profile": "packages", "approve": [{"approve": "a.cdn.test"}]}]
    wider = [{"profile": "packages", "allow": ["evil.test"]},
             {"profile": "packages", "policy": "public"},
             {"profile": "packages", "allow": ["*.example.test"]},
             {"profile": "packages", "approve": [{"approve": "evil.test"}]}]
    for n in narrower:
        st, out = tcp(net, pd, KEY, "POST", "/v1/sandboxes", {"network": n})
        assert st == 201, (n, out)
        sid = json.loads(out)["id"]
        assert tcp(net, pd, KEY, "DELETE", f"/v1/sandboxes/{sid}")[0] == 204
    for n in wider:
        st, out = tcp(net, pd, KEY, "POST", "/v1/sandboxes", {"network": n})
        assert st == 403 and "forbidden" in out and "packages" in out, (n, st, out)
        st, out = tcp(net, pd, WIDE, "POST", "/v1/sandboxes", {"network": n})
        assert st == 201, (n, out)
        assert tcp(net, pd, WIDE, "DELETE", f"/v1/sandboxes/{json.loads(out)['id']}")[0] == 204
    # A live change is held to the same rule.
    st, out = tcp(net, pd, KEY, "POST", "/v1/sandboxes", {"network": {"profile": "packages"}})
    sid = json.loads(out)["id"]
    st, out = tcp(net, pd, KEY, "PUT", f"/v1/sandboxes/{sid}/network", {"profile": "packages", "allow": ["evil.test"]})
    assert st == 403, out
    st, out = tcp(net, pd, KEY, "PUT", f"/v1/sandboxes/{sid}/network", {"profile": "packages", "allow": ["a.cdn.test"]})
    assert st == 200 and json.loads(out)["allow"] == ["a.cdn.test"], out
    # Secrets only for the profile's secret_hosts.
    sec = {"K": {"value": "v-" + secrets.token_hex(8), "hosts": ["a.cdn.test"]}}
    st, out = tcp(net, pd, KEY, "POST", "/v1/sandboxes", {"network": {"profile": "packages"}, "secrets": sec})
    assert st == 403 and "secret_hosts" in out and sec["K"]["value"] not in out, out


def test_a_profile_with_approvals(pd, net):
    sb = pd.json("POST", "/v1/sandboxes", {"network": {"profile": "research"}}, status=201)
    assert sb["network"]["policy"] == "public" and sb["network"]["approve"][0]["approve"] == "api.example.test"
    put_client(pd, sb["id"])
    import threading
    out = {}
    t = threading.Thread(target=lambda: out.update(r=run(pd, sb["id"], [
        {"op": "req", "method": "POST", "path": "/x", "body": "a=1", "timeout": 40}])[0][0]), daemon=True)
    t.start()
    aps = wait_until(lambda: pd.json("GET", "/v1/approvals")["approvals"], 20)
    if not aps:
        t.join(40)
        print(out, pd.tail(), pd.call("GET", f"/v1/sandboxes/{sb['id']}/audit")[1].decode()[-3000:])
    assert aps and aps[0]["sandbox"] == sb["id"] and aps[0]["rule"] == "approve api.example.test", aps
    assert pd.call("POST", f"/v1/approvals/{aps[0]['id']}", {"decision": "allow"})[0] == 200
    t.join(40)
    assert out["r"]["reached"], out
