"""A sandbox's disk (`cordon run`): `/`, /tmp and the home on a per-sandbox ext4 scratch on a
loop device, bounded by --disk, the template a read-only lower of an overlay.

Each test uses its own scratch directory (CORDON_SCRATCH_DIR under tmp_path), so what it
counts (loop devices backed by it, mounts under it, files in it) is its own."""

import hashlib
import os
import pathlib
import signal
import subprocess
import time

import pytest

from conftest import cgroups_available, procs_matching, requires_root, wait_until

pytestmark = [requires_root, pytest.mark.usefixtures("no_leftovers")]

PY = "/usr/bin/python3"

# Writes until the disk says no; prints the errno's name and how much went in.
FILL = r"""
import errno, os, sys
path = sys.argv[1]
n = 0
buf = b"x" * (1 << 20)
try:
    with open(path, "wb") as f:
        while True:
            n += f.write(buf)
            if n > (1 << 31):
                break
        f.flush(); os.fsync(f.fileno())
    print("NOERROR", n)
except OSError as e:
    print(errno.errorcode.get(e.errno, e.errno), n)
os.unlink(path)
print("alive")
"""


def scratch_env(tmp_path):
    d = tmp_path / "scratch"
    d.mkdir(exist_ok=True)
    env = dict(os.environ, CORDON_SCRATCH_DIR=str(d))
    env.pop("CORDON_SCRATCH", None)
    return env, d


def loops_backed_by(d):
    """Loop devices whose backing file is in @d (deleted or not)."""
    out = []
    for name in os.listdir("/sys/block"):
        bf = f"/sys/block/{name}/loop/backing_file"
        try:
            with open(bf) as f:
                if f.read().startswith(str(d) + "/"):
                    out.append(name)
        except OSError:
            pass
    return out


def mounts_under(d):
    with open("/proc/self/mountinfo") as f:
        return [l for l in f if f" {d}" in l]


STAGE = "/run/cordon/stage"  # where a scratch is attached while it is laid out (scratch.c)


def no_traces(d):
    return not loops_backed_by(d) and not mounts_under(d) and not mounts_under(STAGE) and \
        all(n.startswith("golden-") for n in os.listdir(d))


def tree_digest(root):
    h = hashlib.sha256()
    for dirpath, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(dirs + files):
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            h.update(f"{p}:{st.st_mode}:{st.st_uid}:{st.st_gid}:{st.st_size}:{st.st_mtime_ns}".encode())
            if os.path.islink(p):
                h.update(os.readlink(p).encode())
            elif os.path.isfile(p):
                with open(p, "rb") as f:
                    h.update(f.read())
    return h.hexdigest()


@pytest.fixture
def disk(tmp_path):
    env, d = scratch_env(tmp_path)
    yield env, d
    assert wait_until(lambda: no_traces(d), 10), \
        f"left behind: loops {loops_backed_by(d)}, mounts {mounts_under(d) + mounts_under(STAGE)}, " \
        f"files {os.listdir(d)}"


def test_root_is_a_disk_of_its_own(cordon, disk):
    env, _ = disk
    r = cordon.run(["sh", "-c", "stat -f -c %T /; df -k / | tail -1"], ["--disk", "256M"], env=env)
    assert r.returncode == 0, r.describe()
    fstype, df = r.out.splitlines()
    assert fstype == "ext2/ext3", r.out  # stat's name for ext4
    size_k = int(df.split()[1])
    assert 200 * 1024 < size_k <= 256 * 1024, df


@pytest.mark.parametrize("where,user", [("/filler", "root"), ("/tmp/filler", "user"),
                                        ("/home/user/filler", "user"), ("/usr/filler", "root")])
def test_full_disk_is_enospc_and_the_sandbox_lives(cordon, disk, where, user):
    env, _ = disk
    r = cordon.run([PY, "-c", FILL, where], ["--disk", "64M", "--memory", "256M", "--user", user],
                   env=env, json_result=True)
    assert r.returncode == 0, r.describe()
    lines = r.out.split()
    assert lines[0] == "ENOSPC", r.out
    assert 40 << 20 < int(lines[1]) <= 64 << 20, r.out
    assert lines[-1] == "alive"
    assert not r.result["oom_killed"], r.result


