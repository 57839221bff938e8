"""Installs through the egress policy (issue 14): as root, `apt-get update && apt-get install`
and `pip install` fetch from mirror.test, the fake internet's package mirror (its files made
here from the host's own: tests/integration/installs.py), when the sandbox's policy allows the
mirror; with a policy that does not, nothing is fetched. The far side's log shows what came."""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import CORDON, MIRROR, RUNTIME

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from installs import build_apt_template, make_index, make_repo, make_wheel  # noqa: E402

pytestmark = pytest.mark.skipif(not shutil.which("dpkg-deb") or not os.path.isfile("/bin/busybox"),
                                reason="needs dpkg-deb and busybox-static (the test's packages)")

APT = ("echo 'deb [trusted=yes] http://mirror.test/debian ./' > /etc/apt/sources.list && "
       "apt-get update && apt-get install -y cordon-hello && cordon-hello")
PIP = ("python3 -m pip install --quiet --no-cache-dir --disable-pip-version-check "
       "--root-user-action=ignore --break-system-packages --index-url http://mirror.test/pypi/simple/ "
       "--trusted-host mirror.test cordonhello && cd / && "
       "python3 -c 'import cordonhello; print(cordonhello.GREETING)'")


@pytest.fixture(scope="module")
def mirror(fakenet, tmp_path_factory):
    """The mirror's files: a flat apt repository and a pip index, one package each."""
    tmp = tmp_path_factory.mktemp("mirror")
    make_repo(os.path.join(fakenet.mirror, "debian"), str(tmp))
    make_wheel(str(tmp / "cordonhello-1.0-py3-none-any.whl"))
    make_index(os.path.join(fakenet.mirror, "pypi"), str(tmp / "cordonhello-1.0-py3-none-any.whl"))
    subprocess.run(["chmod", "-R", "a+rX", fakenet.mirror], check=True, timeout=30)


@pytest.fixture(scope="module")
def aptbox(fakenet, mirror, tmp_path_factory):
    """The apt template in a store of this module's."""
    tmp = tmp_path_factory.mktemp("installs")
    old = os.environ.get("CORDON_TEMPLATES")
    os.environ["CORDON_TEMPLATES"] = str(tmp / "store")
    try:
        p = build_apt_template(CORDON, "aptbox", str(tmp / "ctx"))
        assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:])
        yield "aptbox"
    finally:
        if old is None:
            del os.environ["CORDON_TEMPLATES"]
        else:
            os.environ["CORDON_TEMPLATES"] = old


def install(fakenet, allow, script, template=None):
    args = ["run", "--runtime", RUNTIME, "--user", "root", "--timeout", "90s", "--allow", allow]
    if template:
        args += ["--template", template]
    return fakenet.cordon(args + ["--", "/bin/sh", "-c", script], timeout=150)


def fetched(fakenet, mark):
    return [os.path.normpath(r["path"]) for r in fakenet.seen(mark) if r.get("kind") == "static"]


def test_apt_get_install_from_an_allowed_mirror(fakenet, aptbox):
    mark = fakenet.mark()
    r = install(fakenet, "mirror.test", APT, template=aptbox)
    assert r.returncode == 0, r.describe()
    assert r.out.splitlines()[-1] == "hello from a package", r.describe()
    got = fetched(fakenet, mark)
    assert "/debian/cordon-hello_1.0_all.deb" in got and "/debian/Packages" in got, got
    assert not [x for x in fakenet.seen(mark) if x.get("peer", "").startswith("10.201.")]


# The `host` template: its apt and dpkg state are the host's, copy-on-write; its sources are
# the host's too, so the test's mirror replaces them (in the sandbox's layer only).
APT_HOST = ("rm -f /etc/apt/sources.list.d/* && " + APT + " && dpkg -s cordon-hello >/dev/null && "
            "test ! -e /etc/apt/auth.conf && test ! -e /etc/apt/auth.conf.d && test ! -e /etc/apt/apt.conf.d && echo clean")


def dpkg_state():
    """What the host's package database holds, to compare after a sandbox's install."""
    out = {}
    for dirpath, _, files in os.walk("/var/lib/dpkg"):
        for f in files:
            p = os.path.join(dirpath, f)
            if os.path.isfile(p) and not os.path.islink(p):
                st = os.stat(p)
                out[p] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.mark.skipif(not os.path.isfile("/var/lib/dpkg/status") or not shutil.which("apt-get"),
                    reason="the host has no dpkg database or apt (the host template shows the host's)")
def test_apt_get_install_in_the_host_template(fakenet, mirror):
    before = dpkg_state()
    mark = fakenet.mark()
    r = install(fakenet, "mirror.test", APT_HOST)
    assert r.returncode == 0, r.describe()
    assert r.out.splitlines()[-2:] == ["hello from a package", "clean"], r.describe()
    assert "/debian/cordon-hello_1.0_all.deb" in fetched(fakenet, mark)
    assert dpkg_state() == before, "the host's /var/lib/dpkg changed"
    assert not os.path.exists("/usr/bin/cordon-hello")
    r = install(fakenet, "mirror.test", "dpkg -s cordon-hello || command -v cordon-hello || echo none")
    assert r.returncode == 0 and r.out.splitlines()[-1] == "none", r.describe()


def test_pip_install_from_an_allowed_index(fakenet, mirror):
    mark = fakenet.mark()
    r = install(fakenet, "mirror.test", PIP)
    assert r.returncode == 0, r.describe()
    assert r.out.splitlines()[-1] == "hello from a wheel", r.describe()
    assert "/pypi/files/cordonhello-1.0-py3-none-any.whl" in fetched(fakenet, mark)


def test_a_mirror_the_policy_does_not_allow_gives_nothing(fakenet, aptbox):
    mark = fakenet.mark()
    r = install(fakenet, "api.example.test", APT, template=aptbox)
    assert r.returncode != 0 and "hello from a package" not in r.out, r.describe()
    r = install(fakenet, "api.example.test", PIP)
    assert r.returncode != 0, r.describe()
    assert fetched(fakenet, mark) == []
    assert not [x for x in fakenet.seen(mark) if x.get("server", "").startswith(MIRROR)]

