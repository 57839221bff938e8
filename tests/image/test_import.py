"""Image import (src/image/oci.c) against archives made here with tarfile: a normal OCI layout
and `docker save` archive, and a corpus of hostile layers, each refused or neutralised with
nothing written outside the target. Drives tests/unit/image/oci-tool ($OCI_TOOL). Needs root
(ownership is kept as uid numbers)."""
import gzip
import hashlib
import io
import json
import os
import stat
import subprocess
import tarfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.environ.get("OCI_TOOL") or os.path.join(HERE, "../../build/tests/unit/image/oci-tool")

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown to image uids)"),
    pytest.mark.skipif(not os.path.exists(TOOL), reason="oci-tool not built: set OCI_TOOL"),
]

# ---- archive makers ----

def ti(name, kind=tarfile.REGTYPE, data=b"", mode=0o644, link="", uid=0, gid=0, size=None):
    t = tarfile.TarInfo(name)
    t.type, t.mode, t.linkname, t.uid, t.gid, t.mtime = kind, mode, link, uid, gid, 1700000000
    t.size = len(data) if size is None else size
    if kind == tarfile.DIRTYPE and mode == 0o644:
        t.mode = 0o755
    return t, data


def tar_bytes(entries):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for t, data in entries:
            tf.addfile(t, io.BytesIO(data) if t.isreg() and not t.islnk() else None)
    return buf.getvalue()


def sha(b):
    return hashlib.sha256(b).hexdigest()


def add(tf, name, data):
    t = tarfile.TarInfo(name)
    t.size = len(data)
    tf.addfile(t, io.BytesIO(data))


LAYER1 = [
    ti("etc/", tarfile.DIRTYPE),
    ti("etc/hello", data=b"hi\n"),
    ti("usr/", tarfile.DIRTYPE), ti("usr/bin/", tarfile.DIRTYPE),
    ti("usr/bin/tool", data=b"#!/bin/sh\n", mode=0o755, uid=1000, gid=1000),
    ti("usr/bin/tool2", tarfile.LNKTYPE, link="usr/bin/tool"),
    ti("bin", tarfile.SYMTYPE, link="usr/bin"),
    ti("gone", data=b"x"),
    ti("opq/", tarfile.DIRTYPE), ti("opq/old", data=b"old"),
]
LAYER2 = [
    ti(".wh.gone"),
    ti("opq/", tarfile.DIRTYPE), ti("opq/.wh..wh..opq"), ti("opq/new", data=b"new"),
    ti("etc/hello", data=b"hello2\n", mode=0o600),
]
EXPECTED = {
    "etc": ("d", 0o755), "etc/hello": ("f", 0o600, b"hello2\n"),
    "usr": ("d", 0o755), "usr/bin": ("d", 0o755),
    "usr/bin/tool": ("f", 0o755, b"#!/bin/sh\n"), "usr/bin/tool2": ("f", 0o755, b"#!/bin/sh\n"),
    "bin": ("l", "usr/bin"), "opq": ("d", 0o755), "opq/new": ("f", 0o644, b"new"),
}
CONFIG = {"architecture": "amd64", "os": "linux",
          "config": {"Env": ["PATH=/usr/bin", "A=b"], "Cmd": ["/bin/sh"], "WorkingDir": "/w",
                     "User": "1000"}}


