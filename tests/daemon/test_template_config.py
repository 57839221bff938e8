"""What a template's template.json says reaches sandboxes made by cordond: its ENV (under the
request's), WORKDIR and USER as process defaults, START running in the background and READY
passing before the create request is answered, and a create failing when READY never does.

The templates are built here with `cordon template build` from the host's static busybox
into a temporary store that this module's cordond reads ($CORDON_TEMPLATES).
"""

import os
import shutil
import subprocess
import time

import pytest

from conftest import BUILD, start_daemon

CORDON = os.path.join(BUILD, "cordon")

pytestmark = pytest.mark.skipif(not os.path.isfile("/bin/busybox"), reason="needs /bin/busybox")

RECIPE = """\
FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
RUN mkdir -p /srv && echo up > /srv/index.html
ENV FROM_TEMPLATE=yes SHARED=template
WORKDIR /srv
USER root
START httpd -f -p 8080 -h /srv
READY wget -q -O /dev/null http://127.0.0.1:8080/index.html
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("tplcfg")
    store = root / "store"
    old = os.environ.get("CORDON_TEMPLATES")
    os.environ["CORDON_TEMPLATES"] = str(store)
    ctx = root / "ctx"
    ctx.mkdir()
    shutil.copy("/bin/busybox", ctx / "busybox")
    (ctx / "Cordonfile").write_text(RECIPE)
    (ctx / "Never").write_text("FROM served\nREADY false\n")
    for name, f in (("served", "Cordonfile"), ("never", "Never")):
        p = subprocess.run([CORDON, "template", "build", name, "-f", str(ctx / f)],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
    yield store
    if old is None:
        del os.environ["CORDON_TEMPLATES"]
    else:
        os.environ["CORDON_TEMPLATES"] = old


@pytest.fixture(scope="module")
def daemon(store):
    # A short READY deadline, so that the template whose READY never passes fails in 3 s.
    d = start_daemon(pool=0, max_sandboxes=8, max_timeout=600, extra=["--ready-timeout", "3"])
    yield d
    alive = d.alive()
    d.cleanup()
    assert alive, f"cordond died during the module:\n{d.log_tail()}"


@pytest.fixture(scope="module")
def client(daemon):
    return daemon.client()


def test_start_is_up_when_create_returns(client):
    sb = client.create({"template": "served", "env": {"SHARED": "request"}})
    try:
        # No retry loop: READY passed before the 201, so the server answers at once.
        out = client.sh(sb["id"], "wget -q -O - http://127.0.0.1:8080/index.html; pwd; id -u; "
                                  "echo $FROM_TEMPLATE $SHARED")
        assert out.splitlines() == ["up", "/srv", "0", "yes request"]
        procs = client.get(f"/v1/sandboxes/{sb['id']}/processes").json()
        tags = [p.get("tag") for p in (procs if isinstance(procs, list) else procs.get("processes", []))]
        assert "start" in tags, procs
        # A request's own user and cwd still win over the template's.
        r = client.exec(sb["id"], argv=["/bin/sh", "-c", "id -u; pwd"], user="user", cwd="/")
        assert r["stdout"].splitlines() == ["1000", "/"]
    finally:
        client.destroy(sb["id"], missing_ok=True)


def test_ready_that_never_passes_fails_the_create(client, daemon):
    t0 = time.monotonic()
    r = client.post("/v1/sandboxes", {"template": "never"}, timeout=60)
    assert r.status >= 500, r.describe()
    assert "READY" in r.text, r.text
    assert 2.5 < time.monotonic() - t0 < 15
    # Nothing of it is left, and the daemon serves on.
    assert [s for s in client.list() if s.get("template") == "never"] == []
    sb = client.create({"template": "served"})
    client.destroy(sb["id"])
