"""Run-time installs as root (issue 14), from local files only (no network, no index):

- apt-get update && apt-get install in a template that has a dpkg database: one built here
  (`FROM scratch`, COPY) of the host's own Debian binaries (dpkg, apt, busybox-static and the
  libraries they load), from a repository the test makes (a .deb built with dpkg-deb, its
  Packages and Release) bound in read-only and named by a `file:` source;
- pip install of a pure-Python wheel made here, system-wide, and npm install -g of a package
  tarball made here, in the `host` template.

Each writes only the sandbox's own disk: the template's files and the host's /usr are as
they were. The `host` template itself has no package database of its own (it shows the
host's /usr, never the host's /var/lib/dpkg or /etc/apt), so apt-get does not work there:
README, "Installing packages". The security probe as root is tests/security (the same
capabilities). Needs root (uid ranges, the disk-backed scratch)."""

import hashlib
import os
import shutil
import subprocess

import pytest

from conftest import CORDON, requires_root, requires_tool
from installs import build_apt_template, make_npm_tarball, make_repo, make_wheel

pytestmark = [requires_root, requires_tool("dpkg-deb"), requires_tool("apt-get"),
              pytest.mark.skipif(not os.path.isfile("/bin/busybox"), reason="needs busybox-static")]


def run(*args, timeout=120):
    return subprocess.run([CORDON, "run", *args], capture_output=True, text=True, timeout=timeout)


def tree_digest(root):
    h = hashlib.sha256()
    for dp, dns, fns in sorted(os.walk(root)):
        dns.sort()
        for n in sorted(fns):
            p = os.path.join(dp, n)
            h.update(p.encode())
            if not os.path.islink(p):
                h.update(open(p, "rb").read())
    return h.hexdigest()


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("CORDON_TEMPLATES", str(tmp_path / "store"))
    return tmp_path / "store"


def test_apt_get_install_as_root_in_a_template_with_a_dpkg_database(store, tmp_path):
    p = build_apt_template(CORDON, "aptbox", str(tmp_path / "ctx"))
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:])
    rootfs = store / "aptbox" / "rootfs"
    before = tree_digest(str(rootfs))
    repo = tmp_path / "repo"
    make_repo(str(repo), str(tmp_path))
    script = ("echo 'deb [trusted=yes] file:/repo ./' > /etc/apt/sources.list && "
              "apt-get update && apt-get install -y cordon-hello && cordon-hello && "
              "dpkg-query -W -f '${Status}\\n' cordon-hello")
    r = run("--template", "aptbox", "--user", "root", "--ro-bind", f"{repo}:/repo", "--",
            "/bin/sh", "-c", script)
    assert r.returncode == 0, (r.stdout[-1500:], r.stderr[-1500:])
    lines = r.stdout.splitlines()
    assert "hello from a package" in lines and lines[-1] == "install ok installed", r.stdout
    # The sandbox's own disk took it: the template is as it was, the next sandbox has none.
    assert tree_digest(str(rootfs)) == before
    r = run("--template", "aptbox", "--user", "root", "--", "/bin/sh", "-c",
            "test ! -e /usr/bin/cordon-hello && test ! -s /var/lib/dpkg/status")
    assert r.returncode == 0, r.stderr
    # "user" cannot: no capability, / and the database are root's.
    r = run("--template", "aptbox", "--ro-bind", f"{repo}:/repo", "--", "/bin/sh", "-c",
            "apt-get install -y cordon-hello")
    assert r.returncode != 0


def test_pip_and_npm_install_as_root_in_the_host_template(tmp_path):
    src = tmp_path / "in"  # readable by the sandbox's root, an unprivileged uid of the host
    src.mkdir(mode=0o755)
    make_wheel(str(src / "cordonhello-1.0-py3-none-any.whl"))
    have_npm = shutil.which("npm") and shutil.which("node")
    if have_npm:
        make_npm_tarball(str(src / "cordon-hello-1.0.0.tgz"))
    for f in src.iterdir():
        f.chmod(0o644)
    script = ("python3 -m pip install --quiet --no-index --no-deps --no-cache-dir "
              "--disable-pip-version-check --root-user-action=ignore --break-system-packages "
              "/in/cordonhello-1.0-py3-none-any.whl && "
              "cd / && python3 -c 'import cordonhello, sys; print(cordonhello.GREETING, cordonhello.__file__)'")
    if have_npm:
        script += (" && npm install -g --offline --no-audit --no-fund --loglevel=error "
                   "/in/cordon-hello-1.0.0.tgz >/dev/null && cordon-hello-js")
    r = run("--user", "root", "--ro-bind", f"{src}:/in", "--", "/bin/sh", "-c", script,
            timeout=180)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    lines = r.stdout.splitlines()
    assert lines[0].startswith("hello from a wheel /usr/local/lib/python3"), lines
    if have_npm:
        assert lines[-1] == "hello from npm", lines
    # The host's /usr has none of it.
    assert not [p for p in ("/usr/local/bin/cordon-hello-js",) if os.path.lexists(p)]
    assert not any(n.startswith("cordonhello") for d in os.listdir("/usr/local/lib")
                   if d.startswith("python3") for n in os.listdir(f"/usr/local/lib/{d}/dist-packages")
                   if os.path.isdir(f"/usr/local/lib/{d}/dist-packages"))
