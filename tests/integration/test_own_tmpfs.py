"""The sandbox's own trees (/etc, /dev, the /proc masks) and the superblocks a sandbox makes.

/etc (the `host` template's), /dev and the empty directory that masks parts of /proc are
three directories of one tmpfs, bound where they go (src/lib/rootfs.c): each superblock a
sandbox makes holds a memcg-aware shrinker id while it lives, and the kernel gives every
memory cgroup of the host a slot per id (up to the most ever in use at once), so a
superblock costs memory in every other sandbox's cgroup (docs/ARCHITECTURE.md, "What an idle
sandbox costs"). These tests hold both sides: the shared tmpfs is read-only as a filesystem (not only as three mounts) and /dev/shm
stays writable; and a sandbox makes no more superblocks than the count below.
"""

import os

from conftest import requires_root

pytestmark = requires_root

# The `host` template with its disk: the ext4 scratch, three package-state overlays (/usr,
# /var/lib/dpkg, /etc/apt), the own tmpfs, /dev/shm, devpts and proc. Before the own tmpfs:
# 11 on a host with /proc/acpi and /proc/driver, up to 14 with asound, scsi and firmware.
HOST_SUPERBLOCKS_MAX = 8
MASKED_DIRS = ("acpi", "asound", "scsi", "firmware", "driver")

SCRIPT = r"""
cat /proc/self/mountinfo
echo ---
for p in /etc/cordon-probe /dev/cordon-probe /dev/shm/cordon-probe; do
  if (: > "$p") 2>/dev/null; then echo "wrote $p"; else echo "refused $p"; fi
done
for d in acpi asound scsi firmware driver; do
  [ -d /proc/$d ] && echo "mask $d $(ls -A /proc/$d | wc -l)"
  (: > /proc/$d/x) 2>/dev/null && echo "wrote /proc/$d/x"
done
true
"""


def parse(out):
    mounts, _, rest = out.partition("---\n")
    table = {}
    for line in mounts.splitlines():
        left, _, right = line.partition(" - ")
        f = left.split()
        fstype, _source, sbopts = right.split()[:3]
        table[f[4]] = {"dev": f[2], "root": f[3], "opts": f[5].split(","), "fstype": fstype,
                       "sb": sbopts.split(",")}
    return table, rest.splitlines()


def host_devs():
    with open("/proc/self/mountinfo") as f:
        return {line.split()[2] for line in f}


def run(cordon, opts=()):
    r = cordon.run(["/bin/sh", "-c", SCRIPT], opts=list(opts))
    assert r.returncode == 0, r.describe()
    return parse(r.out)


def test_etc_dev_and_masks_are_one_read_only_tmpfs(cordon):
    table, lines = run(cordon)
    etc, dev = table["/etc"], table["/dev"]
    assert etc["fstype"] == dev["fstype"] == "tmpfs"
    assert etc["dev"] == dev["dev"], "one tmpfs for /etc and /dev"
    for m in (etc, dev):
        assert "ro" in m["opts"] and "ro" in m["sb"], f"read-only mount and superblock: {m}"
        assert "nosuid" in m["opts"] and "nodev" in m["opts"], m
    assert "noexec" in dev["opts"]
    assert "refused /etc/cordon-probe" in lines and "refused /dev/cordon-probe" in lines, lines
    assert "wrote /dev/shm/cordon-probe" in lines, lines
    shm = table["/dev/shm"]
    assert shm["dev"] != etc["dev"] and "rw" in shm["sb"], "/dev/shm is a writable tmpfs of its own"
    masked = [d for d in MASKED_DIRS if os.path.isdir(f"/proc/{d}")]
    for d in masked:
        m = table[f"/proc/{d}"]
        assert m["dev"] == etc["dev"] and m["root"] == "/mask" and "ro" in m["opts"], m
        assert f"mask {d} 0" in lines, f"/proc/{d} is empty: {lines}"
    assert not [x for x in lines if x.startswith("wrote /proc/")], lines


def test_a_sandbox_makes_few_superblocks(cordon):
    table, _ = run(cordon)
    own = {m["dev"] for m in table.values()} - host_devs()
    kinds = sorted(table_fstype(table, d) for d in own)
    assert len(own) <= HOST_SUPERBLOCKS_MAX, (
        f"{len(own)} superblocks per sandbox ({kinds}): each costs every memory cgroup on the "
        f"host a shrinker slot; at most {HOST_SUPERBLOCKS_MAX}")
    assert kinds.count("tmpfs") == 2, kinds  # the own tmpfs and /dev/shm


def table_fstype(table, dev):
    return next(m["fstype"] for m in table.values() if m["dev"] == dev)


def test_an_image_gets_dev_and_masks_from_one_tmpfs(cordon, busybox_rootfs):
    table, lines = run(cordon, ["--rootfs", str(busybox_rootfs)])
    dev = table["/dev"]
    assert dev["fstype"] == "tmpfs" and "ro" in dev["sb"], dev
    assert "refused /dev/cordon-probe" in lines and "wrote /dev/shm/cordon-probe" in lines, lines
    for d in (d for d in MASKED_DIRS if os.path.isdir(f"/proc/{d}")):
        assert table[f"/proc/{d}"]["dev"] == dev["dev"], table[f"/proc/{d}"]