@pytest.mark.skipif(not cgroups_available(), reason="needs the memory cgroup controller")
def test_700mb_to_tmp_with_512m_of_memory(cordon, disk):
    """The original bug: a tmpfs /tmp was memory, and this write was OOM-killed."""
    env, _ = disk
    r = cordon.run(["sh", "-c", "dd if=/dev/zero of=/tmp/big bs=1M count=700 status=none && "
                                "ls -l /tmp/big | cut -d' ' -f5"],
                   ["--memory", "512M"], env=env, json_result=True, timeout=120)
    assert r.returncode == 0, r.describe()
    assert r.out.strip() == str(700 << 20)
    assert not r.result["oom_killed"], r.result


def test_disk_has_a_dirty_budget_of_its_own(cordon, disk):
    """The loop device under / writes back once 256 MiB of it is dirty, not at the fsync: a
    large write's writeback overlaps it, and one sandbox cannot fill the host's dirty share."""
    env, _ = disk
    for dev in os.listdir("/sys/block"):  # the settings outlive a device's use: undo them on
        knob = f"/sys/block/{dev}/bdi/strict_limit"  # the free ones, so that ours must set it
        if dev.startswith("loop") and not os.path.exists(f"/sys/block/{dev}/loop") and \
                os.path.exists(knob):
            with open(knob, "w") as f:
                f.write("0")
    p = cordon.popen(["sh", "-c", "stat -c %d /; exec sleep 30"], ["--disk", "256M"], env=env,
                     stdout=subprocess.PIPE, text=True)
    try:
        dev = int(p.stdout.readline())
        bdi = f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/bdi"
        if not os.path.exists(f"{bdi}/strict_limit"):
            pytest.skip("the kernel has no per-device strict dirty limit (6.2+)")
        with open(f"{bdi}/strict_limit") as f:
            strict = f.read().strip()
        with open(f"{bdi}/max_bytes") as f:
            max_bytes = int(f.read())
    finally:
        os.killpg(p.pid, signal.SIGTERM)
        p.communicate(timeout=30)
    assert os.major(dev) == 7, dev  # a loop device
    assert strict == "1"
    assert abs(max_bytes - (256 << 20)) < 1 << 20, max_bytes  # kept as a ratio: rounded


def test_sparse_file_costs_nothing(cordon, disk):
    env, _ = disk
    r = cordon.run(["sh", "-c", "truncate -s 5G /tmp/sparse && du -k /tmp/sparse | cut -f1 && "
                                "df -k / | tail -1"], ["--disk", "8G"], env=env)
    assert r.returncode == 0, r.describe()
    du, df = r.out.splitlines()
    assert int(du) == 0
    assert int(df.split()[2]) < 64 * 1024, df  # used, KiB: the filesystem's own metadata


def test_root_writes_slash_and_usr(cordon, disk):
    env, _ = disk
    script = ("mkdir -p /opt/tool && echo 'echo tool-ran' > /usr/local/bin/tool && "
              "chmod +x /usr/local/bin/tool && tool && chown user /opt/tool && ls -ld /opt/tool")
    r = cordon.run(["sh", "-c", script], ["--user", "root"], env=env)
    assert r.returncode == 0, r.describe()
    assert "tool-ran" in r.out and " user " in r.out
    assert not os.path.exists("/usr/local/bin/tool") or \
        "tool-ran" not in open("/usr/local/bin/tool", errors="replace").read()
    # ...and the next sandbox starts from the template again.
    r = cordon.run(["sh", "-c", "test ! -e /usr/local/bin/tool && test ! -e /opt/tool"], env=env)
    assert r.returncode == 0, r.describe()


