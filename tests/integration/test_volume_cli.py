"""`cordon volume create|ls|rm`, `cordon create --volume` and `cordon run --volume`: the CLI
against a real cordond, and one-shot runs that mount the same volumes under the same lock."""

import json
import os
import subprocess
import time

import pytest

from test_cli_client import (CORDON, EXIT_API, EXIT_USAGE, HAVE_CORDOND, IS_ROOT, Daemon,
                             describe, run)

pytestmark = [
    pytest.mark.skipif(not IS_ROOT, reason="volumes need root (loop devices)"),
    pytest.mark.skipif(not HAVE_CORDOND, reason="no cordond binary (ninja -C build)"),
]


@pytest.fixture(scope="module")
def daemon():
    d = Daemon()
    d.start()
    yield d
    d.stop()


def env_of(d):
    return dict(os.environ, CORDON_VOLUME_DIR=os.path.join(d.state_dir, "volumes"))


def cli(d, *args, **kw):
    return run(list(args), sock=d.sock, env=env_of(d), **kw)


def volumes(d):
    p = cli(d, "volume", "ls", "--json")
    assert p.returncode == 0, describe(p)
    return {v["name"]: v for v in json.loads(p.stdout)["volumes"]}


def released(d, name):
    deadline = time.monotonic() + 10
    while volumes(d)[name]["in_use"] and time.monotonic() < deadline:
        time.sleep(0.05)
    return not volumes(d)[name]["in_use"]


def test_volume_lifecycle(daemon):
    p = cli(daemon, "volume", "create", "clivol", "--size", "32M")
    assert p.returncode == 0 and p.stdout == b"clivol\n", describe(p)
    assert volumes(daemon)["clivol"]["size_mb"] == 32
    p = cli(daemon, "volume", "ls")
    assert p.returncode == 0 and b"clivol" in p.stdout and b"NAME" in p.stdout, describe(p)
    p = cli(daemon, "volume", "create", "clivol", "--size", "32M")
    assert p.returncode == EXIT_API and b"volume_exists" in p.stderr, describe(p)
    p = cli(daemon, "create", "--volume", "clivol:/data")
    assert p.returncode == 0, describe(p)
    sid = p.stdout.decode().strip()
    p = cli(daemon, "exec", sid, "--", "sh", "-c", "echo cli > /data/f")
    assert p.returncode == 0, describe(p)
    p = cli(daemon, "create", "--volume", "clivol:/data")
    assert p.returncode == EXIT_API and b"volume_in_use" in p.stderr, describe(p)
    p = cli(daemon, "volume", "rm", "clivol")
    assert p.returncode == EXIT_API and b"volume_in_use" in p.stderr, describe(p)
    # cordond holds it: a one-shot run may not mount it, read-only or not
    for spec in ("clivol:/data", "clivol:/data:ro"):
        p = cli(daemon, "run", "--volume", spec, "--", "true")
        assert p.returncode == EXIT_USAGE and b"in use" in p.stderr, describe(p)
    assert cli(daemon, "kill", sid).returncode == 0
    assert released(daemon, "clivol")
    p = cli(daemon, "run", "--volume", "clivol:/data:ro", "--", "cat", "/data/f")
    assert p.returncode == 0 and p.stdout == b"cli\n", describe(p)
    p = cli(daemon, "run", "--volume", "clivol:/data:ro", "--", "sh", "-c", "echo x > /data/g")
    assert p.returncode != 0 and b"Read-only" in p.stderr, describe(p)
    p = cli(daemon, "run", "--volume", "clivol:/w", "--", "sh", "-c",
            "stat -c %u /w/f && echo run >> /w/f")
    assert p.returncode == 0 and p.stdout == b"1000\n", describe(p)
    p = cli(daemon, "create", "--volume", "clivol:/data:ro")
    assert p.returncode == 0, describe(p)
    sid = p.stdout.decode().strip()
    p = cli(daemon, "exec", sid, "--", "cat", "/data/f")
    assert p.stdout == b"cli\nrun\n", describe(p)
    cli(daemon, "kill", sid)
    assert released(daemon, "clivol")
    p = cli(daemon, "volume", "rm", "clivol")
    assert p.returncode == 0, describe(p)
    assert "clivol" not in volumes(daemon)


