"""Persistent volumes through cordond: /v1/volumes, `volumes` at create. A volume is a sparse
ext4 image under <state>/volumes that outlives sandboxes and the daemon, has its own quota,
is mounted read-write by one sandbox at a time (read-only by any number) and cannot be
deleted while mounted; every attach and detach is an audit record."""

import json
import os
import socket
import subprocess
import time

import pytest

from conftest import CORDON, Daemon, assert_error, start_daemon, wait_until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (loop devices, uid ranges)")


@pytest.fixture(scope="module")
def daemon():
    d = start_daemon(pool=0, max_sandboxes=16)
    yield d
    alive = d.alive()
    d.cleanup()
    assert alive, d.log_tail()


@pytest.fixture
def client(daemon):
    return daemon.client(timeout=60)


_n = [0]


@pytest.fixture
def vol(client):
    """A fresh 64 MiB volume, deleted at the end (once nothing holds it)."""
    _n[0] += 1
    name = f"v{os.getpid()}-{_n[0]}"
    client.ok("POST", "/v1/volumes", {"name": name, "size_mb": 64}, status=201)
    yield name
    wait_until(lambda: client.delete(f"/v1/volumes/{name}").status in (204, 404), 10)


def with_volumes(client, *vols):
    return client.create({"volumes": [dict(zip(("name", "path", "read_only"), v)) for v in vols]})


def destroy_and_reap(client, sid, name):
    """Destroys @sid and waits until cordond let go of @name (the sandbox is reaped)."""
    client.destroy(sid)
    assert wait_until(lambda: not client.ok("GET", f"/v1/volumes/{name}")["in_use"], 10), \
        f"volume {name} still in use after its sandbox went"


def test_create_list_get_delete(client, vol):
    v = client.ok("GET", f"/v1/volumes/{vol}")
    assert v["name"] == vol and v["size_mb"] == 64 and v["in_use"] is False
    assert v["attachments"] == [] and v["used_mb"] < 64
    names = [x["name"] for x in client.ok("GET", "/v1/volumes")["volumes"]]
    assert vol in names
    assert_error(client.post("/v1/volumes", {"name": vol, "size_mb": 64}), 409, "volume_exists")
    assert client.delete(f"/v1/volumes/{vol}").status == 204
    assert_error(client.get(f"/v1/volumes/{vol}"), 404, "not_found")
    assert_error(client.delete(f"/v1/volumes/{vol}"), 404, "not_found")


def test_the_image_is_sparse(client, daemon, vol):
    img = os.path.join(daemon.state_dir, "volumes", vol + ".img")
    st = os.stat(img)
    assert st.st_size == 64 << 20
    assert st.st_blocks * 512 < 16 << 20, "a new volume takes its metadata only"


@pytest.mark.parametrize("body", [
    {"name": "Upper", "size_mb": 64}, {"name": "-dash", "size_mb": 64},
    {"name": ".hidden", "size_mb": 64}, {"name": "a/b", "size_mb": 64},
    {"name": "../x", "size_mb": 64}, {"name": "", "size_mb": 64}, {"name": "x" * 64, "size_mb": 64},
    {"name": "a b", "size_mb": 64}, {"name": "ok", "size_mb": 8}, {"name": "ok", "size_mb": "64"},
    {"name": "ok"}, {"size_mb": 64}, {"name": "ok", "size_mb": 64, "extra": 1},
])
def test_bad_volume_requests(client, daemon, body):
    before = client.ok("GET", "/v1/volumes")["volumes"]
    r = client.post("/v1/volumes", body)
    assert_error(r, 400, ("invalid_field", "unknown_field"))
    assert client.ok("GET", "/v1/volumes")["volumes"] == before


def test_size_over_free_space(client, daemon):
    st = os.statvfs(daemon.state_dir)
    free_mb = st.f_bavail * st.f_frsize >> 20
    if free_mb * 2 > 16 << 20:
        pytest.skip("the host's free space is above the API's largest volume")
    r = client.post("/v1/volumes", {"name": "huge", "size_mb": free_mb * 2})
    assert_error(r, 507, "insufficient_storage")
    assert_error(client.get("/v1/volumes/huge"), 404)
    assert not [n for n in os.listdir(os.path.join(daemon.state_dir, "volumes")) if "huge" in n]


