"""Process event streams never end silently (issue 10): every reader gets every byte and the
exit event. A reader that falls behind holds back its process (PAUSE/RESUME to the agent), not
the sandbox; only a reader past SUBSCRIBER_BACKLOG (8 MiB) in spite of that would be cut off,
and then with a final `lagged` event, never a clean end that looks like the end of the
process."""

import time

import pytest

from conftest import requires_daemon, start_daemon, unb64

pytestmark = requires_daemon

MIB = 1 << 20
TOTAL = 50 * MIB
# 50 MiB of output, as fast as the sandbox can write it
WRITER = {"cmd": f"head -c {TOTAL} /dev/zero", "timeout_s": 120}


@pytest.fixture(scope="module")
def daemon():
    d = start_daemon(pool=0, max_sandboxes=4, max_timeout=600)
    yield d
    alive = d.alive()
    d.cleanup()
    assert alive, f"cordond died during the module:\n{d.log_tail()}"


def read_all(stream, pause=0.0, pause_after=0):
    """Every event to the end; with @pause, sleeps that long once after @pause_after bytes."""
    kinds, got, paused = [], 0, False
    while True:
        ev = stream.next()
        if ev is None:
            return kinds, got
        kinds.append(ev["type"])
        if ev["type"] == "stdout":
            got += len(unb64(ev["data"]))
        if pause and not paused and got >= pause_after:
            time.sleep(pause)
            paused = True


@pytest.mark.any_runtime
def test_fast_reader_gets_everything(client, sandbox):
    s = client.start_process(sandbox["id"], timeout=120, **WRITER)
    kinds, got = read_all(s)
    s.close()
    assert kinds[-1] == "exit", kinds[-5:]
    assert got == TOTAL, f"{got} of {TOTAL} bytes"
    assert "lagged" not in kinds


@pytest.mark.any_runtime
def test_slow_reader_is_told_it_lagged(client, sandbox):
    s = client.start_process(sandbox["id"], timeout=120, **WRITER)
    kinds, got = read_all(s, pause=3.0, pause_after=1)
    s.close()
    ends = kinds[-1]
    assert ends in ("exit", "lagged"), f"the stream ended after {kinds[-3:]} with neither exit nor lagged"
    if ends == "exit":
        assert got == TOTAL, f"exit after {got} of {TOTAL} bytes: output was lost silently"
    else:
        assert got < TOTAL and kinds.count("lagged") == 1
        assert "exit" not in kinds, kinds[-3:]
    # the daemon and the sandbox are fine, and the process ran to its end regardless
    assert client.sh(sandbox["id"], "echo ok") == "ok\n"


@pytest.mark.any_runtime
def test_stalled_reader_holds_back_only_its_process(client, sandbox):
    """Back-pressure reaches the writer (it waits for its reader), while the rest of the
    sandbox, which shares the agent's channel, goes on."""
    sid = sandbox["id"]
    s = client.start_process(sid, timeout=120, **WRITER)
    stall = 3.0
    t0 = time.monotonic()
    # not reading s: other work in the same sandbox is not held up
    assert client.sh(sid, "echo other") == "other\n"
    assert client.put(f"/v1/sandboxes/{sid}/files?path=/tmp/bp", b"x" * 100000).status == 200
    assert client.get(f"/v1/sandboxes/{sid}/files?path=/tmp/bp").body == b"x" * 100000
    other = client.start_process(sid, cmd="head -c 3000000 /dev/zero")
    _, _, ex2 = other.until_exit()
    assert ex2 and ex2["exit_code"] == 0
    assert time.monotonic() - t0 < stall, "the sandbox waited for a stalled reader"
    time.sleep(stall - (time.monotonic() - t0))
    kinds, got = read_all(s)
    s.close()
    assert kinds[-1] == "exit" and got == TOTAL, (kinds[-3:], got)
    ev = s.events[-1]
    assert ev["exit_code"] == 0 and ev["duration_ms"] >= stall * 1000 * 0.9, ev


def test_reader_that_leaves_releases_its_process(client, sandbox, daemon):
    """A paused process goes on when its only (slow) reader hangs up: nothing waits for a
    reader that is gone, and the daemon is fine."""
    sid = sandbox["id"]
    s = client.start_process(sid, timeout=120, **WRITER)
    time.sleep(1.0)  # paused by now, with megabytes queued to us
    s.next()
    s.close()  # hang up mid-stream
    r = client.stream("GET", f"/v1/sandboxes/{sid}/processes/{s.pid}/events", timeout=60)
    if hasattr(r, "next"):
        _, _, ex = r.until_exit()  # output from now on, then the end
        assert ex is not None and ex["exit_code"] == 0, ex
    else:
        assert r.status == 200, r.describe()
    assert daemon.alive()
    assert client.sh(sid, "echo ok") == "ok\n"
