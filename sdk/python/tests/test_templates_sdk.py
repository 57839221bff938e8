"""cordon.Templates against a real cordond whose store is a temporary directory: build from
a recipe with events streamed, list, get, a sandbox from the template, a failed build,
delete. The base template is built first with the CLI from the host's static busybox."""

import os
import shutil
import subprocess

import pytest

from cordon import BuildFailed, NotFound, Sandbox, Templates
from test_sdk import CORDOND, Daemon

CORDON = CORDOND.parent / "cordon"

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="cordond needs root"),
    pytest.mark.skipif(not CORDOND.exists(), reason=f"{CORDOND} is not built"),
    pytest.mark.skipif(not os.path.isfile("/bin/busybox"), reason="needs /bin/busybox"),
]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    root = tmp_path_factory.mktemp("sdk-templates")
    old = os.environ.get("CORDON_TEMPLATES")
    os.environ["CORDON_TEMPLATES"] = str(root / "store")
    shutil.copy("/bin/busybox", root / "busybox")
    (root / "Cordonfile").write_text(
        'FROM scratch\nCOPY busybox /bin/busybox\nRUN ["/bin/busybox", "--install", "-s", "/bin"]\n')
    p = subprocess.run([str(CORDON), "template", "build", "sdkbase", "-f", str(root / "Cordonfile")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    d = Daemon()
    yield d
    d.stop()
    if old is None:
        del os.environ["CORDON_TEMPLATES"]
    else:
        os.environ["CORDON_TEMPLATES"] = old


def test_build_list_get_use_delete(daemon):
    t = Templates(socket=daemon.socket)
    seen = []
    meta = t.build("sdkweb", "FROM sdkbase\nARG WHO=world\nRUN echo hello $WHO > /hello\nENV A=1\n",
                   build_args={"WHO": "sdk"}, on_event=seen.append)
    assert meta["name"] == "sdkweb" and "A=1" in meta["env"]
    kinds = [e["event"] for e in seen]
    assert kinds[0] == "step" and "done" in kinds and kinds[-1] == "exit"
    assert "sdkweb" in [m["name"] for m in t.list()]
    assert t.get("sdkweb")["key"] == meta["key"]
    with Sandbox.create(template="sdkweb", socket=daemon.socket) as sbx:
        r = sbx.exec("cat /hello; echo $A")
        assert r.stdout == "hello sdk\n1\n"
    t.delete("sdkweb")
    with pytest.raises(NotFound):
        t.get("sdkweb")


def test_failed_build_raises_with_the_line(daemon):
    t = Templates(socket=daemon.socket)
    with pytest.raises(BuildFailed) as e:
        t.build("sdkbad", "FROM sdkbase\nRUN echo about to fail; exit 4\n")
    assert "line 2" in e.value.message and "status 4" in e.value.message
    assert any(ev.get("event") == "log" and "about to fail" in ev.get("data", "")
               for ev in e.value.events)
    with pytest.raises(NotFound):
        t.get("sdkbad")


def test_build_with_a_context_directory(daemon, tmp_path):
    t = Templates(socket=daemon.socket)
    ctx = tmp_path / "ctx"
    (ctx / "pkg").mkdir(parents=True)
    (ctx / "pkg" / "hello.txt").write_text("from the context\n")
    t.build("sdkctx", "FROM sdkbase\nCOPY pkg/ /opt/pkg/\n", context=ctx)
    with Sandbox.create(template="sdkctx", socket=daemon.socket) as sbx:
        assert sbx.exec("cat /opt/pkg/hello.txt").stdout == "from the context\n"
    t.delete("sdkctx")
    with pytest.raises(ValueError):
        t.build("sdkctx", "FROM sdkbase\n", context=tmp_path / "missing")
