"""A network decision that cannot be recorded cuts the sandbox's network (issue 10, the audit
log fails closed). The proxy decides before the daemon writes `net.decision`, so that one
connection is made; but once its record cannot be written (here: the state directory, a
4 MiB tmpfs, is full), the daemon sets the sandbox's policy to `deny`, so that no further
connection leaves unrecorded. cordond runs in the fake internet's namespace (conftest).
"""

import json
import os
import shutil
import signal
import subprocess
import tempfile

import pytest

from conftest import CORDON, PY, wait_until
from test_daemon_egress import CORDOND, Daemon, UnixHTTP, decisions, put_client


class FullDaemon(Daemon):
    """test_daemon_egress's Daemon with its state directory on a small tmpfs."""

    def __init__(self, net):  # noqa: super().__init__ would start at once, on a plain dir
        self.root = tempfile.mkdtemp(prefix="cordtest-full-")
        self.state = os.path.join(self.root, "state")
        os.makedirs(self.state)
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", self.state],
                           capture_output=True, text=True)
        if p.returncode != 0:
            shutil.rmtree(self.root, ignore_errors=True)
            pytest.skip(f"cannot mount a tmpfs: {p.stderr.strip()}")
        self.sock = os.path.join(self.root, "cordon.sock")
        self.log = open(os.path.join(self.root, "cordond.log"), "wb")
        argv = net.argv([])[:-1] + [CORDOND, "--socket", self.sock, "--state-dir", self.state,
                                     "--runtime-dir", os.path.join(self.root, "run"), "--pool", "0"]
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=self.log, start_new_session=True)
        assert wait_until(lambda: os.path.exists(self.sock), 15), self.tail()
        self.filler = os.path.join(self.state, "filler")

    def fill(self):
        with open(self.filler, "ab", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError:
                pass

    def free(self):
        os.unlink(self.filler)

    def stop(self):
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()
        print(self.tail())  # shown by pytest when the test failed
        subprocess.run(["umount", self.state], check=False)
        shutil.rmtree(self.root, ignore_errors=True)


def test_unrecordable_decision_cuts_the_network(net):
    if not os.path.exists(CORDOND):
        pytest.skip(f"{CORDOND} not built")
    d = FullDaemon(net)
    stream = None
    try:
        sb = d.json("POST", "/v1/sandboxes",
                    {"network": {"policy": "allow", "allow": ["api.example.test"]}}, status=201)
        sid = sb["id"]
        put_client(d, net, sid)
        # A process that keeps connecting, started while its record can still be written.
        ops = json.dumps([{"op": "http", "connect": "api.example.test", "host": "api.example.test",
                           "path": "/x"}])
        loop = f"while :; do {PY} /home/user/netclient.py '{ops}' >/dev/null 2>&1; sleep 0.2; done"
        stream = UnixHTTP(d.sock)
        stream.request("POST", f"/v1/sandboxes/{sid}/processes",
                       body=json.dumps({"argv": ["/bin/sh", "-c", loop],
                                        "env": {"NETCLIENT_CA": "/home/user/ca.pem"}}))
        assert stream.getresponse().status == 200
        assert wait_until(lambda: any(f["action"] == "allow" and f["host"] == "api.example.test"
                                      for f in decisions(d, sid)), 20), decisions(d, sid)

        d.fill()
        cut = wait_until(lambda: d.json("GET", f"/v1/sandboxes/{sid}")["network"]["policy"] == "deny", 30)
        assert cut, f"the network stayed open with its decisions unrecorded:\n{d.tail()}"
        d.free()
        # The proxy refuses from now on, and says so in the log, which verifies.
        n = len(decisions(d, sid))
        assert wait_until(lambda: any(f["action"] == "deny" and f["host"] == "api.example.test"
                                      for f in decisions(d, sid)[n:]), 20), decisions(d, sid)[n:]
        assert all(f["action"] == "deny" for f in decisions(d, sid)[n:] if f.get("proto") != "dns")
        d.json("DELETE", f"/v1/sandboxes/{sid}", status=204)
        path = os.path.join(d.state, "audit", f"{sid}.jsonl")
        v = subprocess.run([CORDON, "audit", "verify", path], capture_output=True, text=True)
        assert v.returncode == 0, v.stdout + v.stderr
    finally:
        if stream:
            stream.close()
        d.stop()