def test_bad_name_in_path(client):
    assert_error(client.get("/v1/volumes/UPPER"), 400, "invalid_field")
    assert_error(client.delete("/v1/volumes/%2e%2e"), (400, 404))


def test_files_are_the_sandboxs_and_nosuid_nodev(client, vol):
    sid = with_volumes(client, (vol, "/data", False))["id"]
    try:
        out = client.sh(sid, "stat -c '%u:%g' /data; touch /data/f; stat -c '%u:%g' /data/f; "
                             "grep ' /data ' /proc/self/mountinfo")
        lines = out.splitlines()
        assert lines[0] == "1000:1000" and lines[1] == "1000:1000", out
        opts = lines[2].split()[5].split(",")
        assert "nosuid" in opts and "nodev" in opts and "rw" in opts, out
        out = client.sh(sid, "touch /data/rootfile; stat -c %u /data/rootfile", user="root")
        assert out.strip() == "0"
        info = client.info(sid)
        assert info["volumes"] == [{"name": vol, "path": "/data", "read_only": False}]
        att = client.ok("GET", f"/v1/volumes/{vol}")["attachments"]
        assert att == [{"sandbox": sid, "path": "/data", "read_only": False}]
    finally:
        destroy_and_reap(client, sid, vol)


def test_data_survives_destroy_and_restart(daemon, client, vol):
    sid = with_volumes(client, (vol, "/home/user/work", False))["id"]
    client.sh(sid, "mkdir -p ~/work/d && echo persisted > ~/work/d/f && sync")
    destroy_and_reap(client, sid, vol)
    sid = with_volumes(client, (vol, "/mnt/v", True))["id"]
    assert client.sh(sid, "cat /mnt/v/d/f") == "persisted\n"
    client.destroy(sid)
    daemon.stop()
    daemon.start()
    c = daemon.client(timeout=60)
    assert vol in [v["name"] for v in c.ok("GET", "/v1/volumes")["volumes"]]
    sid = wait_until(lambda: c.post("/v1/sandboxes", {"volumes": [{"name": vol, "path": "/data"}]}), 10)
    assert sid.status == 201, sid.describe()
    sid = sid.json()["id"]
    assert c.sh(sid, "cat /data/d/f") == "persisted\n"
    destroy_and_reap(c, sid, vol)


def test_read_only_refuses_writes(client, vol):
    sid = with_volumes(client, (vol, "/data", True))["id"]
    try:
        res = client.exec(sid, cmd="echo x > /data/f", user="root")
        assert res["exit_code"] != 0 and "Read-only" in res["stderr"], res
        r = client.put(f"/v1/sandboxes/{sid}/files?path=/data/g", b"x")
        assert_error(r, 409, "read_only")
    finally:
        destroy_and_reap(client, sid, vol)


def test_one_writer_many_readers(client, vol):
    a = with_volumes(client, (vol, "/data", False))["id"]
    b = c = None
    try:
        client.sh(a, "echo from-a > /data/f")
        before = len(client.list())
        r = client.post("/v1/sandboxes", {"volumes": [{"name": vol, "path": "/data"}]})
        assert_error(r, 409, "volume_in_use")
        assert len(client.list()) == before, "a refused create made a sandbox"
        b = with_volumes(client, (vol, "/data", True))["id"]
        c = with_volumes(client, (vol, "/ro", True))["id"]
        assert client.sh(b, "cat /data/f") == "from-a\n"
        client.sh(a, "echo again > /data/f")
        assert client.sh(c, "cat /ro/f") == "again\n", "one filesystem, seen by every mount"
    finally:
        for s in (b, c):
            if s:
                client.destroy(s)
        destroy_and_reap(client, a, vol)
    d = with_volumes(client, (vol, "/data", False))["id"]  # free again: a writer may come
    destroy_and_reap(client, d, vol)


