"""The scratch's project-quota backend (src/runtime/scratch.c, prjquota.c): with the scratch
directory on an xfs mounted `-o prjquota`, a sandbox's disk is the directory q<slot> with a
project id of its own and a hard block limit of --disk, no loop device.

Each test makes its own xfs image and mounts it under tmp_path. Skips where mkfs.xfs is
missing (apt-get install xfsprogs) or the kernel has no XFS quota support (CONFIG_XFS_QUOTA:
the mount is refused)."""

import os
import shutil
import struct
import subprocess

import pytest

from conftest import requires_root, wait_until

pytestmark = [requires_root]

PY = "/usr/bin/python3"

FILL = r"""
import errno, os, sys
n = 0
try:
    with open(sys.argv[1], "wb") as f:
        while n < (1 << 31):
            n += f.write(b"x" * (1 << 20))
        f.flush(); os.fsync(f.fileno())
    print("NOERROR", n)
except OSError as e:
    print(errno.errorcode.get(e.errno, e.errno), n)
os.unlink(sys.argv[1])
print("alive")
"""

# FS_IOC_FSGETXATTR / FS_IOC_FSSETXATTR of the sandbox's `/`, project id changed: the kernel
# lets only the initial user namespace do it.
SETPROJ = r"""
import errno, fcntl, os, struct
GET, SET = 0x801c581f, 0x401c5820
fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
buf = bytearray(28)
fcntl.ioctl(fd, GET, buf)
xflags, extsize, nextents, projid = struct.unpack_from("IIII", buf)
print("projid", projid)
struct.pack_into("I", buf, 12, 1)
try:
    fcntl.ioctl(fd, SET, bytes(buf))
    print("CHANGED")
except OSError as e:
    print(errno.errorcode.get(e.errno, e.errno))
"""


def mounts_under(d):
    with open("/proc/self/mountinfo") as f:
        return [l for l in f if f" {d}/" in l]


def make_xfs(tmp_path, opts):
    """A 1 GiB xfs mounted at tmp_path/xfs with @opts; the mount's result."""
    if not shutil.which("mkfs.xfs"):
        pytest.skip("needs mkfs.xfs (apt-get install xfsprogs)")
    img, mnt = tmp_path / "xfs.img", tmp_path / "xfs"
    mnt.mkdir()
    with open(img, "wb") as f:
        f.truncate(1 << 30)
    subprocess.run(["mkfs.xfs", "-q", str(img)], check=True, timeout=60)
    return mnt, subprocess.run(["mount", "-o", opts, str(img), str(mnt)], capture_output=True,
                               text=True, timeout=60)


def test_without_prjquota_the_disk_is_an_image(cordon, tmp_path):
    """The probe's other answer: an xfs without project quotas gives loop-ext4 disks."""
    mnt, r = make_xfs(tmp_path, "loop")
    if r.returncode != 0:
        pytest.skip(f"the kernel cannot mount xfs: {r.stderr.strip()}")
    try:
        scratch = mnt / "scratch"
        scratch.mkdir()
        env = dict(os.environ, CORDON_SCRATCH_DIR=str(scratch))
        env.pop("CORDON_SCRATCH", None)
        r = cordon.run(["stat", "-f", "-c", "%T", "/"], ["--disk", "64M"], env=env)
        assert r.returncode == 0, r.describe()
        assert r.out.strip() == "ext2/ext3", r.out
        assert wait_until(lambda: all(n.startswith("golden-") for n in os.listdir(scratch)), 10), \
            os.listdir(scratch)
    finally:
        subprocess.run(["umount", str(mnt)], timeout=60)


