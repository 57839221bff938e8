"""The gvisor runtime end to end, against the jail where both apply (parametrised over the
runtime): `cordon run --runtime gvisor` one-shot, cordond's agent mode (exec, files, limits,
the pool per runtime, GET /v1/runtimes), what the host exposes to a sandbox, and that nothing
is left: no runsc, gofer or Sentry process, state entry, mount, cgroup or veth, also after
kill -9 of cordond and a restart (the sweep)."""

import fcntl
import json
import os
import shutil
import subprocess
import time

import pytest

from conftest import (CORDON, GVISOR_DIR, dc, gvisor_entries, gvisor_mounts, requires_gvisor, run,
                      runsc_procs, slot_by_memory, slot_procs, veths)

pytestmark = requires_gvisor

RUNTIMES = ["jail", "gvisor"]


def run_rt(runtime, args, **kw):
    if "stdout" not in kw:
        kw["capture_output"] = True
    return subprocess.run([CORDON, "run", "--runtime", runtime, *args], timeout=60, **kw)


# ---- one-shot ----

@pytest.mark.parametrize("runtime", RUNTIMES)
def test_run_exit_status_and_stdio(runtime):
    r = run_rt(runtime, ["--", "/bin/sh", "-c", "echo out; echo err >&2; exit 7"])
    assert r.returncode == 7, r
    assert r.stdout == b"out\n" and r.stderr.endswith(b"err\n"), r


def test_run_is_served_by_the_sentry():
    """The kernel a gvisor sandbox sees is gVisor's, not the host's."""
    r = run(["--", "/bin/sh", "-c", "dmesg | head -1; uname -r"])
    assert r.returncode == 0, r
    assert b"gVisor" in r.stdout, r
    assert os.uname().release.encode() not in r.stdout, r


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_run_user_and_root(runtime):
    r = run_rt(runtime, ["--", "/usr/bin/id", "-u"])
    assert r.returncode == 0 and r.stdout == b"1000\n", r
    r = run_rt(runtime, ["--user", "root", "--", "/bin/sh", "-c",
                         "id -u; grep CapEff /proc/self/status"])
    assert r.returncode == 0 and r.stdout.startswith(b"0\n"), r
    # The sandbox root's set (CAPS_SANDBOX_ROOT), not a full one.
    eff = int(r.stdout.split()[-1], 16)
    assert eff and not eff & (1 << 21), f"CAP_SYS_ADMIN held: {r.stdout}"


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_run_output_to_one_file(runtime, tmp_path):
    """`> out 2>&1`: both streams land in order, none over the other."""
    out = tmp_path / "out"
    with open(out, "wb") as f:
        r = run_rt(runtime, ["--", "/bin/sh", "-c", "echo one; echo two >&2; echo three"],
                   stdout=f, stderr=f)
    assert r.returncode == 0
    assert out.read_bytes().splitlines()[-3:] == [b"one", b"two", b"three"], out.read_bytes()


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_run_writes_stay_inside(runtime, tmp_path):
    """/usr is copy-on-write: a write inside changes nothing on the host."""
    marker = f"/usr/cordon-gvisor-{os.getpid()}-{runtime}"
    r = run_rt(runtime, ["--user", "root", "--", "/bin/sh", "-c", f"echo x > {marker} && cat {marker}"])
    assert r.returncode == 0 and r.stdout == b"x\n", r
    assert not os.path.exists(marker)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_host_exposure(runtime):
    """Host files, processes and environment do not reach the sandbox."""
    os.environ["CORDON_GVISOR_SECRET"] = "s3cr3t"
    try:
        r = run_rt(runtime, ["--user", "root", "--", "/bin/sh", "-c",
                             "cat /etc/shadow; ls /work /root/.ssh; env; ls /proc | grep -c '^[0-9]'"])
    finally:
        del os.environ["CORDON_GVISOR_SECRET"]
    assert r.returncode == 0, r
    assert b"s3cr3t" not in r.stdout + r.stderr
    assert b"root:" not in r.stdout, "the host's /etc/shadow is readable"
    assert b"/work" not in r.stdout
    nprocs = int(r.stdout.split()[-1])
    assert 0 < nprocs < 10, f"{nprocs} processes visible: the host's?"


