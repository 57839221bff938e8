"""The relay once a connection is allowed: it carries bytes both ways for as long as both ends
keep the connection, however quiet the sandbox is between two messages."""

import os
import resource
import signal
import threading
import time

from conftest import PY, WEB1, WEB2, children_named, token, wait_until
from test_flood import read_json_line

# The proxy gives a sandbox 10 s (SNIFF_TIMEOUT_S in src/net/egress) to name the destination;
# a relayed connection must not inherit that deadline.
IDLE_S = 11


def test_relay_reads_the_sandbox_after_an_idle_spell(net):
    """A name-checked connection (HTTP Host to an echo port) that is quiet for longer than the
    time allowed for the first bytes still relays what the sandbox sends next."""
    _, res = net.probe(["--allow", "api.example.test:22"], [
        {"op": "echo_idle", "connect": WEB2, "port": 22, "host": "api.example.test",
         "idle": IDLE_S, "data": token("idle")},
    ])
    r = res[0]
    assert r.get("echo0"), f"the connection was not relayed at all: {r}"
    assert r["reached"], f"after {IDLE_S} s of silence the relay stopped reading the sandbox: {r}"


def _child(pid, name, timeout=10):
    found = wait_until(lambda: children_named(pid, name), timeout)
    return found[0] if found else None


def _cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        st = f.read()
    fields = st[st.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_proxy_out_of_descriptors_waits_instead_of_spinning(net):
    """When the proxy has no descriptor left for accept(), queued connections wait in the
    backlog while it pauses. libevent's default was to try again at once, forever, at full
    CPU, with a warning on stderr each time: megabytes of log, or, with a pipe nobody
    drains, a proxy blocked in write() and every sandbox of its controller cut off."""
    start = ("import os, sys, time; time.sleep(2); "
             f"os.execv(sys.executable, [sys.executable, '/netclient.py', 'flood', '{WEB1}', '22', '120', '4'])")
    flood = net.popen(["--allow", f"{WEB1}:22"], [PY, "-c", start])
    err = bytearray()
    drain = threading.Thread(target=lambda: [err.extend(b) for b in iter(lambda: flood.stderr.read1(65536), b"")],
                             daemon=True)
    drain.start()
    try:
        egress = _child(flood.pid, "cordon-egress")
        assert egress, "no cordon-egress under cordon run"
        # Room for exactly ten relayed connections (two descriptors each): the eleventh
        # accept() fails with EMFILE.
        limit = len(os.listdir(f"/proc/{egress}/fd")) + 20
        resource.prlimit(egress, resource.RLIMIT_NOFILE, (limit, limit))
        time.sleep(3)  # the flood has started: ten relayed, the rest queued
        t0, c0 = time.monotonic(), _cpu_s(egress)
        time.sleep(2)
        share = (_cpu_s(egress) - c0) / (time.monotonic() - t0)
        first = read_json_line(flood, 40)
        assert first and first.get("phase") == "flooded", f"the flood did not report: {first!r}"
        assert first["ok"] == 10, f"expected the ten connections that fit to work: {first}"
        assert share < 0.3, f"cordon-egress used {share:.0%} of a CPU while out of descriptors"
        assert err.count(b"accept") < 10, f"cordon-egress logged {err.count(b'accept')} accept errors: {bytes(err[-300:])!r}"
    finally:
        if flood.poll() is None:
            os.killpg(flood.pid, signal.SIGKILL)
        flood.wait()
