"""Templates are immutable under cordond's live sandboxes.

A template name points to a version; a rebuild (the CLI's or the API's POST /v1/templates)
publishes a new one, and a sandbox keeps the version it was made from until it is destroyed.
Before versions, a rebuild or a removal deleted the tree under a live sandbox: its
directories came back empty (mode 0700) and every exec failed with
`SPAWN chdir: Permission denied` while the sandbox still said `running`.

One daemon (with a warm pool, so that pooled sandboxes are about) over a temporary store
($CORDON_TEMPLATES). The templates are the host's static busybox and a marker file, built
with `cordon template build` (no network). Needs root and /bin/busybox.
"""

import os
import shutil
import subprocess

import pytest

from conftest import BUILD, EventStream, assert_error, requires_daemon, start_daemon, wait_until

CORDON = os.path.join(BUILD, "cordon")
BUSYBOX = "/bin/busybox"

pytestmark = requires_daemon + [
    pytest.mark.skipif(not os.path.isfile(BUSYBOX), reason="needs /bin/busybox (busybox-static)"),
]

RECIPE = """\
FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
COPY marker /marker
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("tplver")
    store = root / "store"
    ctx = root / "ctx"
    ctx.mkdir()
    shutil.copy(BUSYBOX, ctx / "busybox")
    (ctx / "Cordonfile").write_text(RECIPE)
    old = os.environ.get("CORDON_TEMPLATES")
    os.environ["CORDON_TEMPLATES"] = str(store)  # ours, the daemon's and its builders'
    yield store
    if old is None:
        del os.environ["CORDON_TEMPLATES"]
    else:
        os.environ["CORDON_TEMPLATES"] = old


@pytest.fixture(scope="module")
def daemon(store):
    d = start_daemon(pool=2, max_sandboxes=16, max_timeout=600)
    yield d
    alive = d.alive()
    d.cleanup()
    assert alive, f"cordond died during the module:\n{d.log_tail()}"


@pytest.fixture(scope="module")
def client(daemon):
    return daemon.client(timeout=120)


def build(store, name, marker):
    ctx = store.parent / "ctx"
    (ctx / "marker").write_text(marker + "\n")
    p = subprocess.run([CORDON, "template", "build", name, "-f", str(ctx / "Cordonfile")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (p.stdout, p.stderr)


def api_build(client, name, recipe):
    s = client.stream("POST", "/v1/templates", {"name": name, "recipe": recipe}, timeout=300)
    assert isinstance(s, EventStream), s.describe()
    events = []
    while (ev := s.next()) is not None:
        events.append(ev)
    s.close()
    assert events[-1] == {"event": "exit", "status": 0}, events


def versions(store):
    d = store / ".versions"
    return sorted(os.listdir(d)) if d.exists() else []


def current(store, name):
    """The version @name points to (None for a directory: the layout before versions)."""
    p = store / name
    return os.readlink(p).split("/", 1)[1] if os.path.islink(p) else None


def sees(client, sid):
    """What a sandbox sees of its template: the marker and the number of tools in /bin."""
    r = client.exec(sid, argv=["/bin/sh", "-c", "cat /marker; ls /bin | wc -l"])
    assert r["exit_code"] == 0, r
    return r["stdout"]


def fd_holders(path):
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == path for fd in os.listdir(f"/proc/{pid}/fd")):
                out.append(int(pid))
        except OSError:
            pass
    return out


def test_live_sandboxes_keep_their_versions_through_rebuilds_and_rm(client, daemon, store):
    name = "ver"
    build(store, name, "one")
    v = [current(store, name)]
    a = client.create(template=name)
    made = [a["id"]]
    try:
        seen_a = sees(client, a["id"])
        assert seen_a.startswith("one\n"), seen_a
        proc = client.start_process(a["id"], argv=["/bin/sleep", "600"])  # a long-running process
        build(store, name, "two")
        v.append(current(store, name))
        assert sees(client, a["id"]) == seen_a  # the live sandbox: its own version, whole
        b = client.create(template=name)
        made.append(b["id"])
        assert sees(client, b["id"]).startswith("two\n")
        # The API's build publishes a new version too (FROM pins the current one).
        api_build(client, name, f"FROM {name}\nRUN echo three > /marker\n")
        v.append(current(store, name))
        c = client.create(template=name)
        made.append(c["id"])
        assert sees(client, c["id"]).startswith("three\n")

        r = client.delete(f"/v1/templates/{name}")
        assert r.status == 204, r.describe()
        assert_error(client.get(f"/v1/templates/{name}"), 404, "not_found")
        assert_error(client.post("/v1/sandboxes", {"template": name}), 404, "not_found")
        for sid, marker in ((a["id"], "one"), (b["id"], "two"), (c["id"], "three")):
            assert sees(client, sid).startswith(marker + "\n"), sid
            assert client.info(sid)["state"] == "running"
        assert None not in v and len(set(v)) == 3, v
        assert versions(store) == sorted(v)  # all held

        out = subprocess.run([CORDON, "template", "gc"], capture_output=True, text=True,
                             check=True).stdout
        assert "removed 0 old versions" in out and "kept 3 in use" in out, out
        proc.close()
        client.destroy(a["id"])
        made.remove(a["id"])
        # Its last holder is gone: the version goes (off the daemon's loop).
        assert wait_until(lambda: versions(store) == sorted(v[1:]), 10), versions(store)
        assert sees(client, b["id"]).startswith("two\n")
    finally:
        for sid in made:
            client.destroy(sid, missing_ok=True)
    assert wait_until(lambda: versions(store) == [], 10), versions(store)
    litter = lambda: [n for n in os.listdir(store) if n.startswith((".tmp-", ".rm-"))]  # noqa: E731
    assert wait_until(lambda: litter() == [], 10), litter()  # deleted off the daemon's loop
    assert daemon.alive()


def test_the_daemon_holds_the_lock_and_the_sandbox_does_not(client, daemon, store):
    build(store, "held", "one")
    sb = client.create(template="held")
    try:
        assert current(store, "held"), "the name is not a link to a version"
        lock = str(store / ".versions" / current(store, "held") / ".lock")
        # Once the pool is full (a child being cloned has the daemon's fds for a moment):
        assert wait_until(lambda: pool_ready(client) >= 4, 20), pool_ready(client)
        # cordond's fd, not the sandbox's (a jail being cloned has a copy for a moment)
        assert wait_until(lambda: fd_holders(lock) == [daemon.proc.pid], 10), fd_holders(lock)
    finally:
        client.destroy(sb["id"])
    assert versions(store).count(current(store, "held")) == 1  # still named: it stays
    assert client.delete("/v1/templates/held").status == 204
    # The pool's sandboxes of it are retired, and the version goes with the last of them.
    assert wait_until(lambda: fd_holders(lock) == [], 10), fd_holders(lock)
    assert wait_until(lambda: not [v for v in versions(store) if v.startswith("held@")], 10)


def pool_ready(client):
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("cordon_pool_ready "):
            return int(float(line.split()[1]))
    raise AssertionError("no cordon_pool_ready in /metrics")


def holders_of(store, name):
    """Versions of @name that someone holds (a pooled or live sandbox)."""
    out = []
    for v in versions(store):
        if v.startswith(name + "@") and fd_holders(str(store / ".versions" / v / ".lock")):
            out.append(v)
    return out


def who(store, name):
    """For a failure's message: which processes hold which versions of @name."""
    out = {}
    for v in versions(store):
        if v.startswith(name + "@"):
            pids = fd_holders(str(store / ".versions" / v / ".lock"))
            out[v] = [(p, open(f"/proc/{p}/comm").read().strip()) for p in pids]
    return out, current(store, name)


