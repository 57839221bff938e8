"""files.upload_dir() and files.download_dir() against a real cordond: a tree with symlinks
and odd names both ways, and what comes out of a sandbox checked before anything is written
(the extractor's rules also tested alone, on archives cordond would never send)."""

import io
import os
import tarfile

import pytest

from cordon import Sandbox, UnsafeArchive
from cordon.files import _check_members
from test_sdk import CORDOND, Daemon

_needs_daemon = [
    pytest.mark.skipif(os.geteuid() != 0, reason="cordond needs root"),
    pytest.mark.skipif(not CORDOND.exists(), reason=f"{CORDOND} is not built"),
]


@pytest.fixture(scope="module")
def daemon():
    d = Daemon()
    yield d
    d.stop()


def make_tree(root):
    for i in range(1500):
        d = os.path.join(root, f"dir {i % 15}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f\u00e9{i}"), "wb") as f:
            f.write(os.urandom(i % 300))
    os.makedirs(os.path.join(root, "a", "b", "empty"))
    os.symlink("../dir 1", os.path.join(root, "a", "up"))
    os.symlink("missing", os.path.join(root, "dangling"))
    with open(os.path.join(root, "n" * 180), "w") as f:
        f.write("long name")


def snapshot(root):
    out = {}
    for dp, dns, fns in os.walk(root):
        for n in dns + fns:
            p = os.path.join(dp, n)
            rel = os.path.relpath(p, root)
            out[rel] = os.readlink(p) if os.path.islink(p) else None if os.path.isdir(p) \
                else open(p, "rb").read()
    return out


@pytest.mark.skipif(os.geteuid() != 0 or not CORDOND.exists(), reason="cordond needs root")
def test_dirs_both_ways(daemon, tmp_path):
    src = tmp_path / "src"
    make_tree(str(src))
    with Sandbox.create(socket=daemon.socket) as sbx:
        res = sbx.files.upload_dir(src, "/home/user/tree")
        assert res["entries"] == len(snapshot(str(src)))
        assert sbx.files.read("/home/user/tree/a/up/f\u00e91") == open(src / "dir 1" / "f\u00e91", "rb").read()
        n = sbx.files.download_dir("/home/user/tree", tmp_path / "back")
        assert n == res["entries"]
        assert snapshot(str(tmp_path / "back")) == snapshot(str(src))
        sbx.exec("mkdir /tmp/venv && ln -s /usr/bin/python3 /tmp/venv/python")
        assert sbx.files.download_dir("/tmp/venv", tmp_path / "venv") == 1
        assert os.readlink(tmp_path / "venv" / "python") == "/usr/bin/python3"
        sbx.exec("ln -s ../../../etc/passwd /home/user/tree/evil")
        with pytest.raises(UnsafeArchive):
            sbx.files.download_dir("/home/user/tree", tmp_path / "refused")
        assert not (tmp_path / "refused").exists()
        os.symlink("/etc", src / "abs")
        with pytest.raises(UnsafeArchive):
            sbx.files.upload_dir(src, "/home/user/other")
        assert not sbx.files.exists("/home/user/other")


def tar_with(*infos):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for ti in infos:
            t.addfile(ti, io.BytesIO(b"x" * ti.size) if ti.isreg() else None)
    buf.seek(0)
    return tarfile.open(fileobj=buf)


def info(name, type=tarfile.REGTYPE, link="", size=1):
    ti = tarfile.TarInfo(name)
    ti.type, ti.linkname, ti.size = type, link, size if type == tarfile.REGTYPE else 0
    return ti


@pytest.mark.parametrize("ti", [
    info("../x"), info("/abs"), info("a/../../x"),
    info("a/l", tarfile.SYMTYPE, "../../etc"), info("h", tarfile.LNKTYPE, "../../etc/passwd"),
    info("dev", tarfile.CHRTYPE), info("fifo", tarfile.FIFOTYPE), info("blk", tarfile.BLKTYPE),
])
def test_the_extractor_refuses(ti):
    with pytest.raises(UnsafeArchive):
        _check_members(tar_with(ti), 1 << 30)


def test_the_extractor_caps_the_size():
    from cordon import PayloadTooLarge
    with pytest.raises(PayloadTooLarge):
        _check_members(tar_with(info("a", size=10), info("b", size=10)), 15)


def test_the_extractor_takes_safe_links():
    ms = _check_members(tar_with(info("./a/"), info("a/l", tarfile.SYMTYPE, "../b"),
                                 info("b"), info("h", tarfile.LNKTYPE, "./b")), 100)
    assert [m.name for m in ms] == ["a", "a/l", "b", "h"]


def test_the_extractor_keeps_absolute_links_and_follows_none(tmp_path):
    """An absolute symlink is the sandbox's own path: written as it is; an entry through it
    is never written where it points."""
    from cordon.files import _extract
    canary = tmp_path / "canary"
    canary.mkdir()
    tar = tar_with(info("l", tarfile.SYMTYPE, str(canary)), info("l/x"))
    ms = _check_members(tar, 100)
    out = tmp_path / "out"
    out.mkdir()
    root = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        _extract(tar, ms[0], root)
        assert os.readlink(out / "l") == str(canary)
        with pytest.raises(OSError):
            _extract(tar, ms[1], root)
    finally:
        os.close(root)
    assert os.listdir(canary) == []
