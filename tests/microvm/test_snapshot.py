"""Memory snapshots of microvm sandboxes through cordond: POST /v1/sandboxes/{id}/snapshots
keeps the guest's RAM and device state (`"memory": true`), a create from it restores, and a
fork maps one snapshot's RAM copy-on-write into each child.

ONE booted parent and ONE snapshot for the module (each boot is seconds under TCG): the
parent runs a counter whose value lives in its memory; the snapshot is taken, two children
are forked and one sandbox created from it, and each test reads them. Last, destroy leaves
no QEMU, tap, VM directory or mount."""

import hashlib
import os
import signal
import time

import pytest

from conftest import dc, mv_create, mvdaemon, qemu_procs, requires_microvm  # noqa: F401

pytestmark = requires_microvm
POOL = 0  # no warm VMs: every boot here is the test's

# The witness: a shell whose counter is a variable (memory only), printed each 0.2 s.
COUNTER = "setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.2; done' >/dev/null 2>&1 < /dev/null &"
# Guest RAM touched (the page cache of a file on the scratch disk: a restored VM's snapshot
# streams those pages, and copies the disk): its snapshot then takes long enough (0.6 s
# here) to be seen under way. urandom: yes(1) or cat loops are slower under TCG.
FILL = "test -e /tmp/fill || dd if=/dev/urandom of=/tmp/fill bs=1M count=200 2>/dev/null; echo filled"
IDENT = ("hostname; cat /sys/class/net/eth0/address 2>/dev/null || ip -o link show eth0; "
         "head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'; echo; date +%s")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@pytest.fixture(scope="module")
def fam(mvdaemon):
    """The parent (booted), its memory snapshot, two fork children and one restored create."""
    cl = mvdaemon.client(timeout=240)
    made = []
    parent = mv_create(cl, {"runtime": "microvm", "timeout_s": 600})
    made.append(parent["id"])
    f = {"cl": cl, "d": mvdaemon, "parent": parent["id"], "made": made}
    try:
        cl.sh(parent["id"], COUNTER)
        cl.sh(parent["id"], "echo parent > /tmp/who; sleep 1")
        t = time.monotonic()
        r = cl.post(f"/v1/sandboxes/{parent['id']}/snapshots")
        f["snapshot_s"] = time.monotonic() - t
        assert r.status in (200, 201), r.describe()
        f["snap"] = r.json()
        f["count_at_snap"] = int(cl.sh(parent["id"], "cat /tmp/count"))
        f["mem"] = os.path.join(mvdaemon.state_dir, "snapshots", f["snap"]["id"], "fs", "vm-mem")
        f["mem_sha"] = sha256(f["mem"])
        t = time.monotonic()
        r = cl.post(f"/v1/sandboxes/{parent['id']}/fork", {"count": 2, "timeout_s": 300})
        f["fork_s"] = time.monotonic() - t
        assert r.status == 200, r.describe()
        assert all("id" in k for k in r.json()), r.json()
        f["kids"] = [k["id"] for k in r.json()]
        made.extend(f["kids"])
        # the fork's own snapshot, which its children map
        f["fork_snap"] = cl.info(f["kids"][0])["snapshot"]
        f["fork_mem"] = os.path.join(mvdaemon.state_dir, "snapshots", f["fork_snap"], "fs", "vm-mem")
        f["fork_sha"] = sha256(f["fork_mem"])
        t = time.monotonic()
        c = cl.create({"snapshot": f["snap"]["id"], "timeout_s": 300})
        f["restore_s"] = time.monotonic() - t
        made.append(c["id"])
        f["restored"] = c["id"]
        yield f
    finally:
        for sid in made:
            cl.destroy(sid, missing_ok=True)


def test_snapshot_keeps_memory(fam):
    snap = fam["snap"]
    assert snap["memory"] is True and snap["runtime"] == "microvm", snap
    names = set(os.listdir(os.path.dirname(fam["mem"])))
    assert {"vm-state", "vm-mem", "vm-scratch", "vm-machine"} <= names, names
    # the parent goes on after its snapshot
    cl = fam["cl"]
    a = int(cl.sh(fam["parent"], "cat /tmp/count"))
    time.sleep(0.6)
    assert int(cl.sh(fam["parent"], "cat /tmp/count")) > a