def test_user_cannot_write_the_image(cordon, disk):
    env, _ = disk
    r = cordon.run(["sh", "-c", "touch /usr/bin/x 2>&1; mkdir /x 2>&1; echo done"], env=env)
    assert r.returncode == 0, r.describe()
    assert r.out.count("Permission denied") == 2, r.out


def test_rootfs_template_is_untouched(cordon, disk, busybox_rootfs):
    env, _ = disk
    before = tree_digest(busybox_rootfs)
    script = ("echo new > /bin/newfile && rm /bin/sh && chmod 700 /bin/busybox && "
              "mkdir /newdir && echo x > /etc/x && /bin/busybox ls /bin")
    r = cordon.run(["/bin/sh", "-c", script], ["--rootfs", str(busybox_rootfs), "--user", "root"],
                   env=env)
    assert r.returncode == 0, r.describe()
    assert "newfile" in r.out and "sh" not in r.out.split()
    assert tree_digest(busybox_rootfs) == before


def test_two_sandboxes_do_not_see_each_other(cordon, disk, marker):
    env, d = disk
    a = cordon.popen(["sh", "-c", f"echo {marker} > /tmp/a; echo {marker} > /usr/local/a; "
                                  f"echo {marker} > /a; sleep 30"], ["--user", "root"], env=env)
    try:
        time.sleep(0.5)
        r = cordon.run(["sh", "-c", "ls /tmp/a /usr/local/a /a 2>&1 | grep -c 'No such'"],
                       ["--user", "root"], env=env)
        assert r.out.strip() == "3", r.describe()
    finally:
        a.terminate()
        a.wait()


def test_killed_holders_leave_nothing(cordon, disk, marker):
    env, d = disk
    procs = [cordon.popen(["sh", "-c", f"echo {marker} > /tmp/f; exec sleep 60"], env=env)
             for _ in range(6)]
    assert wait_until(lambda: len(loops_backed_by(d)) == 6, 15), loops_backed_by(d)
    for p in procs[:3]:
        os.kill(p.pid, signal.SIGKILL)
    for p in procs[3:]:
        p.terminate()
    for p in procs:
        p.wait()
    # The sandboxes died with their holders (parent-death signal), and their disks with
    # them; the killed holders' cgroups go at the next start's sweep. The fixture checks:
    # no loop device, no mount, no image.
    assert cordon.run(["true"], env=env).returncode == 0


def test_sweep_removes_a_dead_holders_leftovers(cordon, disk):
    env, d = disk
    slot = 2047
    lock = f"/run/cordon/slots/{slot}"
    import fcntl
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600) if os.path.isdir("/run/cordon/slots") else None
    if fd is None:
        pytest.skip("no slot directory yet")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        pytest.skip(f"slot {slot} is in use")
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
    # What a holder killed between its steps leaves: the image not yet unlinked, and its
    # staging mount point with the scratch still attached, on /run (scratch.c) or, left by
    # an earlier version, beside the images.
    img = d / f"s{slot}.img"
    img.write_bytes(b"\0" * 4096)
    stages = [d / f"s{slot}", pathlib.Path(STAGE) / f"s{slot}"]
    for stage in stages:
        stage.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "none", str(stage)], check=True)
    r = cordon.run(["true"], env=env)
    assert r.returncode == 0, r.describe()
    assert not img.exists() and not mounts_under(d) and not mounts_under(STAGE)
    assert not any(stage.exists() for stage in stages), stages


def test_tmpfs_fallback(cordon, tmp_path):
    env, _ = scratch_env(tmp_path)
    env["CORDON_SCRATCH"] = "tmpfs"
    r = cordon.run(["stat", "-f", "-c", "%T", "/"], env=env)
    assert r.returncode == 0 and r.out.strip() == "tmpfs", r.describe()


