"""The API of cordond against docs/api/openapi.yaml: sandboxes, exec, processes, files, audit,
/healthz, /metrics, and the route table itself."""

import json
import os
import re
import time
import uuid

import pytest

from conftest import (FILE_ENTRY_REQUIRED, OPENAPI, SANDBOX_KEYS, EventStream,
                      assert_error, b64, get_metrics, host_procs, parse_time, read_int,
                      requires_daemon, sandbox_cgroups, unb64, unique_sleep, wait_until)

pytestmark = requires_daemon

DEFAULT_LIMITS = {"cpus": 1, "memory_mb": 512, "pids": 256, "disk_mb": 4096}


def check_sandbox(sb):
    assert set(sb) == SANDBOX_KEYS, f"Sandbox keys (additionalProperties: false): {sorted(sb)}"
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,64}", sb["id"]), sb["id"]
    assert sb["runtime"] == "jail", sb
    assert sb["state"] in ("creating", "ready", "running", "paused", "stopped", "destroyed"), sb
    c, e = parse_time(sb["created_at"]), parse_time(sb["expires_at"])
    assert abs(e - c - sb["timeout_s"]) <= 2, f"expires_at is not created_at + timeout_s: {sb}"


# ---------------------------------------------------------------------------------------------
# sandboxes


def test_create_defaults(client, fresh):
    t0 = time.time()
    sb = fresh()
    check_sandbox(sb)
    assert sb["template"] == "host"
    assert sb["state"] == "ready", sb
    assert sb["timeout_s"] == 300, sb
    assert abs(parse_time(sb["created_at"]) - t0) < 5, sb
    assert abs(parse_time(sb["expires_at"]) - (t0 + 300)) < 5, sb
    assert sb["limits"] == DEFAULT_LIMITS, sb
    assert sb["network"].get("policy") == "deny", sb
    assert sb["network"].get("allow", []) == [], sb
    assert sb["metadata"] == {}, sb
    # An empty body is {} too, and null means absent.
    r = client.post("/v1/sandboxes", b"", headers={"Content-Type": "application/json"})
    assert r.status == 201, r.describe()
    client.destroy(r.json()["id"])
    r = client.post("/v1/sandboxes", {"timeout_s": None, "limits": None, "metadata": None})
    assert r.status == 201, r.describe()
    sb2 = r.json()
    client.destroy(sb2["id"])
    assert sb2["timeout_s"] == 300 and sb2["limits"] == DEFAULT_LIMITS and sb2["metadata"] == {}, sb2
    assert sb2["id"] != sb["id"]


@pytest.mark.any_runtime
def test_create_custom(client, fresh):
    secret = "s3cr3t-" + uuid.uuid4().hex
    # The jail: the host-side checks below read its processes' cgroups (auto's choice is
    # test_runtime.py's; gvisor's limits are tests/gvisor's).
    body = {"template": "host", "runtime": "jail", "timeout_s": 120,
            "limits": {"cpus": 0.5, "memory_mb": 64, "pids": 64, "disk_mb": 128},
            "network": {"policy": "deny"},
            "env": {"CORDON_TEST_VAR": "hello world", "SECRET_TOKEN": secret},
            "metadata": {"user": "alice", "job": "42", "emoji": "\u00e9\u2603"}}
    sb = fresh(body)
    check_sandbox(sb)
    assert sb["runtime"] == "jail"
    assert sb["timeout_s"] == 120
    assert sb["limits"] == body["limits"], sb
    assert sb["metadata"] == body["metadata"], sb
    assert secret not in json.dumps(sb), "env values must not be echoed in the Sandbox object"
    info = client.info(sb["id"])
    assert info["limits"] == body["limits"] and info["metadata"] == body["metadata"], info
    # The environment is the sandbox's, in every process.
    out = client.sh(sb["id"], 'printf "%s" "$CORDON_TEST_VAR"')
    assert out == "hello world"
    # The limits are the cgroup's: read them on the host through a process of the sandbox.
    marker = unique_sleep()
    s = client.start_process(sb["id"], argv=["sleep", marker], timeout_s=0)
    s.close()
    pids = wait_until(lambda: host_procs(marker, argv0="sleep"), 5)
    assert pids, "the sandbox's sleep is not visible on the host"
    cgs = sandbox_cgroups(pids[0])
    assert cgs, f"the sandbox's process is in no cordon cgroup: {open(f'/proc/{pids[0]}/cgroup').read()}"
    checked = set()
    for d in cgs:
        if os.path.exists(os.path.join(d, "memory.limit_in_bytes")):
            assert int(read_int(os.path.join(d, "memory.limit_in_bytes"))) == 64 << 20, d
            checked.add("memory")
        if os.path.exists(os.path.join(d, "memory.max")):
            assert int(read_int(os.path.join(d, "memory.max"))) == 64 << 20, d
            checked.add("memory")
        if os.path.exists(os.path.join(d, "pids.max")):
            assert read_int(os.path.join(d, "pids.max")) == "64", d
            checked.add("pids")
        if os.path.exists(os.path.join(d, "cpu.cfs_quota_us")):
            q = int(read_int(os.path.join(d, "cpu.cfs_quota_us")))
            p = int(read_int(os.path.join(d, "cpu.cfs_period_us")))
            assert abs(q / p - 0.5) < 0.01, (d, q, p)
            checked.add("cpu")
        if os.path.exists(os.path.join(d, "cpu.max")):
            q, p = read_int(os.path.join(d, "cpu.max")).split()
            assert abs(int(q) / int(p) - 0.5) < 0.01, d
            checked.add("cpu")
    assert checked == {"memory", "pids", "cpu"}, f"limits not found in cgroups {cgs}: {checked}"


