"""Egress policies, end to end: `cordon run` in the machine-under-test namespace, probes from
inside the sandbox (netclient.py), and the fake internet's own logs as the second witness.

A probe's "reached" is true only when a fake server's answer came back; every blocked case
is also checked on the far side: the request's unique path never shows up in any log.
"""

import pytest

from conftest import (DNS_IP, EXIT_USAGE, HOST_IP, METADATA, PRIVATE, PY, WEB1, WEB2, token)


def by_op(results):
    return [(r["op"], r) for r in results]


def assert_reached(r, server=None, **fields):
    assert r.get("reached"), f"expected to reach the fake internet: {r}"
    body = r["body"]
    if server is not None:
        assert body["server"] == server, f"reached the wrong server: {r}"
    for k, v in fields.items():
        assert body.get(k) == v, f"{k}: expected {v!r}: {r}"


def assert_blocked(r):
    assert not r.get("reached"), f"expected to be blocked, but reached a server: {r}"


def assert_paths_unseen(net, mark, paths):
    seen = [rec for rec in net.seen(mark) if rec.get("path") in paths or rec.get("data") in paths]
    assert not seen, f"blocked requests arrived at a server anyway: {seen}"


def dns_names(net, mark):
    return [rec for rec in net.seen(mark, settle=0) if rec["kind"] == "dns"]


# ---- deny ----

@pytest.mark.parametrize("net_opts", [[], ["--net", "none"]], ids=["default", "none"])
def test_none_reaches_nothing(net, net_opts):
    m = net.mark()
    p = [token() for _ in range(5)]
    _, res = net.probe(net_opts, [
        {"op": "resolve", "name": "api.example.test"},
        {"op": "urllib", "url": f"https://api.example.test{p[0]}"},
        {"op": "http", "connect": WEB1, "host": "evil.test", "path": p[1]},
        {"op": "https", "connect": WEB2, "sni": "api.example.test", "path": p[2], "verify": False},
        {"op": "echo", "connect": WEB1, "port": 22, "data": p[3]},
        {"op": "dns", "server": DNS_IP, "name": "api.example.test"},
        {"op": "dns", "server": DNS_IP, "name": "api.example.test", "tcp": True},
        {"op": "udp", "connect": WEB1, "port": 7, "data": p[4]},
    ])
    assert not res[0]["ok"], f"a name resolved with --net none: {res[0]}"
    for r in res[1:5]:
        assert_blocked(r)
    for r in res[5:7]:
        assert not r.get("answered"), f"a DNS query was answered with --net none: {r}"
    seen = net.seen(m)
    assert seen == [], f"with --net none, the fake internet received: {seen}"


# ---- allow: names ----

def test_allow_name_reaches_it_over_https_and_http(net):
    m = net.mark()
    p1, p2, p3 = token(), token(), token()
    _, res = net.probe(["--allow", "api.example.test"], [
        {"op": "resolve", "name": "api.example.test"},
        {"op": "urllib", "url": f"https://api.example.test{p1}"},
        {"op": "urllib", "url": f"http://api.example.test{p2}"},
        {"op": "https", "connect": "api.example.test", "sni": "api.example.test", "path": p3},
    ])
    assert res[0]["ok"] and res[0]["addrs"] == [WEB2], f"api.example.test should resolve to {WEB2}: {res[0]}"
    assert_reached(res[1], f"{WEB2}:443", sni="api.example.test", host="api.example.test", path=p1)
    assert_reached(res[2], f"{WEB2}:80", host="api.example.test", path=p2)
    assert_reached(res[3], f"{WEB2}:443", sni="api.example.test", path=p3)
    # The far side saw the proxy (the host's address), never the sandbox.
    hits = [r for r in net.seen(m) if r.get("path") in (p1, p2, p3)]
    assert len(hits) == 3 and all(r["peer"] == HOST_IP for r in hits), hits


