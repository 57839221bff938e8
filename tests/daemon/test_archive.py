"""Directories in and out of a sandbox: GET and PUT /v1/sandboxes/{id}/files/archive?path=.
The tar is made and unpacked inside the sandbox by cordon-init; cordond checks every archive
whole (basic/tar.c) and refuses, with 400 unsafe_archive, absolute names, '..', links out of
the tree, devices and fifos, and with 413 a size bomb. A refused upload changes nothing. Out
of a sandbox a symlink with an absolute target is kept (its own path); past 8 MiB the archive
is spooled to disk."""

import hashlib
import io
import os
import re
import tarfile

import pytest

from conftest import assert_error, skip_if_sanitized, start_daemon


pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (uid ranges)")

N_FILES = 10000

# A tree made inside the sandbox: 10,000 files in 100 directories, symlinks (relative, inside
# the tree), odd names (spaces, newlines, a leading dash, UTF-8, a non-UTF-8 byte, 200 bytes,
# deep nesting), an empty file and an empty directory.
MAKE_TREE = r'''
import os, sys
root = sys.argv[1]
for d in range(100):
    p = os.path.join(root, "d%03d" % d)
    os.makedirs(p)
    for f in range(100):
        with open(os.path.join(p, "f%03d" % f), "w") as fh:
            fh.write("%d-%d\n" % (d, f) * (f % 7))
odd = os.path.join(root, "odd")
os.makedirs(odd)
for name in ["with space", "new\nline", "-dash", "caf\u00e9", "x" * 200, "tab\there"]:
    open(os.path.join(odd, name), "w").write(name)
open(os.path.join(odd.encode(), b"bad\xff"), "w").write("latin")
deep = os.path.join(root, *["deep%02d" % i for i in range(40)])
os.makedirs(deep)
open(os.path.join(deep, "bottom"), "w").write("bottom")
os.makedirs(os.path.join(root, "empty"))
open(os.path.join(root, "zero"), "w").close()
os.symlink("d000/f001", os.path.join(root, "link"))
os.symlink("../d001", os.path.join(root, "odd", "up"))
os.symlink("nowhere", os.path.join(root, "dangling"))
'''

# What a tree is, from inside: type, path, size, digest of files, target of links.
LIST_TREE = r'''
import hashlib, os, sys
root = sys.argv[1].encode()
out = []
for dp, dns, fns in os.walk(root):
    for n in dns + fns:
        p = os.path.join(dp, n)
        rel = os.path.relpath(p, root)
        if os.path.islink(p):
            out.append(b"l %s %s" % (rel, os.readlink(p)))
        elif os.path.isdir(p):
            out.append(b"d %s" % rel)
        else:
            out.append(b"f %s %s" % (rel, hashlib.sha256(open(p, "rb").read()).hexdigest().encode()))
sys.stdout.buffer.write(b"\0".join(sorted(out)))
'''


@pytest.fixture(scope="module")
def daemon():
    d = start_daemon(pool=0, max_sandboxes=8)
    yield d
    alive = d.alive()
    d.cleanup()
    assert alive, d.log_tail()


@pytest.fixture(scope="module")
def client(daemon):
    return daemon.client(timeout=120)


@pytest.fixture(scope="module")
def sid(client):
    sb = client.create()
    yield sb["id"]
    client.destroy(sb["id"], missing_ok=True)


def py(client, sid, script, *args, **kw):
    res = client.exec(sid, argv=["python3", "-c", script, *args], encoding="base64", timeout=120, **kw)
    assert res["exit_code"] == 0, res
    return res


def listing(client, sid, path):
    import base64
    return base64.b64decode(py(client, sid, LIST_TREE, path)["stdout"]).split(b"\0")


def members_of(body):
    with tarfile.open(fileobj=io.BytesIO(body)) as t:
        return {m.name: m for m in t.getmembers()}


def archive_get(client, sid, path):
    return client.get(f"/v1/sandboxes/{sid}/files/archive?path={path}")


def archive_put(client, sid, path, body):
    return client.put(f"/v1/sandboxes/{sid}/files/archive?path={path}", body)