def test_info_and_list_filter(client, fresh):
    tag = uuid.uuid4().hex[:8]
    a = fresh(metadata={"suite": tag, "user": "alice"})
    b = fresh(metadata={"suite": tag, "user": "bob"})
    c = fresh(metadata={"suite": tag, "user": "alice smith", "job": "7"})
    info = client.info(a["id"])
    check_sandbox(info)
    assert info["id"] == a["id"] and info["metadata"] == a["metadata"]
    ids = [s["id"] for s in client.list()]
    assert {a["id"], b["id"], c["id"]} <= set(ids)
    # Creation order.
    assert ids.index(a["id"]) < ids.index(b["id"]) < ids.index(c["id"]), ids
    got = [s["id"] for s in client.list(f"?metadata.suite={tag}")]
    assert got == [a["id"], b["id"], c["id"]]
    got = [s["id"] for s in client.list(f"?metadata.suite={tag}&metadata.user=alice")]
    assert got == [a["id"]]
    got = [s["id"] for s in client.list(f"?metadata.suite={tag}&metadata.user=alice+smith")]
    assert got == [c["id"]], "+ is a space in a filter value"
    got = [s["id"] for s in client.list(f"?metadata.suite={tag}&metadata.user=alice%20smith")]
    assert got == [c["id"]]
    got = [s["id"] for s in client.list(f"?metadata.suite={tag}&metadata.job=7")]
    assert got == [c["id"]]
    assert client.list(f"?metadata.suite={tag}&metadata.user=carol") == []
    for s in client.list():
        check_sandbox(s)


@pytest.mark.any_runtime
def test_destroy_then_404(client):
    sb = client.create()
    client.destroy(sb["id"])
    for method, path in (("GET", ""), ("DELETE", ""), ("POST", "/exec")):
        body = {"argv": ["true"]} if path == "/exec" else None
        r = client.request(method, f"/v1/sandboxes/{sb['id']}{path}", body)
        assert_error(r, 404, "not_found")
    assert sb["id"] not in [s["id"] for s in client.list()]


def test_set_timeout_moves_expires_at(client, fresh, daemon):
    sb = fresh(timeout_s=60)
    e0 = parse_time(sb["expires_at"])
    t0 = time.time()
    r = client.post(f"/v1/sandboxes/{sb['id']}/timeout", {"timeout_s": 500})
    assert r.status == 200, r.describe()
    sb2 = r.json()
    check_sandbox(sb2)
    e1 = parse_time(sb2["expires_at"])
    assert e1 - e0 > 400, (sb, sb2)
    assert abs(e1 - (t0 + 500)) < 3, sb2
    assert parse_time(client.info(sb["id"])["expires_at"]) == e1
    # Shortening works too.
    sb3 = client.ok("POST", f"/v1/sandboxes/{sb['id']}/timeout", {"timeout_s": 30})
    assert abs(parse_time(sb3["expires_at"]) - (time.time() + 30)) < 3, sb3
    # Beyond the server's maximum (--max-timeout 600): out of range.
    r = client.post(f"/v1/sandboxes/{sb['id']}/timeout", {"timeout_s": daemon.max_timeout + 1})
    e = assert_error(r, 400, "invalid_field")
    assert "timeout_s" in e["message"]
    assert parse_time(client.info(sb["id"])["expires_at"]) == parse_time(sb3["expires_at"])


# ---------------------------------------------------------------------------------------------
# exec


@pytest.mark.any_runtime
def test_exec_exit_code_stdout_stderr(client, sandbox):
    sid = sandbox["id"]
    res = client.exec(sid, cmd="echo out; echo err >&2; exit 3")
    assert res["exit_code"] == 3 and res["signal"] == 0, res
    assert res["stdout"] == "out\n" and res["stderr"] == "err\n", res
    assert res["timed_out"] is False and res["oom"] is False, res
    assert isinstance(res["duration_ms"], int) and res["duration_ms"] >= 0, res
    res = client.exec(sid, argv=["echo", "a b", "$HOME"])
    assert res["exit_code"] == 0 and res["stdout"] == "a b $HOME\n", res
    res = client.exec(sid, argv=["no-such-command-xyz"])
    assert res["exit_code"] == 127, res
    res = client.exec(sid, argv=["/etc/hostname"])
    assert res["exit_code"] in (126, 127), res


@pytest.mark.any_runtime
def test_exec_signal_death(client, sandbox):
    res = client.exec(sandbox["id"], cmd="kill -KILL $$")
    assert res["exit_code"] == -1 and res["signal"] == 9, res
    res = client.exec(sandbox["id"], cmd="kill -TERM $$")
    assert res["exit_code"] == -1 and res["signal"] == 15, res
    assert res["timed_out"] is False, res


