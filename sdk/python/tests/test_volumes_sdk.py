"""cordon.Volumes and Sandbox.create(volumes=...) against a real cordond: create, list, get,
data kept across sandboxes, read-only mounts, one writer at a time, delete in use, the typed
errors of bad input."""

import os
import time

import pytest

from cordon import (InvalidField, NotFound, ReadOnly, Sandbox, VolumeExists, VolumeInUse,
                    Volumes)
from test_sdk import CORDOND, Daemon

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="cordond needs root (loop devices)"),
    pytest.mark.skipif(not CORDOND.exists(), reason=f"{CORDOND} is not built"),
]


@pytest.fixture(scope="module")
def daemon():
    d = Daemon()
    yield d
    d.stop()


def released(vols, name, timeout=10.0):
    deadline = time.monotonic() + timeout
    while vols.get(name)["in_use"] and time.monotonic() < deadline:
        time.sleep(0.05)
    return not vols.get(name)["in_use"]


def test_volumes_round_trip(daemon):
    vols = Volumes(socket=daemon.socket)
    v = vols.create("sdkdata", size_mb=32)
    assert v["name"] == "sdkdata" and v["size_mb"] == 32 and not v["in_use"]
    assert "sdkdata" in [x["name"] for x in vols.list()]
    with pytest.raises(VolumeExists):
        vols.create("sdkdata", size_mb=32)
    with Sandbox.create(socket=daemon.socket, volumes=["sdkdata:/data"]) as sbx:
        assert sbx.info().volumes == [{"name": "sdkdata", "path": "/data", "read_only": False}]
        sbx.files.write("/data/kept.txt", b"kept")
        with pytest.raises(VolumeInUse):
            Sandbox.create(socket=daemon.socket, volumes=["sdkdata:/other"])
        with pytest.raises(VolumeInUse):
            vols.delete("sdkdata")
        with Sandbox.create(socket=daemon.socket,
                            volumes=[{"name": "sdkdata", "path": "/ro", "read_only": True}]) as ro:
            assert ro.files.read("/ro/kept.txt") == b"kept"
            with pytest.raises(ReadOnly):
                ro.files.write("/ro/nope", b"x")
            assert len(vols.get("sdkdata")["attachments"]) == 2
    assert released(vols, "sdkdata")
    with Sandbox.create(socket=daemon.socket, volumes=["sdkdata:/again"]) as sbx:
        assert sbx.files.read("/again/kept.txt") == b"kept"
    assert released(vols, "sdkdata")
    vols.delete("sdkdata")
    with pytest.raises(NotFound):
        vols.get("sdkdata")


@pytest.mark.parametrize("name", ["Bad", "../x", "", "x" * 64, ".dot"])
def test_bad_names(daemon, name):
    with pytest.raises(InvalidField):
        Volumes(socket=daemon.socket).create(name, size_mb=32)


@pytest.mark.parametrize("path", ["/proc/x", "/sys", "/dev/x", "rel", "/a/../b", "/"])
def test_bad_mount_paths(daemon, path):
    vols = Volumes(socket=daemon.socket)
    if not any(v["name"] == "paths" for v in vols.list()):
        vols.create("paths", size_mb=16)
    with pytest.raises(InvalidField):
        Sandbox.create(socket=daemon.socket, volumes=[{"name": "paths", "path": path}])
    assert not vols.get("paths")["in_use"]


def test_mount_string_forms():
    from cordon.sandbox import _volume_mount
    assert _volume_mount("a:/x") == {"name": "a", "path": "/x", "read_only": False}
    assert _volume_mount("a:/x:ro") == {"name": "a", "path": "/x", "read_only": True}
    for bad in ("a", ":/x", "a:"):
        with pytest.raises(ValueError):
            _volume_mount(bad)