def test_ten_thousand_files_out_and_back_in(client, sid):
    py(client, sid, MAKE_TREE, "/tmp/tree")
    before = listing(client, sid, "/tmp/tree")
    assert len(before) > N_FILES
    r = archive_get(client, sid, "/tmp/tree")
    assert r.status == 200 and r.content_type == "application/x-tar", r.describe()
    m = members_of(r.body)
    assert sum(1 for x in m.values() if x.isfile()) >= N_FILES
    assert m["link"].issym() and m["link"].linkname == "d000/f001"
    assert "odd/new\nline" in m and "odd/" + "x" * 200 in m
    assert all(not x.name.startswith(("/", "..")) for x in m.values())
    with tarfile.open(fileobj=io.BytesIO(r.body)) as t:
        assert t.extractfile("d003/f005").read() == b"3-5\n" * 5
    up = archive_put(client, sid, "/home/user/copy", r.body)
    assert up.status == 200, up.describe()
    assert up.json()["entries"] == len(m)
    assert listing(client, sid, "/home/user/copy") == before


def test_a_tree_from_the_host_goes_in(client, sid):
    buf = io.BytesIO()
    files = {}
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for i in range(N_FILES):
            name = f"p{i % 50:02d}/file {i} \u2603"
            data = hashlib.sha256(str(i).encode()).hexdigest().encode() * (i % 3)
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
            files[name] = data
        ln = tarfile.TarInfo("p00/alias")
        ln.type, ln.linkname = tarfile.SYMTYPE, "file 0 \u2603"
        t.addfile(ln)
        hl = tarfile.TarInfo("hard")
        hl.type, hl.linkname = tarfile.LNKTYPE, "p01/file 1 \u2603"
        t.addfile(hl)
        long = tarfile.TarInfo("l/" + "n" * 250)
        long.size = 4
        t.addfile(long, io.BytesIO(b"long"))
    r = archive_put(client, sid, "/tmp/in", buf.getvalue())
    assert r.status == 200, r.describe()
    out = py(client, sid, "import os,sys; print(sum(len(f) for _,_,f in os.walk('/tmp/in')));"
                          "print(open('/tmp/in/p07/file 107 \u2603').read());"
                          "print(os.readlink('/tmp/in/p00/alias'));"
                          "print(os.stat('/tmp/in/hard').st_nlink);"
                          "print(open('/tmp/in/l/' + 'n'*250).read())")
    import base64
    lines = base64.b64decode(out["stdout"]).decode().splitlines()
    assert lines == [str(N_FILES + 3), files["p07/file 107 \u2603"].decode(), "file 0 \u2603", "2", "long"]
    back = members_of(archive_get(client, sid, "/tmp/in").body)
    assert len([m for m in back.values() if m.isfile()]) == N_FILES + 2


def test_one_file_comes_out_under_its_name(client, sid):
    client.sh(sid, "echo one > /tmp/single")
    m = members_of(archive_get(client, sid, "/tmp/single").body)
    assert list(m) == ["single"]


@pytest.mark.parametrize("cmd,why", [
    ("mkdir -p /tmp/h2/a && ln -s ../../../etc /tmp/h2/a/up", "symlink"),
    ("mkdir -p /tmp/h3 && ln -s .. /tmp/h3/parent", "symlink"),
])
def test_hostile_trees_inside_are_refused(client, sid, cmd, why):
    client.sh(sid, cmd)
    path = cmd.split()[2]
    e = assert_error(archive_get(client, sid, path), 400, "unsafe_archive")
    assert why in e["message"]


def test_absolute_symlinks_come_out_as_symlinks(client, sid):
    """A venv's bin/python -> /usr/bin/python3: the sandbox's own path, kept as a symlink in
    the tar (its target never read, on either side); one climbing out by '..' is refused."""
    client.sh(sid, "mkdir -p /tmp/venv/bin && ln -s /usr/bin/python3 /tmp/venv/bin/python && "
                   "ln -s /etc /tmp/venv/etcdir && echo home=/usr/bin > /tmp/venv/pyvenv.cfg")
    r = archive_get(client, sid, "/tmp/venv")
    assert r.status == 200, r.describe()
    m = members_of(r.body)
    assert m["bin/python"].issym() and m["bin/python"].linkname == "/usr/bin/python3"
    assert m["etcdir"].issym() and m["etcdir"].linkname == "/etc"
    assert not any(n.startswith("etcdir/") for n in m), sorted(m)
    assert set(m) == {"bin", "bin/python", "etcdir", "pyvenv.cfg"}, sorted(m)