@pytest.mark.any_runtime
def test_exec_timeout(client, sandbox):
    t0 = time.monotonic()
    res = client.exec(sandbox["id"], argv=["sleep", "30"], timeout_s=1)
    dt = time.monotonic() - t0
    assert res["timed_out"] is True, res
    assert res["exit_code"] == -1 and res["signal"] != 0, res
    assert 0.9 < dt < 5, f"exec with timeout_s=1 took {dt:.2f}s"
    assert 900 <= res["duration_ms"] < 5000, res
    # The sandbox is still usable and the killed process is gone.
    assert client.sh(sandbox["id"], "echo alive") == "alive\n"


@pytest.mark.any_runtime
def test_exec_stdin(client, sandbox):
    res = client.exec(sandbox["id"], argv=["cat"], stdin="hello\nworld \u00e9\n")
    assert res["exit_code"] == 0 and res["stdout"] == "hello\nworld \u00e9\n", res
    # Default stdin is empty (closed), so cat ends at once.
    res = client.exec(sandbox["id"], argv=["cat"], timeout_s=5)
    assert res["timed_out"] is False and res["stdout"] == "", res


def test_exec_env_cwd_user(client, sandbox):
    sid = sandbox["id"]
    res = client.exec(sid, cmd='printf "%s|%s" "$FOO" "$BAR"', env={"FOO": "1 2", "BAR": "x=y"})
    assert res["stdout"] == "1 2|x=y", res
    assert client.sh(sid, "pwd", cwd="/tmp") == "/tmp\n"
    assert client.sh(sid, "id -u") == "1000\n", "default user is uid 1000"
    assert client.sh(sid, "id -u", user="user") == "1000\n"
    assert client.sh(sid, "id -u", user="root") == "0\n"
    home = client.sh(sid, "pwd").strip()
    assert home == client.sh(sid, 'printf "%s\\n" "$HOME"').strip() and home != "/", \
        "default cwd is the user's home"
    # "user" has no capabilities and cannot get any back (the bounding set is empty too);
    # root holds the sandbox root's set (CAPS_SANDBOX_ROOT), in its user namespace only.
    want = {"user": "0000000000000000", "root": "00000000800405fb"}
    for user in ("root", "user"):
        caps = client.sh(sid, "grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status", user=user)
        assert len(caps.splitlines()) == 5, caps
        for line in caps.splitlines():
            held = "0000000000000000" if line.startswith(("CapInh", "CapAmb")) else want[user]
            assert line.split()[1] == held, f"{user}: {caps}"
    # cwd that does not exist: not a 200 with exit 0.
    r = client.post(f"/v1/sandboxes/{sid}/exec", {"argv": ["pwd"], "cwd": "/nonexistent-dir"})
    assert r.status != 200 or r.json()["exit_code"] != 0, r.describe()


@pytest.mark.any_runtime
def test_exec_output_cap(client, fresh):
    sandbox = fresh()  # its own: a failure here must not take the shared sandbox down
    big = 16 << 20
    res = client.exec(sandbox["id"], cmd=f"head -c {big} /dev/zero | tr '\\0' a", timeout=60)
    assert res.get("stdout_truncated") is True, {k: v for k, v in res.items() if k != "stdout"}
    assert 0 < len(res["stdout"]) < big, len(res["stdout"])
    assert set(res["stdout"]) == {"a"}
    assert res.get("stderr_truncated", False) is False
    res = client.exec(sandbox["id"], cmd=f"head -c {big} /dev/zero | tr '\\0' b >&2")
    assert res.get("stderr_truncated") is True and res.get("stdout_truncated", False) is False
    res = client.exec(sandbox["id"], cmd="echo small")
    assert res.get("stdout_truncated", False) is False


def test_exec_oom(client, fresh):
    sb = fresh(limits={"memory_mb": 32})
    # The shell holds the whole command substitution in memory: ~200 MB > 32 MiB.
    res = client.exec(sb["id"], cmd="x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo survived",
                      timeout_s=30, timeout=60)
    assert res["oom"] is True, res
    assert "survived" not in res["stdout"], res


@pytest.mark.any_runtime
def test_exec_invalid_utf8_output(client, sandbox):
    res = client.exec(sandbox["id"], cmd="printf 'a\\377b'")
    assert res["stdout"] == "a\ufffdb", res


# ---------------------------------------------------------------------------------------------
# streamed processes


@pytest.mark.any_runtime
def test_process_stream(client, sandbox):
    s = client.start_process(sandbox["id"], cmd="echo hi; echo err >&2; exit 5", tag="t1")
    assert s.headers.get("content-type", "").startswith("application/x-ndjson"), s.headers
    assert s.start.get("tag") == "t1", s.start
    out, err, ex = s.until_exit()
    assert out == b"hi\n" and err == b"err\n", s.events
    assert ex is not None, f"no exit event: {s.events}"
    assert ex == s.events[-1], "exit is the last event"
    assert ex["exit_code"] == 5 and ex["signal"] == 0 and ex["pid"] == s.pid, ex
    assert set(ex) == {"type", "pid", "exit_code", "signal", "timed_out", "oom", "duration_ms"}, ex
    for ev in s.events:
        assert ev["pid"] == s.pid
        if ev["type"] in ("stdout", "stderr"):
            assert set(ev) == {"type", "pid", "data"}, ev
            # Padded standard base64.
            assert len(ev["data"]) % 4 == 0 and re.fullmatch(r"[A-Za-z0-9+/]*=*", ev["data"]), ev