@pytest.fixture
def xfs_scratch(tmp_path):
    """A 1 GiB xfs with project quotas, mounted at tmp_path/xfs; its scratch/ directory."""
    mnt, r = make_xfs(tmp_path, "loop,prjquota")
    if r.returncode != 0:
        pytest.skip(f"the kernel cannot mount xfs with prjquota (no XFS quota support?): "
                    f"{r.stderr.strip()}")
    scratch = mnt / "scratch"
    scratch.mkdir()
    env = dict(os.environ, CORDON_SCRATCH_DIR=str(scratch))
    env.pop("CORDON_SCRATCH", None)
    try:
        yield env, scratch
        # Teardown removed the disk's directory (and a CORDON_SCRATCH=loop run left its golden
        # image only).
        assert wait_until(lambda: all(n.startswith("golden-") for n in os.listdir(scratch)) and not mounts_under(scratch), 10), \
            f"left behind: {os.listdir(scratch)}, mounts {mounts_under(scratch)}"
        q = subprocess.run(["xfs_quota", "-x", "-c", "report -p -b -N", str(mnt)],
                           capture_output=True, text=True, timeout=30).stdout
        used = [l for l in q.splitlines() if l.strip() and not l.startswith("#0 ")]
        assert all(l.split()[1] == "0" and l.split()[3] == "0" for l in used), q
    finally:
        subprocess.run(["umount", str(mnt)], timeout=60)


def test_disk_is_a_directory_with_a_project_quota(cordon, xfs_scratch):
    env, _ = xfs_scratch
    r = cordon.run(["sh", "-c", "stat -f -c %T /; df -k / | tail -1"], ["--disk", "64M"], env=env)
    assert r.returncode == 0, r.describe()
    fstype, df = r.out.splitlines()
    assert fstype == "xfs", r.out
    # xfs reports a project's limit as the size of a directory of that project.
    assert int(df.split()[1]) == 64 * 1024, df


@pytest.mark.parametrize("where,user", [("/filler", "root"), ("/tmp/filler", "user"),
                                        ("/usr/filler", "root")])
def test_full_disk_is_enospc_and_the_sandbox_lives(cordon, xfs_scratch, where, user):
    env, _ = xfs_scratch
    r = cordon.run([PY, "-c", FILL, where], ["--disk", "64M", "--memory", "256M", "--user", user],
                   env=env, json_result=True)
    assert r.returncode == 0, r.describe()
    words = r.out.split()
    assert words[0] == "ENOSPC", r.out  # xfs answers a project's hard limit with ENOSPC
    assert 56 << 20 <= int(words[1]) <= 64 << 20, r.out
    assert words[-1] == "alive"
    assert not r.result["oom_killed"], r.result


def test_root_inside_cannot_leave_its_project(cordon, xfs_scratch):
    env, _ = xfs_scratch
    r = cordon.run([PY, "-c", SETPROJ], ["--disk", "64M", "--user", "root"], env=env)
    assert r.returncode == 0, r.describe()
    lines = r.out.split("\n")
    assert lines[0].startswith("projid ") and int(lines[0].split()[1]) >= 0x434f0000, r.out
    assert lines[1] in ("EINVAL", "EPERM", "ENOTTY"), r.out


def test_loop_on_request(cordon, xfs_scratch):
    env, _ = xfs_scratch
    r = cordon.run(["stat", "-f", "-c", "%T", "/"], ["--disk", "64M"],
                   env=dict(env, CORDON_SCRATCH="loop"))
    assert r.returncode == 0, r.describe()
    assert r.out.strip() == "ext2/ext3", r.out  # stat's name for ext4


def test_inodes_are_bounded_too(cordon, xfs_scratch):
    """An inode per 4 KiB of --disk (and 64): empty files cannot fill the host's inodes."""
    env, _ = xfs_scratch
    code = ("import errno, os\nn = 0\ntry:\n    while n < 100000:\n"
            "        open(f'/tmp/e{n}', 'w').close(); n += 1\n"
            "except OSError as e:\n    print(errno.errorcode[e.errno], n)\n")
    r = cordon.run([PY, "-c", code], ["--disk", "32M"], env=env)
    assert r.returncode == 0, r.describe()
    err, n = r.out.split()
    assert err == "ENOSPC" and 8000 < int(n) < 8256, r.out
