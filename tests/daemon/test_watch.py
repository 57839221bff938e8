"""GET /v1/sandboxes/{id}/files/watch: inotify in cordon-init, recursive (new directories are
watched too), create/write/remove/rename/chmod as NDJSON, an explicit overflow when events are
lost, never unbounded memory; paths checked as the files API checks them."""

import time

import pytest

from conftest import daemon_fixture, TEST_RUNTIME, EventStream, assert_error, requires_daemon

pytestmark = requires_daemon
# runsc (2022-12): 60000 files take longer than the stream's timeout to make, and an event
# seen through a bind mount (/tmp is one) is not reported on the path of another mount.
gvisor_slow = pytest.mark.skipif(TEST_RUNTIME == "gvisor",
                                 reason="runsc: too slow for the flood, /tmp is a bind mount")


daemon = daemon_fixture(pool=0, max_sandboxes=4, max_timeout=600)


def watch(client, sid, path, recursive=True):
    q = f"path={path}" + ("&recursive=1" if recursive else "")
    return client.stream("GET", f"/v1/sandboxes/{sid}/files/watch?{q}", timeout=15)


def collect(stream, until, limit=2000):
    """Events until one satisfies @until (the list so far, that one included)."""
    got = []
    for _ in range(limit):
        ev = stream.next()
        assert ev is not None, f"stream ended; got {got}"
        got.append((ev["type"], ev.get("path")))
        if until(ev):
            return got
    raise AssertionError(f"not seen in {limit} events: {got[-20:]}")


def test_events_recursive(client, sandbox):
    sid = sandbox["id"]
    client.sh(sid, "rm -rf /home/user/w && mkdir -p /home/user/w/old")
    s = watch(client, sid, "/home/user/w")
    assert isinstance(s, EventStream), s.describe()
    client.sh(sid, "cd /home/user/w && echo hi > a && chmod 600 a && mv a b && rm b && "
                   "mkdir new && sleep 0.3 && echo x > new/inner && echo y > old/deep && "
                   "touch /home/user/w/END")
    got = collect(s, lambda e: e.get("path") == "/home/user/w/END")
    s.close()
    want = [("create", "/home/user/w/a"), ("write", "/home/user/w/a"),
            ("chmod", "/home/user/w/a"), ("rename", "/home/user/w/a"),
            ("create", "/home/user/w/b"), ("remove", "/home/user/w/b"),
            ("create", "/home/user/w/new"), ("create", "/home/user/w/new/inner"),
            ("write", "/home/user/w/new/inner"), ("create", "/home/user/w/old/deep")]
    for w in want:
        assert w in got, f"{w} missing from {got}"


def test_not_recursive(client, sandbox):
    sid = sandbox["id"]
    client.sh(sid, "rm -rf /home/user/n && mkdir -p /home/user/n/sub")
    s = watch(client, sid, "/home/user/n", recursive=False)
    assert isinstance(s, EventStream), s.describe()
    client.sh(sid, "echo x > /home/user/n/sub/f; touch /home/user/n/END")
    got = collect(s, lambda e: e.get("path") == "/home/user/n/END")
    s.close()
    assert not [g for g in got if g[1].startswith("/home/user/n/sub/")], got


@pytest.mark.parametrize("path,status,code", [
    ("../etc", 400, "invalid_field"),
    ("/home/user/../../etc/..", None, None),  # normalized inside: allowed, the sandbox's /
    # a magic link: ELOOP from openat2 (jail); without openat2 (gvisor) the link itself is
    # opened O_NOFOLLOW, which is no directory: refused either way
    ("/proc/self/fd/0", (400, 409), ("invalid_path", "not_a_directory")),
    ("/nonexistent", 404, "not_found"),
    ("/etc/hostname", 409, "not_a_directory"),
    ("/root", 403, "forbidden"),
])
def test_hostile_paths(client, sandbox, path, status, code):
    s = watch(client, sandbox["id"], path)
    if status is None:
        if isinstance(s, EventStream):
            s.close()
        return
    assert not isinstance(s, EventStream), f"{path}: a watch was opened"
    assert_error(s, status, code)


@gvisor_slow
def test_symlink_out_stays_inside(client, sandbox):
    """A symlink to / resolves to the sandbox's own root (the agent cannot see the host's)."""
    sid = sandbox["id"]
    client.sh(sid, "rm -f /home/user/up && ln -s / /home/user/up")
    s = watch(client, sid, "/home/user/up/tmp", recursive=False)
    assert isinstance(s, EventStream), s.describe()
    client.sh(sid, "touch /tmp/seen-by-watch")
    got = collect(s, lambda e: e.get("path", "").endswith("/seen-by-watch"))
    s.close()
    assert got[-1] == ("create", "/home/user/up/tmp/seen-by-watch")


@gvisor_slow
def test_overflow_is_said(client, sandbox):
    """A flood of events while nobody reads: the kernel's queue overflows and the reader is
    told so, once, explicitly."""
    sid = sandbox["id"]
    client.sh(sid, "rm -rf /home/user/f && mkdir /home/user/f")
    s = watch(client, sid, "/home/user/f")
    assert isinstance(s, EventStream), s.describe()
    client.exec(sid, argv=["sh", "-c", "cd /home/user/f && i=0; while [ $i -lt 60000 ]; do "
                           "echo x > f$i; i=$((i+1)); done; touch END"], timeout_s=120)
    got = collect(s, lambda e: e["type"] == "overflow" or e.get("path") == "/home/user/f/END",
                  limit=200000)
    s.close()
    assert got[-1][0] == "overflow", f"no overflow after {len(got)} events"


def test_watch_limit_and_release(client, sandbox):
    sid = sandbox["id"]
    open_ = []
    for _ in range(16):
        s = watch(client, sid, "/tmp", recursive=False)
        assert isinstance(s, EventStream), s.describe()
        open_.append(s)
    assert_error(watch(client, sid, "/tmp"), 429, "quota_exceeded")
    for s in open_:
        s.close()
    deadline = time.monotonic() + 10
    while True:
        s = watch(client, sid, "/tmp")
        if isinstance(s, EventStream):
            s.close()
            break
        assert time.monotonic() < deadline, "closed watches were never released"
        time.sleep(0.2)
    assert client.sh(sid, "echo alive") == "alive\n"


def test_hostile_names(client, sandbox):
    """Names are the sandbox's bytes: a newline, a quote and bytes that are not UTF-8 come
    as one JSON line each, with the exact bytes in path_b64."""
    import base64
    sid = sandbox["id"]
    client.sh(sid, "rm -rf /home/user/h && mkdir /home/user/h")
    s = watch(client, sid, "/home/user/h", recursive=False)
    assert isinstance(s, EventStream), s.describe()
    client.sh(sid, "cd /home/user/h && touch \"$(printf 'a\\nb\\042c\\377')\" && touch END")
    got = []
    for _ in range(50):
        ev = s.next()
        assert ev is not None
        got.append(ev)
        if ev["path"] == "/home/user/h/END":
            break
    s.close()
    odd = [e for e in got if "path_b64" in e]
    assert odd, got
    assert base64.b64decode(odd[0]["path_b64"]) == b"/home/user/h/a\nb\"c\xff"
