"""The microvm runtime end to end: cordon run --runtime microvm boots Debian's kernel under
QEMU and runs the command in it; cordond serves microvm sandboxes through the agent on the
virtio-serial channel, and keeps one warm. Few boots (each is seconds under TCG): two
one-shot runs (most checks; QEMU's jail and a forwarded signal), three in cordond (a cold create, the pool's refill
and its refill after the pooled create), each part followed by the leak check."""

import os
import signal
import subprocess
import time

import pytest

from conftest import (CORDON, dc, environ, mv_create, mvdaemon, qemu_procs, requires_microvm,  # noqa: F401
                      run, start_mvdaemon)

pytestmark = requires_microvm

SCRIPT = r"""
set -e
read line; echo "stdin: $line"
echo "uid: $(id -u)"
echo "kernel: $(uname -r)"
echo "cpus: $(nproc)"
echo "mem_kb: $(grep MemTotal /proc/meminfo | tr -s ' ' | cut -d' ' -f2)"
echo "root: $(grep ' / ' /proc/mounts | cut -d' ' -f3)"
echo written > /tmp/f && echo "tmp: $(cat /tmp/f)"
echo "home: $(echo x > $HOME/y && cat $HOME/y)"
echo to-stderr >&2
dd if=/dev/zero bs=1024 count=2048 2>/dev/null | wc -c | sed 's/^/bulk: /'
exit 7
"""


def fields(out):
    return dict(l.split(": ", 1) for l in out.decode().splitlines() if ": " in l)


def assert_no_leftovers(mvenv):
    vms = mvenv["CORDON_MICROVM_DIR"]
    assert qemu_procs(vms) == [], "a QEMU of this session still runs"
    left = os.listdir(vms) if os.path.isdir(vms) else []
    assert left == [], f"VM directories left: {left}"
    with open("/proc/self/mountinfo") as f:
        assert not [l for l in f if vms in l], "a mount of the VM directory is left"


def test_oneshot_in_its_own_kernel(mvenv, rootfs):
    """stdin, stdout, stderr and the exit status as the jail gives them; the guest's own
    kernel; uid 1000; --cpus and --memory are the VM's; a writable overlay root; 2 MiB of
    output whole."""
    r = run(mvenv, rootfs, ["--cpus", "2", "--memory", "300M", "--user", "user"],
            ["/bin/sh", "-c", SCRIPT], input=b"hello\n")
    assert r.returncode == 7, (r.returncode, r.stderr)
    f = fields(r.stdout)
    assert f["stdin"] == "hello", f
    assert f["uid"] == "1000", f
    assert f["kernel"].endswith("-cloud-amd64"), f
    assert f["cpus"] == "2", f
    assert 200_000 < int(f["mem_kb"]) < 300 * 1024, f
    assert f["root"] == "overlay", f
    assert f["tmp"] == "written" and f["home"] == "x", f
    assert f["bulk"].strip() == str(2 << 20), f
    assert b"to-stderr" in r.stderr, r.stderr
    assert_no_leftovers(mvenv)


def status_of(pid):
    with open(f"/proc/{pid}/status") as f:
        return dict(l.rstrip("\n").split(":\t", 1) for l in f if ":\t" in l)


