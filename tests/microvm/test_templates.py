"""Every create a restore (CORDON_MICROVM_TEMPLATES=1): a template's first microvm sandbox
boots and is snapshotted into the cache at its guest's hello; the next is restored from that
snapshot. One boot, one restore; the template snapshot this module made is removed after."""

import glob
import os
import time

import pytest

from conftest import dc, mv_create, qemu_procs, requires_microvm

pytestmark = requires_microvm
CACHE = os.environ.get("CORDON_MICROVM_CACHE", "/var/cache/cordon-microvm")


@pytest.fixture(scope="module")
def tdaemon(tmp_path_factory):
    vms = str(tmp_path_factory.mktemp("tmpl-vms"))
    before = set(glob.glob(os.path.join(CACHE, "vm-template-*")))
    saved = {k: os.environ.get(k) for k in ("CORDON_MICROVM_DIR", "CORDON_MICROVM_TEMPLATES")}
    os.environ.update(CORDON_MICROVM_DIR=vms, CORDON_MICROVM_TEMPLATES="1")
    try:
        d = dc.start_daemon(pool=0, max_sandboxes=8, max_timeout=600)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    d.vms = vms
    yield d
    d.cleanup()
    for t in set(glob.glob(os.path.join(CACHE, "vm-template-*"))) - before:
        for f in os.listdir(t):
            os.unlink(os.path.join(t, f))
        os.rmdir(t)
    assert dc.wait_until(lambda: qemu_procs(vms) == [] and os.listdir(vms) == [], 10)


def test_second_create_is_a_restore(tdaemon):
    cl = tdaemon.client(timeout=240)
    before = set(glob.glob(os.path.join(CACHE, "vm-template-*")))
    t = time.monotonic()
    a = mv_create(cl, {"runtime": "microvm"})
    first = time.monotonic() - t
    try:
        made = set(glob.glob(os.path.join(CACHE, "vm-template-*"))) - before
        if not made:  # a template snapshot of this machine was in the cache already
            assert glob.glob(os.path.join(CACHE, "vm-template-*")), "no template snapshot"
        ra = cl.sh(a["id"], "hostname; head -c 16 /dev/urandom | od -An -tx1; date +%s")
    finally:
        cl.destroy(a["id"])
    t = time.monotonic()
    b = mv_create(cl, {"runtime": "microvm"})
    second = time.monotonic() - t
    print(f"boot {first * 1000:.0f} ms, restore {second * 1000:.0f} ms")
    try:
        rb = cl.sh(b["id"], "hostname; head -c 16 /dev/urandom | od -An -tx1; date +%s")
        ha, sa, ta = ra.split("\n")[:3]
        hb, sb, tb = rb.split("\n")[:3]
        assert ha == hb == "cordon", (ra, rb)
        assert sa != sb, "the restored guest's RNG repeats the template's"
        assert abs(int(tb) - time.time()) < 30, rb
        if made:  # the first one booted
            assert second < first / 3, f"the restore took {second:.2f} s, the boot {first:.2f} s"
        assert cl.sh(b["id"], "echo x > /tmp/y; cat /tmp/y") == "x\n"
    finally:
        cl.destroy(b["id"])
