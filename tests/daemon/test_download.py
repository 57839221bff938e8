"""A file out of a sandbox: GET /v1/sandboxes/{id}/files?path=. cordond keeps the first 8 MiB
in memory and spools the rest to an unlinked file of its state directory, sent with sendfile,
so a 100 MiB read costs it far less memory than the file; past --max-download (4G by default)
the read is refused with 413 payload_too_large, naming the limit."""

import hashlib
import os
import re

import pytest

from conftest import assert_error, skip_if_sanitized, start_daemon

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (uid ranges)")

MiB = 1 << 20


def peak_mib(pid):
    return int(re.search(r"VmHWM:\s+(\d+) kB", open(f"/proc/{pid}/status").read())[1]) >> 10


def make_file(c, sid, path, size):
    """A file of @size random bytes at @path in the sandbox; its sha256."""
    c.sh(sid, f"head -c {size} /dev/urandom > {path} && sha256sum {path} > {path}.sum")
    return c.sh(sid, f"cut -d' ' -f1 {path}.sum").strip()


def get(c, sid, path):
    return c.get(f"/v1/sandboxes/{sid}/files?path={path}")


def test_a_100_mib_read_is_spooled_not_held():
    skip_if_sanitized()
    d = start_daemon(pool=0, max_sandboxes=2)
    try:
        c = d.client(timeout=120)
        s = c.create()["id"]
        want = make_file(c, s, "/tmp/big", 100 * MiB)
        before = peak_mib(d.proc.pid)
        r = get(c, s, "/tmp/big")
        assert r.status == 200, r.describe()
        grew = peak_mib(d.proc.pid) - before
        assert len(r.body) == 100 * MiB
        assert hashlib.sha256(r.body).hexdigest() == want
        print(f"\ncordond's peak RSS grew {grew} MiB for a 100 MiB read")
        assert grew < 32, f"cordond's peak RSS grew by {grew} MiB for a 100 MiB read"
        assert not [f for f in os.listdir(d.state_dir) if f.startswith("#")], "a named spool"
        # a small file after it is still whole (in memory, no spool)
        c.sh(s, "printf small > /tmp/small")
        assert get(c, s, "/tmp/small").body == b"small"
        c.destroy(s)
    finally:
        d.cleanup()


def test_the_download_maximum_is_exact_and_a_larger_read_is_413():
    d = start_daemon(pool=0, max_sandboxes=2, extra=["--max-download", "12M"])
    try:
        c = d.client(timeout=60)
        s = c.create()["id"]
        at = make_file(c, s, "/tmp/at", 12 * MiB)  # exactly the maximum: past the memory part
        make_file(c, s, "/tmp/over", 12 * MiB + 1)
        r = get(c, s, "/tmp/at")
        assert r.status == 200, r.describe()
        assert hashlib.sha256(r.body).hexdigest() == at
        r = get(c, s, "/tmp/over")
        assert_error(r, 413, ["payload_too_large"])
        assert "--max-download" in r.json()["error"]["message"], r.describe()
        # the sandbox and its agent go on: the refused read left nothing behind
        assert get(c, s, "/tmp/at").status == 200
        assert c.exec(s, argv=["true"])["exit_code"] == 0
        c.destroy(s)
    finally:
        d.cleanup()
