"""A sandbox whose setup never ends does not hold its create for ever (issue 10).

The jail child of a create hung in its setup (cordond's threads and glibc's setresgid, fixed
in src/runtime/jail/child.c); the client then waited until its own timeout. Whatever makes a
child hang, the daemon's deadline for setup and HELLO_OK (AGENT_HELLO_MS, 10 s) kills it and
the create answers 500 internal. The hang is made here with SIGSTOP on the child between
clone() and exec() (it still has the name of the thread that cloned it then: cordond's spawner,
`cordon-spawn`, or cordond where the child is a copy), which nothing in the child can undo.

And the stopped child holds nothing another create needs: while it is stopped, a second
sandbox is built and answered (runtime/jail/spawn.c: the thread that cloned the stopped child
waits for its exec; a build that waited for that thread would wait on the deadline, which is
the loop's own timer, and hang the daemon).
"""

import os
import signal
import threading
import time

from conftest import assert_error, requires_daemon, start_daemon, wait_until

pytestmark = requires_daemon

DEADLINE_S = 10


def children(pid):
    out = []
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/children") as f:
                out += f.read().split()
    except OSError:
        pass
    return out


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


BEFORE_EXEC = ("cordon-spawn", "cordond")


def stop_a_child_in_setup(daemon_pid, until):
    """SIGSTOPs the first child of cordond that has not exec'd cordon-init yet."""
    while time.monotonic() < until:
        for k in children(daemon_pid):
            if comm(k) in BEFORE_EXEC:
                os.kill(int(k), signal.SIGSTOP)
                if comm(k) in BEFORE_EXEC:  # stopped before its exec
                    return int(k)
                os.kill(int(k), signal.SIGCONT)
    return None


def test_a_setup_that_hangs_is_killed_and_the_create_answers():
    d = start_daemon(pool=0, max_sandboxes=4)
    try:
        c = d.client(timeout=60)
        # The first disk of a size makes its empty filesystem (cordond runs mke2fs, whose child
        # is also named cordond before its exec): done here, so the child caught is the jail's.
        c.destroy(c.create({"limits": {"disk_mb": 512}})["id"])
        for _ in range(50):
            res = {}

            def create():
                t0 = time.monotonic()
                # Not from the pool (there is none) and not the default disk: built now.
                res["r"] = c.post("/v1/sandboxes", {"limits": {"disk_mb": 512}})
                res["s"] = time.monotonic() - t0

            th = threading.Thread(target=create)
            th.start()
            child = stop_a_child_in_setup(d.proc.pid, time.monotonic() + 5)
            if child is not None:
                # Another create, built now too, while the first child is stopped.
                t0 = time.monotonic()
                other = d.client(timeout=60).post("/v1/sandboxes", {"limits": {"disk_mb": 512}})
                took = time.monotonic() - t0
                assert other.status == 201, other.text
                assert took < DEADLINE_S - 2, f"a create waited {took:.1f} s for the stopped one"
                c.destroy(other.json()["id"])
            th.join(60)
            assert not th.is_alive(), "the create did not answer in 60 s"
            if child is None:  # it exec'd before we caught it: another try
                assert res["r"].status == 201, res["r"].text
                c.destroy(res["r"].json()["id"])
                continue
            assert_error(res["r"], 500, "internal")
            assert DEADLINE_S - 1 <= res["s"] < DEADLINE_S + 5, res["s"]
            # Killed (SIGKILL reaches a stopped process) and reaped, not left behind.
            assert wait_until(lambda: not os.path.exists(f"/proc/{child}"), 10), \
                f"the stuck child {child} is still there ({comm(child)})"
            assert d.alive()
            sb = c.create({})
            c.destroy(sb["id"])
            return
        raise AssertionError("no create's child could be caught before its exec in 50 tries")
    finally:
        d.cleanup()
