"""Bad secret bodies are a 4xx naming the field, never echoing the value (the full path, with a
network, is tests/net/test_daemon_secrets.py); rotation and revocation of a secret a sandbox
does not have are 404; a bad name is 400."""

import pytest

from conftest import assert_error, requires_daemon

pytestmark = requires_daemon

V = "VALUE-must-not-be-echoed-7f3a"

BAD = [
    ({"1K": {"value": V, "hosts": ["a.test"]}}, "invalid_field", "secrets"),
    ({"K": {"value": V + "\n", "hosts": ["a.test"]}}, "invalid_field", "secrets.K.value"),
    ({"K": {"value": "x" * 4097, "hosts": ["a.test"]}}, "invalid_field", "secrets.K.value"),
    ({"K": {"value": V}}, "invalid_field", "secrets.K.hosts"),
    ({"K": {"value": V, "hosts": ["127.0.0.1"]}}, "invalid_field", "secrets.K.hosts[0]"),
    ({"K": {"value": V, "hosts": ["a_b.test"]}}, "invalid_field", "secrets.K.hosts[0]"),
    ({"K": {"value": V, "hosts": ["a.test"], "in": ["header", "path"]}}, "invalid_field", "secrets.K.in[1]"),
    ({"K": {"value": V, "hosts": ["a.test"], "extra": True}}, "unknown_field", "secrets.K"),
    ({"K": V}, "invalid_field", "secrets.K"),
    ("K", "invalid_field", "secrets"),
]


@pytest.mark.parametrize("secrets,code,field", BAD)
def test_bad_secrets_at_create(client, secrets, code, field):
    r = client.post("/v1/sandboxes", {"secrets": secrets})
    assert_error(r, 400, code)
    msg = r.json()["error"]["message"]
    assert field in msg and V not in msg, msg


def test_rotate_and_revoke_need_the_secret(client, sandbox):
    sid = sandbox["id"]
    r = client.put(f"/v1/sandboxes/{sid}/secrets/API_KEY", {"value": V})
    assert_error(r, 404, "not_found")
    assert V not in r.text
    assert_error(client.delete(f"/v1/sandboxes/{sid}/secrets/API_KEY"), 404, "not_found")
    assert_error(client.delete(f"/v1/sandboxes/{sid}/secrets/bad-name"), 400, "invalid_field")
    assert_error(client.put(f"/v1/sandboxes/{sid}/secrets/bad-name", {"value": V}), 400, "invalid_field")
    assert_error(client.put(f"/v1/sandboxes/{sid}/secrets/API_KEY", {}), 400, "invalid_field")
    assert_error(client.put(f"/v1/sandboxes/{sid}/secrets/API_KEY", b"not json"), 400, "bad_request")
    assert_error(client.put("/v1/sandboxes/sb-nope/secrets/API_KEY", {"value": V}), 404, "not_found")