def test_a_big_archive_out_is_spooled_not_held(tmp_path):
    """A directory of 64 MiB out of a sandbox: cordond keeps 8 MiB of it in memory and the
    rest in an unlinked file of its state directory, so its peak RSS grows far less than the
    archive; the bytes arrive whole."""
    skip_if_sanitized()
    d = start_daemon(pool=0, max_sandboxes=2)
    try:
        c = d.client(timeout=120)
        s = c.create()["id"]
        c.sh(s, "mkdir -p /tmp/sp && head -c 64M /dev/urandom > /tmp/sp/big && "
                "sha256sum /tmp/sp/big > /tmp/sum && echo x > /tmp/sp/small")
        want = c.sh(s, "cut -d' ' -f1 /tmp/sum").strip()
        hwm = lambda: int(re.search(r"VmHWM:\s+(\d+) kB", open(f"/proc/{d.proc.pid}/status").read())[1])
        before = hwm()
        r = archive_get(c, s, "/tmp/sp")
        assert r.status == 200, r.describe()
        grew = (hwm() - before) >> 10
        with tarfile.open(fileobj=io.BytesIO(r.body)) as t:
            assert hashlib.sha256(t.extractfile("big").read()).hexdigest() == want
            assert t.extractfile("small").read() == b"x\n"
        assert grew < 32, f"cordond's peak RSS grew by {grew} MiB for a 64 MiB archive"
        assert not [f for f in os.listdir(d.state_dir) if f.startswith("#")], "a named spool"
        c.destroy(s)
    finally:
        d.cleanup()


def test_what_is_not_a_file_is_left_out(client, sid):
    client.sh(sid, "mkdir -p /tmp/sp && mkfifo /tmp/sp/fifo && "
                   "python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('/tmp/sp/sock')\" && "
                   "echo x > /tmp/sp/ok")
    r = archive_get(client, sid, "/tmp/sp")
    assert r.status == 200, r.describe()
    assert list(members_of(r.body)) == ["ok"]


def test_a_size_bomb_out_is_refused(client, sid):
    client.sh(sid, "mkdir -p /tmp/bomb && truncate -s 5G /tmp/bomb/sparse")
    assert_error(archive_get(client, sid, "/tmp/bomb"), 413, "payload_too_large")
    assert client.sh(sid, "echo alive") == "alive\n"


def tar_of(*entries, fmt=tarfile.GNU_FORMAT):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        for name, kind, extra in entries:
            ti = tarfile.TarInfo(name)
            data = b""
            if kind == "file":
                data = extra or b"x"
                ti.size = len(data)
            elif kind == "sym":
                ti.type, ti.linkname = tarfile.SYMTYPE, extra
            elif kind == "hard":
                ti.type, ti.linkname = tarfile.LNKTYPE, extra
            elif kind == "chr":
                ti.type, ti.devmajor, ti.devminor = tarfile.CHRTYPE, 1, 3
            elif kind == "blk":
                ti.type = tarfile.BLKTYPE
            elif kind == "fifo":
                ti.type = tarfile.FIFOTYPE
            t.addfile(ti, io.BytesIO(data) if data else None)
    return buf.getvalue()


