"""SDK tests that need no root and no built daemon: parsing, error mapping, and the whole SDK
against tests/fake_cordond.py (a stand-in that speaks the same HTTP API)."""

import os
import shutil
import socket
import tempfile
import threading
import time

import pytest

import cordon
from cordon import errors
from cordon._http import Client, Endpoint, build_query, resolve_endpoint
from cordon.processes import command_fields

from fake_cordond import FakeCordond


# -- endpoint resolution -------------------------------------------------------------------------

def test_endpoint_defaults_and_env():
    e = resolve_endpoint(environ={})
    assert e.is_unix and e.socket_path == "/run/cordon/cordon.sock"
    e = resolve_endpoint(environ={"CORDON_SOCKET": "/tmp/x.sock"})
    assert e.socket_path == "/tmp/x.sock"
    e = resolve_endpoint(environ={"CORDON_SOCKET": "/tmp/x.sock", "CORDON_URL": "http://h:9"})
    assert (e.scheme, e.host, e.port) == ("http", "h", 9)
    e = resolve_endpoint(socket_path="/a.sock", environ={"CORDON_URL": "http://h:9"})
    assert e.socket_path == "/a.sock"  # explicit beats environment
    e = resolve_endpoint(url="http://h:1", environ={"CORDON_SOCKET": "/x"})
    assert e.host == "h"
    with pytest.raises(ValueError):
        resolve_endpoint(socket_path="/a", url="http://h")


@pytest.mark.parametrize("url,expect", [
    ("http://127.0.0.1:8080", ("http", "127.0.0.1", 8080, "", None)),
    ("http://example.com", ("http", "example.com", 80, "", None)),
    ("https://example.com/api/", ("https", "example.com", 443, "/api", None)),
    ("http://[::1]:7000", ("http", "::1", 7000, "", None)),
    ("unix:/run/c.sock", ("unix", "", 0, "", "/run/c.sock")),
    ("unix:///run/c.sock", ("unix", "", 0, "", "/run/c.sock")),
    ("http+unix://%2Frun%2Fc.sock", ("unix", "", 0, "", "/run/c.sock")),
])
def test_parse_url(url, expect):
    e = Endpoint.parse_url(url)
    assert (e.scheme, e.host, e.port, e.prefix, e.socket_path) == expect


@pytest.mark.parametrize("bad", ["ftp://x", "http://", "unix:", "http://h:99999", "localhost:80"])
def test_parse_url_rejects(bad):
    with pytest.raises(ValueError):
        Endpoint.parse_url(bad)


def test_client_api_key_from_env():
    c = Client(environ={"CORDON_URL": "http://h:1", "CORDON_API_KEY": "k1"})
    assert c.api_key == "k1" and c.endpoint.host == "h"
    assert c._headers(None, False, None)["Authorization"] == "Bearer k1"
    assert Client(api_key="k2", environ={"CORDON_API_KEY": "k1"}).api_key == "k2"
    assert "Authorization" not in Client(environ={})._headers(None, False, None)


def test_build_query():
    assert build_query(None) == ""
    assert build_query({"path": "/a b/c+d", "depth": 2}) == "?path=/a%20b/c%2Bd&depth=2"
    assert build_query([("metadata.k", "v&w"), ("x", None)]) == "?metadata.k=v%26w"
    assert build_query({"follow": True}) == "?follow=true"


def test_command_fields():
    assert command_fields("echo hi") == {"cmd": "echo hi"}
    assert command_fields(["echo", "hi"]) == {"argv": ["echo", "hi"]}
    assert command_fields(("a",)) == {"argv": ["a"]}
    with pytest.raises(ValueError):
        command_fields([])
    with pytest.raises(TypeError):
        command_fields(b"echo")


# -- error mapping -------------------------------------------------------------------------------

@pytest.mark.parametrize("status,code,cls", [
    (400, "bad_request", errors.BadRequest),
    (400, "invalid_field", errors.InvalidField),
    (400, "unknown_field", errors.UnknownField),
    (413, "payload_too_large", errors.PayloadTooLarge),
    (404, "not_found", errors.NotFound),
    (409, "conflict", errors.Conflict),
    (429, "quota_exceeded", errors.QuotaExceeded),
    (503, "capacity", errors.CapacityError),
    (401, "unauthorized", errors.Unauthorized),
    (403, "forbidden", errors.Forbidden),
    (500, "internal", errors.InternalError),
    (503, "unavailable", errors.Unavailable),
    (504, "timeout", errors.Timeout),
    (405, "method_not_allowed", errors.MethodNotAllowed),
    (411, "length_required", errors.LengthRequired),
    (400, "unsupported_runtime", errors.UnsupportedRuntime),
    (503, "audit_unavailable", errors.AuditUnavailable),
    (400, "invalid_path", errors.InvalidPath),
    (409, "read_only", errors.ReadOnly),
    (409, "no_space", errors.NoSpace),
    (409, "not_a_directory", errors.NotADirectory),
    (409, "is_a_directory", errors.IsADirectory),
    (409, "cross_device", errors.CrossDevice),
])
def test_error_mapping(status, code, cls):
    body = ('{"error": {"code": "%s", "message": "limits.memory_mb: must be an integer"}}'
            % code).encode()
    e = errors.error_from_response(status, body, {"Retry-After": "3"})
    assert type(e) is cls
    assert (e.code, e.status, e.message, e.retry_after) == (
        code, status, "limits.memory_mb: must be an integer", 3.0)
    assert isinstance(e, errors.CordonError)
    assert code in str(e) and "memory_mb" in str(e)