def test_allow_name_reaches_nothing_else(net):
    m = net.mark()
    p = {k: token(k) for k in ("evilhttp", "evilhttps", "ipliteral", "pinned", "hostdiff",
                               "urlevil", "echo", "ipsni")}
    _, res = net.probe(["--allow", "api.example.test"], [
        # 0-2: evil.test by name: DNS refused, no connection
        {"op": "resolve", "name": "evil.test"},
        {"op": "dns", "server": DNS_IP, "name": "evil.test"},
        {"op": "urllib", "url": f"http://evil.test{p['urlevil']}"},
        # 3-4: evil.test's address with its own name
        {"op": "http", "connect": WEB1, "host": "evil.test", "path": p["evilhttp"]},
        {"op": "https", "connect": WEB1, "sni": "evil.test", "path": p["evilhttps"], "verify": False},
        # 5: an IP literal, no name at all
        {"op": "http", "connect": WEB1, "host": WEB1, "path": p["ipliteral"]},
        # 6: /etc/hosts-style pinning: the allowed name's address, a forbidden SNI
        {"op": "https", "connect": WEB2, "sni": "evil.test", "path": p["pinned"], "verify": False},
        # 7: the allowed name's address, a forbidden Host header
        {"op": "http", "connect": WEB2, "host": "evil.test", "path": p["hostdiff"]},
        # 8: a port the name rule does not cover (default ports are 80 and 443)
        {"op": "echo", "connect": WEB2, "port": 22, "data": p["echo"]},
        # 9: an SNI IP address
        {"op": "https", "connect": WEB2, "sni": WEB2, "path": p["ipsni"], "verify": False},
    ])
    assert not res[0]["ok"], f"evil.test resolved: {res[0]}"
    assert res[1].get("answered") and res[1]["rcode"] == 5, f"expected REFUSED for evil.test: {res[1]}"
    for r in res[2:]:
        assert_blocked(r)
    assert_paths_unseen(net, m, set(p.values()))
    dns = dns_names(net, m)
    assert not [d for d in dns if d["qname"] != "api.example.test"], \
        f"the host's resolver was asked for names the policy does not allow: {dns}"


def test_allowed_sni_to_a_forbidden_ip_goes_to_the_name(net):
    """Allowed SNI (or Host) sent to another server's address: the proxy dials the *name*, so
    the answer comes from api.example.test's server, never from the address asked for."""
    m = net.mark()
    p1, p2, p3 = token(), token(), token()
    _, res = net.probe(["--allow", "api.example.test"], [
        {"op": "https", "connect": WEB1, "sni": "api.example.test", "path": p1},
        {"op": "http", "connect": WEB1, "host": "api.example.test", "path": p2},
        # Host inside TLS differs from the SNI: TLS is not terminated, so it can only ever
        # reach the SNI's server.
        {"op": "https", "connect": WEB2, "sni": "api.example.test", "host": "evil.test", "path": p3},
    ])
    assert_reached(res[0], f"{WEB2}:443", sni="api.example.test")
    assert_reached(res[1], f"{WEB2}:80", host="api.example.test")
    assert_reached(res[2], f"{WEB2}:443", sni="api.example.test")
    wrong = [r for r in net.seen(m) if r.get("path") in (p1, p2, p3) and not r["server"].startswith(WEB2 + ":")]
    assert not wrong, f"requests went to the address, not to the name: {wrong}"


def test_allowed_name_resolving_to_a_private_address_is_blocked(net):
    m = net.mark()
    p1, p2, p3, p4 = token(), token(), token(), token()
    _, res = net.probe(["--allow", "rebind.test"], [
        {"op": "urllib", "url": f"http://rebind.test{p1}"},
        {"op": "http", "connect": WEB1, "host": "rebind.test", "path": p2},
        {"op": "https", "connect": WEB2, "sni": "rebind.test", "path": p3, "verify": False},
        {"op": "http", "connect": PRIVATE, "host": "rebind.test", "path": p4},
        {"op": "resolve", "name": "rebind.test"},
    ])
    for r in res[:4]:
        assert_blocked(r)
    # If the DNS filter answers at all, it must not hand out the private address.
    assert PRIVATE not in res[4].get("addrs", []), f"the sandbox was told rebind.test is {PRIVATE}: {res[4]}"
    assert_paths_unseen(net, m, {p1, p2, p3, p4})
    assert not [r for r in net.seen(m, settle=0) if r.get("server", "").startswith(PRIVATE)]


