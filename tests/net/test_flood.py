"""A sandbox that opens connections as fast as it can hits its own limits; another sandbox
running at the same time is not hurt."""

import json
import os
import select
import signal
import time

from conftest import PY, WEB1, token

FLOOD = 500
HOLD_S = 8


def read_json_line(p, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r, _, _ = select.select([p.stdout], [], [], 0.2)
        if r:
            line = p.stdout.readline()
            if not line:
                return None
            try:
                return json.loads(line)
            except ValueError:
                continue
        if p.poll() is not None:
            return None
    return None


def test_flood_hits_the_limits_without_hurting_another_sandbox(net):
    rule = f"{WEB1}:22"
    flood = net.popen(["--allow", rule], [PY, "/netclient.py", "flood", WEB1, "22", str(FLOOD), str(HOLD_S)])
    try:
        first = read_json_line(flood, 40)
        assert first and first.get("phase") == "flooded", \
            f"the flooding sandbox did not report: {first!r} rc={flood.poll()} " \
            f"stderr={flood.stderr.read().decode() if flood.poll() is not None else ''}"
        # While the flood's connections are all held open: a second sandbox.
        t0 = time.monotonic()
        ops = [{"op": "echo", "connect": WEB1, "port": 22, "data": token("b")} for _ in range(10)]
        ops.append({"op": "urllib", "url": f"https://api.example.test{token()}"})
        _, res = net.probe(["--allow", rule, "--allow", "api.example.test"], ops)
        took = time.monotonic() - t0
        assert flood.poll() is None, "the flood ended before the second sandbox ran: not concurrent"
        failed = [r for r in res if not r.get("reached")]
        assert not failed, f"the second sandbox was hurt by the first one's flood: {failed}"
        slow = [r for r in res if r["s"] > 1.0]
        assert not slow, f"the second sandbox's connections were slowed by the flood: {slow}"

        done = read_json_line(flood, HOLD_S + 30)
        assert done and done.get("phase") == "done", f"the flooding sandbox did not finish: {done!r}"
    finally:
        if flood.poll() is None:
            os.killpg(flood.pid, signal.SIGKILL)
        flood.wait()

    assert "EMFILE" not in first["errors"] and "ENFILE" not in first["errors"], \
        f"the flood ran out of file descriptors in the sandbox; it did not test the proxy: {first}"
    assert first["ok"] > 0, f"no connection of the flooding sandbox worked at all: {first}"
    assert first["ok"] < FLOOD, \
        f"{FLOOD} concurrent connections all worked: no per-sandbox limit was hit: {first}"
    assert done["alive_after_hold"] == done["ok"], \
        f"connections admitted under the limit were dropped later: {done}"
    print(f"flood: {first}; second sandbox took {took:.2f}s")
