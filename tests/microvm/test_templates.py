"""Every create a restore (the default; CORDON_MICROVM_TEMPLATES=0 opts out): a template's
memory snapshot is made once, by a VM of its own booted on cordond's creator thread (a create
on the loop that finds none is answered 503 "being made"), and every agent-mode create, pooled
or not, restores from it. The warm pool holds restored VMs: a pooled create answers at once.

Guest boots: one for the template snapshot, one for the opt-out's boot; the rest restore. The
template snapshots this module made are removed after."""

import glob
import os
import re
import time

import pytest

from conftest import dc, mv_create, qemu_procs, requires_microvm, start_mvdaemon, stop_mvdaemon

pytestmark = requires_microvm
CACHE = os.environ.get("CORDON_MICROVM_CACHE", "/var/cache/cordon-microvm")


def start(tmp_path_factory, pool, **env):
    """cordond with templates at their default unless @env names them."""
    return start_mvdaemon(str(tmp_path_factory.mktemp("tmpl-vms")), env={"CORDON_MICROVM_TEMPLATES": None, **env},
                          pool=pool, max_sandboxes=8, max_timeout=600)


@pytest.fixture(scope="module")
def made():
    """The template snapshots the module made, removed at its end."""
    before = set(glob.glob(os.path.join(CACHE, "vm-template-*")))
    yield before
    for t in set(glob.glob(os.path.join(CACHE, "vm-template-*"))) - before:
        for f in os.listdir(t):
            os.unlink(os.path.join(t, f))
        os.rmdir(t)


@pytest.fixture(scope="module")
def pdaemon(tmp_path_factory, made):
    d = start(tmp_path_factory, pool=1)
    yield d
    stop_mvdaemon(d)


def restored(vms):
    """The QEMUs of @vms that were restored (-incoming), and those that booted."""
    out = {True: [], False: []}
    for pid in qemu_procs(vms):
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            out[b"-incoming" in f.read()].append(pid)
    return out


def pool_ready(cl):
    m = re.search(r"^cordon_pool_ready (\d+)$", cl.get("/metrics").text, re.M)
    return int(m.group(1)) if m else 0


def probe(cl, sid):
    return cl.sh(sid, "hostname; head -c 16 /dev/urandom | od -An -tx1; date +%s").split("\n")[:3]


def test_creates_restore_and_the_pool_holds_restored_vms(pdaemon, made):
    cl = pdaemon.client(timeout=240)
    a = mv_create(cl, {"runtime": "microvm"})  # 503 while the creator makes the snapshot
    try:
        assert set(glob.glob(os.path.join(CACHE, "vm-template-*"))), "no template snapshot"
        ra = probe(cl, a["id"])
        # ready: the jail's `host` entry, and the microvm one this create asked for
        assert dc.wait_until(lambda: pool_ready(cl) >= 2, 120), "the pool did not fill"
        vm = restored(pdaemon.vms)
        assert vm[False] == [] and len(vm[True]) == 2, vm  # the template's VM is gone
        t = time.monotonic()
        b = mv_create(cl, {"runtime": "microvm"})
        pooled = time.monotonic() - t
        rb = probe(cl, b["id"])
        print(f"pooled create {pooled * 1000:.0f} ms")
        assert pooled < 0.2, f"a pooled create took {pooled:.2f} s"
        assert ra[0] == rb[0] == "cordon", (ra, rb)
        assert ra[1] != rb[1], "two restores' RNG repeat each other"
        assert abs(int(rb[2]) - time.time()) < 30, rb
        assert cl.sh(b["id"], "echo x > /tmp/y; cat /tmp/y") == "x\n"
        cl.destroy(b["id"])
    finally:
        cl.destroy(a["id"], missing_ok=True)


def test_opt_out_boots(tmp_path_factory, made):
    d = start(tmp_path_factory, pool=0, CORDON_MICROVM_TEMPLATES="0")
    try:
        cl = d.client(timeout=240)
        s = mv_create(cl, {"runtime": "microvm"})
        vm = restored(d.vms)
        assert vm[True] == [] and len(vm[False]) == 1, vm
        assert cl.sh(s["id"], "echo up") == "up\n"
        cl.destroy(s["id"])
    finally:
        stop_mvdaemon(d)


def test_a_new_shape_is_made_off_the_loop(pdaemon, made):
    """A create of a shape with no snapshot yet is answered 503 at once (the loop never boots
    it); the creator thread makes that shape's snapshot, and the retry is a restore."""
    cl = pdaemon.client(timeout=240)
    body = {"runtime": "microvm", "limits": {"disk_mb": 3000 + os.getpid() % 97}}
    have = set(glob.glob(os.path.join(CACHE, "vm-template-*")))
    t = time.monotonic()
    r = cl.post("/v1/sandboxes", body)
    assert r.status == 503 and "being made" in r.text, r.describe()
    assert time.monotonic() - t < 2, "the loop waited for the template's VM"
    s = mv_create(cl, body)
    try:
        assert set(glob.glob(os.path.join(CACHE, "vm-template-*"))) - have, "no new template snapshot"
        vm = restored(pdaemon.vms)
        assert vm[False] == [] and vm[True], vm  # the template's VM is gone, this one restored
        assert cl.sh(s["id"], "echo up") == "up\n"
    finally:
        cl.destroy(s["id"])