STAT_FAMILY = ("ls -ld / /proc /etc/passwd && stat -c '%n %F' / && du -s /usr/share/doc/coreutils >/dev/null && "
               "find /etc -maxdepth 1 -name passwd && test -d / && echo ok")


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_coreutils_stat_family(runtime):
    """coreutils 9 passes AT_NO_AUTOMOUNT to every statx(2), which the Sentry of Debian 12's
    runsc refuses with EINVAL: cordon-gvisor-stat.so, preloaded by cordon-init, drops it.
    Without it `ls -l` fails on every path."""
    r = run_rt(runtime, ["--", "/bin/sh", "-c", STAT_FAMILY])
    assert r.returncode == 0 and r.stdout.endswith(b"ok\n"), r
    assert b"/ directory" in r.stdout, r
    # The caller's own LD_PRELOAD is kept, after ours.
    r = run_rt(runtime, ["--env", "LD_PRELOAD=/no/such.so", "--", "/bin/sh", "-c",
                         "ls -ld / && echo \"$LD_PRELOAD\""])
    assert r.returncode == 0 and r.stdout.endswith(b"/no/such.so\n"), r


def test_run_timeout():
    t = time.monotonic()
    r = run(["--timeout", "2", "--", "/bin/sleep", "30"])
    assert r.returncode == 124, r
    assert time.monotonic() - t < 15


def test_run_leaves_nothing():
    before, procs = gvisor_entries(), set(runsc_procs())
    for _ in range(3):
        assert run(["--", "/bin/true"]).returncode == 0
    assert gvisor_entries() == before
    assert not set(runsc_procs()) - procs


class SlotsHeld:
    """Holds every free host uid slot (the lock files of lib/idmap.c, taken and let go the same
    way) but those in @free, so that the next sandboxes must take those."""

    SLOTS, DIR = 2048, "/run/cordon/slots"

    def __init__(self, free):
        self.held = {}
        os.makedirs(self.DIR, exist_ok=True)
        for n in range(self.SLOTS):
            if n not in free:
                self.take(n)

    def take(self, n):
        fd = os.open(os.path.join(self.DIR, str(n)), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)  # someone else's
            return
        self.held[n] = fd

    def release(self, n):
        os.unlink(os.path.join(self.DIR, str(n)))
        os.close(self.held.pop(n))

    def close(self):
        for n in list(self.held):
            self.release(n)