HOSTILE = {
    "dotdot": tar_of(("../escape", "file", None)),
    "dotdot-inner": tar_of(("a/../../escape", "file", None)),
    "absolute": tar_of(("/etc/evil", "file", None)),
    "symlink-abs": tar_of(("l", "sym", "/etc")),
    "symlink-up": tar_of(("a/l", "sym", "../../etc")),
    "symlink-then-through": tar_of(("l", "sym", "."), ("l/../x", "file", None)),
    "hardlink-out": tar_of(("h", "hard", "../etc/passwd")),
    "hardlink-abs": tar_of(("h", "hard", "/etc/passwd")),
    "char-device": tar_of(("null", "chr", None)),
    "block-device": tar_of(("disk", "blk", None)),
    "fifo": tar_of(("pipe", "fifo", None)),
    "pax-dotdot": tar_of(("a" * 120 + "/../../x", "file", None), fmt=tarfile.PAX_FORMAT),
    "gnu-long-dotdot": tar_of(("../" + "b" * 150, "file", None)),
    "garbage": b"not a tar at all" * 64,
    "truncated": tar_of(("ok", "file", b"y" * 5000))[:1024],
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_archives_in_are_refused(client, sid, name):
    r = archive_put(client, sid, f"/tmp/target-{name}", HOSTILE[name])
    assert_error(r, 400, "unsafe_archive")
    out = client.exec(sid, cmd=f"ls -d /tmp/target-{name} /tmp/escape /escape /tmp/x /x 2>/dev/null")
    assert out["stdout"] == "", f"a refused archive changed something: {out}"


def test_an_upload_over_the_limit(client, sid, daemon):
    big = tar_of(("f", "file", b"z" * (65 << 20)))
    r = archive_put(client, sid, "/tmp/big", big)
    assert r.status == 413, r.describe()


def test_archive_paths_and_errors(client, sid):
    assert_error(archive_get(client, sid, "relative"), 400)
    assert_error(archive_get(client, sid, "/nonexistent"), 404, "not_found")
    client.sh(sid, "echo f > /tmp/afile")
    assert_error(archive_put(client, sid, "/tmp/afile/sub", tar_of(("x", "file", None))), (404, 409))
    r = archive_put(client, sid, "/usr/nope", tar_of(("x", "file", None)))
    assert r.status in (403, 409), r.describe()


# Stops a child of the agent (its name is PID 1's) that lives on: the archive child, not a
# process the agent is about to exec.
STOPPER = ("echo $$ > /tmp/stopper; c=$(cat /proc/1/comm); while :; do for p in /proc/[0-9]*; do "
           "n=${p#/proc/}; [ \"$n\" != 1 ] && [ \"$(cat $p/comm 2>/dev/null)\" = \"$c\" ] && "
           "sleep 0.3 && [ \"$(cat $p/comm 2>/dev/null)\" = \"$c\" ] && "
           "kill -STOP $n 2>/dev/null && echo $n > /tmp/stopped; done; done")


def test_a_stopped_packer_blocks_nothing(client, daemon):
    """The packing child runs as the sandbox's user, who may stop it: the agent polls its pipe
    rather than wait on it, so the sandbox keeps answering; continued, the archive comes."""
    import threading
    import time
    sid = client.create()["id"]
    try:
        client.sh(sid, "mkdir -p /tmp/big && for i in $(seq 100); do head -c 2000000 /dev/urandom > /tmp/big/f$i; done",
                  timeout=120)
        ev = client.start_process(sid, cmd=STOPPER, tag="stopper")
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("r", daemon.client(timeout=60).get(
            f"/v1/sandboxes/{sid}/files/archive?path=/tmp/big")))
        t.start()
        deadline = time.monotonic() + 10
        stopped = ""
        while time.monotonic() < deadline and not stopped:
            stopped = client.exec(sid, cmd="cat /tmp/stopped 2>/dev/null")["stdout"].strip()
        assert stopped, "the packer was never seen"
        t0 = time.monotonic()
        assert client.sh(sid, "echo alive") == "alive\n"
        assert time.monotonic() - t0 < 5, "the agent waited on a stopped packer"
        client.exec(sid, cmd="kill -9 $(cat /tmp/stopper); kill -CONT " + stopped, user="root")
        t.join(60)
        assert out["r"].status == 200, out["r"].describe()
        assert len(members_of(out["r"].body)) == 100
        ev.close()
    finally:
        client.destroy(sid, missing_ok=True)


def test_a_stopped_unpacker_blocks_nothing(client, daemon):
    """The same for the unpacking child: stopped mid-upload, the sandbox keeps answering;
    continued, the upload ends."""
    import threading
    import time
    sid = client.create()["id"]
    try:
        ev = client.start_process(sid, cmd=STOPPER, tag="stopper")
        n = 30000  # many small files: slow enough to unpack to be caught
        body = tar_of(*[(f"d{i % 100}/f{i}", "file", b"x" * 1000) for i in range(n)])
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("r", daemon.client(timeout=60).put(
            f"/v1/sandboxes/{sid}/files/archive?path=/tmp/up", body)))
        t.start()
        deadline = time.monotonic() + 10
        stopped = ""
        while time.monotonic() < deadline and not stopped:
            stopped = client.exec(sid, cmd="cat /tmp/stopped 2>/dev/null")["stdout"].strip()
        assert stopped, "the unpacker was never seen"
        time.sleep(0.5)
        t0 = time.monotonic()
        assert client.sh(sid, "echo alive") == "alive\n"
        assert time.monotonic() - t0 < 5, "the agent waited on a stopped unpacker"
        assert t.is_alive(), "the upload ended while its unpacker was stopped"
        client.exec(sid, cmd="kill -9 $(cat /tmp/stopper); kill -CONT " + stopped, user="root")
        t.join(60)
        assert out["r"].status == 200, out["r"].describe()
        assert out["r"].json()["entries"] == n
        ev.close()
    finally:
        client.destroy(sid, missing_ok=True)
