"""What the install tests make from the host's own files, with no network: a small template
with a dpkg database (the host's dpkg, apt, GNU tar and busybox-static, and the libraries they
load), a flat Debian repository of one package, a pure-Python wheel, an npm package tarball
and a PEP 503 index. Used by tests/integration/test_installs.py (a `file:` repository, files
bound in) and tests/net/test_installs_net.py (the same served by the fake internet)."""

import base64
import hashlib
import io
import os
import shutil
import subprocess
import tarfile
import zipfile

# What the apt template runs: dpkg's and apt's programs (dpkg checks for sh, rm, tar, diff,
# ldconfig and start-stop-daemon in PATH before it installs anything; dpkg-deb runs GNU tar).
PROGRAMS = ["/usr/bin/dpkg", "/usr/bin/dpkg-deb", "/usr/bin/dpkg-query", "/usr/bin/dpkg-split",
            "/usr/bin/dpkg-trigger", "/usr/bin/apt-get", "/usr/bin/apt-config",
            "/usr/sbin/ldconfig", "/usr/sbin/start-stop-daemon", "/usr/bin/tar",
            "/usr/lib/apt/methods/file", "/usr/lib/apt/methods/copy", "/usr/lib/apt/methods/store",
            "/usr/lib/apt/methods/http"]
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




def build_apt_template(cordon, name, ctx):
    """`cordon template build NAME` of apt_rootfs() (FROM scratch, COPY) in $CORDON_TEMPLATES."""
    apt_rootfs(os.path.join(ctx, "root"))
    with open(os.path.join(ctx, "Cordonfile"), "w") as f:
        f.write("FROM scratch\nCOPY root/ /\n")
    return subprocess.run([cordon, "template", "build", name, "-f", os.path.join(ctx, "Cordonfile"),
                           "--context", ctx], capture_output=True, text=True, timeout=300)


def make_index(root, wheel):
    """A PEP 503 simple index under @root/simple for the wheel file @wheel (copied to
    @root/files): what `pip install --index-url http://HOST/simple/` reads."""
    name = os.path.basename(wheel)
    project = name.split("-")[0]
    os.makedirs(os.path.join(root, "files"), exist_ok=True)
    os.makedirs(os.path.join(root, "simple", project), exist_ok=True)
    shutil.copy(wheel, os.path.join(root, "files", name))
    digest = hashlib.sha256(open(wheel, "rb").read()).hexdigest()
    with open(os.path.join(root, "simple", project, "index.html"), "w") as f:
        f.write(f'<html><body><a href="../../files/{name}#sha256={digest}">{name}</a></body></html>\n')
