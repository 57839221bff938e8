"""GET /v1/sandboxes/{id}/metrics: CPU and memory from the sandbox's cgroup, its scratch disk
from inside (the agent's STATFS), sampled every 5 s into a ring, plus the value now."""

import time

import pytest

from conftest import daemon_fixture, assert_error, requires_daemon, wait_until

pytestmark = requires_daemon

SAMPLE_KEYS = {"timestamp", "cpu_ms", "cpu_pct", "memory_bytes", "disk_used_bytes",
               "disk_total_bytes"}


daemon = daemon_fixture(pool=0, max_sandboxes=4, max_timeout=600)


def metrics(client, sid):
    r = client.get(f"/v1/sandboxes/{sid}/metrics")
    assert r.status == 200, r.describe()
    m = r.json()
    assert set(m) == {"id", "interval_s", "current", "samples"}, m
    for s in m["samples"] + [m["current"]]:
        assert set(s) == SAMPLE_KEYS, s
        assert s["disk_used_bytes"] <= s["disk_total_bytes"] or s["disk_total_bytes"] == 0, s
    return m


def test_metrics_grow_with_use(client, sandbox):
    sid = sandbox["id"]
    m = metrics(client, sid)
    assert m["id"] == sid and m["interval_s"] == 5
    if m["current"]["memory_bytes"] == 0:
        pytest.skip("no cgroup memory accounting here")
    # the first tick asks the agent for the disk; the next sample carries it
    assert wait_until(lambda: metrics(client, sid)["current"]["disk_total_bytes"] > 0, 12), \
        metrics(client, sid)
    before = metrics(client, sid)["current"]
    client.exec(sid, argv=["sh", "-c", "head -c 32000000 /dev/urandom > /tmp/blob; sync; "
                           "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done"], timeout_s=60)
    assert wait_until(lambda: metrics(client, sid)["current"]["disk_used_bytes"] >=
                      before["disk_used_bytes"] + 16_000_000, 12), (before, metrics(client, sid))
    after = metrics(client, sid)
    assert after["current"]["cpu_ms"] > before["cpu_ms"], (before, after["current"])
    assert len(after["samples"]) >= 2
    stamps = [s["timestamp"] for s in after["samples"]]
    assert stamps == sorted(stamps)


def test_metrics_of_unknown_sandbox(client):
    assert_error(client.get("/v1/sandboxes/sb-aaaaaaaaaaaaaaaaaaaa/metrics"), 404, "not_found")
