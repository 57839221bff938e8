"""`cordon run --runtime NAME` and `cordon create --runtime NAME`: the jail and auto run; a
runtime this host cannot run (gvisor where runsc is missing, microvm where QEMU or its guest
kernel is) and an unknown one are refused before anything is made, with a message naming
the runtimes that can run. The gvisor and microvm runtimes' own tests are tests/gvisor and
tests/microvm."""

import json
import os
import re
import subprocess
import time

import pytest

from conftest import CORDON, EXIT_USAGE, IS_ROOT
from test_cli_client import Daemon, describe, run

GVISOR = os.geteuid() == 0 and os.access(os.environ.get("CORDON_RUNSC", "/usr/bin/runsc"), os.X_OK)
AUTO = "gvisor" if GVISOR else "jail"  # auto: the strongest with both modes and a network


def listing():
    """`cordon runtimes --json --local`: this host's own probe, as `cordon run` makes it."""
    r = subprocess.run([CORDON, "runtimes", "--json", "--local"], capture_output=True, timeout=60)
    assert r.returncode == 0, r
    return json.loads(r.stdout)


def runnable():
    """The runtimes this host can run, strongest first (microvm depends on the machine: QEMU
    and the guest kernel's cache)."""
    if not os.access(CORDON, os.X_OK):
        return ["jail"]
    return [x["name"] for x in listing()["runtimes"] if x["available"]]


RUNNABLE = runnable()
# microvm is auto's pick only where it runs under KVM (under TCG it is asked for by name).
if "microvm" in RUNNABLE and listing()["runtimes"][0].get("mode", {}).get("name") == "kvm":
    AUTO = "microvm"
CAN = "this host can run: " + ", ".join(RUNNABLE)


def test_the_runnable_list():
    """`cordon runtimes`: the jail always, gvisor exactly where runsc is, strongest first;
    each with its capabilities, the reason when it cannot run, and what auto picks."""
    assert "jail" in RUNNABLE and RUNNABLE[-1] == "jail", RUNNABLE
    assert ("gvisor" in RUNNABLE) == GVISOR, RUNNABLE
    body = listing()
    assert body["source"] == "local" and body["default"] == "jail", body
    assert body["auto"] == AUTO, body
    for x in body["runtimes"]:
        assert (x["reason"] is None) == x["available"], x
        assert "oneshot" in x["capabilities"], x
    mv = body["runtimes"][0]
    assert mv["name"] == "microvm" and (not mv["available"] or mv["mode"]["name"] in ("kvm", "tcg"))


def test_runtimes_table_and_no_daemon(tmp_path):
    """Without a daemon at --socket, `cordon runtimes` probes this host and says so; the table
    has one row per runtime, the reason beside one that cannot run."""
    r = subprocess.run([CORDON, "--socket", str(tmp_path / "none.sock"), "runtimes"],
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r
    out = r.stdout.decode()
    assert "probed on this host (no cordond at" in out, out
    rows = {l.split()[0]: l for l in out.splitlines()[1:4]}
    assert set(rows) == {"microvm", "gvisor", "jail"}, out
    for x in listing()["runtimes"]:
        assert rows[x["name"]].split()[1] == ("yes" if x["available"] else "no"), out
        if x["reason"]:
            assert x["reason"][:40] in rows[x["name"]], out

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


def _children(pid):
    out = []
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
        except OSError:
            continue
        if int(st[st.rindex(")") + 2:].split()[1]) == pid:
            out.append((int(d), st[st.index("(") + 1:st.rindex(")")]))
    return out


def _fds(pid):
    out = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out[int(fd)] = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            pass
    return out


def test_oneshot_pid1_holds_nothing_of_cordons(tmp_path):
    """cordon-init, the sandbox's PID 1, holds its stdio, its status channel and what it made
    itself, and nothing else of the `cordon` process: whatever cordon had open without
    O_CLOEXEC when it cloned the jail's child (here a pipe its caller left it) is closed
    before the exec (src/runtime/jail/child.c; a wrong bound once left it open, and the
    command's own fds, which cordon-init closes again, did not show it)."""
    out, err = tmp_path / "out", tmp_path / "err"
    # Inheritable, and above every fd cordon opens itself: what a careless caller hands down
    # (a shell keeps its own at 255).
    r, w = os.pipe()
    high = [os.dup2(r, 300), os.dup2(w, 301)]
    os.close(r)
    os.close(w)
    try:
        with open(out, "wb") as o, open(err, "wb") as e:
            p = subprocess.Popen([CORDON, "run", "--", "sleep", "30"], stdin=subprocess.DEVNULL,
                                 stdout=o, stderr=e, start_new_session=True, pass_fds=high)
    finally:
        for fd in high:
            os.close(fd)
    try:
        fds, deadline = {}, time.monotonic() + 30
        while "anon_inode:[signalfd]" not in fds.values():  # PID 1 past its own set-up
            assert p.poll() is None and time.monotonic() < deadline, (p.poll(), err.read_text())
            init = [c for c, comm in _children(p.pid) if comm.startswith("memfd:cordon")]
            fds = _fds(init[0]) if init else {}
            time.sleep(0.05)
        ours = {"/dev/null", str(out), str(err)}
        strays = {fd: t for fd, t in fds.items()
                  if t not in ours and not t.startswith(("socket:[", "anon_inode:"))}
        assert not strays, fds
    finally:
        p.terminate()  # cordon run ends its sandbox and removes what it made
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
            p.wait()


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


def test_runtimes_from_the_daemon(daemon):
    """With a daemon, `cordon runtimes --json` is its GET /v1/runtimes."""
    p = run(["runtimes", "--json"], daemon.sock)
    assert p.returncode == 0, describe(p)
    body = json.loads(p.stdout)
    assert body["source"] == "cordond" and body["auto"] == AUTO, body
    assert [x["name"] for x in body["runtimes"] if x["available"]] == RUNNABLE, body


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
