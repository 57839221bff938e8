"""The microvm runtime end to end: cordon run --runtime microvm boots Debian's kernel under
QEMU and runs the command in it. Few boots (each is seconds under TCG): one carries most
checks, one a command that is not there, one a timeout, each followed by the leak check."""

import json
import os
import subprocess

from conftest import CORDON, qemu_procs, requires_microvm, run

pytestmark = requires_microvm

SCRIPT = r"""
set -e
read line; echo "stdin: $line"
echo "uid: $(id -u)"
echo "kernel: $(uname -r)"
echo "cpus: $(nproc)"
echo "mem_kb: $(grep MemTotal /proc/meminfo | tr -s ' ' | cut -d' ' -f2)"
echo "root: $(grep ' / ' /proc/mounts | cut -d' ' -f3)"
echo written > /tmp/f && echo "tmp: $(cat /tmp/f)"
echo "home: $(echo x > $HOME/y && cat $HOME/y)"
echo to-stderr >&2
dd if=/dev/zero bs=1024 count=2048 2>/dev/null | wc -c | sed 's/^/bulk: /'
exit 7
"""


def fields(out):
    return dict(l.split(": ", 1) for l in out.decode().splitlines() if ": " in l)


def assert_no_leftovers(mvenv):
    vms = mvenv["CORDON_MICROVM_DIR"]
    assert qemu_procs(vms) == [], "a QEMU of this session still runs"
    left = os.listdir(vms) if os.path.isdir(vms) else []
    assert left == [], f"VM directories left: {left}"
    with open("/proc/self/mountinfo") as f:
        assert not [l for l in f if vms in l], "a mount of the VM directory is left"


def test_oneshot_in_its_own_kernel(mvenv, rootfs):
    """stdin, stdout, stderr and the exit status as the jail gives them; the guest's own
    kernel; uid 1000; --cpus and --memory are the VM's; a writable overlay root; 2 MiB of
    output whole."""
    r = run(mvenv, rootfs, ["--cpus", "2", "--memory", "300M", "--user", "user"],
            ["/bin/sh", "-c", SCRIPT], input=b"hello\n")
    assert r.returncode == 7, (r.returncode, r.stderr)
    f = fields(r.stdout)
    assert f["stdin"] == "hello", f
    assert f["uid"] == "1000", f
    assert f["kernel"].endswith("-cloud-amd64"), f
    assert f["cpus"] == "2", f
    assert 200_000 < int(f["mem_kb"]) < 300 * 1024, f
    assert f["root"] == "overlay", f
    assert f["tmp"] == "written" and f["home"] == "x", f
    assert f["bulk"].strip() == str(2 << 20), f
    assert b"to-stderr" in r.stderr, r.stderr
    assert_no_leftovers(mvenv)


def test_missing_command_is_127(mvenv, rootfs):
    r = run(mvenv, rootfs, ["--json-result", "1"], ["/bin/not-there"])
    assert r.returncode == 127, (r.returncode, r.stderr)
    assert_no_leftovers(mvenv)


def test_timeout_kills_the_vm(mvenv, rootfs):
    """--timeout ends the VM (QEMU killed): 124, and nothing of it is left."""
    r = run(mvenv, rootfs, ["--timeout", "8s"], ["/bin/sleep", "600"])
    assert r.returncode == 124, (r.returncode, r.stderr)
    assert_no_leftovers(mvenv)


def test_runtimes_reports_the_accelerator(mvenv):
    """No boot: the registry's view, as GET /v1/runtimes shows it (tests/daemon covers the
    route): microvm is available here, in kvm or tcg mode."""
    out = subprocess.run([CORDON, "run", "--runtime", "nope", "--", "true"], capture_output=True,
                         env=mvenv, timeout=60)
    assert out.returncode == 2 and b"this host can run: microvm," in out.stderr, out.stderr