@pytest.mark.any_runtime
def test_process_binary_output(client, sandbox):
    s = client.start_process(sandbox["id"], cmd="printf '\\000\\001\\377\\n'; head -c 300000 /dev/zero")
    out, _, ex = s.until_exit()
    assert ex["exit_code"] == 0
    assert out == b"\x00\x01\xff\n" + b"\0" * 300000


@pytest.mark.any_runtime
def test_process_stdin_and_close(client, sandbox):
    sid = sandbox["id"]
    s = client.start_process(sid, argv=["cat"])
    base = f"/v1/sandboxes/{sid}/processes/{s.pid}/stdin"
    r = client.post(base, {"data": b64(b"hello\n\x00\xff")})
    assert r.status == 204, r.describe()
    ev = s.read_until(lambda e: e["type"] == "stdout")
    assert ev is not None and unb64(ev["data"]).startswith(b"hello"), s.events
    r = client.post(base, {"data": b64("more\n"), "eof": True})
    assert r.status == 204, r.describe()
    out, _, ex = s.until_exit()
    allout = b"".join(unb64(e["data"]) for e in s.events if e["type"] == "stdout")
    assert allout == b"hello\n\x00\xffmore\n", s.events
    assert ex is not None and ex["exit_code"] == 0, s.events
    r = client.post(base, {"data": b64("late")})
    assert_error(r, 409, "conflict")


@pytest.mark.any_runtime
def test_process_stdin_eof_only(client, sandbox):
    s = client.start_process(sandbox["id"], argv=["wc", "-c"])
    r = client.post(f"/v1/sandboxes/{sandbox['id']}/processes/{s.pid}/stdin", {"eof": True})
    assert r.status == 204, r.describe()
    out, _, ex = s.until_exit()
    assert out.strip() == b"0" and ex["exit_code"] == 0, s.events


@pytest.mark.any_runtime
@pytest.mark.parametrize("sig,num", [("SIGTERM", 15), ("KILL", 9), (2, 2)])
def test_process_signal(client, sandbox, sig, num):
    s = client.start_process(sandbox["id"], argv=["sleep", "1000"])
    r = client.post(f"/v1/sandboxes/{sandbox['id']}/processes/{s.pid}/signal", {"signal": sig})
    assert r.status == 204, r.describe()
    _, _, ex = s.until_exit()
    assert ex is not None and ex["signal"] == num and ex["exit_code"] == -1, s.events


def test_process_reattach_and_list(client, sandbox):
    sid = sandbox["id"]
    marker = unique_sleep()
    s = client.start_process(sid, cmd=f"while :; do echo tick; sleep 0.1; done & sleep {marker}; exit 7",
                             tag="reattach-me", timeout_s=0)
    pid = s.pid
    s.close()  # closing the stream does not stop the process
    time.sleep(0.3)
    assert host_procs(marker, argv0="sleep"), "the process died with its stream"
    procs = client.ok("GET", f"/v1/sandboxes/{sid}/processes")["processes"]
    mine = [p for p in procs if p["pid"] == pid]
    assert len(mine) == 1, procs
    p = mine[0]
    assert set(p) <= {"pid", "tag", "argv", "cwd", "user", "started_at"}, p
    assert p["tag"] == "reattach-me" and p["user"] == "user", p
    assert p["argv"][:2] == ["/bin/sh", "-c"] and marker in p["argv"][2], p
    assert abs(parse_time(p["started_at"]) - time.time()) < 10, p
    # Reattach: start, then output from now on.
    r = client.stream("GET", f"/v1/sandboxes/{sid}/processes/{pid}/events")
    assert isinstance(r, EventStream), r.describe()
    first = r.next()
    assert first == {"type": "start", "pid": pid, "tag": "reattach-me"} or \
        (first["type"] == "start" and first["pid"] == pid), first
    ev = r.read_until(lambda e: e["type"] == "stdout")
    assert ev is not None and b"tick" in unb64(ev["data"]), r.events
    # Kill the sleep only: the shell then exits 7.
    for hp in host_procs(marker, argv0="sleep"):
        os.kill(hp, 9)
    ex = r.read_until(lambda e: e["type"] == "exit")
    r.close()
    assert ex is not None and ex["exit_code"] == 7, r.events
    procs = client.ok("GET", f"/v1/sandboxes/{sid}/processes")["processes"]
    assert pid not in [p["pid"] for p in procs], "an exited process is still listed"
    # After the exit: its exit event alone.
    r = client.stream("GET", f"/v1/sandboxes/{sid}/processes/{pid}/events")
    assert isinstance(r, EventStream), r.describe()
    _, _, ex2 = r.until_exit()
    assert [e["type"] for e in r.events] == ["exit"] and ex2["exit_code"] == 7, r.events
    # Unknown pid.
    assert_error(client.get(f"/v1/sandboxes/{sid}/processes/999999/events"), 404, "not_found")
    assert_error(client.post(f"/v1/sandboxes/{sid}/processes/999999/signal", {"signal": "TERM"}),
                 404, "not_found")