@pytest.mark.parametrize("spec", ["Bad:/data", "v", "v:", "v:data", "v:/proc/x", "v:/dev",
                                  "v:/sys/x", "v:/", "v:/a/../b", "v:/data:rx"])
def test_bad_volume_arguments(daemon, spec):
    for cmd in (["create", "--volume", spec], ["run", "--volume", spec, "--", "true"]):
        p = cli(daemon, *cmd)
        assert p.returncode == EXIT_USAGE and b"--volume" in p.stderr, describe(p)


def test_run_volume_missing(daemon):
    p = cli(daemon, "run", "--volume", "nosuchvol:/data", "--", "true")
    assert p.returncode == EXIT_USAGE and b"no volume" in p.stderr, describe(p)


# ---- cordon cp -r ----

def make_tree(root, n=2000):
    for i in range(n):
        d = os.path.join(root, f"d{i % 20:02d}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f {i}\u00e9"), "w") as f:
            f.write(str(i) * (i % 5))
    os.makedirs(os.path.join(root, "empty"))
    os.symlink("d00/f 0\u00e9", os.path.join(root, "link"))
    with open(os.path.join(root, "x" * 200), "w") as f:
        f.write("long")


def tree_of(root):
    out = {}
    for dp, dns, fns in os.walk(root):
        for n in dns + fns:
            p = os.path.join(dp, n)
            rel = os.path.relpath(p, root)
            out[rel] = ("l", os.readlink(p)) if os.path.islink(p) else \
                ("d",) if os.path.isdir(p) else ("f", open(p, "rb").read())
    return out


def test_cp_recursive_both_ways(daemon, tmp_path):
    src = tmp_path / "src"
    make_tree(str(src))
    p = cli(daemon, "create")
    assert p.returncode == 0, describe(p)
    sid = p.stdout.decode().strip()
    try:
        p = cli(daemon, "cp", "-r", str(src), f"{sid}:/home/user/proj")
        assert p.returncode == 0, describe(p)
        p = cli(daemon, "exec", sid, "--", "sh", "-c", "find /home/user/proj -type f | wc -l")
        assert p.stdout.strip() == b"2001", describe(p)
        back = tmp_path / "back"
        p = cli(daemon, "cp", "--recursive", f"{sid}:/home/user/proj", str(back))
        assert p.returncode == 0, describe(p)
        assert tree_of(str(back)) == tree_of(str(src))
        # an absolute symlink (the sandbox's own path) comes out as a symlink, not followed
        cli(daemon, "exec", sid, "--", "sh", "-c", "mkdir /tmp/venv /tmp/venv/bin && "
            "ln -s /usr/bin/python3 /tmp/venv/bin/python && ln -s /etc /tmp/venv/etc")
        venv = tmp_path / "venv"
        p = cli(daemon, "cp", "-r", f"{sid}:/tmp/venv", str(venv))
        assert p.returncode == 0, describe(p)
        assert os.readlink(venv / "bin" / "python") == "/usr/bin/python3"
        assert os.readlink(venv / "etc") == "/etc" and sorted(os.listdir(venv)) == ["bin", "etc"]
        # a tree inside with a link that climbs out of it: refused before anything is written
        cli(daemon, "exec", sid, "--", "ln", "-s", "../../../etc/shadow", "/home/user/proj/evil")
        out = tmp_path / "refused"
        p = cli(daemon, "cp", "-r", f"{sid}:/home/user/proj", str(out))
        assert p.returncode == EXIT_API and b"unsafe_archive" in p.stderr, describe(p)
        assert not out.exists()
        p = cli(daemon, "cp", "-r", str(src / "link"), f"{sid}:/tmp/x")
        assert p.returncode == EXIT_USAGE, describe(p)
    finally:
        cli(daemon, "kill", sid)
