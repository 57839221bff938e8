"""CORDON_TASK_TOKEN: each sandbox's processes get an HS256 JWT naming the sandbox id, its
template, metadata and deadline, signed with the key cordond made at its first start
(<state-dir>/task-token.key, 0600); GET /v1/task-token-key gives the key on the unix socket
only. The check here is the standard library's hmac, as an operator's service would do it."""

import base64
import hashlib
import hmac
import json
import os
import stat

import pytest

from conftest import parse_time, requires_daemon, start_daemon
from test_lifecycle import free_port

pytestmark = requires_daemon

KEY = "tok-key-0123456789abcdef"


@pytest.fixture(scope="module")
def d():
    dm = start_daemon(pool=1, listen=f"127.0.0.1:{free_port()}", api_keys=f"{KEY} tenant 4\n")
    yield dm
    dm.cleanup()


def unb64url(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def verify(token, key):
    """The claims of @token if its HS256 signature is @key's, else None."""
    head, body, sig = token.split(".")
    want = hmac.new(key, f"{head}.{body}".encode(), hashlib.sha256).digest()
    if not hmac.compare_digest(want, unb64url(sig)):
        return None
    assert json.loads(unb64url(head)) == {"alg": "HS256", "typ": "JWT"}
    return json.loads(unb64url(body))


def token_of(cl, sid):
    r = cl.exec(sid, argv=["/bin/sh", "-c", 'printf %s "$CORDON_TASK_TOKEN"'])
    assert r["exit_code"] == 0, r
    return r["stdout"]


def test_the_token_names_the_task_and_verifies(d):
    cl = d.client()
    path = os.path.join(d.state_dir, "task-token.key")
    st = os.stat(path)
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_size == 32
    k = cl.get("/v1/task-token-key")
    assert k.status == 200, k.describe()
    doc = k.json()
    assert doc["alg"] == "HS256" and doc["format"] == "JWT"
    key = unb64url(doc["key"])
    with open(path, "rb") as f:
        assert f.read() == key
    sb = cl.create({"metadata": {"task": "t-42", "user": "alice"}, "timeout_s": 120})
    try:
        claims = verify(token_of(cl, sb["id"]), key)
        assert claims is not None, "the signature does not verify"
        assert claims["sub"] == sb["id"] and claims["iss"] == "cordond"
        assert claims["template"] == "host" and claims["metadata"] == {"task": "t-42", "user": "alice"}
        assert abs(claims["exp"] - parse_time(sb["expires_at"])) <= 2, (claims, sb)
        assert claims["iat"] <= claims["exp"] - 118
        # A forged claim (another sandbox's id) does not verify with the key.
        head, body, sig = token_of(cl, sb["id"]).split(".")
        forged = dict(claims, sub="sb-someoneelse")
        fb = base64.urlsafe_b64encode(json.dumps(forged).encode()).decode().rstrip("=")
        assert verify(f"{head}.{fb}.{sig}", key) is None
        # A new deadline re-issues the token for the processes that start afterwards.
        info = cl.ok("POST", f"/v1/sandboxes/{sb['id']}/timeout", {"timeout_s": 500})
        again = verify(token_of(cl, sb["id"]), key)
        assert abs(again["exp"] - parse_time(info["expires_at"])) <= 2 and again["exp"] > claims["exp"]
    finally:
        cl.destroy(sb["id"], missing_ok=True)


def test_each_sandbox_has_its_own_token(d):
    cl = d.client()
    a, b = cl.create({}), cl.create({})
    try:
        assert token_of(cl, a["id"]) != token_of(cl, b["id"])
    finally:
        cl.destroy(a["id"], missing_ok=True)
        cl.destroy(b["id"], missing_ok=True)


def test_the_key_is_not_given_over_tcp(d):
    r = d.tcp_client(KEY).get("/v1/task-token-key")
    assert r.status == 403 and r.json()["error"]["code"] == "forbidden", r.describe()


def test_the_key_survives_a_restart(d):
    key = d.client().get("/v1/task-token-key").json()["key"]
    d.stop()
    d.start()
    assert d.client().get("/v1/task-token-key").json()["key"] == key