def test_stdin_close_or_signal_crossing_the_exit_keeps_the_sandbox(daemon, client, fresh):
    """A client's stdin close and signal sent as its process exits reach the agent after it
    reaped the process: its ESRCH comes back for a channel cordond has closed, which is no
    protocol error (it destroyed the sandbox about one time in a hundred before)."""
    sid = fresh()["id"]
    other = daemon.client()
    for i in range(400):
        s = client.start_process(sid, argv=["true"])
        r = other.post(f"/v1/sandboxes/{sid}/processes/{s.pid}/stdin", {"eof": True})
        assert r.status in (204, 404, 409), r.describe()
        r = other.post(f"/v1/sandboxes/{sid}/processes/{s.pid}/signal", {"signal": "TERM"})
        assert r.status in (200, 202, 204, 404, 409), r.describe()
        s.until_exit()
        assert other.get(f"/v1/sandboxes/{sid}").status == 200, f"the sandbox went at {i}:\n{daemon.log_tail()}"
    assert "breaks the protocol" not in daemon.log_tail(20000)


@pytest.mark.any_runtime
def test_process_timeout(client, sandbox):
    s = client.start_process(sandbox["id"], argv=["sleep", "100"], timeout_s=1)
    t0 = time.monotonic()
    _, _, ex = s.until_exit()
    assert ex is not None and ex["timed_out"] is True, s.events
    assert time.monotonic() - t0 < 5


# ---------------------------------------------------------------------------------------------
# files


def fpath(sid, p, op=""):
    from urllib.parse import quote
    return f"/v1/sandboxes/{sid}/files{op}?path={quote(p, safe='/')}"


def check_entry(e, path=None, type_=None):
    assert FILE_ENTRY_REQUIRED <= set(e) <= FILE_ENTRY_REQUIRED | {"symlink_target"}, e
    parse_time(e["mtime"])
    if path:
        assert e["path"] == path and e["name"] == os.path.basename(path), e
    if type_:
        assert e["type"] == type_, e


def test_files_upload_download(client, sandbox):
    sid = sandbox["id"]
    data = b"hello files\n"
    r = client.put(fpath(sid, "/home/user/a.txt"), data)
    assert r.status == 200, r.describe()
    e = r.json()
    check_entry(e, "/home/user/a.txt", "file")
    assert e["size"] == len(data)
    r = client.get(fpath(sid, "/home/user/a.txt"))
    assert r.status == 200 and r.body == data, r.describe()
    assert r.content_type.startswith("application/octet-stream"), r.describe()
    # It is really in the sandbox, owned by the sandbox's user.
    assert client.sh(sid, "cat /home/user/a.txt") == data.decode()
    assert client.sh(sid, "stat -c %u /home/user/a.txt") == "1000\n"
    # Replace.
    assert client.put(fpath(sid, "/home/user/a.txt"), b"x").status == 200
    assert client.get(fpath(sid, "/home/user/a.txt")).body == b"x"
    # Written in the sandbox, read through the API.
    client.sh(sid, "printf 'from inside' > /tmp/inside.txt")
    assert client.get(fpath(sid, "/tmp/inside.txt")).body == b"from inside"
    # Empty file.
    r = client.put(fpath(sid, "/home/user/empty"), b"")
    assert r.status == 200 and r.json()["size"] == 0, r.describe()
    assert client.get(fpath(sid, "/home/user/empty")).body == b""


@pytest.mark.any_runtime
def test_files_binary_and_5mib(client, sandbox):
    sid = sandbox["id"]
    blob = bytes(range(256)) * 4
    assert client.put(fpath(sid, "/home/user/bin"), blob).status == 200
    assert client.get(fpath(sid, "/home/user/bin")).body == blob
    big = os.urandom(5 << 20)
    r = client.put(fpath(sid, "/home/user/big"), big, timeout=60)
    assert r.status == 200, r.describe()
    assert r.json()["size"] == len(big)
    r = client.get(fpath(sid, "/home/user/big"), timeout=60)
    assert r.status == 200 and len(r.body) == len(big) and r.body == big
    import hashlib
    assert client.sh(sid, "sha256sum /home/user/big").split()[0] == hashlib.sha256(big).hexdigest()