def test_run_beside_a_slot_whose_id_it_prefixes():
    """runsc finds a container by any unambiguous prefix of its id: the container of slot 1
    must not be taken for slot 14's, nor its delete fail as "ambiguous" beside it (which left
    its state entry, and the next run of slot 1 failed with "container already exists")."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    if dc.slot_held(1) or dc.slot_held(14):
        pytest.skip("uid slot 1 or 14 is held by another sandbox of this host")
    before, procs = gvisor_entries(), set(runsc_procs())
    slots = SlotsHeld(free={1, 14})
    slots.take(1)
    try:
        bg = subprocess.Popen([CORDON, "run", "--runtime", "gvisor", "--", "/bin/sleep", "60"])
        try:
            assert dc.wait_until(lambda: slot_procs("s14"), 30), "the long run did not take slot 14"
            slots.release(1)
            for _ in range(3):
                r = run(["--", "/bin/echo", "one"])
                assert (r.returncode, r.stdout) == (0, b"one\n"), r
            assert bg.poll() is None, "the run of slot 14 ended beside slot 1's"
        finally:
            bg.terminate()  # cordon run takes its sandbox down on SIGTERM
            bg.wait(30)
    finally:
        slots.close()
    assert dc.wait_until(lambda: gvisor_entries() == before, 15), gvisor_entries() ^ before
    assert not set(runsc_procs()) - procs


def test_refused_when_runsc_missing(tmp_path):
    env = dict(os.environ, CORDON_RUNSC=str(tmp_path / "no-runsc"), CORDON_GVISOR_DIR=str(tmp_path))
    r = subprocess.run([CORDON, "run", "--runtime", "gvisor", "--", "/bin/true"], env=env,
                       capture_output=True, timeout=30)
    assert r.returncode == 2, r
    assert b"runsc not found" in r.stderr, r


# ---- cordond, agent mode ----

def test_runtimes_listed(gclient):
    body = gclient.get("/v1/runtimes").json()
    g = {x["name"]: x for x in body["runtimes"]}["gvisor"]
    assert g["available"] is True and g["reason"] is None, g
    assert {"oneshot", "agent", "egress", "limits", "pause"} <= set(g["capabilities"]), g
    assert body["auto"] == "gvisor" and body["default"] == "jail", body


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_agent_exec_files(gclient, runtime):
    sb = gclient.create({"runtime": runtime})
    try:
        assert sb["runtime"] == runtime and gclient.info(sb["id"])["runtime"] == runtime
        r = gclient.exec(sb["id"], cmd="echo hi; id -u; echo err >&2; exit 3")
        assert (r["exit_code"], r["stdout"], r["stderr"]) == (3, "hi\n1000\n", "err\n"), r
        # Children that close their stdio do not cut the agent's channel.
        for _ in range(3):
            assert gclient.sh(sb["id"], "true </dev/null >/dev/null; echo ok") == "ok\n"
        # agent mode's processes preload the stat shim too (test_coreutils_stat_family)
        assert gclient.sh(sb["id"], STAT_FAMILY).endswith("ok\n")
        r = gclient.put(f"/v1/sandboxes/{sb['id']}/files?path=/home/user/f.txt", b"data\n")
        assert r.status in (200, 201), r.describe()
        assert gclient.sh(sb["id"], "cat /home/user/f.txt; stat -c %u /home/user/f.txt") == "data\n1000\n"
        r = gclient.get(f"/v1/sandboxes/{sb['id']}/files?path=/home/user/f.txt")
        assert r.status == 200 and r.body == b"data\n", r.describe()
        # As the user, root's files stay root's.
        r = gclient.put(f"/v1/sandboxes/{sb['id']}/files?path=/root/x", b"x")
        assert r.status == 403, r.describe()
    finally:
        gclient.destroy(sb["id"])


def test_agent_python_workload(gclient):
    sb = gclient.create({"runtime": "gvisor"})
    try:
        out = gclient.sh(sb["id"], "python3 -c 'import threading, multiprocessing, subprocess;"
                         "t=threading.Thread(target=print, args=(1,)); t.start(); t.join();"
                         "print(multiprocessing.Pool(2).map(abs, [-2, -3]));"
                         "print(subprocess.run([\"echo\", \"sub\"], capture_output=True).stdout)'")
        assert out == "1\n[2, 3]\nb'sub\\n'\n", out
    finally:
        gclient.destroy(sb["id"])


def test_limits_in_the_cgroup(gclient, gdaemon):
    """runsc, the gofer and the Sentry are in the sandbox's cgroup, with the sandbox's memory
    and pids plus the Sentry's part (GVISOR_MEM_EXTRA, GVISOR_HOST_PIDS)."""
    sb = gclient.create({"runtime": "gvisor", "limits": {"memory_mb": 256, "pids": 64}})
    try:
        procs = runsc_procs()
        assert procs, "no runsc process"
        cgs = {d for p in procs for d in dc.sandbox_cgroups(p)}
        assert cgs, f"runsc processes outside any sandbox cgroup: {procs}"
        # Another sandbox's (the pool's) runsc is there too: find this one's by its memory.
        mem = [d for d in cgs if os.path.exists(os.path.join(d, "memory.limit_in_bytes")) and
               int(dc.read_int(os.path.join(d, "memory.limit_in_bytes"))) == (256 + 96) << 20]
        mem += [d for d in cgs if os.path.exists(os.path.join(d, "memory.max")) and
                dc.read_int(os.path.join(d, "memory.max")) == str((256 + 96) << 20)]
        assert len({os.path.basename(d) for d in mem}) == 1, cgs
        name = os.path.basename(mem[0])
        pids = [d for d in cgs if os.path.basename(d) == name and
                os.path.exists(os.path.join(d, "pids.max"))]
        assert pids and dc.read_int(os.path.join(pids[0], "pids.max")) == str(192 + 64 * 16), pids
        # Within the limit, processes run.
        assert gclient.sh(sb["id"], "for i in $(seq 20); do sleep 1 & done; wait; echo done") == "done\n"
    finally:
        gclient.destroy(sb["id"])


