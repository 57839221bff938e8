"""Templates are immutable under live sandboxes (daemon-less `cordon run`).

A template name points to a version (<store>/<name> -> .versions/<name>@<id>); a rebuild
publishes a new one, and a running sandbox keeps the one it started from until it ends. Before
versions, a rebuild or `template rm` deleted the tree under a live sandbox: its directories
came back empty (mode 0700) and every exec failed. Each test builds a tiny template (the
host's static busybox and a marker file, no network) in its own store ($CORDON_TEMPLATES).
Needs root (builds) and /bin/busybox (busybox-static).
"""

import json
import os
import shutil
import signal
import subprocess
import threading
import time

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("CORDON_BUILD", os.path.join(REPO, "build"))
CORDON = os.path.join(BUILD, "cordon")
BUSYBOX = "/bin/busybox"

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (template builds)"),
    pytest.mark.skipif(not os.path.isfile(BUSYBOX), reason="needs /bin/busybox (busybox-static)"),
]

RECIPE = """\
FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
COPY marker /marker
"""

# Prints "ready", waits for a line on stdin (the test rebuilds meanwhile), then shows what it
# sees: the marker and that /bin still has its tools.
WAITER = "echo ready; read x; cat /marker; ls /bin | wc -l; echo $x"


@pytest.fixture
def store(tmp_path, monkeypatch):
    d = tmp_path / "store"
    monkeypatch.setenv("CORDON_TEMPLATES", str(d))
    return d


@pytest.fixture
def ctx(tmp_path):
    c = tmp_path / "ctx"
    c.mkdir()
    shutil.copy(BUSYBOX, c / "busybox")
    (c / "Cordonfile").write_text(RECIPE)
    return c