def test_pause_stops_the_guest_and_resume_sets_its_clock(fam):
    """Paused (QMP stop), the counter (5 a second) does not count; resumed, it counts on and
    the guest's clock is the host's again."""
    cl, sid = fam["cl"], fam["parent"]
    c0 = int(cl.sh(sid, "cat /tmp/count"))
    assert cl.post(f"/v1/sandboxes/{sid}/pause").status == 200
    time.sleep(2.0)
    assert cl.post(f"/v1/sandboxes/{sid}/resume").status == 200
    c1 = int(cl.sh(sid, "cat /tmp/count"))
    assert c1 - c0 <= 4, (c0, c1)
    time.sleep(0.6)
    assert int(cl.sh(sid, "cat /tmp/count")) > c1
    assert abs(int(cl.sh(sid, "date +%s")) - time.time()) < 5


def test_children_continue_the_counter(fam):
    """The counting process is in each child, its in-memory count carried on from the
    snapshot (not from 0), counting on its own."""
    cl = fam["cl"]
    for sid in fam["kids"] + [fam["restored"]]:
        assert cl.sh(sid, "cat /tmp/who") == "parent\n"
        a = int(cl.sh(sid, "cat /tmp/count"))
        time.sleep(0.6)
        b = int(cl.sh(sid, "cat /tmp/count"))
        assert fam["count_at_snap"] - 10 <= a < b, (sid, fam["count_at_snap"], a, b)


def test_children_are_isolated(fam):
    cl = fam["cl"]
    kids = fam["kids"]
    for i, sid in enumerate(kids):
        cl.sh(sid, f"echo child{i} > /tmp/who; echo x > /tmp/mine{i}")
    for i, sid in enumerate(kids):
        assert cl.sh(sid, "cat /tmp/who") == f"child{i}\n"
        assert cl.sh(sid, "ls /tmp | grep mine || true") == f"mine{i}\n"
    assert cl.sh(fam["parent"], "cat /tmp/who; ls /tmp | grep -c mine || true") == "parent\n0\n"


def test_children_have_new_identity_entropy_and_clock(fam):
    cl = fam["cl"]
    seen = {}
    for sid in [fam["parent"]] + fam["kids"] + [fam["restored"]]:
        host, mac, rnd, now = cl.sh(sid, IDENT).split("\n")[:4]
        seen[sid] = (host, mac, rnd)
        # a template's sandbox is "cordon"; one made from a snapshot is named after itself
        assert host == ("cordon" if sid == fam["parent"] else sid), (sid, host)
        assert abs(int(now) - time.time()) < 30, (sid, now)
    for i in range(3):
        assert len({v[i] for v in seen.values()}) == len(seen), seen
    for sid, snap in [(k, fam["fork_snap"]) for k in fam["kids"]] + [(fam["restored"], fam["snap"]["id"])]:
        info = cl.info(sid)
        assert info["runtime"] == "microvm" and info["snapshot"] == snap, info
        if snap == fam["fork_snap"]:
            assert info["parent"] == fam["parent"], info


def test_snapshot_memory_file_unchanged_by_children(fam):
    cl = fam["cl"]
    for sid in fam["kids"] + [fam["restored"]]:
        cl.sh(sid, "dd if=/dev/urandom of=/tmp/junk bs=1k count=2048 2>/dev/null; "
                   "head -c 8000000 /dev/zero | tr '\\0' x > /dev/null; sync")
    assert sha256(fam["mem"]) == fam["mem_sha"]
    assert sha256(fam["fork_mem"]) == fam["fork_sha"]
    for mem in (fam["mem"], fam["fork_mem"]):
        st = os.stat(mem)
        assert st.st_uid == 0 and st.st_mode & 0o222 == 0o200, oct(st.st_mode)


def test_fork_of_a_restored_sandbox(fam):
    """A restored sandbox's RAM is a private mapping, so its snapshot carries every page in
    the state stream: its fork child has its memory all the same (counter, files)."""
    cl = fam["cl"]
    src = fam["restored"]
    cl.sh(src, "echo grand > /tmp/gen")
    r = cl.post(f"/v1/sandboxes/{src}/fork", {"count": 1, "timeout_s": 120})
    assert r.status == 200 and "id" in r.json()[0], r.describe()
    g = r.json()[0]["id"]
    gsnap = cl.info(g)["snapshot"]
    try:
        assert cl.sh(g, "cat /tmp/gen /tmp/who") == "grand\nparent\n"
        a = int(cl.sh(g, "cat /tmp/count"))
        time.sleep(0.6)
        assert fam["count_at_snap"] <= a < int(cl.sh(g, "cat /tmp/count"))
        assert cl.sh(g, "hostname") == g + "\n"
    finally:
        cl.destroy(g)
        assert cl.delete(f"/v1/snapshots/{gsnap}").status == 204
    b = int(cl.sh(src, "cat /tmp/count"))
    time.sleep(0.6)
    assert int(cl.sh(src, "cat /tmp/count")) > b  # the source goes on after its fork