def test_pids_limit_ends_the_sandbox_not_the_host(gclient, gdaemon):
    """Past pids.max the Sentry cannot make the host threads it runs tasks on: the sandbox
    ends (documented), the host and cordond go on, and nothing of it is left."""
    sb = gclient.create({"runtime": "gvisor", "limits": {"pids": 16, "memory_mb": 200}})
    name = slot_by_memory(200)
    assert slot_procs(name)
    r = gclient.post(f"/v1/sandboxes/{sb['id']}/exec",
                     {"cmd": "for i in $(seq 300); do sleep 30 & done 2>/dev/null; echo done"},
                     timeout=60)
    assert r.status in (200, 409), r.describe()
    assert gdaemon.alive()
    gclient.destroy(sb["id"], missing_ok=True)
    assert dc.wait_until(lambda: not slot_procs(name), 15), slot_procs(name)
    assert dc.wait_until(lambda: not os.path.exists(os.path.join(GVISOR_DIR, name)), 15)


def test_pool_per_runtime(gclient, gdaemon):
    """A gvisor create is kept warm for the next gvisor create; a jail create still gets a jail."""
    a = gclient.create({"runtime": "gvisor"})
    gclient.destroy(a["id"])
    time.sleep(3)  # the pool fills on its thread: one gvisor sandbox is kept warm
    t = time.monotonic()
    b = gclient.create({"runtime": "gvisor"})
    took = time.monotonic() - t
    j = gclient.create({"runtime": "jail"})
    try:
        assert b["runtime"] == "gvisor" and j["runtime"] == "jail"
        assert took < 0.15, f"a pooled gvisor create took {took:.3f} s"
        assert gclient.sh(b["id"], "dmesg | head -1").startswith("[")
    finally:
        gclient.destroy(b["id"])
        gclient.destroy(j["id"])


def test_no_leaks_after_many_and_kill9(tmp_path, monkeypatch):
    """After N gvisor sandboxes, and after kill -9 of cordond with live ones and a restart:
    no runsc process, state entry, mount, cgroup or veth of them is left. The daemon has a
    gvisor directory of its own (CORDON_GVISOR_DIR), so no other cordond's pool moves what
    is counted; the platform probe's answer is copied in."""
    base = str(tmp_path / "gvisor")
    os.makedirs(base)
    if os.path.exists(os.path.join(GVISOR_DIR, "probe")):
        shutil.copy(os.path.join(GVISOR_DIR, "probe"), base)
    monkeypatch.setenv("CORDON_GVISOR_DIR", base)
    d = dc.start_daemon(pool=0, max_sandboxes=16)
    try:
        cl = d.client(timeout=60)
        for _ in range(5):
            sb = cl.create({"runtime": "gvisor"})
            assert cl.sh(sb["id"], "echo ok") == "ok\n"
            cl.destroy(sb["id"])
        assert dc.wait_until(lambda: not gvisor_entries(base), 10), gvisor_entries(base)
        assert not gvisor_mounts(base) and not runsc_procs(base)
        live = [cl.create({"runtime": "gvisor", "network": {"policy": "public"}}) for _ in range(2)]
        assert all(cl.sh(s["id"], "echo ok") == "ok\n" for s in live)
        slots = {e for e in gvisor_entries(base) if not e.startswith("runsc/")}
        assert len(slots) == 2 and runsc_procs(base) and gvisor_mounts(base), slots
        ours = {f"cdn{n[1:]}" for n in slots}
        assert ours <= veths(), (ours, veths())
        d.kill9()
        d.start()
        assert dc.wait_until(lambda: not runsc_procs(base), 15), runsc_procs(base)
        assert dc.wait_until(lambda: not gvisor_entries(base), 15), gvisor_entries(base)
        assert not gvisor_mounts(base), gvisor_mounts(base)
        left = lambda: {c for c in dc.cordon_cgroup_dirs() if os.path.basename(c) in slots}
        assert dc.wait_until(lambda: not left(), 10), left()
        assert not ours & veths(), ours & veths()
    finally:
        d.cleanup()


# name: (the host tools it needs, the script, what it prints). The host image is the host's
# root, so a tool is inside exactly where the host has it.
PY_THREADS = ("import threading, multiprocessing, subprocess\n"
              "out = []\n"
              "ts = [threading.Thread(target=out.append, args=(i,)) for i in range(8)]\n"
              "[t.start() for t in ts]; [t.join() for t in ts]\n"
              "print(sorted(out) == list(range(8)))\n"
              "with multiprocessing.Pool(2) as p: print(p.map(abs, [-2, -3]))\n"
              "print(subprocess.run(['sh', '-c', 'echo sub'], capture_output=True, timeout=30)"
              ".stdout.decode().strip())\n")
