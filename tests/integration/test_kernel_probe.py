"""The kernel suite's choice of KVM or TCG (tests/kernels/qemu.sh), against fake QEMUs.

Hosts differ in how a /dev/kvm that cannot run a stock guest fails: QEMU hangs on some,
aborts at once on others (`failed to set MSR 0x10a`), exits early or prints garbage. Each
outcome must end in TCG, under `set -euo pipefail`, with no QEMU left behind; only a guest
that reports its init running keeps KVM. No root, no KVM, no real QEMU needed: the fakes
stand in for QEMU (the thing under test is the probe, not QEMU).
"""

import os
import subprocess
import tempfile
import textwrap

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LIB = os.path.join(REPO, "tests", "kernels", "qemu.sh")

# Each fake finds the console file in its `-serial file:PATH` argument.
PRELUDE = 'for a; do case $a in file:*) LOG=${a#file:};; esac; done; echo $$ >"$PIDFILE"\n'
FAKES = {
    "abort": 'echo "qemu-system-x86_64: error: failed to set MSR 0x10a to 0x2c000000ab" >&2\n'
             'echo "kvm_buf_set_msrs: Assertion failed." >&2; kill -ABRT $$',
    "hang": "exec sleep 600",
    "early-exit": "exit 0",
    "garbage": 'head -c 4096 /dev/urandom >"$LOG"; exec sleep 600',
    "up": 'printf "Linux version 6.1\\r\\nCORDON-GUEST-UP\\r\\n" >"$LOG"; exec sleep 600',
    "up-in-noise": '{ head -c 512 /dev/urandom; printf "\\nCORDON-GUEST-UP\\n"; } >"$LOG"; exec sleep 600',
}


def probe(fake, kvm=True):
    with tempfile.TemporaryDirectory() as d:
        qemu = os.path.join(d, "qemu")
        with open(qemu, "w") as f:
            f.write("#!/bin/bash\n" + PRELUDE + FAKES[fake] + "\n")
        os.chmod(qemu, 0o755)
        dev = os.path.join(d, "kvm")
        if kvm:
            open(dev, "w").close()
        script = textwrap.dedent(f"""
            set -euo pipefail
            . {LIB}
            if qemu_probe_kvm {d}/log {d}/out -kernel x; then
                echo "KVM"; qemu_stop
            else
                echo "TCG $probe_why"
            fi
            echo "qpid=[$qpid]"
        """)
        env = dict(os.environ, QEMU=qemu, PROBE_S="2", KVM_DEV=dev, PIDFILE=os.path.join(d, "pid"))
        r = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=30)
        pid = None
        if os.path.exists(env["PIDFILE"]):
            pid = int(open(env["PIDFILE"]).read())
        alive = pid is not None and os.path.exists(f"/proc/{pid}") and \
            open(f"/proc/{pid}/stat").read().split()[2] != "Z"
        return r, alive


@pytest.mark.parametrize("fake", ["abort", "hang", "early-exit", "garbage"])
def test_every_failure_falls_back_to_tcg(fake):
    r, alive = probe(fake)
    assert r.returncode == 0, f"the probe ended its caller: {r.stderr}"
    lines = r.stdout.splitlines()
    assert lines[0].startswith("TCG "), r.stdout
    assert lines[-1] == "qpid=[]"
    assert not alive, "the fake QEMU was left running"
    if fake == "abort":
        assert "MSR 0x10a" in lines[0] and "exited" in lines[0]
    if fake in ("hang", "garbage"):
        assert "did not start in 2s" in lines[0]


@pytest.mark.parametrize("fake", ["up", "up-in-noise"])
def test_a_guest_that_reports_its_init_keeps_kvm(fake):
    r, alive = probe(fake)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "KVM", r.stdout
    assert not alive


def test_no_kvm_device_is_tcg_without_starting_qemu():
    r, alive = probe("up", kvm=False)
    assert r.returncode == 0, r.stderr
    assert "no usable" in r.stdout.splitlines()[0]
    assert not alive
