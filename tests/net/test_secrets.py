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

    def run(ops, opts=(), secret=None, env_value=False):
        spec = secret or f"API_KEY={VALUE}@api.example.test"
        env = [f"CORDON_EGRESS_UPSTREAM_CA={net.ca}", f"CORDON_EGRESS_CA_DIR={ca_dir}"]
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