WORKLOADS = {
    "sh": (["/bin/sh"], "i=0; while [ $i -lt 100 ]; do i=$((i+1)); done; echo $i | tr 0 o", "1oo"),
    "python3": (["/usr/bin/python3"], f"python3 -c \"{PY_THREADS}\"", "True [2, 3] sub"),
    "venv": (["/usr/bin/python3"], "python3 -m venv /tmp/v && /tmp/v/bin/python -c "
             "'import sys; print(sys.prefix, sys.prefix != sys.base_prefix)'", "/tmp/v True"),
    "cc": (["/usr/bin/cc"], "cd /tmp && printf '#include <stdio.h>\\nint main(){puts(\"cc-ok\");}\\n'"
           " > a.c && cc -O2 a.c -o a && ./a", "cc-ok"),
    "git": (["/usr/bin/git"], "cd /tmp && git init -q r && cd r && echo x > f && git add f && "
            "git -c user.email=a@b -c user.name=n commit -qm m && echo y > g && "
            "git status --porcelain && git log --oneline | wc -l", "?? g 1"),
    "node": (["/usr/bin/node"], "node -e 'setTimeout(() => console.log(6 * 7), 10)'", "42"),
}


@pytest.mark.parametrize("workload", list(WORKLOADS))
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_workloads(runtime, workload):
    """sh, python3 (threads, multiprocessing, subprocess), a venv, cc (compile and run), git
    (init, commit, status) and node, each where the host has it, in each runtime."""
    tools, script, want = WORKLOADS[workload]
    missing = [t for t in tools if not os.access(t, os.X_OK)]
    if missing:
        pytest.skip(f"{', '.join(missing)} is not installed on the host (the host image)")
    r = run_rt(runtime, ["--", "/bin/sh", "-c", script])
    assert r.returncode == 0, r
    assert r.stdout.split() == want.encode().split(), r


