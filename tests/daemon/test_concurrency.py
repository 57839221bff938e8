"""Many sandbox lifecycles at once, with zero errors (issue 10).

16 clients share N lifecycles (create -> exec `true` -> destroy) on one cordond with a warm
pool. Every request must answer what the contract says (201, 200 with exit 0, 204): a
single 500 or 404 is a failure. The defect this guards against: an fd registered with the
event loop was closed before its event was removed, so the registration survived in epoll
(a child being cloned held a copy of the fd) and later fired under the fd number's next
owner, another sandbox's pidfd, destroying that sandbox with reason `exited` while its
client was still using it.

After the run every sandbox's audit log must end in `sandbox.destroy` with reason `api`:
one destroyed by a stale event says `exited`.

CORDON_LIFECYCLES sets N (default 2000: about 15 s on 2 cores; the unfixed daemon failed 2
of them); bench/bench_daemon.py --lifecycles runs the same at 20,000.
"""

import json
import os
import threading
import time

import pytest

from conftest import requires_daemon, start_daemon

pytestmark = requires_daemon

N = int(os.environ.get("CORDON_LIFECYCLES", "2000"))
THREADS = 16


@pytest.fixture(scope="module")
def busy_daemon():
    d = start_daemon(pool=8, max_sandboxes=64, max_timeout=600)
    yield d
    alive = d.alive()
    d.cleanup()
    assert alive, f"cordond died during the module:\n{d.log_tail()}"


def run_lifecycles(daemon, n, threads):
    lock = threading.Lock()
    left = [n]
    errors, ids = [], []

    def worker():
        c = daemon.client(timeout=60, keepalive=True)
        while True:
            with lock:
                if left[0] == 0:
                    break
                left[0] -= 1
            step = "create"
            try:
                r = c.post("/v1/sandboxes", {})
                if r.status != 201:
                    raise AssertionError(r.describe())
                sid = r.json()["id"]
                with lock:
                    ids.append(sid)
                step = "exec"
                r = c.post(f"/v1/sandboxes/{sid}/exec", {"argv": ["true"]})
                if r.status != 200 or r.json().get("exit_code") != 0:
                    raise AssertionError(r.describe())
                step = "destroy"
                r = c.delete(f"/v1/sandboxes/{sid}")
                if r.status != 204:
                    raise AssertionError(r.describe())
            except Exception as e:  # noqa: BLE001 - every error is counted and shown
                with lock:
                    errors.append(f"{step}: {e}")
        c.close()

    t0 = time.monotonic()
    ths = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    return errors, ids, time.monotonic() - t0


def last_record(path):
    with open(path, "rb") as f:
        lines = f.read().splitlines()
    return json.loads(lines[-1]) if lines else None


def test_lifecycles_at_16_way_have_zero_errors(busy_daemon):
    errors, ids, wall = run_lifecycles(busy_daemon, N, THREADS)
    print(f"{N} lifecycles at {THREADS}-way in {wall:.1f} s ({N / wall:.0f}/s), "
          f"{len(errors)} errors")
    assert not errors, (f"{len(errors)} of {N} lifecycles failed; first ones:\n" +
                        "\n".join(errors[:10]) + "\n" + busy_daemon.log_tail(2000))
    assert busy_daemon.alive()
    # No sandbox was destroyed by anything but its client's DELETE.
    wrong = []
    for sid in ids:
        rec = last_record(os.path.join(busy_daemon.audit_dir, sid + ".jsonl"))
        if not rec or rec["event"] != "sandbox.destroy" or rec["fields"].get("reason") != "api":
            wrong.append((sid, rec and rec["event"], rec and rec["fields"]))
    assert not wrong, f"{len(wrong)} sandboxes not ended by their DELETE: {wrong[:5]}"
    # Nothing is left behind in the daemon.
    assert busy_daemon.client().list() == []