def test_restored_qemu_maps_the_snapshot_read_only(fam):
    """The child's QEMU holds the snapshot's RAM file through a read-only fd (the shim), and
    runs jailed like any other."""
    vms = fam["d"].vms
    pids = qemu_procs(vms)
    assert len(pids) == 4, pids
    ro = 0
    for pid in pids:
        for n in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{n}")
                if target == "/img/mem":  # the jail's name of the snapshot's vm-mem
                    with open(f"/proc/{pid}/fdinfo/{n}") as fi:
                        flags = int(fi.read().split("flags:")[1].split()[0], 8)
                    assert flags & 3 == os.O_RDONLY, (pid, oct(flags))
                    ro += 1
            except FileNotFoundError:
                continue
    # The three children, and the parent: every create a restore (its RAM file the template's).
    assert ro == 4, f"restored QEMUs holding a snapshot's RAM read-only: {ro}"
    # and map it privately (copy-on-write): rw-p, never rw-s
    maps = [l for pid in pids for l in open(f"/proc/{pid}/maps") if l.rstrip().endswith(" /img/mem")]
    assert len(maps) == 4 and all(l.split()[1] == "rw-p" for l in maps), maps


def test_restore_of_another_runtimes_snapshot_is_refused(fam):
    """A jail's (filesystem) snapshot is not a microvm memory snapshot: a 400 naming it, and
    no QEMU started."""
    cl = fam["cl"]
    j = cl.create({"runtime": "jail"})
    try:
        r = cl.post(f"/v1/sandboxes/{j['id']}/snapshots")
        assert r.status in (200, 201), r.describe()
        snap = r.json()["id"]
    finally:
        cl.destroy(j["id"])
    try:
        r = cl.post("/v1/sandboxes", {"snapshot": snap, "runtime": "microvm"})
        if r.status == 201:
            cl.destroy(r.json()["id"])
        dc.assert_error(r, 400, "invalid_field")
        assert "not a memory snapshot" in r.json()["error"]["message"], r.describe()
        assert len(qemu_procs(fam["d"].vms)) == 4
    finally:
        cl.delete(f"/v1/snapshots/{snap}")


def test_restore_with_a_network(fam):
    """A create from the (deny) parent's snapshot with a policy: the restored guest's eth0
    gets its own slot's address, route and resolver (the host end of its veth), which the
    host has; its address is not the parent's or a sibling's."""
    cl = fam["cl"]
    c = cl.create({"snapshot": fam["snap"]["id"], "timeout_s": 120,
                   "network": {"policy": "allow", "allow": ["example.test"]}})
    try:
        out = cl.sh(c["id"], "cat /proc/net/route | awk 'NR>1 && $2==\"00000000\" {print $3}'; "
                             "cat /etc/resolv.conf; ip -4 -o addr show eth0 2>/dev/null || "
                             "cat /proc/net/fib_trie | grep -m1 -A1 '10.201' ")
        assert "nameserver 10.201." in out, out
        gw_hex = out.split()[0]
        gw = ".".join(str(int(gw_hex[i:i + 2], 16)) for i in (6, 4, 2, 0))
        assert f"nameserver {gw}" in out, out
        links = os.popen("ip -4 -o addr show").read()
        assert f" {gw}/30 " in links, (gw, links)  # the host end of this sandbox's veth
    finally:
        cl.destroy(c["id"])


def test_a_guest_that_stops_answering_is_destroyed_at_its_deadline(fam):
    """A restored VM whose QEMU is stopped (SIGSTOP: the guest answers nothing) is destroyed
    at its TTL all the same: QEMU killed, its directory gone."""
    cl, vms = fam["cl"], fam["d"].vms
    before, dirs = set(qemu_procs(vms)), set(os.listdir(vms))
    c = cl.create({"snapshot": fam["snap"]["id"], "timeout_s": 4})
    new = set(qemu_procs(vms)) - before
    assert len(new) == 1, new
    pid = new.pop()
    os.kill(pid, signal.SIGSTOP)
    t = time.monotonic()
    assert dc.wait_until(lambda: not os.path.exists(f"/proc/{pid}"), 20), "the stopped QEMU lives on"
    assert time.monotonic() - t < 15
    assert cl.get(f"/v1/sandboxes/{c['id']}").status == 404 or cl.info(c["id"])["state"] != "running"
    assert dc.wait_until(lambda: not set(os.listdir(vms)) - dirs, 5), os.listdir(vms)