def test_quota_is_enospc(client):
    client.ok("POST", "/v1/volumes", {"name": "small", "size_mb": 16}, status=201)
    sid = with_volumes(client, ("small", "/data", False))["id"]
    try:
        res = client.exec(sid, cmd="dd if=/dev/zero of=/data/big bs=1M count=64", timeout=60)
        assert res["exit_code"] != 0 and "No space left" in res["stderr"], res
        assert client.sh(sid, "echo alive") == "alive\n"
        r = client.put(f"/v1/sandboxes/{sid}/files?path=/data/more", b"y" * (1 << 20))
        assert_error(r, 409, "no_space")
    finally:
        destroy_and_reap(client, sid, "small")
    assert client.delete("/v1/volumes/small").status == 204


def test_delete_in_use_refused(client, daemon, vol):
    sid = with_volumes(client, (vol, "/data", True))["id"]
    assert_error(client.delete(f"/v1/volumes/{vol}"), 409, "volume_in_use")
    assert os.path.exists(os.path.join(daemon.state_dir, "volumes", vol + ".img"))
    destroy_and_reap(client, sid, vol)
    assert client.delete(f"/v1/volumes/{vol}").status == 204
    assert not os.path.exists(os.path.join(daemon.state_dir, "volumes", vol + ".img"))


@pytest.mark.parametrize("mount", [
    {"path": "data"}, {"path": "/"}, {"path": "/proc"}, {"path": "/proc/x"}, {"path": "/sys"},
    {"path": "/sys/fs"}, {"path": "/dev"}, {"path": "/dev/shm"}, {"path": "/a/../etc"},
    {"path": "/a/./b"}, {"path": "/a//b"}, {"path": "/a/"}, {"path": "/.."}, {"path": 7},
    {"path": "/data", "read_only": "yes"}, {"path": "/data", "name": "BAD"}, {"path": "/data", "x": 1},
    {}, {"name": "v"},
])
def test_bad_mounts_refused(client, vol, mount):
    before = len(client.list())
    m = {"name": vol, **mount}
    r = client.post("/v1/sandboxes", {"volumes": [m]})
    assert_error(r, 400, ("invalid_field", "unknown_field"))
    assert len(client.list()) == before
    assert client.ok("GET", f"/v1/volumes/{vol}")["in_use"] is False


def test_same_volume_twice_in_one_request(client, vol):
    r = client.post("/v1/sandboxes", {"volumes": [{"name": vol, "path": "/a"},
                                                  {"name": vol, "path": "/b", "read_only": True}]})
    assert_error(r, 400, "invalid_field")
    r = client.post("/v1/sandboxes", {"volumes": [{"name": "nosuchvolume", "path": "/a"}]})
    assert_error(r, 404, "not_found")
    too_many = [{"name": f"n{i}", "path": f"/m{i}"} for i in range(9)]
    assert_error(client.post("/v1/sandboxes", {"volumes": too_many}), 400, "invalid_field")


def test_attach_and_detach_are_audited(client, daemon, vol):
    sid = with_volumes(client, (vol, "/data", True))["id"]
    destroy_and_reap(client, sid, vol)
    with open(os.path.join(daemon.audit_dir, f"{sid}.jsonl")) as f:
        recs = [json.loads(l) for l in f]
    events = [r["event"] for r in recs]
    att = [r for r in recs if r["event"] == "volume.attach"]
    det = [r for r in recs if r["event"] == "volume.detach"]
    assert len(att) == 1 and len(det) == 1, events
    for r in att + det:
        f = r["fields"]
        assert (f["name"], f["path"], f["read_only"]) == (vol, "/data", True), r
    assert events.index("volume.attach") < events.index("volume.detach") < events.index("sandbox.destroy")