def test_files_mkdir_list_stat(client, sandbox):
    sid = sandbox["id"]
    root = "/home/user/tree-" + uuid.uuid4().hex[:6]
    r = client.post(f"/v1/sandboxes/{sid}/files/mkdir", {"path": f"{root}/a/b/c", "parents": True})
    assert r.status == 200, r.describe()
    check_entry(r.json(), f"{root}/a/b/c", "dir")
    # parents: true on an existing directory succeeds; without it, conflict.
    r = client.post(f"/v1/sandboxes/{sid}/files/mkdir", {"path": f"{root}/a/b/c", "parents": True})
    assert r.status == 200, r.describe()
    assert_error(client.post(f"/v1/sandboxes/{sid}/files/mkdir", {"path": f"{root}/a"}), 409, "conflict")
    # Missing parent without parents.
    assert_error(client.post(f"/v1/sandboxes/{sid}/files/mkdir", {"path": f"{root}/x/y"}), 404, "not_found")
    client.post(f"/v1/sandboxes/{sid}/files/mkdir", {"path": f"{root}/d"})
    client.put(fpath(sid, f"{root}/f1"), b"12345")
    client.put(fpath(sid, f"{root}/a/f2"), b"1")
    client.put(fpath(sid, f"{root}/a/b/c/f4"), b"1")
    client.sh(sid, f"ln -s f1 {root}/link")
    r = client.get(fpath(sid, root, "/list"))
    assert r.status == 200, r.describe()
    ents = r.json()["entries"]
    for e in ents:
        check_entry(e)
    got = {e["path"]: e["type"] for e in ents}
    assert got == {f"{root}/a": "dir", f"{root}/d": "dir", f"{root}/f1": "file",
                   f"{root}/link": "symlink"}, got
    link = [e for e in ents if e["type"] == "symlink"][0]
    assert link.get("symlink_target") == "f1", link
    f1 = [e for e in ents if e["path"].endswith("/f1")][0]
    assert f1["size"] == 5 and f1["name"] == "f1", f1
    r = client.get(fpath(sid, root, "/list") + "&depth=2")
    got2 = {e["path"] for e in r.json()["entries"]}
    assert got2 == set(got) | {f"{root}/a/f2", f"{root}/a/b"}, got2
    r = client.get(fpath(sid, root, "/list") + "&depth=32")
    got32 = {e["path"] for e in r.json()["entries"]}
    assert got32 == got2 | {f"{root}/a/b/c", f"{root}/a/b/c/f4"}, got32
    # Depth-first: a directory's descendants come right after it, as one block.
    order = [e["path"] for e in r.json()["entries"]]
    for i, p in enumerate(order):
        desc = [j for j, q in enumerate(order) if q.startswith(p + "/")]
        assert desc == list(range(i + 1, i + 1 + len(desc))), f"not depth-first at {p}: {order}"
    assert_error(client.get(fpath(sid, root, "/list") + "&depth=0"), 400, "invalid_field")
    assert_error(client.get(fpath(sid, root, "/list") + "&depth=33"), 400, "invalid_field")
    assert_error(client.get(fpath(sid, f"{root}/f1", "/list")), 409, "not_a_directory")
    assert_error(client.get(fpath(sid, f"{root}/nope", "/list")), 404, "not_found")
    # stat: symlinks are not followed.
    st = client.ok("GET", fpath(sid, f"{root}/link", "/stat"))
    check_entry(st, f"{root}/link", "symlink")
    assert st["symlink_target"] == "f1"
    st = client.ok("GET", fpath(sid, f"{root}/f1", "/stat"))
    check_entry(st, f"{root}/f1", "file")
    assert st["size"] == 5 and st["mode"] & 0o777 == int(client.sh(sid, f"stat -c %a {root}/f1"), 8)
    st = client.ok("GET", fpath(sid, root, "/stat"))
    check_entry(st, root, "dir")
    assert_error(client.get(fpath(sid, f"{root}/nope", "/stat")), 404, "not_found")


@pytest.mark.any_runtime
def test_files_move_remove(client, sandbox):
    sid = sandbox["id"]
    root = "/home/user/mv-" + uuid.uuid4().hex[:6]
    client.ok("POST", f"/v1/sandboxes/{sid}/files/mkdir", {"path": f"{root}/sub", "parents": True})
    client.put(fpath(sid, f"{root}/a"), b"A")
    r = client.post(f"/v1/sandboxes/{sid}/files/move", {"from": f"{root}/a", "to": f"{root}/sub/b"})
    assert r.status == 204, r.describe()
    assert_error(client.get(fpath(sid, f"{root}/a")), 404, "not_found")
    assert client.get(fpath(sid, f"{root}/sub/b")).body == b"A"
    assert_error(client.post(f"/v1/sandboxes/{sid}/files/move", {"from": f"{root}/a", "to": f"{root}/c"}),
                 404, "not_found")
    # Download of a directory: is_a_directory (a 409 like conflict).
    assert_error(client.get(fpath(sid, f"{root}/sub")), 409, "is_a_directory")
    # Remove a file, then a directory with everything in it.
    client.put(fpath(sid, f"{root}/sub/c"), b"C")
    assert client.delete(fpath(sid, f"{root}/sub/c")).status == 204
    assert_error(client.get(fpath(sid, f"{root}/sub/c")), 404, "not_found")
    r = client.delete(fpath(sid, root))
    assert r.status == 204, r.describe()
    assert client.exec(sid, argv=["test", "-e", root])["exit_code"] == 1
    assert_error(client.delete(fpath(sid, root)), 404, "not_found")
    # Upload into a missing directory.
    assert_error(client.put(fpath(sid, f"{root}/nodir/x"), b"x"), 404, "not_found")


# ---------------------------------------------------------------------------------------------
# audit


def audit_lines(client, sid):
    r = client.get(f"/v1/sandboxes/{sid}/audit")
    assert r.status == 200, r.describe()
    assert r.content_type.startswith("application/x-ndjson"), r.describe()
    assert r.body.endswith(b"\n"), r.body[-200:]
    assert b"\n\n" not in r.body, f"blank lines in the NDJSON audit stream: {r.body[:400]!r}"
    return r.body, [json.loads(x) for x in r.body.splitlines()]