def test_error_mapping_fallbacks():
    e = errors.error_from_response(404, b"not json at all")
    assert type(e) is errors.NotFound and e.message == "not json at all"
    e = errors.error_from_response(502, b"")
    assert isinstance(e, errors.InternalError) and e.status == 502
    e = errors.error_from_response(418, b'{"error": {"code": "teapot", "message": "m"}}')
    assert type(e) is errors.CordonError and e.code == "teapot"
    e = errors.error_from_response(400, b'{"error": {"code": "invalid_field"}}')
    assert type(e) is errors.InvalidField
    assert issubclass(errors.InvalidField, errors.BadRequest)
    assert issubclass(errors.UnknownField, errors.BadRequest)


def test_unavailable_is_connection_error(tmp_path):
    path = str(tmp_path / "nobody.sock")
    with pytest.raises(ConnectionError) as ei:
        cordon.Sandbox.list(socket=path)
    assert isinstance(ei.value, cordon.CordonUnavailable)
    assert isinstance(ei.value, cordon.Unavailable)
    assert path in str(ei.value) and "cordond" in str(ei.value)
    # a socket file nobody listens on
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    s.close()
    with pytest.raises(cordon.CordonUnavailable) as ei:
        cordon.health(socket=path)
    assert "running" in str(ei.value)


# -- against the fake daemon ---------------------------------------------------------------------

@pytest.fixture()
def fake():
    d = tempfile.mkdtemp()
    f = FakeCordond(os.path.join(d, "c.sock"), keys={"good-key"}, tcp=True)
    yield f
    f.stop()
    shutil.rmtree(d, ignore_errors=True)


def test_fake_readme_flow(fake, monkeypatch):
    monkeypatch.setenv("CORDON_SOCKET", fake.socket_path)
    monkeypatch.delenv("CORDON_URL", raising=False)
    with cordon.Sandbox.create(template="host", timeout=60, env={"X": "1"},
                               metadata={"task": "t1"}) as sbx:
        r = sbx.exec("echo $X; python3 -c 'print(6*7)'")
        assert (r.exit_code, r.stdout) == (0, "1\n42\n")
        got = []
        p = sbx.processes.start(["sh", "-c", "cat"], on_stdout=got.append)
        p.send_stdin(b"hi\n")
        p.close_stdin()
        assert p.wait(10).stdout == "hi\n" and "".join(got) == "hi\n"
        sbx.files.write("/a.txt", b"data")
        assert sbx.files.read("/a.txt") == b"data"
        assert [e.name for e in sbx.files.list("/")] == ["a.txt"]
        assert sbx.set_timeout(120).timeout_s == 120
        assert [s.id for s in cordon.Sandbox.list(metadata={"task": "t1"})] == [sbx.id]
        assert cordon.Sandbox.list(metadata={"task": "t2"}) == []
        assert sbx.audit()[0]["event"] == "sandbox.create"
        sid = sbx.id
    with pytest.raises(cordon.NotFound):
        cordon.Sandbox.connect(sid)
    # create sent only what was given, as the contract names it
    import json
    creates = [r for r in fake.requests if r[:2] == ("POST", "/v1/sandboxes")]
    assert creates


def test_fake_keepalive_one_connection_per_thread(fake):
    c = Client(socket=fake.socket_path)
    s = cordon.Sandbox.create(client=c)
    conn = c._local.conn
    sock_before = conn.sock
    for _ in range(5):
        s.info()
    assert c._local.conn is conn and conn.sock is sock_before  # kept alive
    box = {}

    def other():
        s.info()
        box["conn"] = c._local.conn
    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert box["conn"] is not conn
    # the server drops the idle connection: the next request reconnects transparently
    conn.sock.shutdown(socket.SHUT_RDWR)
    assert s.info().id == s.id
    c.close()


def test_fake_process_utf8_split_and_bytes(fake):
    s = cordon.Sandbox.create(socket=fake.socket_path)
    text, raw = [], []
    # é split across two writes: the str callback must never see a broken character
    p = s.processes.start(["sh", "-c", "printf '\\303'; sleep 0.2; printf '\\251\\377'"],
                          on_stdout=text.append, on_stdout_bytes=raw.append)
    r = p.wait(10)
    assert "\ufffd\ufffd" not in "".join(text)
    assert "".join(text) == "\u00e9\ufffd" and r.stdout == "\u00e9\ufffd"
    assert b"".join(raw) == b"\xc3\xa9\xff" and r.stdout_bytes == b"\xc3\xa9\xff"
    s.kill()