def test_wildcard_matches_subdomains_only(net):
    m = net.mark()
    ok1, ok2, ok3 = token(), token(), token()
    bad = [token() for _ in range(6)]
    _, res = net.probe(["--allow", "*.cdn.test"], [
        {"op": "urllib", "url": f"https://a.cdn.test{ok1}"},
        {"op": "urllib", "url": f"http://b.cdn.test{ok2}"},
        {"op": "https", "connect": WEB1, "sni": "a.cdn.test", "path": ok3},
        # the apex is not matched
        {"op": "resolve", "name": "cdn.test"},
        {"op": "https", "connect": WEB2, "sni": "cdn.test", "path": bad[0], "verify": False},
        {"op": "http", "connect": WEB2, "host": "cdn.test", "path": bad[1]},
        # nor a name that merely ends the same way, nor one that contains it
        {"op": "http", "connect": WEB2, "host": "evilcdn.test", "path": bad[2]},
        {"op": "http", "connect": WEB1, "host": "a.cdn.test.evil.test", "path": bad[3]},
        {"op": "urllib", "url": f"http://cdn.test{bad[4]}"},
        {"op": "http", "connect": WEB1, "host": "evil.test", "path": bad[5]},
    ])
    assert_reached(res[0], f"{WEB2}:443", sni="a.cdn.test")
    assert_reached(res[1], f"{WEB2}:80", host="b.cdn.test")
    assert_reached(res[2], f"{WEB2}:443", sni="a.cdn.test")
    assert not res[3]["ok"], f"the apex cdn.test resolved under *.cdn.test: {res[3]}"
    for r in res[4:]:
        assert_blocked(r)
    assert_paths_unseen(net, m, set(bad))


# ---- allow: addresses ----

def test_ip_rule_with_port(net):
    m = net.mark()
    e1, e2, h1, h2 = token(), token(), token(), token()
    _, res = net.probe(["--allow", f"{WEB1}:22"], [
        {"op": "echo", "connect": WEB1, "port": 22, "data": e1},
        {"op": "http", "connect": WEB1, "port": 80, "host": "evil.test", "path": h1},
        {"op": "https", "connect": WEB1, "port": 443, "sni": "evil.test", "path": h2, "verify": False},
        {"op": "echo", "connect": WEB2, "port": 22, "data": e2},
        {"op": "resolve", "name": "evil.test"},
    ])
    assert res[0]["reached"], f"the raw TCP echo on {WEB1}:22 should work: {res[0]}"
    for r in res[1:4]:
        assert_blocked(r)
    assert not res[4]["ok"], f"an address rule made a name resolve: {res[4]}"
    hits = [r for r in net.seen(m) if r.get("data") == e1]
    assert hits and all(r["peer"] == HOST_IP for r in hits), hits
    assert_paths_unseen(net, m, {h1, h2})
    assert not [r for r in net.seen(m, settle=0) if r.get("data") == e2]


def test_cidr_rule_with_port(net):
    m = net.mark()
    e1, e2, h1 = token(), token(), token()
    _, res = net.probe(["--allow", "198.51.100.0/24:22"], [
        {"op": "echo", "connect": WEB1, "port": 22, "data": e1},
        {"op": "echo", "connect": WEB2, "port": 22, "data": e2},
        {"op": "http", "connect": WEB2, "port": 80, "host": "api.example.test", "path": h1},
    ])
    assert res[0]["reached"] and res[1]["reached"], res[:2]
    assert_blocked(res[2])
    assert_paths_unseen(net, m, {h1})


# ---- public ----

def test_public_reaches_the_internet(net):
    p1, p2, e1 = token(), token(), token()
    _, res = net.probe(["--net", "public"], [
        {"op": "urllib", "url": f"https://api.example.test{p1}"},
        {"op": "urllib", "url": f"http://evil.test{p2}"},
        {"op": "echo", "connect": WEB2, "port": 22, "data": e1},
    ])
    assert_reached(res[0], f"{WEB2}:443", sni="api.example.test")
    assert_reached(res[1], f"{WEB1}:80", host="evil.test")
    assert res[2]["reached"], f"public mode should reach any port of a public address: {res[2]}"


