"""`cordon run --runtime NAME` and `cordon create --runtime NAME`: the jail and auto run; a
runtime this host cannot run (gvisor where runsc is missing, microvm where QEMU or its guest
kernel is) and an unknown one are refused before anything is made, with a message naming
the runtimes that can run. The gvisor and microvm runtimes' own tests are tests/gvisor and
tests/microvm."""

import json
import os
import re
import subprocess

import pytest

from conftest import CORDON, EXIT_USAGE, IS_ROOT
from test_cli_client import Daemon, describe, run

GVISOR = os.geteuid() == 0 and os.access(os.environ.get("CORDON_RUNSC", "/usr/bin/runsc"), os.X_OK)
AUTO = "gvisor" if GVISOR else "jail"  # auto: the strongest with both modes and a network


def runnable():
    """The runtimes this host can run, as a refusal names them (microvm depends on the
    machine: QEMU and the guest kernel's cache)."""
    if not os.access(CORDON, os.X_OK):
        return ["jail"]
    r = subprocess.run([CORDON, "run", "--runtime", "no-such", "--", "true"], capture_output=True,
                       timeout=60)
    m = re.search(r"this host can run: ([a-z, ]+)", r.stderr.decode())
    return m.group(1).strip().split(", ") if m else []


RUNNABLE = runnable()
CAN = "this host can run: " + ", ".join(RUNNABLE)


def test_the_runnable_list():
    """The list the refusals give: the jail always, gvisor exactly where runsc is, strongest
    first."""
    assert "jail" in RUNNABLE and RUNNABLE[-1] == "jail", RUNNABLE
    assert ("gvisor" in RUNNABLE) == GVISOR, RUNNABLE

SH = "/bin/sh"


@pytest.mark.parametrize("name", ["jail", "auto"])
def test_run_runtime(cordon, name):
    r = cordon.run([SH, "-c", "echo in-$((6 * 7))"], opts=["--runtime", name])
    assert r.returncode == 0, r.describe()
    assert r.stdout == b"in-42\n"


@pytest.mark.parametrize("name,why", [("gvisor", "runsc"), ("microvm", "microvm"),
                                      ("runc", "no such runtime"), ("", "no such runtime")])
def test_run_runtime_refused(cordon, name, why, marker):
    if name in RUNNABLE:
        pytest.skip(f"{name} runs on this host (tests/{name})")
    r = cordon.run([SH, "-c", f"echo {marker}"], opts=["--runtime", name])
    assert r.returncode == EXIT_USAGE, r.describe()
    assert marker.encode() not in r.stdout, "the command ran anyway"
    err = r.stderr.decode()
    assert f"runtime '{name}'" in err and why in err, r.describe()
    assert CAN in err, r.describe()


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
        want = AUTO if name == "auto" else "jail"
        assert sb["runtime"] == want, sb
        p = run(["info", "--json", sb["id"]], daemon.sock)
        assert p.returncode == 0 and json.loads(p.stdout)["runtime"] == want, describe(p)
    finally:
        run(["kill", sb["id"]], daemon.sock)


@pytest.mark.parametrize("name,code", [("microvm", "unsupported_runtime"),
                                       ("runc", "invalid_field")])
def test_create_runtime_refused(daemon, name, code):
    if name in RUNNABLE:
        pytest.skip(f"{name} runs on this host (tests/{name})")
    before = run(["ls", "--json"], daemon.sock)
    p = run(["create", "--runtime", name], daemon.sock)
    assert p.returncode == 1, describe(p)
    err = p.stderr.decode()
    assert code in err and "runtime" in err, describe(p)
    if code == "unsupported_runtime":
        assert CAN in err, describe(p)
    after = run(["ls", "--json"], daemon.sock)
    assert before.stdout == after.stdout, "a refused create left a sandbox"
