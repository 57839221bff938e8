"""The templates API of cordond: GET/POST /v1/templates, GET/DELETE /v1/templates/{name}.

One daemon for the module, with CORDON_TEMPLATES pointing at a temporary store, so that
nothing here touches /var/lib/cordon. A base template `tiny` (the host's static busybox) is
made first with the CLI; the API builds on it: through the API the build context is a private
directory that holds only the recipe, so a template made there needs a base with a shell.

Needs root (like every daemon test) and /bin/busybox (Debian's busybox-static).
"""

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid

import pytest

from conftest import (CORDON, EventStream, assert_error, host_procs, requires_daemon,
                      start_daemon, wait_until)

BUSYBOX = "/bin/busybox"

pytestmark = requires_daemon + [
    pytest.mark.skipif(not os.path.isfile(BUSYBOX), reason="needs /bin/busybox (busybox-static)"),
]

KEY = "tenant-key-0123456789abcdef"
BASE = "tiny"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def unique(prefix="t"):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def store():
    root = tempfile.mkdtemp(prefix="cordon-templates-test-")
    path = os.path.join(root, "store")
    ctx = os.path.join(root, "ctx")
    os.makedirs(ctx)
    shutil.copy(BUSYBOX, os.path.join(ctx, "busybox"))
    with open(os.path.join(ctx, "Cordonfile"), "w") as f:
        f.write('FROM scratch\nCOPY busybox /bin/busybox\nRUN ["/bin/busybox","--install","-s","/bin"]\n')
    env = dict(os.environ, CORDON_TEMPLATES=path)
    p = subprocess.run([CORDON, "template", "build", BASE, "-f", os.path.join(ctx, "Cordonfile")],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"cordon template build {BASE}: {p.returncode}\n{p.stdout}\n{p.stderr}"
    yield path
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def daemon(store):
    old = os.environ.get("CORDON_TEMPLATES")
    os.environ["CORDON_TEMPLATES"] = store  # the daemon inherits it, and its builders with it
    try:
        d = start_daemon(pool=0, max_sandboxes=8, max_timeout=600,
                         listen=f"127.0.0.1:{free_port()}", api_keys=f"{KEY} tenant 4\n")
    finally:
        if old is None:
            del os.environ["CORDON_TEMPLATES"]
        else:
            os.environ["CORDON_TEMPLATES"] = old
    yield d
    alive = d.alive()
    d.cleanup()
    assert alive, f"cordond died during the module:\n{d.log_tail()}"


@pytest.fixture(scope="module")
def client(daemon):
    return daemon.client(timeout=120)


def build_dirs(daemon):
    """The builds' private recipe directories left in the runtime directory."""
    return [n for n in os.listdir(daemon.runtime_dir) if n.startswith("template-build-")]


def builders(name):
    """Live `cordon-template build NAME` processes."""
    return host_procs(f"\0{name}\0", argv0="cordon-template")


def build(client, name, recipe, **extra):
    """POSTs a build and reads the stream to its end; returns (events, exit status)."""
    s = client.stream("POST", "/v1/templates", dict(name=name, recipe=recipe, **extra), timeout=300)
    assert isinstance(s, EventStream), f"build was refused: {s.describe()}"
    assert s.headers.get("content-type", "").startswith("application/x-ndjson"), s.headers
    events = []
    while (ev := s.next()) is not None:
        events.append(ev)
    s.close()
    assert events and events[-1].get("event") == "exit", f"the stream does not end with exit: {events}"
    assert [e for e in events if e.get("event") == "exit"] == [events[-1]], events
    assert isinstance(events[-1].get("status"), int), events[-1]
    return events, events[-1]["status"]


def start_build(client, name, recipe):
    """A build left running: the open stream, after its first event."""
    s = client.stream("POST", "/v1/templates", {"name": name, "recipe": recipe}, timeout=60)
    assert isinstance(s, EventStream), f"build was refused: {s.describe()}"
    ev = s.read_until(lambda e: e.get("event") == "step" and e.get("step") == 2)
    assert ev is not None, f"no step 2 event: {s.events}"
    return s


# ---------------------------------------------------------------------------------------------
# the whole life of a template


def test_build_list_get_run_delete(client, daemon):
    name = unique("hello")
    events, status = build(client, name, "FROM tiny\nRUN echo hi > /hello\nENV A=b\n")
    assert status == 0, events
    assert not [e for e in events if e.get("event") == "error"], events
    steps = [e for e in events if e.get("event") == "step"]
    assert [e["step"] for e in steps] == [1, 2, 3], events
    assert all(e["of"] == 3 for e in steps), events
    assert steps[1]["instruction"] == "RUN echo hi > /hello", steps
    assert len([e for e in events if e.get("event") == "step_done"]) == 3, events
    done = [e for e in events if e.get("event") == "done"]
    assert len(done) == 1 and done[0]["name"] == name, events
    assert build_dirs(daemon) == []

    listed = client.ok("GET", "/v1/templates")
    assert isinstance(listed, list), listed
    names = [t["name"] for t in listed]
    assert name in names and BASE in names, names
    meta = client.ok("GET", f"/v1/templates/{name}")
    assert meta["source"] == "build:api", meta
    assert meta["name"] == name and "A=b" in meta["env"], meta
    assert meta == [t for t in listed if t["name"] == name][0]

    sb = client.create(template=name)
    try:
        assert sb["template"] == name, sb
        res = client.exec(sb["id"], argv=["/bin/cat", "/hello"])
        assert res["exit_code"] == 0 and res["stdout"] == "hi\n", res
    finally:
        client.destroy(sb["id"])

    r = client.delete(f"/v1/templates/{name}")
    assert r.status == 204 and r.body == b"", r.describe()
    assert_error(client.get(f"/v1/templates/{name}"), 404, "not_found")
    assert_error(client.delete(f"/v1/templates/{name}"), 404, "not_found")
    assert name not in [t["name"] for t in client.ok("GET", "/v1/templates")]
    assert_error(client.post("/v1/sandboxes", {"template": name}), 404, "not_found")


def test_build_args_and_no_cache(client):
    name = unique("args")
    recipe = "FROM tiny\nARG GREETING=none\nRUN echo $GREETING > /greeting\n"
    events, status = build(client, name, recipe, build_args={"GREETING": "bonjour"}, no_cache=True)
    assert status == 0, events
    sb = client.create(template=name)
    try:
        res = client.exec(sb["id"], argv=["/bin/cat", "/greeting"])
        assert res["stdout"] == "bonjour\n", res
    finally:
        client.destroy(sb["id"])
    assert client.delete(f"/v1/templates/{name}").status == 204


def test_failing_run(client, daemon):
    name = unique("fail")
    events, status = build(client, name, "FROM tiny\nRUN echo bad; exit 3\n")
    assert status == 1, events
    errors = [e for e in events if e.get("event") == "error"]
    assert len(errors) == 1 and "line 2" in errors[0]["message"], events
    assert any(e.get("event") == "log" and "bad" in e.get("data", "") for e in events), events
    assert not [e for e in events if e.get("event") == "done"], events
    assert_error(client.get(f"/v1/templates/{name}"), 404, "not_found")
    assert build_dirs(daemon) == []


def _tar_b64(files, extra=None):
    import base64
    import io
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, data in files.items():
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode = len(data), 0o644
            t.addfile(ti, io.BytesIO(data))
        for ti in extra or ():
            t.addfile(ti)
    return base64.b64encode(buf.getvalue()).decode()


def test_context_upload_feeds_copy_and_stays_inside(client, daemon, tmp_path):
    """A context archive is unpacked (hostile-safe) and COPY reads from it, and only from it."""
    import tarfile
    escape = tarfile.TarInfo("../../../../../../tmp/cordon-ctx-escape")
    escape.size = 0
    link = tarfile.TarInfo("link")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc"
    ctx = _tar_b64({"app/main.py": b"print('hi')\n", "app/data.txt": b"data\n"}, [escape, link])
    name = unique("ctx")
    events, status = build(client, name, "FROM tiny\nCOPY app/ /srv/app/\nCOPY link /link\n", context=ctx)
    assert status == 0, events
    assert not os.path.exists("/tmp/cordon-ctx-escape")
    sb = client.create(template=name)
    try:
        res = client.exec(sb["id"], argv=["/bin/sh", "-c", "cat /srv/app/data.txt; readlink /link"])
        assert res["stdout"] == "data\n/etc\n", res
    finally:
        client.destroy(sb["id"])
    # Through a symlink of the context to the host: refused, never followed.
    events, status = build(client, unique("ctx"), "FROM tiny\nCOPY link/passwd /x\n", context=ctx)
    assert status == 1 and "source" in events[-2].get("message", ""), events
    assert client.delete(f"/v1/templates/{name}").status == 204


def test_copy_sees_only_the_recipe(client):
    """The context of an API build is the recipe's private directory."""
    name = unique("copy")
    recipe = "FROM tiny\nCOPY --chmod=644 Cordonfile /recipe\n"
    events, status = build(client, name, recipe)
    assert status == 0, events
    sb = client.create(template=name)
    try:
        res = client.exec(sb["id"], argv=["/bin/cat", "/recipe"])
        assert res["stdout"] == recipe, res
    finally:
        client.destroy(sb["id"])
    assert client.delete(f"/v1/templates/{name}").status == 204
    events, status = build(client, unique("copy"), "FROM tiny\nCOPY /etc/passwd /x\n")
    assert status == 1, events


# ---------------------------------------------------------------------------------------------
# what is refused before anything starts


BIG = "#" * (1 << 20) + "\n"


@pytest.mark.parametrize("body,status,code", [
    ("", 400, "bad_request"),
    ("{", 400, "bad_request"),
    ("[]", 400, "bad_request"),
    ('"FROM tiny"', 400, "bad_request"),
    ('{"name": "a", "name": "b", "recipe": "FROM tiny"}', 400, "bad_request"),
    ({"name": "x", "recipe": "FROM tiny", "context": "/"}, 400, "invalid_field"),
    ({"name": "x", "recipe": "FROM tiny", "context": 5}, 400, "invalid_field"),
    ({"name": "x", "recipe": "FROM tiny", "context": "not base64!"}, 400, "invalid_field"),
    ({"name": "x", "recipe": "FROM tiny", "Context": "AAAA"}, 400, "unknown_field"),
    ({"name": "x", "recipe": "FROM tiny", "NAME": "y"}, 400, "unknown_field"),
    ({"recipe": "FROM tiny"}, 400, "invalid_field"),
    ({"name": "x"}, 400, "invalid_field"),
    ({"name": None, "recipe": "FROM tiny"}, 400, "invalid_field"),
    ({"name": "Bad", "recipe": "FROM tiny"}, 400, "invalid_field"),
    ({"name": "../etc", "recipe": "FROM tiny"}, 400, "invalid_field"),
    ({"name": "host", "recipe": "FROM tiny"}, 400, "invalid_field"),
    ({"name": "a" * 65, "recipe": "FROM tiny"}, 400, "invalid_field"),
    ({"name": "x\u0000y", "recipe": "FROM tiny"}, 400, "invalid_field"),
    ({"name": 5, "recipe": "FROM tiny"}, 400, "invalid_field"),
    ({"name": "x", "recipe": ["FROM tiny"]}, 400, "invalid_field"),
    ({"name": "x", "recipe": ""}, 400, "invalid_field"),
    ({"name": "x", "recipe": "FROM tiny\u0000"}, 400, "invalid_field"),
    ({"name": "x", "recipe": BIG}, 400, "invalid_field"),
    ({"name": "x", "recipe": "FROM tiny", "build_args": ["A=b"]}, 400, "invalid_field"),
    ({"name": "x", "recipe": "FROM tiny", "build_args": {"A": 1}}, 400, "invalid_field"),
    ({"name": "x", "recipe": "FROM tiny", "build_args": {"1A": "b"}}, 400, "invalid_field"),
    ({"name": "x", "recipe": "FROM tiny", "build_args": {"A-B": "b"}}, 400, "invalid_field"),
    ({"name": "x", "recipe": "FROM tiny", "build_args": {"A": "x" * 4097}}, 400, "invalid_field"),
    ({"name": "x", "recipe": "FROM tiny",
      "build_args": {f"A{i}": "b" for i in range(65)}}, 400, "invalid_field"),
    ({"name": "x", "recipe": "FROM tiny", "no_cache": "yes"}, 400, "invalid_field"),
    ({"name": "x", "recipe": "FROM tiny", "no_cache": 1}, 400, "invalid_field"),
])
def test_bad_body(client, daemon, body, status, code):
    before = client.ok("GET", "/v1/templates")
    r = client.post("/v1/templates", body)
    e = assert_error(r, status, code)
    if code == "unknown_field":
        assert "known: name, recipe, build_args, no_cache, context" in e["message"], e
    assert build_dirs(daemon) == []
    assert builders("x") == []
    assert client.ok("GET", "/v1/templates") == before


def test_big_recipe_message(client):
    e = assert_error(client.post("/v1/templates", {"name": "x", "recipe": BIG}), 400, "invalid_field")
    assert "recipe" in e["message"] and "1048576" in e["message"], e


def test_body_over_the_limit(client):
    r = client.post("/v1/templates", {"name": "x", "recipe": "#" * (49 << 20)})
    assert_error(r, 413, "payload_too_large")


def test_get_and_delete_missing_or_invalid(client):
    assert_error(client.get("/v1/templates/no-such-template"), 404, "not_found")
    assert_error(client.delete("/v1/templates/no-such-template"), 404, "not_found")
    for bad in ("Bad", "host", ".hidden", "a" * 65, "%2e%2e"):
        assert_error(client.get(f"/v1/templates/{bad}"), 400, "invalid_field")
        assert_error(client.delete(f"/v1/templates/{bad}"), 400, "invalid_field")
    r = client.request("PUT", "/v1/templates/x", {})
    assert_error(r, 405, "method_not_allowed")


def test_tenant_keys_read_but_do_not_change(client, daemon):
    tenant = daemon.tcp_client(KEY)
    assert_error(daemon.tcp_client().get("/v1/templates"), 401, "unauthorized")
    listed = tenant.ok("GET", "/v1/templates")
    assert BASE in [t["name"] for t in listed], listed
    assert tenant.ok("GET", f"/v1/templates/{BASE}")["name"] == BASE
    assert_error(tenant.post("/v1/templates", {"name": "x", "recipe": "FROM tiny"}), 403, "forbidden")
    assert_error(tenant.delete(f"/v1/templates/{BASE}"), 403, "forbidden")
    assert client.ok("GET", f"/v1/templates/{BASE}")["name"] == BASE


# ---------------------------------------------------------------------------------------------
# builds that do not end well for their client


def test_client_disconnect_kills_the_build(client, daemon):
    name = unique("gone")
    s = start_build(client, name, "FROM tiny\nRUN sleep 600\n")
    assert wait_until(lambda: builders(name), 10), "no cordon-template process for the build"
    s.close()
    assert wait_until(lambda: not builders(name), 15), f"the build outlived its client: {builders(name)}"
    assert wait_until(lambda: build_dirs(daemon) == [], 5), build_dirs(daemon)
    r = client.get("/healthz", timeout=5)
    assert r.status == 200 and r.json()["status"] == "ok", r.describe()
    assert_error(client.get(f"/v1/templates/{name}"), 404, "not_found")
    # The slot was given back: a build runs.
    events, status = build(client, unique("after"), "FROM tiny\nENV X=1\n")
    assert status == 0, events
    assert daemon.alive()


def test_a_slow_reader_gets_every_line(client, daemon):
    """A reader that lags more than the daemon's backlog (8 MiB) holds the builder back (the
    pipe is not read until the stream drains); no line of the build's output is dropped."""
    name, lines, text = unique("loud"), 250000, "x" * 79  # 20 MB of output
    s = client.stream("POST", "/v1/templates",
                      {"name": name, "recipe": f"FROM tiny\nRUN yes {text} | head -n {lines}\n"},
                      timeout=300)
    assert isinstance(s, EventStream), f"build was refused: {s.describe()}"
    time.sleep(3)  # not reading while it writes
    got = 0
    while (ev := s.next()) is not None:
        if ev.get("event") == "log" and ev.get("step") == 2:
            got += len(ev["data"])
    s.close()
    assert s.events[-1] == {"event": "exit", "status": 0}, s.events[-3:]
    assert got == lines * 80, f"{got} bytes of output, want {lines * 80}"
    client.delete(f"/v1/templates/{name}")


def test_at_most_two_builds(client, daemon):
    names = [unique("slow"), unique("slow")]
    streams = [start_build(client, n, "FROM tiny\nRUN sleep 600\n") for n in names]
    try:
        r = client.post("/v1/templates", {"name": unique("third"), "recipe": "FROM tiny\n"})
        e = assert_error(r, 503, "capacity")
        assert r.headers.get("retry-after", "").isdigit(), r.describe()
        assert "2" in e["message"], e
        # Reads are not held up by builds.
        assert client.get("/v1/templates", timeout=5).status == 200
    finally:
        for s in streams:
            s.close()
    assert wait_until(lambda: not any(builders(n) for n in names), 15)
    assert wait_until(lambda: build_dirs(daemon) == [], 5), build_dirs(daemon)
    for n in names:
        assert_error(client.get(f"/v1/templates/{n}"), 404, "not_found")
    events, status = build(client, unique("again"), "FROM tiny\nENV X=2\n")
    assert status == 0, events


def fd_targets(pid):
    out = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out[int(fd)] = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            pass
    return out


def test_stream_is_line_by_line(client, daemon):
    """Lines come as the builder writes them, not at the end; the builder has /dev/null for
    stdin and stderr, a pipe for stdout, and none of the daemon's sockets."""
    name = unique("live")
    s = client.stream("POST", "/v1/templates",
                      {"name": name, "recipe": "FROM tiny\nRUN echo first; sleep 600\n"}, timeout=30)
    assert isinstance(s, EventStream), s.describe()
    try:
        ev = s.read_until(lambda e: e.get("event") == "log")
        assert ev is not None and "first" in ev["data"], s.events
        pids = builders(name)
        assert len(pids) == 1, pids
        fds = fd_targets(pids[0])
        assert fds[0] == "/dev/null" and fds[2] == "/dev/null", fds
        assert fds[1].startswith("pipe:"), fds
        ours = {t for t in fd_targets(daemon.proc.pid).values() if t.startswith("socket:")}
        assert ours and not ours & set(fds.values()), (ours, fds)
    finally:
        s.close()
    assert wait_until(lambda: not builders(name), 15)


def test_slow_reader_loses_nothing(client):
    """A reader that stalls holds the builder back (its pipe fills) rather than losing lines
    or making the daemon buffer without bound."""
    name = unique("spew")
    n = 24 << 20
    s = client.stream("POST", "/v1/templates",
                      {"name": name, "recipe": f"FROM tiny\nRUN yes abcdefghij | head -c {n}\n"},
                      timeout=120)
    assert isinstance(s, EventStream), s.describe()
    time.sleep(3)
    assert builders(name), "the build ended while nobody read its output"
    total, last = 0, None
    while (ev := s.next()) is not None:
        last = ev
        if ev["event"] == "log":
            total += len(ev["data"])
    s.close()
    assert total == n, total
    assert last == {"event": "exit", "status": 0}, last
    assert client.delete(f"/v1/templates/{name}").status == 204