def test_qemu_confined_and_signals_forwarded(mvenv, rootfs):
    """While the guest runs, QEMU is in a jail of its own: the slot's uid (not root), no
    capability, no_new_privs, its seccomp filter, its own mount, pid, net, ipc, uts and
    cgroup namespaces, a root holding only its files. Then SIGINT to cordon run reaches the
    command inside the guest (its trap runs: exit 9), and nothing of the VM is left."""
    script = 'trap "echo got-int; exit 9" INT; echo up; sleep 600 & wait'
    p = subprocess.Popen([CORDON, "run", "--runtime", "microvm", "--rootfs", rootfs, "--timeout", "60s",
                          "--", "/bin/sh", "-c", script], env=mvenv, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    try:
        vms = mvenv["CORDON_MICROVM_DIR"]
        ours = []
        deadline = time.monotonic() + 10
        while not ours and time.monotonic() < deadline:
            ours = qemu_procs(vms)
            time.sleep(0.2)
        assert len(ours) == 1, f"QEMUs of this run: {ours}"
        st = status_of(ours[-1])
        uid = st["Uid"].split()
        assert uid[0] != "0" and len(set(uid)) == 1, st["Uid"]
        for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            assert int(st[cap], 16) == 0, (cap, st[cap])
        assert st["NoNewPrivs"] == "1" and st["Seccomp"] == "2", st
        for ns in ("mnt", "pid", "net", "ipc", "uts", "cgroup"):
            assert os.readlink(f"/proc/{ours[-1]}/ns/{ns}") != os.readlink(f"/proc/self/ns/{ns}"), ns
        assert set(os.listdir(f"/proc/{ours[-1]}/root")) <= \
            {"bin", "dev", "etc", "img", "lib", "lib32", "lib64", "proc", "sbin", "usr", "vm"}
        assert p.stdout.readline() == b"up\n"  # the trap is set
        p.send_signal(signal.SIGINT)
    finally:
        out, err = p.communicate(timeout=60)
    assert p.returncode == 9 and out == b"got-int\n", (p.returncode, out, err)
    assert_no_leftovers(mvenv)


def mkfs_procs(cache):
    """mkfs.erofs processes writing into @cache."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"mkfs.erofs") and any(a.startswith(cache.encode() + b"/") for a in argv):
            out.append(int(pid))
    return out


def test_first_create_does_not_wait_for_the_image(tmp_path):
    """The `host` template's erofs (a few GiB of /usr, minutes) is not made on cordond's
    loop: a create that finds none is answered 503 at once and the image is made on the
    creator thread, once however many ask; the daemon answers meanwhile; stopping it
    stops mkfs.erofs."""
    cache = str(tmp_path / "cache")
    d = start_mvdaemon(str(tmp_path / "vms"), env={"CORDON_MICROVM_CACHE": cache}, pool=0, max_sandboxes=4)
    try:
        cl = d.client(timeout=30)
        for _ in range(3):
            t = time.monotonic()
            r = cl.post("/v1/sandboxes", {"runtime": "microvm"})
            assert r.status == 503 and "being made" in r.text, r.describe()
            assert r.json()["error"]["code"] == "unavailable", r.describe()
            assert time.monotonic() - t < 5, f"the create waited {time.monotonic() - t:.1f} s"
        assert dc.wait_until(lambda: mkfs_procs(cache), 10), "no mkfs.erofs for the image"
        t = time.monotonic()
        assert cl.get("/healthz").status == 200
        assert cl.create({})["id"]  # a jail sandbox meanwhile
        assert time.monotonic() - t < 5, "the daemon's loop waited for the image"
        assert len(mkfs_procs(cache)) == 1, "the image is made once"
        assert cl.list() and all(s["runtime"] == "jail" for s in cl.list())
    finally:
        d.cleanup()
    assert dc.wait_until(lambda: not mkfs_procs(cache), 10), "mkfs.erofs outlived cordond"


def test_unknown_runtime_names_microvm(mvenv):
    out = subprocess.run([CORDON, "run", "--runtime", "nope", "--", "true"], capture_output=True,
                         env=mvenv, timeout=60)
    assert out.returncode == 2 and b"this host can run: microvm," in out.stderr, out.stderr


def test_runtimes_reports_the_accelerator(mvdaemon):
    body = mvdaemon.client().get("/v1/runtimes").json()
    mv = {x["name"]: x for x in body["runtimes"]}["microvm"]
    assert mv["available"] is True and mv["reason"] is None, mv
    assert {"oneshot", "agent", "limits"} <= set(mv["capabilities"]), mv
    assert mv["mode"]["name"] in ("kvm", "tcg"), mv
    assert (mv["mode"]["reason"] is None) == (mv["mode"]["name"] == "kvm"), mv
    # auto takes microvm only under KVM (TCG is emulation: asked for by name)
    assert (body["auto"] == "microvm") == (mv["mode"]["name"] == "kvm"), body


def test_agent_exec_files_and_pool(mvdaemon):
    """exec and files through the frame protocol on the virtio-serial channel; the guest's
    clock is the host's; the next create is served warm from the pool; destroy leaves
    nothing."""
    cl = mvdaemon.client(timeout=180)
    a = mv_create(cl, {"runtime": "microvm"})
    try:
        assert a["runtime"] == "microvm"
        r = cl.exec(a["id"], cmd="uname -r; id -u; echo err >&2; exit 3")
        assert r["exit_code"] == 3 and r["stderr"] == "err\n", r
        kernel, uid = r["stdout"].split()
        assert kernel.endswith("-cloud-amd64") and uid == "1000", r
        r = cl.put(f"/v1/sandboxes/{a['id']}/files?path=/home/user/f.txt", b"data\n")
        assert r.status in (200, 201), r.describe()
        assert cl.sh(a["id"], "cat /home/user/f.txt") == "data\n"
        r = cl.get(f"/v1/sandboxes/{a['id']}/files?path=/home/user/f.txt")
        assert r.status == 200 and r.body == b"data\n", r.describe()
        guest_now = int(cl.sh(a["id"], "date +%s"))
        assert abs(guest_now - time.time()) < 60, guest_now
    finally:
        cl.destroy(a["id"])
    # The pool keeps one microvm sandbox warm for the next microvm create.
    assert dc.wait_until(lambda: len(os.listdir(mvdaemon.vms)) == 1, 60), os.listdir(mvdaemon.vms)
    time.sleep(8)  # its boot
    t = time.monotonic()
    b = mv_create(cl, {"runtime": "microvm"})
    took = time.monotonic() - t
    try:
        assert took < 1.0, f"a pooled microvm create took {took:.3f} s"
        assert cl.sh(b["id"], "echo ok") == "ok\n"
    finally:
        cl.destroy(b["id"])


def test_kill9_of_cordond_leaves_nothing(mvdaemon):
    """Last in the module: with the pool's VM live, kill -9 of cordond takes its QEMU along
    (PR_SET_PDEATHSIG, the cgroup), and the next cordond's sweep removes its directory."""
    vms = mvdaemon.vms
    assert dc.wait_until(lambda: len(qemu_procs(vms)) == 1, 60), (qemu_procs(vms), mvdaemon.log_tail())
    mvdaemon.kill9()
    assert dc.wait_until(lambda: qemu_procs(vms) == [], 10), qemu_procs(vms)
    assert os.listdir(vms), "the dead daemon's VM directory is already gone: nothing to sweep"
    mvdaemon.pool = 0
    with environ(CORDON_MICROVM_DIR=vms):
        mvdaemon.start()
    assert dc.wait_until(lambda: os.listdir(vms) == [], 10), os.listdir(vms)
