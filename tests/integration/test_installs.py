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

import base64
import hashlib
import io
import os
import shutil
import subprocess
import tarfile
import zipfile

import pytest

from conftest import CORDON, requires_root, requires_tool

pytestmark = [requires_root, requires_tool("dpkg-deb"), requires_tool("apt-get"),
              pytest.mark.skipif(not os.path.isfile("/bin/busybox"), reason="needs busybox-static")]

# What the apt template runs: dpkg's and apt's programs (dpkg checks for sh, rm, tar, diff,
# ldconfig and start-stop-daemon in PATH before it installs anything; dpkg-deb runs GNU tar).
PROGRAMS = ["/usr/bin/dpkg", "/usr/bin/dpkg-deb", "/usr/bin/dpkg-query", "/usr/bin/dpkg-split",
            "/usr/bin/dpkg-trigger", "/usr/bin/apt-get", "/usr/bin/apt-config",
            "/usr/sbin/ldconfig", "/usr/sbin/start-stop-daemon", "/usr/bin/tar",
            "/usr/lib/apt/methods/file", "/usr/lib/apt/methods/copy", "/usr/lib/apt/methods/store"]
DATA = ["/usr/share/dpkg/cputable", "/usr/share/dpkg/ostable", "/usr/share/dpkg/tupletable",
        "/usr/share/dpkg/abitable"]
BUSYBOX_APPLETS = ["sh", "rm", "diff", "cat", "ls", "echo", "mkdir", "test", "grep", "gzip",
                   "cp", "mv", "ln", "chmod", "id", "env", "sed", "stat", "true"]


def libraries(path):
    """The shared objects @path loads (ldd's absolute paths), the loader included."""
    out = subprocess.run(["ldd", path], capture_output=True, text=True, timeout=30).stdout
    libs = []
    for line in out.splitlines():
        parts = line.split()
        libs += [p for p in parts if p.startswith("/")]
    return libs


def install(root, path):
    """@path of the host copied to the same path under @root, its directories' symlinks (a
    merged /usr: /lib -> usr/lib) copied as symlinks and followed."""
    parts = path.strip("/").split("/")
    host, dst = "/", root
    for i, c in enumerate(parts):
        host, dst = os.path.join(host, c), os.path.join(dst, c)
        if os.path.islink(host):
            target = os.readlink(host)
            if not os.path.lexists(dst):
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                os.symlink(target, dst)
            rest = "/".join(parts[i + 1:])
            nxt = os.path.normpath(os.path.join(os.path.dirname(host), target))
            return install(root, os.path.join(nxt, rest) if rest else nxt)
    if os.path.isdir(host):
        os.makedirs(dst, exist_ok=True)
    elif not os.path.exists(dst):
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(host, dst)


def apt_rootfs(root):
    for p in PROGRAMS:
        install(root, p)
        for lib in libraries(p):
            install(root, lib)
    for d in DATA:
        if os.path.exists(d):
            install(root, d)
    install(root, "/bin/busybox")
    for a in BUSYBOX_APPLETS:
        if not os.path.lexists(os.path.join(root, "usr/bin", a)):
            os.symlink("busybox", os.path.join(root, "usr/bin", a))
    for d in ("var/lib/dpkg/info", "var/lib/dpkg/updates", "var/lib/dpkg/triggers",
              "var/lib/dpkg/alternatives", "var/lib/apt/lists/partial",
              "var/cache/apt/archives/partial", "var/log/apt", "etc/apt/apt.conf.d",
              "etc/apt/sources.list.d", "etc/apt/preferences.d", "etc/dpkg/dpkg.cfg.d", "tmp"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    for f in ("var/lib/dpkg/status", "var/lib/dpkg/available"):
        open(os.path.join(root, f), "w").close()
    with open(os.path.join(root, "etc/apt/apt.conf.d/00sandbox"), "w") as f:
        f.write('APT::Sandbox::User "root";\n')  # no _apt user in this small template


def make_repo(repo, work):
    """A flat repository with one package, cordon-hello 1.0 (a script, no dependencies)."""
    pkg = os.path.join(work, "pkg")
    os.makedirs(os.path.join(pkg, "DEBIAN"))
    os.makedirs(os.path.join(pkg, "usr/bin"))
    with open(os.path.join(pkg, "DEBIAN/control"), "w") as f:
        f.write("Package: cordon-hello\nVersion: 1.0\nArchitecture: all\n"
                "Maintainer: Cordon tests <tests@cordon.invalid>\nDescription: a test package\n")
    with open(os.path.join(pkg, "usr/bin/cordon-hello"), "w") as f:
        f.write("#!/bin/sh\necho hello from a package\n")
    os.chmod(os.path.join(pkg, "usr/bin/cordon-hello"), 0o755)
    os.makedirs(repo)
    deb = os.path.join(repo, "cordon-hello_1.0_all.deb")
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", pkg, deb], check=True,
                   capture_output=True, timeout=60)
    data = open(deb, "rb").read()
    control = subprocess.run(["dpkg-deb", "-f", deb], check=True, capture_output=True, text=True,
                             timeout=30).stdout
    packages = (control.rstrip("\n") + f"\nFilename: ./cordon-hello_1.0_all.deb\nSize: {len(data)}\n"
                f"SHA256: {hashlib.sha256(data).hexdigest()}\n\n").encode()
    with open(os.path.join(repo, "Packages"), "wb") as f:
        f.write(packages)
    with open(os.path.join(repo, "Release"), "w") as f:
        f.write("Origin: cordon-tests\nLabel: cordon-tests\nSuite: local\nCodename: local\n"
                "Date: Tue, 01 Dec 2026 00:00:00 UTC\nSHA256:\n"
                f" {hashlib.sha256(packages).hexdigest()} {len(packages)} Packages\n")


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
    ctx = tmp_path / "ctx"
    apt_rootfs(str(ctx / "root"))
    (ctx / "Cordonfile").write_text("FROM scratch\nCOPY root/ /\n")
    p = subprocess.run([CORDON, "template", "build", "aptbox", "-f", str(ctx / "Cordonfile"),
                        "--context", str(ctx)], capture_output=True, text=True, timeout=300)
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


def make_wheel(path):
    files = {"cordonhello/__init__.py": b"GREETING = 'hello from a wheel'\n"}
    di = "cordonhello-1.0.dist-info"
    files[f"{di}/METADATA"] = b"Metadata-Version: 2.1\nName: cordonhello\nVersion: 1.0\n"
    files[f"{di}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    rows = [f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}"
            for n, d in files.items()] + [f"{di}/RECORD,,"]
    files[f"{di}/RECORD"] = ("\n".join(rows) + "\n").encode()
    with zipfile.ZipFile(path, "w") as z:
        for n, d in files.items():
            z.writestr(n, d)


def make_npm_tarball(path):
    files = {"package/package.json": b'{"name": "cordon-hello", "version": "1.0.0", '
                                     b'"bin": {"cordon-hello-js": "cli.js"}}\n',
             "package/cli.js": b"#!/usr/bin/env node\nconsole.log('hello from npm');\n"}
    with tarfile.open(path, "w:gz") as t:
        for n, d in files.items():
            ti = tarfile.TarInfo(n)
            ti.size, ti.mode = len(d), 0o755 if n.endswith(".js") else 0o644
            t.addfile(ti, io.BytesIO(d))


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