def test_fake_process_signal_list_connect_detach(fake):
    s = cordon.Sandbox.create(socket=fake.socket_path)
    p = s.processes.start("sleep 30", tag="t")
    assert p.tag == "t"
    assert [q.pid for q in s.processes.list()] == [p.pid]
    p.detach()
    with pytest.raises(cordon.CordonUnavailable):
        p.wait(5)  # detached: no result
    seen = []
    q = s.processes.connect(p.pid, on_exit=seen.append)
    q.signal("TERM")
    r = q.wait(10)
    assert (r.exit_code, r.signal) == (-1, 15) and seen == [r]
    done = s.processes.connect(p.pid)  # already exited: the exit event alone
    assert done.exited and done.exit_code == -1
    with pytest.raises(cordon.Conflict):
        q.send_stdin(b"x")
    with pytest.raises(cordon.NotFound):
        s.processes.connect(1)
    s.kill()


def test_fake_callback_exception_does_not_stop_stream(fake, caplog):
    s = cordon.Sandbox.create(socket=fake.socket_path)

    def boom(_):
        raise RuntimeError("callback bug")
    r = s.processes.start("echo a; sleep 0.1; echo b", on_stdout=boom).wait(10)
    assert r.stdout == "a\nb\n"
    assert "callback bug" in caplog.text
    s.kill()


def test_fake_stream_reattaches_after_break(fake):
    s = cordon.Sandbox.create(socket=fake.socket_path)
    out = []
    p = s.processes.start("sleep 0.5; echo after", on_stdout=out.append)
    # break the stream's connection under the reader thread: it must reattach by pid
    p._stream.conn.sock.shutdown(socket.SHUT_RDWR)
    r = p.wait(10)
    assert r.exit_code == 0 and "".join(out) == "after\n"
    assert any(m == "GET" and path.endswith(f"/processes/{p.pid}/events")
               for m, path, _ in fake.requests)
    s.kill()


def test_fake_files_and_errors(fake):
    s = cordon.Sandbox.create(socket=fake.socket_path)
    f = s.files
    assert f.mkdir("/d/e", parents=True).type == "dir"
    f.write("/d/e/x y+z.txt", "t\u00e9xt")
    assert f.read_text("/d/e/x y+z.txt") == "t\u00e9xt"
    assert [e.path for e in f.list("/", depth=3)] == ["/d", "/d/e", "/d/e/x y+z.txt"]
    assert f.stat("/d/e/x y+z.txt").size == 5
    f.move("/d/e/x y+z.txt", "/d/moved")
    assert f.exists("/d/moved") and not f.exists("/d/e/x y+z.txt")
    with pytest.raises(cordon.Conflict):
        f.read("/d")
    with pytest.raises(cordon.Conflict):
        f.mkdir("/d")
    f.remove("/d")
    with pytest.raises(cordon.NotFound):
        f.stat("/d")
    with pytest.raises(cordon.InvalidField) as ei:
        cordon.Sandbox.create(socket=fake.socket_path, limits={"memory_mb": 1})
    assert "memory_mb" in ei.value.message
    with pytest.raises(cordon.UnknownField):
        cordon.Sandbox.create(socket=fake.socket_path, limits={"memory": 1})
    with pytest.raises(cordon.BadRequest):
        s.exec("true", user="nobody")
    with pytest.raises(ValueError):
        s.exec("cat", stdin=b"\xff")
    s.kill()


def test_fake_tcp_api_key(fake, monkeypatch):
    with pytest.raises(cordon.Unauthorized):
        cordon.Sandbox.list(url=fake.url, api_key="bad")
    with pytest.raises(cordon.Unauthorized):
        cordon.Sandbox.list(url=fake.url)
    monkeypatch.setenv("CORDON_URL", fake.url)
    monkeypatch.setenv("CORDON_API_KEY", "good-key")
    s = cordon.Sandbox.create()
    assert s.exec(["echo", "ok"]).stdout == "ok\n"
    assert s.kill() is True
    assert fake.requests[-1][2].get("Authorization") == "Bearer good-key"


def test_context_manager_does_not_mask_errors(fake):
    with pytest.raises(RuntimeError):
        with cordon.Sandbox.create(socket=fake.socket_path) as s:
            fake.sandboxes.clear()  # it vanished (e.g. its deadline passed)
            raise RuntimeError("user error")
    with cordon.Sandbox.create(socket=fake.socket_path) as s:
        s.kill()  # killing twice is fine


def test_every_documented_error_code_has_its_class():
    """Each code of the OpenAPI document's Error schema maps to a class of that name's code,
    so a new code on the server is not silently a generic error in the SDK."""
    import os
    import re
    spec = open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "api",
                             "openapi.yaml")).read()
    block = spec[spec.index("Error:"):]
    block = block[block.index("enum:"):]
    codes = re.findall(r"^\s+- ([a-z_]+)$", block[:block.index("\n\n") if "\n\n" in block else None],
                       re.M)
    assert len(codes) > 10, codes
    missing = [c for c in codes if errors._BY_CODE.get(c) is None or errors._BY_CODE[c].code != c]
    assert not missing, f"codes without an SDK class: {missing}"