def build(ctx, name, marker):
    (ctx / "marker").write_text(marker + "\n")
    p = subprocess.run([CORDON, "template", "build", name, "-f", str(ctx / "Cordonfile")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (p.stdout, p.stderr)


def tpl(*args, check=0):
    p = subprocess.run([CORDON, "template", *args], capture_output=True, text=True, timeout=120)
    if check is not None:
        assert p.returncode == check, (args, p.returncode, p.stdout, p.stderr)
    return p


def run(name, script):
    return subprocess.run([CORDON, "run", "--template", name, "--", "/bin/sh", "-c", script],
                          capture_output=True, text=True, timeout=60)


def versions(store):
    d = store / ".versions"
    return sorted(os.listdir(d)) if d.exists() else []


def current(store, name):
    """The version @name points to (None for a directory: the layout before versions)."""
    p = store / name
    return os.readlink(p).split("/", 1)[1] if os.path.islink(p) else None


class Waiter:
    """A `cordon run` of WAITER, started and seen running."""

    def __init__(self, name):
        self.p = subprocess.Popen([CORDON, "run", "--template", name, "--", "/bin/sh", "-c", WAITER],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, start_new_session=True)
        line = self.p.stdout.readline()
        assert line == "ready\n", (line, self.p.stderr.read() if self.p.poll() is not None else "")

    def finish(self):
        out, err = self.p.communicate("go\n", timeout=30)
        return self.p.returncode, out, err

    def kill(self):
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGKILL)
        self.p.wait()
        for f in (self.p.stdin, self.p.stdout, self.p.stderr):
            f.close()


def bin_count(store, name):
    r = run(name, "ls /bin | wc -l")
    assert r.returncode == 0, r
    return r.stdout


def test_run_keeps_its_version_through_rebuild_and_rm(store, ctx):
    build(ctx, "tv", "one")
    tools = bin_count(store, "tv")
    first = current(store, "tv")
    w = Waiter("tv")
    try:
        build(ctx, "tv", "two")
        # A new sandbox gets the new version; the old one is kept for the live sandbox.
        r = run("tv", "cat /marker")
        assert (r.returncode, r.stdout) == (0, "two\n"), r
        second = current(store, "tv")
        tpl("rm", "tv")
        assert not os.path.lexists(store / "tv")
        assert run("tv", "true").returncode != 0  # the name is gone at once
        left = versions(store)
        code, out, err = w.finish()
    finally:
        w.kill()
    assert code == 0, (out, err)
    assert out == f"one\n{tools}go\n", (out, err)
    assert None not in (first, second) and first != second, (first, second)
    assert left == [first]  # the unused new version went at rm; the held one stayed
    assert versions(store) == []  # its last holder ended: the version went with it
    assert [n for n in os.listdir(store) if n.startswith((".tmp-", ".rm-"))] == []


def test_gc_removes_an_old_version_only_once_nothing_holds_it(store, ctx):
    build(ctx, "tv", "one")
    first = current(store, "tv")
    w = Waiter("tv")
    try:
        build(ctx, "tv", "two")
        out = tpl("gc").stdout
        assert "removed 0 old versions" in out and "kept 1 in use" in out, out
        assert first in versions(store)
        # A holder that dies without a word (kill -9) holds nothing: the kernel drops its lock.
        os.killpg(w.p.pid, signal.SIGKILL)
        w.p.wait()
        assert first in versions(store)  # nobody released it: only gc can know
        out = tpl("gc").stdout
        assert "removed 1 old versions" in out and "kept 0 in use" in out, out
        assert versions(store) == [current(store, "tv")]
    finally:
        w.kill()
    r = run("tv", "cat /marker")
    assert (r.returncode, r.stdout) == (0, "two\n"), r


def test_rebuilds_and_imports_publish_new_versions(store, ctx, tmp_path):
    build(ctx, "tv", "one")
    v1 = current(store, "tv")
    meta = json.loads(tpl("inspect", "tv").stdout)
    assert v1 == f"tv@{meta['version']}", meta
    build(ctx, "tv", "one")  # up to date: nothing new
    assert current(store, "tv") == v1
    build(ctx, "tv", "two")
    assert current(store, "tv") != v1 and versions(store) == [current(store, "tv")]
    # The version's tree is never written again: its template.json names it.
    meta = json.loads((store / ".versions" / current(store, "tv") / "template.json").read_text())
    assert current(store, "tv") == f"tv@{meta['version']}"


def make_legacy(store, name):
    """Turns <store>/<name> into a template directory as stores held before versions."""
    vid = current(store, name)
    os.unlink(store / name)
    os.rename(store / ".versions" / vid, store / name)
    os.unlink(store / name / ".lock")
    meta = json.loads((store / name / "template.json").read_text())
    del meta["version"]
    (store / name / "template.json").write_text(json.dumps(meta))


def test_a_template_from_before_versions_still_works(store, ctx):
    build(ctx, "old", "one")
    tools = bin_count(store, "old")
    make_legacy(store, "old")
    assert os.path.isdir(store / "old") and not os.path.islink(store / "old")
    listed = json.loads(tpl("ls", "--json").stdout)
    assert [m["name"] for m in listed] == ["old"]
    w = Waiter("old")  # the first use makes it a version
    try:
        assert os.path.islink(store / "old")
        migrated = current(store, "old")
        assert versions(store) == [migrated]
        assert migrated == "old@" + json.loads(tpl("inspect", "old").stdout)["version"]
        build(ctx, "old", "two")
        assert run("old", "cat /marker").stdout == "two\n"
        code, out, err = w.finish()
    finally:
        w.kill()
    assert (code, out) == (0, f"one\n{tools}go\n"), (out, err)
    assert versions(store) == [current(store, "old")]
    # A rebuild and a removal of a directory never opened migrate it too.
    build(ctx, "older", "one")
    make_legacy(store, "older")
    build(ctx, "older", "three")
    assert run("older", "cat /marker").stdout == "three\n"
    make_legacy(store, "older")
    tpl("rm", "older")
    assert not os.path.lexists(store / "older")
    assert versions(store) == [current(store, "old")]


def test_the_lock_never_reaches_the_sandbox(store, ctx):
    """The version's lock is cordon run's own fd (O_CLOEXEC), not one of the sandbox's."""
    build(ctx, "tv", "one")
    w = Waiter("tv")
    try:
        lock = str(store / ".versions" / current(store, "tv") / ".lock")

        def holders():
            out = []
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    fds = os.listdir(f"/proc/{pid}/fd")
                    if any(os.readlink(f"/proc/{pid}/fd/{fd}") == lock for fd in fds):
                        out.append(int(pid))
                except OSError:
                    pass
            return out

        assert holders() == [w.p.pid]
    finally:
        w.kill()


def test_runs_racing_rebuilds_always_get_a_whole_version(store, ctx, tmp_path):
    """Runs started while the template is rebuilt over and over: each one starts from one
    whole version (never a half-replaced or deleted one), and nothing is left behind."""
    build(ctx, "tv", "v0")
    stop = threading.Event()
    errors = []

    def rebuild():
        i = 0
        while not stop.is_set():
            i += 1
            c = tmp_path / f"ctx{i % 2}"
            if not c.exists():
                shutil.copytree(ctx, c)
            try:
                build(c, "tv", f"v{i}")
            except AssertionError as e:  # reported below, not lost in the thread
                errors.append(e)
                return

    t = threading.Thread(target=rebuild)
    t.start()
    seen = set()
    try:
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            r = run("tv", "cat /marker; ls /bin | wc -l")
            assert r.returncode == 0, r
            marker, tools = r.stdout.split()
            assert marker.startswith("v") and int(tools) > 100, r.stdout
            seen.add(marker)
    finally:
        stop.set()
        t.join(60)
    assert not errors, errors
    assert len(seen) > 1, seen  # the race did happen
    assert versions(store) == [current(store, "tv")]
    assert [n for n in os.listdir(store) if n.startswith((".tmp-", ".rm-"))] == []


def test_a_name_that_is_not_a_link_to_its_own_version_is_refused(store, ctx, tmp_path):
    """Only ".versions/<name>@<16 hex>" is followed: a link elsewhere (planted, or another
    template's version) is not run, and rm takes the link away without touching its target."""
    build(ctx, "tv", "one")
    outside = tmp_path / "outside"
    (outside / "rootfs" / "bin").mkdir(parents=True)
    (outside / "template.json").write_text('{"name": "evil"}')
    for name, target in (("evil", str(outside)), ("other", ".versions/" + current(store, "tv")),
                         ("dots", "../outside")):
        os.symlink(target, store / name)
        r = run(name, "true")
        assert r.returncode == 2 and "not a link to one of its versions" in r.stderr, r
        tpl("rm", name)
        assert not os.path.lexists(store / name)
    assert sorted(os.listdir(outside)) == ["rootfs", "template.json"]
    assert run("tv", "cat /marker").stdout == "one\n"