def test_no_pooled_sandbox_of_an_old_version_is_handed_out(client, daemon, store):
    """The pool keeps sandboxes of a template warm once it was asked for; a rebuild (by the
    CLI or the API) retires them at once and the pool refills from the new version."""
    build(store, "pooled", "one")
    client.destroy(client.create(template="pooled")["id"])  # from now on kept warm
    # Its pooled sandboxes hold its version (the pool's count alone may still be the last
    # test's, whose template's sandboxes are being retired).
    assert wait_until(lambda: holders_of(store, "pooled") == [current(store, "pooled")], 30), \
        who(store, "pooled")
    assert wait_until(lambda: pool_ready(client) >= 4, 30), pool_ready(client)  # host's 2 and ours
    build(store, "pooled", "two")
    # cordond watches the store: the pool's old sandboxes retire without waiting for a create.
    assert wait_until(lambda: holders_of(store, "pooled") == [current(store, "pooled")], 20), \
        who(store, "pooled")
    sb = client.create(template="pooled")
    try:
        assert sees(client, sb["id"]).startswith("two\n")
    finally:
        client.destroy(sb["id"])
    assert wait_until(lambda: holders_of(store, "pooled") == [current(store, "pooled")], 20), \
        who(store, "pooled")
    assert wait_until(lambda: pool_ready(client) >= 4, 20), pool_ready(client)
    # Through the API the retirement does not wait for a create.
    api_build(client, "pooled", "FROM pooled\nRUN echo three > /marker\n")
    assert wait_until(lambda: holders_of(store, "pooled") == [current(store, "pooled")], 20), \
        who(store, "pooled")
    assert wait_until(lambda: pool_ready(client) >= 4, 20), pool_ready(client)
    for _ in range(3):  # the pool's two and one made on demand: all of the new version
        sb = client.create(template="pooled")
        try:
            assert sees(client, sb["id"]).startswith("three\n")
        finally:
            client.destroy(sb["id"])
    mine = lambda: [v for v in versions(store) if v.startswith("pooled@")]  # noqa: E731
    assert wait_until(lambda: mine() == [current(store, "pooled")], 10), mine()
    # Removed: its pooled sandboxes go, and with them its last version.
    assert client.delete("/v1/templates/pooled").status == 204
    assert wait_until(lambda: mine() == [], 10), mine()
    assert wait_until(lambda: pool_ready(client) == 2, 20), pool_ready(client)


START_READY = """FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
COPY marker /srv/index.html
START httpd -f -p 8080 -h /srv
READY wget -q -O /dev/null http://127.0.0.1:8080/index.html
"""


def test_a_pooled_sandbox_runs_its_templates_start_and_ready(client, daemon, store):
    ctx = store.parent / "ctx"
    (ctx / "Served").write_text(START_READY)
    (ctx / "marker").write_text("served\n")
    p = subprocess.run([CORDON, "template", "build", "served", "-f", str(ctx / "Served")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    client.destroy(client.create(template="served")["id"])
    assert wait_until(lambda: pool_ready(client) >= 4, 60), pool_ready(client)
    for _ in range(3):
        sb = client.create(template="served")
        try:
            r = client.exec(sb["id"], argv=["/bin/wget", "-q", "-O", "-", "http://127.0.0.1:8080/index.html"])
            assert (r["exit_code"], r["stdout"]) == (0, "served\n"), r
        finally:
            client.destroy(sb["id"])
    assert client.delete("/v1/templates/served").status == 204
    assert wait_until(lambda: pool_ready(client) == 2, 20), pool_ready(client)