def test_public_never_reaches_metadata_private_or_the_host(net):
    """In public mode a public address is relayed as asked, so every case here names, by its
    address or through the sandbox's DNS, something always blocked; the Host/SNI cases are
    sent to a blocked address so that only a name the proxy resolves itself could get out."""
    m = net.mark()
    cases = [
        ("metadata by IP", {"op": "http", "connect": METADATA, "host": METADATA}),
        ("metadata by name", {"op": "http", "connect": "metadata.test", "host": "metadata.test"}),
        ("metadata by name, urllib", {"op": "urllib", "url": "http://metadata.test"}),
        ("metadata by Host", {"op": "http", "connect": PRIVATE, "host": "metadata.test"}),
        ("private by IP :80", {"op": "http", "connect": PRIVATE, "host": PRIVATE}),
        ("private by IP :443", {"op": "https", "connect": PRIVATE, "sni": "rebind.test", "verify": False}),
        ("private by name", {"op": "http", "connect": "rebind.test", "host": "rebind.test"}),
        ("private by Host", {"op": "http", "connect": METADATA, "host": "rebind.test"}),
        ("private by SNI", {"op": "https", "connect": METADATA, "sni": "rebind.test", "verify": False}),
        ("host address :80", {"op": "http", "connect": HOST_IP, "host": HOST_IP}),
        ("host address :8080", {"op": "http", "connect": HOST_IP, "port": 8080, "host": HOST_IP}),
        ("host address :22", {"op": "echo", "connect": HOST_IP, "port": 22}),
        ("host address by name", {"op": "http", "connect": "self.test", "host": "self.test"}),
        ("host address by Host", {"op": "http", "connect": PRIVATE, "host": "self.test"}),
        ("host end of the veth", {"op": "http", "connect": "@gateway", "host": "x"}),
        ("host end of the veth :8080", {"op": "http", "connect": "@gateway", "port": 8080, "host": "x"}),
        ("host end of the veth :22", {"op": "echo", "connect": "@gateway", "port": 22}),
        ("host loopback by name", {"op": "http", "connect": "loop.test", "host": "loop.test"}),
        ("host loopback by Host: loop.test", {"op": "http", "connect": PRIVATE, "host": "loop.test"}),
        ("host loopback by Host: localhost", {"op": "http", "connect": PRIVATE, "host": "localhost"}),
        ("host loopback by Host: 127.0.0.1", {"op": "http", "connect": PRIVATE, "host": "127.0.0.1"}),
        ("sandbox loopback", {"op": "http", "connect": "127.0.0.1", "host": "localhost"}),
    ]
    ops, paths = [], set()
    for _, o in cases:
        t = token()
        paths.add(t)
        o = dict(o)
        if o["op"] == "urllib":
            o["url"] += t
        elif o["op"] == "echo":
            o["data"] = t
        else:
            o["path"] = t
        ops.append(o)
    _, res = net.probe(["--net", "public"], ops)
    leaks = [(name, r) for (name, _), r in zip(cases, res) if r.get("reached")]
    assert not leaks, "public mode reached always-blocked destinations:\n" + \
        "\n".join(f"  {n}: {r}" for n, r in leaks)
    assert_paths_unseen(net, m, paths)
    forbidden = [r for r in net.seen(m, settle=0)
                 if r["log"] == "hostsrv.jsonl" or r.get("server", "").split(":")[0] in (METADATA, PRIVATE)]
    assert not forbidden, f"metadata, private or host servers were contacted: {forbidden}"


def test_public_never_reaches_another_sandbox(net):
    srv = net.popen(["--net", "public"], [PY, "/netclient.py", "serve", "8000", "20"])
    try:
        line = srv.stdout.readline().decode()
        assert '"serving"' in line, f"the serving sandbox did not start: {line!r} " \
                                    f"{srv.stderr.read().decode() if srv.poll() is not None else ''}"
        import json
        addr = json.loads(line)["addr"]
        assert addr, line
        p = token()
        _, res = net.probe(["--net", "public"], [
            {"op": "http", "connect": addr, "port": 8000, "host": addr, "path": p},
            {"op": "http", "connect": "10.201.0.2", "port": 8000, "host": "x", "path": p},
            {"op": "http", "connect": "10.201.0.6", "port": 8000, "host": "x", "path": p},
        ])
        for r in res:
            assert_blocked(r)
    finally:
        import os
        import signal
        if srv.poll() is None:
            os.killpg(srv.pid, signal.SIGKILL)
        srv.wait()


# ---- rules that name always-blocked ranges ----

@pytest.mark.parametrize("rule,needle", [
    ("10.0.0.0/8", "10.0.0.0/8"),
    ("169.254.169.254", "169.254.169.254"),
    ("*", "*"),
    ("127.0.0.1", "127.0.0.1"),
    ("192.168.0.0/16", "192.168.0.0/16"),
    ("100.64.0.0/10", "100.64.0.0/10"),
    ("10.99.0.5:80", "10.99.0.5"),
    ("[fd00:ec2::254]:80", "fd00:ec2::254"),
])
def test_rule_naming_a_blocked_range_is_refused(net, rule, needle):
    r = net.cordon(["run", "--allow", rule, "--", "/bin/sh", "-c", "echo RAN"], timeout=30)
    assert r.returncode == EXIT_USAGE, f"expected exit 2 for --allow {rule}:\n{r.describe()}"
    assert "RAN" not in r.out, f"the command ran despite a refused rule:\n{r.describe()}"
    assert needle in r.err, f"the message should name the refused rule {rule!r}:\n{r.describe()}"