def oci_archive(path, corrupt=False):
    l1 = gzip.compress(tar_bytes(LAYER1))
    l2 = tar_bytes(LAYER2)
    config = json.dumps({**CONFIG, "rootfs": {"type": "layers",
                                              "diff_ids": ["sha256:" + sha(tar_bytes(LAYER1)),
                                                           "sha256:" + sha(l2)]}}).encode()
    manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": "sha256:" + sha(config), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": "sha256:" + sha(l1), "size": len(l1)},
                   {"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": "sha256:" + sha(l2), "size": len(l2)}]}).encode()
    index = json.dumps({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": "sha256:" + sha(manifest), "size": len(manifest)}]}).encode()
    with tarfile.open(path, "w") as tf:
        add(tf, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add(tf, "index.json", index)
        for blob in (config, manifest, l1):
            add(tf, "blobs/sha256/" + sha(blob), blob)
        add(tf, "blobs/sha256/" + sha(l2), l2 + (b"\0" * 512 if corrupt else b""))


def docker_archive(path):
    l1, l2 = tar_bytes(LAYER1), tar_bytes(LAYER2)
    config = json.dumps({**CONFIG, "rootfs": {"type": "layers",
                         "diff_ids": ["sha256:" + sha(l1), "sha256:" + sha(l2)]}}).encode()
    cname = sha(config) + ".json"
    manifest = json.dumps([{"Config": cname, "RepoTags": ["t:latest"],
                            "Layers": ["aaa/layer.tar", "bbb/layer.tar"]}]).encode()
    with tarfile.open(path, "w") as tf:
        add(tf, "manifest.json", manifest)
        add(tf, cname, config)
        add(tf, "aaa/layer.tar", l1)
        add(tf, "bbb/layer.tar", l2)

# ---- what is where ----

def tree(root):
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("l", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("d", stat.S_IMODE(st.st_mode))
            else:
                out[rel] = ("f", stat.S_IMODE(st.st_mode), open(p, "rb").read())
    return out


HOST_FILES = ["/etc/passwd", "/etc/shadow", "/etc/hostname"]


def host_state():
    return {p: (os.stat(p).st_mtime_ns, sha(open(p, "rb").read())) for p in HOST_FILES
            if os.path.exists(p)}


@pytest.fixture
def env(tmp_path):
    target = tmp_path / "target"
    canary = tmp_path / "canary"
    target.mkdir()
    canary.mkdir()
    (canary / "file").write_bytes(b"canary")
    (tmp_path / "outside").write_bytes(b"outside")
    before = (tree(tmp_path / "canary"), sorted(os.listdir(tmp_path)), host_state())
    yield tmp_path, target
    assert (tree(tmp_path / "canary"), sorted(os.listdir(tmp_path)), host_state()) == before
    assert (tmp_path / "outside").read_bytes() == b"outside"
    for p in ["/etc/x", "/abs", "/x", os.path.join(str(tmp_path), "x")]:
        assert not os.path.exists(p), p


def run(*args, stdin=None):
    return subprocess.run([TOOL, *map(str, args)], input=stdin, capture_output=True, timeout=300)


def apply(tmp, target, entries, max_bytes=1 << 30):
    layer = tmp / "layer.tar"
    layer.write_bytes(tar_bytes(entries))
    return run("apply", target, layer, max_bytes)

# ---- normal images ----

def test_oci_two_layers(env):
    tmp, target = env
    oci_archive(tmp / "img.tar")
    r = run("import", target, tmp / "img.tar")
    assert r.returncode == 0, r.stderr
    assert tree(target) == EXPECTED
    assert os.stat(target / "usr/bin/tool").st_ino == os.stat(target / "usr/bin/tool2").st_ino
    assert os.stat(target / "usr/bin/tool").st_uid == 1000
    assert r.stdout.decode().splitlines() == ["env=PATH=/usr/bin", "env=A=b", "cmd=/bin/sh",
                                              "workdir=/w", "user=1000"]
    os.unlink(tmp / "img.tar")


def test_docker_save_two_layers(env):
    tmp, target = env
    docker_archive(tmp / "img.tar")
    r = run("import", target, tmp / "img.tar")
    assert r.returncode == 0, r.stderr
    assert tree(target) == EXPECTED
    os.unlink(tmp / "img.tar")


def test_import_needs_empty_target(env):
    tmp, target = env
    oci_archive(tmp / "img.tar")
    (target / "x").write_bytes(b"")
    r = run("import", target, tmp / "img.tar")
    assert r.returncode == 1 and b"not empty" in r.stderr
    os.unlink(tmp / "img.tar")
    os.unlink(target / "x")


def test_blob_digest_mismatch(env):
    tmp, target = env
    oci_archive(tmp / "img.tar", corrupt=True)
    r = run("import", target, tmp / "img.tar")
    assert r.returncode == 1 and b"sha256" in r.stderr, r.stderr
    os.unlink(tmp / "img.tar")

# ---- hostile layers ----

def finish(tmp):
    os.unlink(tmp / "layer.tar")


def test_dotdot_resolved_inside(env):
    tmp, target = env
    r = apply(tmp, target, [ti("../../etc/x", data=b"x"), ti("a/../../../x", data=b"y")])
    assert r.returncode == 0, r.stderr
    assert tree(target) == {"etc": ("d", 0o755), "etc/x": ("f", 0o644, b"x"), "x": ("f", 0o644, b"y")}
    finish(tmp)


def test_absolute_resolved_inside(env):
    tmp, target = env
    r = apply(tmp, target, [ti("/abs/path", data=b"x")])
    assert r.returncode == 0, r.stderr
    assert (target / "abs/path").read_bytes() == b"x"
    finish(tmp)


@pytest.mark.parametrize("link", ["/etc", "../../..", str("/"), "."])
def test_no_write_through_symlink(env, link):
    tmp, target = env
    r = apply(tmp, target, [ti("a", tarfile.SYMTYPE, link=link), ti("a/passwd", data=b"pwned")])
    assert r.returncode == 1 and b"symlink" in r.stderr, r.stderr
    assert tree(target) == {"a": ("l", link)}
    finish(tmp)


def test_symlink_to_canary_then_file_replaces_link(env):
    tmp, target = env
    r = apply(tmp, target, [ti("f", tarfile.SYMTYPE, link=str(tmp / "canary/file")),
                            ti("f", data=b"mine")])
    assert r.returncode == 0, r.stderr
    assert tree(target) == {"f": ("f", 0o644, b"mine")}
    finish(tmp)


@pytest.mark.parametrize("link", ["/etc/shadow", "../outside", "../canary/file"])
def test_hardlink_out_refused(env, link):
    tmp, target = env
    r = apply(tmp, target, [ti("h", tarfile.LNKTYPE, link=link)])
    assert r.returncode == 1 and b"not inside" in r.stderr, r.stderr
    assert tree(target) == {}
    finish(tmp)


def test_hardlink_then_file_does_not_write_through(env):
    tmp, target = env
    r = apply(tmp, target, [ti("p", data=b"orig"), ti("h", tarfile.LNKTYPE, link="p"),
                            ti("h", data=b"new")])
    assert r.returncode == 0, r.stderr
    assert tree(target) == {"p": ("f", 0o644, b"orig"), "h": ("f", 0o644, b"new")}
    finish(tmp)


def test_devices_fifos_skipped(env):
    tmp, target = env
    chr_ = ti("dev/null2", tarfile.CHRTYPE, mode=0o666)
    chr_[0].devmajor, chr_[0].devminor = 1, 3
    blk = ti("sda", tarfile.BLKTYPE, mode=0o666)
    blk[0].devmajor, blk[0].devminor = 8, 0
    r = apply(tmp, target, [chr_, blk, ti("fifo", tarfile.FIFOTYPE), ti("ok", data=b"1")])
    assert r.returncode == 0, r.stderr
    assert tree(target) == {"ok": ("f", 0o644, b"1")}
    finish(tmp)


def test_setuid_sticky_stripped_ids_capped(env):
    tmp, target = env
    r = apply(tmp, target, [ti("su", data=b"x", mode=0o6755), ti("st/", tarfile.DIRTYPE, mode=0o1777),
                            ti("big", data=b"", uid=70000, gid=1 << 31)])
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(os.stat(target / "su").st_mode) == 0o755
    assert stat.S_IMODE(os.stat(target / "st").st_mode) == 0o777
    st = os.stat(target / "big")
    assert (st.st_uid, st.st_gid) == (65534, 65534)
    finish(tmp)


def test_huge_declared_size_refused(env):
    tmp, target = env
    t, _ = ti("huge", size=10 << 30)
    (tmp / "layer.tar").write_bytes(t.tobuf(tarfile.PAX_FORMAT) + b"\0" * 4096)
    r = run("apply", target, tmp / "layer.tar", 1 << 30)
    assert r.returncode == 1 and b"exceed" in r.stderr, r.stderr
    assert tree(target) == {}
    finish(tmp)


def test_byte_budget_over_many_files(env):
    tmp, target = env
    r = apply(tmp, target, [ti("f%d" % i, data=b"x" * 1000) for i in range(5)], max_bytes=4500)
    assert r.returncode == 1 and b"exceed" in r.stderr
    finish(tmp)


def test_tar_bomb_entry_limit(env):
    tmp, target = env
    header = ti("d/", tarfile.DIRTYPE)[0].tobuf(tarfile.USTAR_FORMAT)
    p = subprocess.Popen([TOOL, "apply", target, "-"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    chunk = header * 4096
    try:
        for _ in range((2 << 20) // 4096):
            p.stdin.write(chunk)
    except BrokenPipeError:
        pass
    out, errs = p.communicate(timeout=300)
    assert p.returncode == 1 and b"entries" in errs, errs
    assert tree(target) == {"d": ("d", 0o755)}


def test_duplicates_replace_cleanly(env):
    tmp, target = env
    r = apply(tmp, target, [ti("x", data=b"file"), ti("x/", tarfile.DIRTYPE), ti("x/y", data=b"y"),
                            ti("z/", tarfile.DIRTYPE), ti("z/inner", data=b"i"), ti("z", data=b"z"),
                            ti("w", data=b"1"), ti("w", data=b"22")])
    assert r.returncode == 0, r.stderr
    assert tree(target) == {"x": ("d", 0o755), "x/y": ("f", 0o644, b"y"),
                            "z": ("f", 0o644, b"z"), "w": ("f", 0o644, b"22")}
    finish(tmp)


@pytest.mark.parametrize("name", [".wh..", "sub/.wh..", ".wh..."[:-1] + "."])
def test_whiteout_of_dotdot_refused(env, name):
    tmp, target = env
    r = apply(tmp, target, [ti("sub/", tarfile.DIRTYPE), ti("sub/keep", data=b"k"), ti(name)])
    assert r.returncode == 1 and b"whiteout" in r.stderr, r.stderr
    assert "sub/keep" in tree(target)
    finish(tmp)


def test_whiteout_through_symlink_refused(env):
    tmp, target = env
    r = apply(tmp, target, [ti("l", tarfile.SYMTYPE, link=str(tmp / "canary")), ti("l/.wh.file"),
                            ti("l/.wh..wh..opq")])
    assert r.returncode == 1 and b"symlink" in r.stderr, r.stderr
    finish(tmp)


def test_opaque_through_symlink_refused(env):
    tmp, target = env
    r = apply(tmp, target, [ti("l", tarfile.SYMTYPE, link=str(tmp / "canary")), ti("l/.wh..wh..opq")])
    assert r.returncode == 1 and b"symlink" in r.stderr, r.stderr
    finish(tmp)


def test_garbage_refused(env):
    tmp, target = env
    (tmp / "layer.tar").write_bytes(b"\x1f\x8b" + os.urandom(2000))
    r = run("apply", target, tmp / "layer.tar")
    assert r.returncode == 1
    finish(tmp)