def test_sdk_gvisor(gdaemon):
    """The SDK's runtime="gvisor": the sandbox it makes runs on gVisor."""
    import sys
    sdk = os.path.join(os.path.dirname(__file__), "..", "..", "sdk", "python")
    sys.path.insert(0, sdk)
    try:
        import cordon
    finally:
        sys.path.remove(sdk)
    with cordon.Sandbox.create(runtime="gvisor", socket=gdaemon.sock) as sbx:
        assert sbx.info().runtime == "gvisor"
        r = sbx.exec("dmesg | head -1")
        assert "gVisor" in r.stdout, r


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_rootfs_image_is_copy_on_write(runtime, tmp_path):
    """--rootfs: the image is the root, written through a layer on the sandbox's disk."""
    busybox = "/bin/busybox"
    if not os.access(busybox, os.X_OK):
        pytest.skip("busybox-static is not installed")
    img = tmp_path / "img"
    (img / "bin").mkdir(parents=True)
    subprocess.run(["cp", busybox, str(img / "bin" / "busybox")], check=True)
    for c in ("sh", "echo", "cat", "id"):
        os.symlink("busybox", img / "bin" / c)
    r = run_rt(runtime, ["--rootfs", str(img), "--user", "root", "--", "/bin/sh", "-c",
                         "echo in-image; echo y > /bin/new && cat /bin/new"])
    assert r.returncode == 0 and r.stdout == b"in-image\ny\n", r
    assert not (img / "bin" / "new").exists(), "a write reached the image"


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_run_stdin_and_signals(runtime):
    """The caller's stdin reaches the command; a SIGTERM to cordon run reaches it too."""
    r = run_rt(runtime, ["--", "/bin/cat"], input=b"through\n")
    assert r.returncode == 0 and r.stdout == b"through\n", r
    p = subprocess.Popen([CORDON, "run", "--runtime", runtime, "--", "/bin/sh", "-c",
                          "trap 'echo got-term; exit 9' TERM; echo ready; sleep 30 & wait"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert p.stdout.readline() == b"ready\n"
        time.sleep(0.2)
        p.send_signal(15)
        out, _ = p.communicate(timeout=20)
    finally:
        p.kill()
    assert p.returncode == 9 and out == b"got-term\n", (p.returncode, out)


def test_killed_cordon_run_is_swept_by_the_next(tmp_path, monkeypatch):
    """kill -9 of a one-shot `cordon run --runtime gvisor`: its runsc dies with it, and the
    next `cordon run` (any runtime) removes its bundle, mounts and runsc state."""
    base = str(tmp_path / "gvisor")
    os.makedirs(base)
    if os.path.exists(os.path.join(GVISOR_DIR, "probe")):
        shutil.copy(os.path.join(GVISOR_DIR, "probe"), base)
    monkeypatch.setenv("CORDON_GVISOR_DIR", base)
    p = subprocess.Popen([CORDON, "run", "--runtime", "gvisor", "--", "/bin/sh", "-c",
                          "echo ready; sleep 60"], stdout=subprocess.PIPE)
    try:
        assert p.stdout.readline() == b"ready\n"
        assert gvisor_entries(base) and gvisor_mounts(base)
    finally:
        p.kill()
        p.wait()
    assert dc.wait_until(lambda: not runsc_procs(base), 10), runsc_procs(base)
    assert run_rt("jail", ["--", "/bin/true"]).returncode == 0
    assert not gvisor_entries(base), gvisor_entries(base)
    assert not gvisor_mounts(base), gvisor_mounts(base)


# ---- cordond --default-runtime ----

@pytest.mark.parametrize("name,how", [("gvisor", "flag"), ("auto", "config")])
def test_default_runtime(name, how, tmp_path):
    """--default-runtime NAME: a create that names no runtime gets it (auto: the strongest
    this host runs, gvisor here), from the pool, which keeps the host template warm on it; a
    create that names one still gets that one, and a sandbox made from a jail snapshot stays
    on the jail. GET /v1/runtimes and `cordon runtimes` say which is the default. Given as the flag or
    as the config file's key."""
    extra = ["--default-runtime", name]
    if how == "config":
        (tmp_path / "cordond.conf").write_text(f"# the runtime of a create that names none\n"
                                               f"default-runtime = {name}\n")
        extra = ["--config", str(tmp_path / "cordond.conf")]
    d = dc.start_daemon(pool=1, max_sandboxes=8, extra=extra)
    c = d.client(timeout=60)
    made = []
    try:
        body = c.get("/v1/runtimes").json()
        assert body["default"] == "gvisor" and body["auto"] == "gvisor", body
        p = subprocess.run([CORDON, "--socket", d.sock, "runtimes", "--json"], capture_output=True,
                           timeout=60)
        assert p.returncode == 0 and json.loads(p.stdout)["default"] == "gvisor", p
        assert dc.wait_until(lambda: c.get("/healthz").json()["pool_ready"] >= 1, 30)
        t = time.monotonic()
        sb = c.create({})
        took = time.monotonic() - t
        made.append(sb["id"])
        assert sb["runtime"] == "gvisor", sb
        assert took < 0.15, f"the default runtime's create took {took:.3f} s: not pooled"
        assert c.sh(sb["id"], "dmesg | head -1").startswith("["), "not on gVisor"
        j = c.create({"runtime": "jail"})
        made.append(j["id"])
        assert j["runtime"] == "jail", j
        snap = c.post(f"/v1/sandboxes/{j['id']}/snapshots")
        assert snap.status == 201, snap.describe()
        child = c.create({"snapshot": snap.json()["id"]})
        made.append(child["id"])
        assert child["runtime"] == "jail", child
    finally:
        for sid in made:
            c.destroy(sid, missing_ok=True)
        alive = d.alive()
        d.cleanup()
    assert alive, d.log_tail()


@pytest.mark.parametrize("value,why", [("runc", "no such runtime"), ("", "no such runtime")])
def test_default_runtime_refused(tmp_path, value, why):
    """A --default-runtime that is unknown stops cordond at start, saying why (no create
    would work); nothing is made."""
    cordond = os.path.join(os.path.dirname(CORDON), "cordond")
    p = subprocess.run([cordond, "--default-runtime", value, "--state-dir", str(tmp_path / "st"),
                        "--runtime-dir", str(tmp_path / "rt"), "--socket", str(tmp_path / "s")],
                       capture_output=True, timeout=60)
    assert p.returncode != 0, p
    assert b"--default-runtime" in p.stderr and why.encode() in p.stderr, p.stderr
    assert not os.path.exists(tmp_path / "st"), "a refused start made its state directory"