def memory_stat_of(pid):
    """The memory cgroup's memory.stat of @pid, as a dict (v2, or v1's memory hierarchy)."""
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            if ctrls == "":
                base = "/sys/fs/cgroup"
            elif "memory" in ctrls.split(","):
                base = "/sys/fs/cgroup/memory"
            else:
                continue
            try:
                with open(f"{base}{path}/memory.stat") as s:
                    return dict((k, int(v)) for k, v in (l.split() for l in s))
            except OSError:
                continue
    return None


@pytest.mark.skipif(not cgroups_available(), reason="needs the memory cgroup controller")
@pytest.mark.parametrize("mode", ["disk", "tmpfs"])
def test_written_bytes_are_not_memory(cordon, tmp_path, sleep_arg, mode):
    """On the disk, what a sandbox writes is page cache (reclaimable), never shmem: the
    tmpfs root (the control: CORDON_SCRATCH=tmpfs) holds every written byte as shmem."""
    env, d = scratch_env(tmp_path)
    if mode == "tmpfs":
        env["CORDON_SCRATCH"] = "tmpfs"
    p = cordon.popen(["sh", "-c", f"dd if=/dev/zero of=/tmp/f bs=1M count=96 status=none && "
                                  f"sync && exec sleep {sleep_arg}"], env=env)
    try:
        pids = []
        assert wait_until(lambda: pids.extend(procs_matching(sleep_arg, argv0="sleep")) or pids, 20)
        st = memory_stat_of(pids[0])
        assert st is not None
        shmem = st.get("shmem", st.get("total_shmem", 0))
        if mode == "disk":
            assert shmem < 16 << 20, st
        else:
            assert shmem >= 90 << 20, st
    finally:
        p.terminate()
        p.wait()
    assert wait_until(lambda: no_traces(d), 10)


def make_wheel(dirpath):
    """A pure-Python wheel, made here: no index, no network."""
    import zipfile
    name = "cordontestpkg"
    whl = dirpath / f"{name}-1.0-py3-none-any.whl"
    files = {f"{name}/__init__.py": "VALUE = 'installed-at-run-time'\n",
             f"{name}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
             f"{name}-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                           "Tag: py3-none-any\n"}
    record = "".join(f"{p},,\n" for p in files) + f"{name}-1.0.dist-info/RECORD,,\n"
    files[f"{name}-1.0.dist-info/RECORD"] = record
    with zipfile.ZipFile(whl, "w") as z:
        for p, text in files.items():
            z.writestr(p, text)
    return whl


@pytest.mark.skipif(subprocess.run([PY, "-m", "pip", "--version"], capture_output=True).returncode != 0,
                    reason="no pip for the host's python3")
def test_pip_install_as_root_at_run_time(cordon, disk, tmp_path):
    env, _ = disk
    share = tmp_path / "wheels"
    share.mkdir(mode=0o755)
    os.chmod(share, 0o755)
    whl = make_wheel(share)
    os.chmod(whl, 0o644)
    inside = f"/tmp/{whl.name}"
    script = (f"cp /mnt/{whl.name} {inside} && "
              f"{PY} -m pip install -q --no-index --no-cache-dir --break-system-packages {inside} "
              f"&& {PY} -c 'import cordontestpkg; print(cordontestpkg.VALUE)'")
    r = cordon.run(["sh", "-c", script], ["--user", "root", "--ro-bind", f"{share}:/mnt"],
                   env=env, timeout=120)
    assert r.returncode == 0, r.describe()
    assert r.out.strip().endswith("installed-at-run-time"), r.out
    assert subprocess.run([PY, "-c", "import cordontestpkg"], capture_output=True).returncode != 0, \
        "the install reached the host"
    # "user" cannot install system-wide: pip falls back to the user's site, in its home.
    r = cordon.run(["sh", "-c", f"{PY} -m pip install -q --no-index --break-system-packages "
                                f"/mnt/{whl.name} && {PY} -c 'import cordontestpkg as m; print(m.__file__)'"],
                   ["--ro-bind", f"{share}:/mnt"], env=env, timeout=120)
    assert r.returncode == 0, r.describe()
    assert r.out.strip().splitlines()[-1].startswith("/home/user/.local/"), r.out