# ---- IPv6 ----

def test_public_never_reaches_the_host_over_ipv6_link_local(net):
    """The veth carries IPv6 link-local addresses on both ends: the host's services listening
    on [::] must not be reachable from the sandbox through them."""
    import json
    import os
    import signal
    import time
    shared = os.path.join(net.tmp, f"v6-{os.getpid()}-{time.monotonic_ns()}")
    os.mkdir(shared)
    os.chmod(shared, 0o755)
    m = net.mark()
    p = token()
    op = {"op": "v6host", "file": "/shared/target", "ports": [80, 8080], "path": p}
    sbx = net.popen(["--net", "public", "--ro-bind", f"{shared}:/shared"],
                    [PY, "/netclient.py", json.dumps([op])])
    try:
        addr = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and addr is None and sbx.poll() is None:
            out = net.host_exec("ip", "-o", "-6", "addr", "show", "scope", "link").stdout.decode()
            for line in out.splitlines():
                f = line.split()
                if f[1].startswith("cdn") and "tentative" not in line:
                    addr = f[3].split("/")[0]
            time.sleep(0.1)
        assert addr, f"no IPv6 link-local address on the sandbox's host end: {out}"
        with open(os.path.join(shared, "t"), "w") as f:
            f.write(addr)
        os.rename(os.path.join(shared, "t"), os.path.join(shared, "target"))
        out, err = sbx.communicate(timeout=40)
    finally:
        if sbx.poll() is None:
            os.killpg(sbx.pid, signal.SIGKILL)
            sbx.wait()
    res = json.loads(out.decode().strip().splitlines()[-1])
    assert res[0]["addr"] == addr, res
    assert_blocked(res[0])
    assert_paths_unseen(net, m, {p})


# ---- headers split across segments, explicit ports ----

def test_split_client_hello_and_http_head(net):
    """The name arrives in pieces: still allowed when allowed, still blocked when not."""
    m = net.mark()
    ok1, ok2, ok3, bad1, bad2 = token(), token(), token(), token(), token()
    _, res = net.probe(["--allow", "api.example.test"], [
        {"op": "https_split", "connect": "api.example.test", "sni": "api.example.test", "path": ok1},
        {"op": "https_split", "connect": "api.example.test", "sni": "api.example.test", "path": ok2, "cut": 5},
        {"op": "http_split", "connect": "api.example.test", "host": "api.example.test", "path": ok3, "cut": 30},
        {"op": "https_split", "connect": WEB1, "sni": "evil.test", "path": bad1, "verify": False},
        {"op": "http_split", "connect": WEB1, "host": "evil.test", "path": bad2, "cut": 30},
    ])
    assert_reached(res[0], f"{WEB2}:443", sni="api.example.test")
    assert_reached(res[1], f"{WEB2}:443", sni="api.example.test")
    assert_reached(res[2], f"{WEB2}:80", host="api.example.test")
    assert_blocked(res[3])
    assert_blocked(res[4])
    assert_paths_unseen(net, m, {bad1, bad2})


@pytest.mark.parametrize("rule", ["api.example.test:8080", "api.example.test:8000-8100"])
def test_name_rule_with_port(net, rule):
    m = net.mark()
    ok, bad1, bad2 = token(), token(), token()
    _, res = net.probe(["--allow", rule], [
        {"op": "http", "connect": "api.example.test", "port": 8080, "host": "api.example.test:8080", "path": ok},
        {"op": "http", "connect": WEB2, "port": 80, "host": "api.example.test", "path": bad1},
        {"op": "https", "connect": WEB2, "port": 443, "sni": "api.example.test", "path": bad2, "verify": False},
    ])
    assert_reached(res[0], f"{WEB2}:8080")
    assert_blocked(res[1])
    assert_blocked(res[2])
    assert_paths_unseen(net, m, {bad1, bad2})


def test_cidr_rule_with_port_range(net):
    m = net.mark()
    e1, h1 = token(), token()
    _, res = net.probe(["--allow", "198.51.100.0/24:20-23"], [
        {"op": "echo", "connect": WEB2, "port": 22, "data": e1},
        {"op": "http", "connect": WEB2, "port": 80, "host": "api.example.test", "path": h1},
    ])
    assert res[0]["reached"], res[0]
    assert_blocked(res[1])
    assert_paths_unseen(net, m, {h1})
