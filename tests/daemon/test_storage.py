"""A cordond sandbox's disk: `/`, /tmp and home on its own ext4 scratch (<state>/scratch),
bounded by limits.disk_mb, the template the read-only lower of an overlay; root installs."""

import concurrent.futures
import os
import time

import pytest

from conftest import cordon_cgroup_dirs, slot_held, start_daemon, wait_until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (loop devices, uid ranges)")

FILL = ("python3 -c \"import errno,os,sys\n"
        "n=0\n"
        "try:\n"
        " f=open(sys.argv[1],'wb')\n"
        " while n < (1<<31): n+=f.write(b'x'*(1<<20))\n"
        " f.flush(); os.fsync(f.fileno())\n"
        " print('NOERROR')\n"
        "except OSError as e: print(errno.errorcode[e.errno])\n"
        "os.unlink(sys.argv[1])\" ")


def scratch_of(d):
    return os.path.join(d.state_dir, "scratch")


def loops_backed_by(d):
    prefix = scratch_of(d) + "/"
    out = []
    for name in os.listdir("/sys/block"):
        try:
            with open(f"/sys/block/{name}/loop/backing_file") as f:
                if f.read().startswith(prefix):
                    out.append(name)
        except OSError:
            pass
    return out


def mounts_in(path):
    with open("/proc/self/mountinfo") as f:
        return [l for l in f if f" {path}" in l]


def traces(d):
    s = scratch_of(d)
    files = [n for n in os.listdir(s) if not n.startswith("golden-")] if os.path.isdir(s) else []
    return loops_backed_by(d), mounts_in(s), files


@pytest.fixture(scope="module")
def daemon():
    d = start_daemon(pool=1, max_sandboxes=16)
    yield d
    alive = d.alive()
    d.cleanup()
    assert alive, d.log_tail()


@pytest.fixture(scope="module")
def client(daemon):
    return daemon.client(timeout=120)



def test_full_disk_is_enospc_and_the_sandbox_answers(client):
    sb = client.create({"limits": {"disk_mb": 64, "memory_mb": 256}})
    sid = sb["id"]
    try:
        for where, user in (("/tmp/f", "user"), ("/home/user/f", "user"), ("/f", "root"),
                            ("/usr/f", "root")):
            out = client.sh(sid, FILL + where, user=user, timeout=120)
            assert out.strip() == "ENOSPC", (where, out)
            assert client.sh(sid, "echo alive") == "alive\n"
        r = client.get(f"/v1/sandboxes/{sid}")
        assert r.status == 200 and r.json()["state"] == "running", r.describe()
    finally:
        client.destroy(sid)


def test_root_writes_slash_and_sandboxes_do_not_share(client):
    a = client.create({})["id"]
    b = client.create({})["id"]
    try:
        client.sh(a, "echo a > /usr/local/bin/marker && mkdir -p /opt/a && echo a > /tmp/a",
                  user="root")
        assert client.sh(a, "cat /usr/local/bin/marker") == "a\n"
        out = client.sh(b, "ls /usr/local/bin/marker /opt/a /tmp/a 2>&1 | grep -c 'No such'; true",
                        user="root")
        assert out.strip() == "3", out
        assert not os.path.exists("/opt/a")
        # "user" holds nothing: / and /usr stay root's.
        res = client.exec(b, cmd="touch /usr/local/bin/x")
        assert res["exit_code"] != 0, res
        caps = client.sh(b, "grep CapEff /proc/self/status")
        assert caps.split()[1] == "0000000000000000", caps
        caps = client.sh(b, "grep CapEff /proc/self/status", user="root")
        assert caps.split()[1] == "00000000800405fb", caps
    finally:
        client.destroy(a)
        client.destroy(b)


def test_killed_daemon_leaves_no_disk(tmp_path):
    d = start_daemon(pool=2, max_sandboxes=16)
    try:
        c = d.client(timeout=60)
        ids = [c.create({"limits": {"disk_mb": 128}})["id"] for _ in range(4)]
        for sid in ids:
            c.sh(sid, "dd if=/dev/zero of=/tmp/x bs=1M count=8 status=none")
        assert len(loops_backed_by(d)) >= 4, loops_backed_by(d)
        d.kill9()
        # PID 1 of each sandbox dies with its parent; its disk goes with its mounts.
        assert wait_until(lambda: traces(d) == ([], [], []), 15), traces(d)
        d.start()
        c = d.client(timeout=60)
        sid = c.create({})["id"]
        assert c.sh(sid, "echo ok") == "ok\n"
        c.destroy(sid)
    finally:
        d.cleanup()
    assert wait_until(lambda: traces(d) == ([], [], []), 15), traces(d)


LEAK_SANDBOXES = int(os.environ.get("CORDON_LEAK_SANDBOXES", "200"))  # fewer on a slow CI
LEAK_NETWORKED = 8  # of them with a network (a veth each)


def sandbox_slots(pid):
    """The uid slots ("sN" cgroup names) of the sandboxes whose PID 1 is a child of @pid."""
    out = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            kids = f.read().split()
        for k in kids:
            try:
                with open(f"/proc/{k}/cgroup") as f:
                    for line in f:
                        name = line.rstrip("\n").rsplit("/", 1)[-1]
                        if "/cordon/" in line and name.startswith("s") and name[1:].isdigit():
                            out.add(name)
            except OSError:
                pass
    return out


def slot_leftovers(slots):
    """Cgroup directories and veths of @slots ("sN") still there while nobody holds the slot."""
    free = {s for s in slots if not slot_held(s[1:])}
    cg = [c for c in cordon_cgroup_dirs() if os.path.basename(c) in free]
    veths = [n for n in os.listdir("/sys/class/net") if n.startswith("cdn") and f"s{n[3:]}" in free]
    return sorted(cg) + sorted(veths)


def test_200_disks_and_kill9_of_cordond_leave_nothing():
    """LEAK_SANDBOXES sandboxes with disks (some with a network), cordond SIGKILLed with all of
    them alive, then started again: no loop device, mount, image, cgroup or veth of theirs is
    left, and the restarted daemon makes sandboxes with disks again."""
    d = start_daemon(pool=0, max_sandboxes=LEAK_SANDBOXES + 8)
    try:
        c = d.client(timeout=120)
        body = lambda i: dict({"limits": {"disk_mb": 32}},
                              **({"network": {"policy": "public"}} if i < LEAK_NETWORKED else {}))
        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            ids = list(ex.map(lambda i: c.create(body(i))["id"], range(LEAK_SANDBOXES)))
        assert c.sh(ids[-1], "stat -f -c %T / && echo x > /tmp/x") == "ext2/ext3\n"
        slots = sandbox_slots(d.proc.pid)
        assert len(slots) == LEAK_SANDBOXES, len(slots)
        assert len(loops_backed_by(d)) == LEAK_SANDBOXES, len(loops_backed_by(d))
        veths = {n for n in os.listdir("/sys/class/net") if n.startswith("cdn")}
        assert len({f"cdn{s[1:]}" for s in slots} & veths) == LEAK_NETWORKED, veths
        d.kill9()
        d.start()
        c = d.client(timeout=60)
        assert wait_until(lambda: traces(d) == ([], [], []), 30), traces(d)
        assert wait_until(lambda: not slot_leftovers(slots), 15), slot_leftovers(slots)
        sid = c.create({"limits": {"disk_mb": 32}})["id"]
        assert c.sh(sid, "stat -f -c %T /") == "ext2/ext3\n"
        c.destroy(sid)
    finally:
        d.cleanup()
    assert wait_until(lambda: traces(d) == ([], [], []), 15), traces(d)