def test_cordon_run_shares_the_lock(client, daemon, vol):
    """A one-shot `cordon run --volume` opens the image itself, under the same lock: refused
    while cordond has the volume mounted, and its writes seen by cordond's sandboxes after."""
    env = dict(os.environ, CORDON_VOLUME_DIR=os.path.join(daemon.state_dir, "volumes"))
    sid = with_volumes(client, (vol, "/data", True))["id"]
    r = subprocess.run([CORDON, "run", "--volume", f"{vol}:/data", "--", "true"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "in use" in r.stderr, r
    destroy_and_reap(client, sid, vol)
    r = subprocess.run([CORDON, "run", "--volume", f"{vol}:/data", "--", "sh", "-c",
                        "echo from-run > /data/r"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r
    sid = with_volumes(client, (vol, "/data", False))["id"]
    assert client.sh(sid, "cat /data/r") == "from-run\n"
    r = subprocess.run([CORDON, "run", "--volume", f"{vol}:/data:ro", "--", "true"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "in use" in r.stderr, r
    destroy_and_reap(client, sid, vol)


def test_tcp_keys_may_not_touch_volumes():
    """Volumes are the host's, not any key's: over TCP every volume route and a create with
    volumes is 403, so a tenant cannot read or delete another's data."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    d = Daemon(pool=0, max_sandboxes=4, listen=f"127.0.0.1:{port}", api_keys="vol-test-key-0123456789 t 4\n")
    d.start()
    try:
        d.client().ok("POST", "/v1/volumes", {"name": "mine", "size_mb": 16}, status=201)
        t = d.tcp_client(token="vol-test-key-0123456789")
        for method, path, body in [("GET", "/v1/volumes", None), ("GET", "/v1/volumes/mine", None),
                                   ("DELETE", "/v1/volumes/mine", None),
                                   ("POST", "/v1/volumes", {"name": "x", "size_mb": 16}),
                                   ("POST", "/v1/sandboxes", {"volumes": [{"name": "mine", "path": "/d"}]})]:
            assert_error(t.request(method, path, body), 403, "forbidden")
        assert d.client().ok("GET", "/v1/volumes/mine")["in_use"] is False
    finally:
        d.cleanup()


def volume_loops(d, name):
    img = os.path.join(d.state_dir, "volumes", name + ".img")
    out = []
    for dev in os.listdir("/sys/block"):
        try:
            with open(f"/sys/block/{dev}/loop/backing_file") as f:
                if f.read().strip() == img:
                    out.append(dev)
        except OSError:
            pass
    return out


def test_sigkilled_daemon_leaves_no_mount_or_lock():
    """cordond SIGKILLed with a volume mounted read-write: its sandboxes die with it, the loop
    device clears itself, the lock goes with it, and the next cordond mounts the volume."""
    d = start_daemon(pool=0, max_sandboxes=4)
    try:
        c = d.client(timeout=60)
        c.ok("POST", "/v1/volumes", {"name": "crash", "size_mb": 32}, status=201)
        sid = with_volumes(c, ("crash", "/data", False))["id"]
        c.sh(sid, "echo before > /data/f && sync")
        assert volume_loops(d, "crash"), "the volume is on a loop device while mounted"
        d.kill9()
        assert wait_until(lambda: not volume_loops(d, "crash"), 10), "the loop device stayed"
        d.start()
        c = d.client(timeout=60)
        r = c.post("/v1/sandboxes", {"volumes": [{"name": "crash", "path": "/d"}]})
        assert r.status == 201, r.describe()
        assert c.sh(r.json()["id"], "cat /d/f") == "before\n"
    finally:
        d.cleanup()


def test_half_made_volumes_are_swept_at_start():
    """A cordond killed in mke2fs leaves .tmp-<name>.<pid>: the next start removes it; a name
    that is not a volume's is never listed."""
    d = start_daemon(pool=0, max_sandboxes=2)
    try:
        vdir = os.path.join(d.state_dir, "volumes")
        d.client().ok("POST", "/v1/volumes", {"name": "real", "size_mb": 16}, status=201)
        dead = subprocess.Popen(["true"])
        dead.wait()
        stale = os.path.join(vdir, f".tmp-ghost.{dead.pid}")
        with open(stale, "w") as f:
            f.write("half made")
        open(os.path.join(vdir, "Bad Name.img"), "w").close()
        d.stop()
        d.start()
        assert not os.path.exists(stale)
        assert [v["name"] for v in d.client().ok("GET", "/v1/volumes")["volumes"]] == ["real"]
    finally:
        d.cleanup()
