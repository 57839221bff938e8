"""`cordon run --runtime NAME` and `cordon create --runtime NAME`: the jail and auto run; a
runtime this host cannot run (gvisor and microvm are known, not built yet) and an unknown one
are refused before anything is made, with a message naming the runtimes that can run."""

import json
import subprocess

import pytest

from conftest import EXIT_USAGE, IS_ROOT
from test_cli_client import Daemon, describe, run

SH = "/bin/sh"


@pytest.mark.parametrize("name", ["jail", "auto"])
def test_run_runtime(cordon, name):
    r = cordon.run([SH, "-c", "echo in-$((6 * 7))"], opts=["--runtime", name])
    assert r.returncode == 0, r.describe()
    assert r.stdout == b"in-42\n"


@pytest.mark.parametrize("name,why", [("gvisor", "not built yet"), ("microvm", "not built yet"),
                                      ("runc", "no such runtime"), ("", "no such runtime")])
def test_run_runtime_refused(cordon, name, why, marker):
    r = cordon.run([SH, "-c", f"echo {marker}"], opts=["--runtime", name])
    assert r.returncode == EXIT_USAGE, r.describe()
    assert marker.encode() not in r.stdout, "the command ran anyway"
    err = r.stderr.decode()
    assert f"runtime '{name}'" in err and why in err, r.describe()
    assert "this host can run: jail" in err, r.describe()


def test_run_help_names_runtime(cordon):
    r = cordon.raw(["run", "--help"])
    assert r.returncode == 0 and b"--runtime NAME" in r.stdout, r.describe()


def test_oneshot_stdio_is_the_callers(cordon, tmp_path):
    """One-shot mode passes the caller's 0-2 (spec->stdio) and nothing else: an fd the caller
    has open besides them does not reach the command."""
    extra = open(tmp_path / "extra", "w")
    try:
        r = cordon.raw(["run", "--", SH, "-c", "ls /proc/self/fd; echo to-err >&2"],
                       input=b"", pass_fds=(extra.fileno(),))
    finally:
        extra.close()
    assert r.returncode == 0, r.describe()
    assert r.stderr.endswith(b"to-err\n"), r.describe()
    # 0-2, and the directory fd ls reads /proc/self/fd with.
    assert r.stdout.split() == [b"0", b"1", b"2", b"3"], r.describe()


@pytest.fixture(scope="module")
def daemon():
    if not IS_ROOT:
        pytest.skip("cordond needs root")
    d = Daemon()
    d.start()
    yield d
    d.stop()


@pytest.mark.parametrize("name", ["jail", "auto"])
def test_create_runtime(daemon, name):
    p = run(["create", "--json", "--runtime", name], daemon.sock)
    assert p.returncode == 0, describe(p)
    sb = json.loads(p.stdout)
    try:
        assert sb["runtime"] == "jail", sb
        p = run(["info", "--json", sb["id"]], daemon.sock)
        assert p.returncode == 0 and json.loads(p.stdout)["runtime"] == "jail", describe(p)
    finally:
        run(["kill", sb["id"]], daemon.sock)


@pytest.mark.parametrize("name,code", [("gvisor", "unsupported_runtime"),
                                       ("microvm", "unsupported_runtime"),
                                       ("runc", "invalid_field")])
def test_create_runtime_refused(daemon, name, code):
    before = run(["ls", "--json"], daemon.sock)
    p = run(["create", "--runtime", name], daemon.sock)
    assert p.returncode == 1, describe(p)
    err = p.stderr.decode()
    assert code in err and "runtime" in err, describe(p)
    if code == "unsupported_runtime":
        assert "not built yet" in err and "can run: jail" in err, describe(p)
    after = run(["ls", "--json"], daemon.sock)
    assert before.stdout == after.stdout, "a refused create left a sandbox"
