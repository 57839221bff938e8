"""cordond without its egress proxy stops, with a failure a supervisor restarts on; and the
proxy, which loads the host's trust bundle on a thread at nice 10, relays at cordond's
priority.

cordon-egress tells its controller its ports before it loads its CA and the host's trust
bundle (src/net/egress/main.c: half of cordond's start), so a CA it cannot load now ends it
after cordond has started rather than before. Either way cordond must not serve without it
(no sandbox could reach anything, fail closed, and none would work): it stops, says why, and
exits with status 1, which the shipped unit's Restart=on-failure restarts (it exited 0
before, and a supervisor took that for a clean stop). cordond runs in the fake internet's
machine-under-test namespace (conftest), as in test_daemon_egress.py.
"""

import os
import shutil
import signal
import subprocess
import tempfile

import pytest

from conftest import children_named, wait_until
from test_daemon_egress import CORDOND

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="cordond's egress needs root (nftables, namespaces)")


class Started:
    def __init__(self, net, prepare=None):
        self.root = tempfile.mkdtemp(prefix="cordtest-proxy-")
        state = os.path.join(self.root, "state")
        os.makedirs(state, mode=0o700)
        if prepare:
            prepare(state)
        self.log_path = os.path.join(self.root, "cordond.log")
        self.sock = os.path.join(self.root, "cordon.sock")
        argv = net.argv([])[:-1] + [CORDOND, "--socket", self.sock, "--state-dir", state,
                                     "--runtime-dir", os.path.join(self.root, "run"), "--pool", "0"]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def close(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def started():
    made = []
    yield lambda net, prepare=None: made.append(Started(net, prepare)) or made[-1]
    for s in made:
        s.close()


def test_a_ca_that_cannot_be_loaded_stops_cordond_with_a_failure(net, started):
    if not os.path.exists(CORDOND):
        pytest.skip(f"{CORDOND} not built")

    def bad_ca(state):
        ca = os.path.join(state, "egress-ca")
        os.makedirs(ca, mode=0o700)
        for name in ("ca.key", "ca.crt"):
            with open(os.path.join(ca, name), "w") as f:
                f.write("-----BEGIN GARBAGE-----\nnot a key\n-----END GARBAGE-----\n")
            os.chmod(os.path.join(ca, name), 0o600)

    s = started(net, bad_ca)
    assert wait_until(lambda: s.proc.poll() is not None, 20), f"cordond kept running:\n{s.log()}"
    log = s.log()
    assert s.proc.returncode == 1, f"exit status {s.proc.returncode}:\n{log}"
    assert "do not make a CA" in log, log
    assert "egress proxy died" in log or "cordon-egress did not start" in log, log


def test_the_proxys_death_stops_cordond_with_a_failure(net, started):
    if not os.path.exists(CORDOND):
        pytest.skip(f"{CORDOND} not built")
    s = started(net)
    pid = s.proc.pid  # cordond: nsenter, unshare and sh exec their way to it
    assert wait_until(lambda: children_named(pid, "cordon-egress"), 20), f"no proxy under cordond:\n{s.log()}"
    assert wait_until(lambda: "serving on" in s.log(), 20), s.log()
    for p in children_named(pid, "cordon-egress"):
        os.kill(p, signal.SIGKILL)
    assert wait_until(lambda: s.proc.poll() is not None, 20), f"cordond kept running:\n{s.log()}"
    assert s.proc.returncode == 1, f"exit status {s.proc.returncode}:\n{s.log()}"
    assert "egress proxy died" in s.log()


def _status_field(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return line.split()[1]
    return None


def _nice(pid):
    with open(f"/proc/{pid}/stat") as f:
        st = f.read()
    return int(st[st.rindex(")") + 2:].split()[16])  # field 19


def test_the_proxy_relays_at_cordonds_priority_once_its_bundle_is_loaded(net, started):
    """The proxy loads the host's trust bundle at nice 10 (it is half of its start, beside the
    pool's first builds), on a thread of its own: a relay left at nice 10 would lose to every
    sandbox it serves. Seccomp on is the sign that the load is over (it is applied right
    after)."""
    if not os.path.exists(CORDOND):
        pytest.skip(f"{CORDOND} not built")
    s = started(net)
    pid = s.proc.pid
    assert wait_until(lambda: children_named(pid, "cordon-egress"), 20), f"no proxy under cordond:\n{s.log()}"
    proxy = children_named(pid, "cordon-egress")[0]
    assert wait_until(lambda: _status_field(proxy, "Seccomp") == "2", 20), f"no seccomp on the proxy:\n{s.log()}"
    assert _nice(proxy) == _nice(pid), (_nice(proxy), _nice(pid))