def test_a_snapshot_runs_off_the_loop(fam):
    """The restored sandbox's snapshot (a restored VM's RAM goes through the state stream:
    a second or more under TCG) runs on cordond's snapshot thread: meanwhile /healthz and an
    exec on another VM answer at once, and the sandbox refuses the rest with 409
    sandbox_busy; then it answers 201 with its memory, and the guest runs on."""
    cl, d = fam["cl"], fam["d"]
    src, other = fam["restored"], fam["kids"][0]
    assert cl.sh(src, FILL, timeout=120) == "filled\n"
    job = dc.Background(d, f"/v1/sandboxes/{src}/snapshots")
    assert dc.wait_busy(cl, src, job), f"never seen busy: {job.r and job.r.describe()}"
    dc.assert_busy_refusals(cl, src)
    dc.assert_served_while(job, cl, other, "microvm")
    assert job.r.status == 201 and job.r.json()["memory"] is True, job.r.describe()
    try:
        a = int(cl.sh(src, "cat /tmp/count"))
        time.sleep(0.6)
        assert int(cl.sh(src, "cat /tmp/count")) > a, "the guest runs on after its snapshot"
    finally:
        assert cl.delete(f"/v1/snapshots/{job.r.json()['id']}").status == 204


def test_destroy_during_a_snapshot(fam):
    """A DELETE while a VM's snapshot is being made answers at once; the snapshot is
    refused (409 conflict) and removed, and the VM goes with nothing left: no QEMU, no VM
    directory, no snapshot directory."""
    cl, d, vms = fam["cl"], fam["d"], fam["d"].vms
    src = fam["restored"]
    store = os.path.join(d.state_dir, "snapshots")
    assert cl.sh(src, FILL, timeout=120) == "filled\n"
    before, dirs, snaps = set(qemu_procs(vms)), set(os.listdir(vms)), sorted(os.listdir(store))
    job = dc.Background(d, f"/v1/sandboxes/{src}/snapshots")
    assert dc.wait_busy(cl, src, job), f"never seen busy: {job.r and job.r.describe()}"
    assert cl.delete(f"/v1/sandboxes/{src}").status == 204
    fam["made"].remove(src)
    dc.assert_error(cl.get(f"/v1/sandboxes/{src}"), 404, "not_found")
    job.join()
    e = dc.assert_error(job.r, 409, "conflict")
    assert "destroyed while its snapshot was being made" in e["message"], e
    assert sorted(os.listdir(store)) == snaps, "nothing half-made"
    assert dc.wait_until(lambda: len(set(qemu_procs(vms))) == len(before) - 1 and
                         len(set(os.listdir(vms))) == len(dirs) - 1, 15), (qemu_procs(vms), os.listdir(vms))
    assert set(qemu_procs(vms)) < before and set(os.listdir(vms)) < dirs


def test_destroy_leaves_nothing(fam):
    cl, vms = fam["cl"], fam["d"].vms
    for sid in list(fam["made"]):
        cl.destroy(sid)
    assert dc.wait_until(lambda: qemu_procs(vms) == [] and os.listdir(vms) == [], 15), \
        (qemu_procs(vms), os.listdir(vms))
    with open("/proc/self/mountinfo") as f:
        assert not [l for l in f if vms in l]
    # no tap and no network namespace held by cordond (QEMU, their other holder, is gone;
    # cordond's teardown thread lets go of a sandbox's last fds just after its destroy)
    pid = fam["d"].proc.pid

    def net_fds():
        held = []
        for n in os.listdir(f"/proc/{pid}/fd"):
            try:
                held.append(os.readlink(f"/proc/{pid}/fd/{n}"))
            except FileNotFoundError:  # closed while we looked
                continue
        return [t for t in held if t == "/dev/net/tun" or t.startswith("net:[")]
    assert dc.wait_until(lambda: not net_fds(), 10), net_fds()
    # the snapshot stays the user's until deleted
    assert os.path.exists(fam["mem"])
    for snap, mem in ((fam["snap"]["id"], fam["mem"]), (fam["fork_snap"], fam["fork_mem"])):
        assert cl.delete(f"/v1/snapshots/{snap}").status == 204
        assert not os.path.exists(os.path.dirname(os.path.dirname(mem)))
