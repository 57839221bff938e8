"""Every top-level entry of a --rootfs image reaches the sandbox, however many.

The jail child reads the image's top directory with getdents64() into a 4 KiB buffer on its
stack (opendir() allocates, which the child of a threaded cordond must not: issue 10); an
image whose names take several reads must lose none of them, and the names the sandbox gets
fresh (proc, dev, tmp, ...) are still skipped.
"""

import os

from conftest import requires_root

pytestmark = requires_root

N = 300  # about 20 KiB of dirents: five reads and more


def test_every_entry_of_a_large_image_top_is_there(cordon, busybox_rootfs):
    names = {f"entry-{i:03d}-" + "x" * 60 for i in range(N)}
    for n in names:
        (busybox_rootfs / n).write_text(n)
    (busybox_rootfs / "tmp").mkdir()
    (busybox_rootfs / "tmp" / "from-the-image").write_text("no")
    r = cordon.run(["/bin/sh", "-c", "ls /; ls /tmp"], opts=["--rootfs", str(busybox_rootfs)])
    assert r.returncode == 0, r.describe()
    seen = set(r.out.split())
    assert names <= seen, f"missing: {sorted(names - seen)[:5]}"
    assert "bin" in seen and "from-the-image" not in seen, r.describe()
    assert len(os.listdir(busybox_rootfs)) == N + 2