def test_audit_events(client, fresh, daemon):
    secret = "hunter2-" + uuid.uuid4().hex
    sb = fresh(env={"SECRET_A": secret}, metadata={"a": "b"})
    sid = sb["id"]
    client.exec(sid, argv=["true"], env={"SECRET_B": secret + "b"}, tag="audited")
    client.put(fpath(sid, "/home/user/audited.txt"), b"abc")
    client.delete(fpath(sid, "/home/user/audited.txt"))
    body, recs = audit_lines(client, sid)
    events = [r["event"] for r in recs]
    for ev in ("sandbox.create", "sandbox.ready", "process.start", "process.exit", "file.write",
               "file.remove"):
        assert ev in events, f"no {ev} in the audit of {sid}: {events}"
    assert events.index("sandbox.create") < events.index("sandbox.ready") < events.index("process.start")
    assert [r["seq"] for r in recs] == list(range(1, len(recs) + 1))
    for r in recs:
        assert set(r) == {"v", "seq", "prev", "t", "sandbox", "event", "fields"}, r
        assert r["sandbox"] == sid and r["v"] == 1, r
    ps = [r for r in recs if r["event"] == "process.start"][-1]["fields"]
    assert ps["argv"] == ["true"] and "SECRET_B" in ps["env_names"], ps
    pe = [r for r in recs if r["event"] == "process.exit"][-1]["fields"]
    assert pe["code"] == 0 and pe["timed_out"] is False, pe
    fw = [r for r in recs if r["event"] == "file.write"][-1]["fields"]
    assert fw["path"] == "/home/user/audited.txt" and fw["bytes"] == 3, fw
    assert secret.encode() not in body, "an env value reached the audit log"
    # The API streams the file's bytes unchanged.
    with open(os.path.join(daemon.audit_dir, f"{sid}.jsonl"), "rb") as f:
        ondisk = f.read()
    assert ondisk.startswith(body), "GET .../audit is not the audit file's bytes"
    # Following: the stream stays open and delivers new records.
    s = client.stream("GET", f"/v1/sandboxes/{sid}/audit?follow=1", timeout=10)
    assert isinstance(s, EventStream), s.describe()
    for _ in recs:
        s.next()
    client.exec(sid, argv=["true"], tag="followed")
    ev = s.read_until(lambda e: e["event"] == "process.start")
    s.close()
    assert ev is not None and ev["fields"].get("tag") == "followed", s.events[-3:]
    assert_error(client.get(f"/v1/sandboxes/{sid}/audit?follow=maybe"), 400)


# ---------------------------------------------------------------------------------------------
# service


def test_healthz(client):
    r = client.get("/healthz")
    assert r.status == 200 and r.json()["status"] == "ok", r.describe()
    assert r.content_type.startswith("application/json")


# The names cordond exposes (src/daemon/metrics.c); the contract does not fix them.
LIVE = "cordon_sandboxes_live"
POOL = "cordon_pool_ready"
CREATES = "cordon_sandbox_creates_total"
FAILS = "cordon_sandbox_create_failures_total"
OOMS = "cordon_oom_kills_total"
TIMEOUTS = "cordon_process_timeouts_total"
AUDITS = "cordon_audit_events_total"


def test_metrics(client, fresh):
    m0 = get_metrics(client)
    for name, kind in ((LIVE, "gauge"), (POOL, "gauge"), (CREATES, "counter"), (FAILS, "counter"),
                       (OOMS, "counter"), (TIMEOUTS, "counter"), (AUDITS, "counter")):
        assert name in m0.samples, f"no {name} in /metrics: {m0.names()}"
        assert m0.types.get(name) == kind, f"{name}: TYPE {m0.types.get(name)}, expected {kind}"
    live, pool, creates, fails, ooms, timeouts, audits = LIVE, POOL, CREATES, FAILS, OOMS, TIMEOUTS, AUDITS
    hists = m0.histograms(r"^cordon")
    assert hists, f"no latency histogram in /metrics: {sorted(m0.types.items())}"
    assert {"cordon_create_latency_seconds", "cordon_exec_latency_seconds"} <= set(hists), hists
    # Histograms are well formed: _bucket with le including +Inf, _sum, _count.
    for h in hists:
        buckets = m0.samples.get(h + "_bucket", [])
        assert any('le="+Inf"' in lbl for lbl, _ in buckets), f"{h}: no +Inf bucket"
        assert h + "_count" in m0.samples and h + "_sum" in m0.samples, h
    hist_count = sum(m0.total(h + "_count") for h in hists)
    # Move them.
    sb = fresh(limits={"memory_mb": 32})
    client.exec(sb["id"], argv=["sleep", "10"], timeout_s=1)
    client.exec(sb["id"], cmd="x=$(head -c 200000000 /dev/zero | tr '\\0' a)", timeout_s=30, timeout=60)
    m1 = get_metrics(client)
    assert m1.total(live) >= m0.total(live) + 1, (live, m0.total(live), m1.total(live))
    assert m1.total(creates) >= m0.total(creates) + 1, creates
    assert m1.total(timeouts) >= m0.total(timeouts) + 1, timeouts
    assert m1.total(ooms) >= m0.total(ooms) + 1, ooms
    assert m1.total(audits) >= m0.total(audits) + 4, audits
    assert sum(m1.total(h + "_count") for h in hists) > hist_count
    assert m1.total(pool) >= 0
    # A failed create (no such template) counts as a failure or at least not as a create.
    r = client.post("/v1/sandboxes", {"template": "no-such-template-xyz"})
    assert_error(r, 404, "not_found")
    m2 = get_metrics(client)
    assert m2.total(creates) == m1.total(creates) or m2.total(fails) > m1.total(fails)


# ---------------------------------------------------------------------------------------------
# the route table agrees with the contract


def documented_routes():
    routes, path = [], None
    with open(OPENAPI) as f:
        for line in f:
            m = re.match(r"^  (/\S*):\s*$", line)
            if m:
                path = m.group(1)
                continue
            if re.match(r"^\S", line):
                path = None
            m = re.match(r"^    (get|put|post|delete|patch):\s*$", line)
            if m and path:
                routes.append((m.group(1).upper(), path))
    return routes


def test_openapi_parse_sanity():
    routes = documented_routes()
    assert ("POST", "/v1/sandboxes") in routes and ("GET", "/healthz") in routes, routes
    assert len(routes) >= 20, routes


def test_routes_agree_with_contract(client, fresh):
    sid = fresh()["id"]
    client.put(fpath(sid, "/home/user/r.txt"), b"r")
    proc = client.start_process(sid, argv=["cat"], timeout_s=0)
    bodies = {
        ("POST", "/v1/sandboxes"): {},
        ("POST", "/v1/sandboxes/{id}/timeout"): {"timeout_s": 100},
        ("POST", "/v1/sandboxes/{id}/exec"): {"argv": ["true"]},
        ("POST", "/v1/sandboxes/{id}/processes"): {"argv": ["true"]},
        ("POST", "/v1/sandboxes/{id}/processes/{pid}/stdin"): {"data": b64("x")},
        ("POST", "/v1/sandboxes/{id}/processes/{pid}/signal"): {"signal": "CONT"},
        ("PUT", "/v1/sandboxes/{id}/files"): b"data",
        ("POST", "/v1/sandboxes/{id}/files/mkdir"): {"path": "/home/user/rdir", "parents": True},
        ("POST", "/v1/sandboxes/{id}/files/move"): {"from": "/home/user/rdir", "to": "/home/user/rdir2"},
        ("PUT", "/v1/sandboxes/{id}/network"): {"policy": "deny"},
        ("POST", "/v1/sandboxes/{id}/fork"): {"count": 1},
    }
    snap = client.post(f"/v1/sandboxes/{sid}/snapshots").json()["id"]
    query = {"/v1/sandboxes/{id}/files": "?path=/home/user/r.txt",
             "/v1/sandboxes/{id}/files/list": "?path=/home/user",
             "/v1/sandboxes/{id}/files/stat": "?path=/home/user"}
    routes = documented_routes()
    # Destructive ones last.
    last = [("POST", "/v1/sandboxes/{id}/files/move"), ("DELETE", "/v1/sandboxes/{id}/files"),
            ("DELETE", "/v1/snapshots/{id}"), ("DELETE", "/v1/sandboxes/{id}")]
    routes = [r for r in routes if r not in last] + [r for r in last if r in routes]
    bad = []
    for method, tmpl in routes:
        the_id = snap if tmpl.startswith("/v1/snapshots/") else sid
        path = tmpl.replace("{id}", the_id).replace("{pid}", str(proc.pid)) + query.get(tmpl, "")
        if tmpl.endswith("/events") or (method, tmpl) == ("POST", "/v1/sandboxes/{id}/processes"):
            s = client.stream(method, path, bodies.get((method, tmpl)), timeout=10)
            status = s.status
            s.close()
        else:
            r = client.request(method, path, bodies.get((method, tmpl)))
            status = r.status
            if (method, tmpl) == ("POST", "/v1/sandboxes") and status == 201:
                client.destroy(r.json()["id"])
            if tmpl.endswith("/fork") and status == 200:
                for kid in r.json():
                    client.destroy(kid["id"], missing_ok=True)
            if tmpl.endswith("/pause"):
                client.post(f"/v1/sandboxes/{sid}/resume")
            if status in (404, 405) or status >= 500:
                bad.append(r.describe())
            continue
        if status in (404, 405) or status >= 500:
            bad.append(f"{method} {path} -> {status}")
    proc.close()
    assert not bad, "documented routes that do not answer:\n" + "\n".join(bad)


@pytest.mark.parametrize("method,path", [
    ("GET", "/v1/nope"), ("GET", "/"), ("POST", "/v2/sandboxes"), ("GET", "/v1/sandboxes/x/y/z"),
    ("GET", "/healthz/extra"), ("GET", "/v1/sandboxes/{id}/filesx"),
])
def test_undocumented_route_is_json_404(client, sandbox, method, path):
    r = client.request(method, path.replace("{id}", sandbox["id"]))
    assert_error(r, 404, "not_found")


@pytest.mark.parametrize("method,path", [
    ("PATCH", "/v1/sandboxes"), ("DELETE", "/v1/sandboxes"), ("PUT", "/v1/sandboxes/{id}"),
    ("POST", "/healthz"), ("GET", "/v1/sandboxes/{id}/exec"),
])
def test_wrong_method_is_json_error(client, sandbox, method, path):
    r = client.request(method, path.replace("{id}", sandbox["id"]))
    # The contract has no error code for 405; 400 bad_request and 404 not_found are its codes.
    assert r.status in (400, 404, 405), r.describe()
    if r.status in (400, 404):
        assert_error(r, r.status, ("bad_request", "not_found"))
        return
    # 405 has no code in the contract's enum; at least the JSON shape and an Allow header.
    assert r.content_type.startswith("application/json"), r.describe()
    e = r.json()["error"]
    assert set(e) == {"code", "message"} and e["message"], r.describe()
    assert "allow" in r.headers, f"405 without an Allow header: {r.describe()}"
