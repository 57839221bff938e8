"""What file operations and execs run into inside a sandbox, named (issue 10): each errno of
the agent is a specific 4xx code of the contract, never 500 or 503; listings say when they are
cut and can be paged; names that are not UTF-8 come back exactly (name_b64/path_b64) and can
be used again; exec names a missing command, can return its output as base64, and a process
refused for want of the sandbox's pids is 429 quota_exceeded."""

import base64
import json
import uuid
from urllib.parse import quote, quote_from_bytes

import pytest

from conftest import assert_error, requires_daemon, start_daemon

pytestmark = requires_daemon


@pytest.fixture(scope="module")
def daemon():
    d = start_daemon(pool=0, max_sandboxes=8, max_timeout=600)
    yield d
    alive = d.alive()
    d.cleanup()
    assert alive, f"cordond died during the module:\n{d.log_tail()}"


def fpath(sid, p, op=""):
    q = quote_from_bytes(p, safe="/") if isinstance(p, bytes) else quote(p, safe="/")
    return f"/v1/sandboxes/{sid}/files{op}?path={q}"


def tmpdir(client, sid):
    root = "/tmp/fe-" + uuid.uuid4().hex[:8]
    client.ok("POST", f"/v1/sandboxes/{sid}/files/mkdir", {"path": root})
    return root


# ---------------------------------------------------------------------------------------------
# errno -> code


def test_read_only_file_system(client, sandbox):
    # The host template's /etc is a sealed read-only mount; /usr is a writable overlay on
    # the sandbox's own disk, owned by root inside: refused to "user" by its owner.
    sid = sandbox["id"]
    e = assert_error(client.put(fpath(sid, "/etc/cordon-ro-test"), b"x"), 409, "read_only")
    assert "/etc/cordon-ro-test" in e["message"] and "Read-only" in e["message"], e
    assert_error(client.post(f"/v1/sandboxes/{sid}/files/mkdir", {"path": "/etc/d-ro"}), 409,
                 "read_only")
    assert_error(client.delete(fpath(sid, "/etc/passwd")), (403, 409), ("read_only", "forbidden"))
    assert_error(client.put(fpath(sid, "/usr/cordon-ro-test"), b"x"), (403, 409),
                 ("forbidden", "read_only"))


def test_symlink_loop_is_invalid_path(client, sandbox):
    sid = sandbox["id"]
    root = tmpdir(client, sid)
    client.sh(sid, f"cd {root} && ln -s a b && ln -s b a")
    for op, req in (("", client.get), ("/list", client.get)):
        assert_error(req(fpath(sid, f"{root}/a", op)), 400, "invalid_path")
    assert_error(client.put(fpath(sid, f"{root}/a"), b"x"), 400, "invalid_path")
    assert_error(client.get(fpath(sid, f"{root}/a/x")), 400, "invalid_path")


def test_not_a_directory_and_is_a_directory(client, sandbox):
    sid = sandbox["id"]
    root = tmpdir(client, sid)
    client.put(fpath(sid, f"{root}/f"), b"file")
    assert_error(client.get(fpath(sid, f"{root}/f/x")), 409, "not_a_directory")
    assert_error(client.put(fpath(sid, f"{root}/f/x"), b"x"), 409, "not_a_directory")
    assert_error(client.get(fpath(sid, f"{root}/f", "/list")), 409, "not_a_directory")
    assert_error(client.post(f"/v1/sandboxes/{sid}/files/mkdir", {"path": f"{root}/f/d"}), 409,
                 "not_a_directory")
    assert_error(client.get(fpath(sid, root)), 409, "is_a_directory")
    assert_error(client.put(fpath(sid, root), b"x"), 409, "is_a_directory")


def test_cross_device_move(client, sandbox):
    sid = sandbox["id"]
    root = tmpdir(client, sid)
    client.put(fpath(sid, f"{root}/f"), b"x")
    # /dev/shm is a tmpfs of its own, writable by the sandbox's user
    shm = client.exec(sid, cmd="test -w /dev/shm && echo yes")["stdout"]
    if shm != "yes\n":
        pytest.skip("no second writable file system (/dev/shm) in this sandbox")
    e = assert_error(client.post(f"/v1/sandboxes/{sid}/files/move",
                                 {"from": f"{root}/f", "to": "/dev/shm/f"}), 409, "cross_device")
    assert "cross-device" in e["message"].lower(), e
    assert client.get(fpath(sid, f"{root}/f")).body == b"x"  # nothing moved


def test_full_disk_upload_is_no_space(client, fresh):
    sb = fresh(limits={"disk_mb": 16})
    sid = sb["id"]
    r = client.put(fpath(sid, "/tmp/big"), b"\0" * (24 << 20))
    e = assert_error(r, 409, "no_space")
    assert "retry-after" not in r.headers, r.describe()  # the user's to clear, not the host's
    assert "space" in e["message"].lower(), e
    # the sandbox lives on, and what fits still fits once the big file is gone
    client.delete(fpath(sid, "/tmp/big"))
    assert client.put(fpath(sid, "/tmp/small"), b"ok").status == 200


def test_name_too_long_is_invalid_path(client, sandbox):
    sid = sandbox["id"]
    assert_error(client.put(fpath(sid, "/tmp/" + "n" * 300), b"x"), 400, "invalid_path")


# ---------------------------------------------------------------------------------------------
# listings


def listing(client, sid, path, **q):
    extra = "".join(f"&{k}={v}" for k, v in q.items())
    r = client.get(fpath(sid, path, "/list") + extra)
    assert r.status == 200, r.describe()
    doc = r.json()
    assert isinstance(doc.get("truncated"), bool), doc.keys()
    return doc


def test_small_listing_is_not_truncated(client, sandbox):
    sid = sandbox["id"]
    root = tmpdir(client, sid)
    client.put(fpath(sid, f"{root}/a"), b"1")
    doc = listing(client, sid, root)
    assert doc["truncated"] is False and "next_cursor" not in doc, doc
    assert [e["name"] for e in doc["entries"]] == ["a"]


def test_big_listing_is_truncated_and_pages(client, sandbox):
    sid = sandbox["id"]
    root = tmpdir(client, sid)
    n = 10100  # over the agent's 10,000 entries per reply
    client.sh(sid, f"cd {root} && mkdir sub && touch sub/x sub/y && seq 1 {n} | xargs touch",
              timeout=120)
    want = {str(i) for i in range(1, n + 1)} | {"sub", "sub/x", "sub/y"}
    seen, pages, cursor = [], 0, None
    while True:
        q = {"depth": 2}
        if cursor:
            q["cursor"] = cursor
        doc = listing(client, sid, root, **q)
        pages += 1
        seen += [e["path"][len(root) + 1:] for e in doc["entries"]]
        if not doc["truncated"]:
            assert "next_cursor" not in doc
            break
        assert isinstance(doc["next_cursor"], str) and doc["next_cursor"], doc.keys()
        assert doc["entries"], "a truncated page with no entries makes no progress"
        cursor = doc["next_cursor"]
        assert pages < 10
    assert pages >= 2, "10,100 entries came back in one page"
    assert len(seen) == len(set(seen)), "an entry came back twice"
    assert set(seen) == want, (len(seen), sorted(want - set(seen))[:5])
    assert_error(client.get(fpath(sid, root, "/list") + "&cursor=x1"), 400, "invalid_field")


def test_entries_too_deep_to_list_are_said(client, sandbox):
    """A path below the listed directory longer than a frame's NAME (4095 bytes) cannot be
    listed; the listing says so (omitted) rather than leave it out silently."""
    sid = sandbox["id"]
    root = tmpdir(client, sid)
    mk = ("import os\nos.chdir(%r)\nfor _ in range(17):\n    os.mkdir('d' * 250)\n"
          "    os.chdir('d' * 250)\nopen('leaf', 'w').close()\n" % root)
    client.sh(sid, "python3 -", stdin=mk)
    doc = listing(client, sid, root, depth=32)
    assert doc.get("omitted") is True, {k: v for k, v in doc.items() if k != "entries"}
    assert len(doc["entries"]) == 16, len(doc["entries"])  # the 16 levels that fit
    small = listing(client, sid, root, depth=2)
    assert "omitted" not in small and len(small["entries"]) == 2


def test_non_utf8_names_come_back_exact_and_usable(client, sandbox):
    sid = sandbox["id"]
    root = tmpdir(client, sid)
    raw = b"caf\xe9-\xff.txt"  # Latin-1, not UTF-8
    # made inside the sandbox, with the exact bytes
    client.sh(sid, f"cd {root} && printf 'latin' > \"$(printf 'caf\\351-\\377.txt')\" && "
                   f"ln -s \"$(printf 'caf\\351-\\377.txt')\" link && touch ok.txt")
    doc = listing(client, sid, root)
    by = {}
    for e in doc["entries"]:
        key = base64.b64decode(e["name_b64"]) if "name_b64" in e else e["name"].encode()
        by[key] = e
    assert set(by) == {raw, b"link", b"ok.txt"}, by  # nothing left out
    e = by[raw]
    assert "\ufffd" in e["name"] and base64.b64decode(e["path_b64"]) == root.encode() + b"/" + raw
    assert "name_b64" not in by[b"ok.txt"] and "path_b64" not in by[b"ok.txt"]
    lk = by[b"link"]
    assert base64.b64decode(lk["symlink_target_b64"]) == raw and "name_b64" not in lk, lk
    # the exact bytes, percent-encoded, reach the file again
    p = base64.b64decode(e["path_b64"])
    r = client.get(fpath(sid, p))
    assert r.status == 200 and r.body == b"latin", r.describe()
    st = client.ok("GET", fpath(sid, p, "/stat"))
    assert base64.b64decode(st["name_b64"]) == raw and st["size"] == 5, st
    assert client.put(fpath(sid, p), b"again").status == 200
    assert client.get(fpath(sid, p)).body == b"again"
    # JSON bodies carry such a path as *_b64
    raw2 = root.encode() + b"/d\xfe"
    r = client.post(f"/v1/sandboxes/{sid}/files/mkdir",
                    {"path_b64": base64.b64encode(raw2).decode()})
    assert r.status == 200 and base64.b64decode(r.json()["path_b64"]) == raw2, r.describe()
    r = client.post(f"/v1/sandboxes/{sid}/files/move",
                    {"from_b64": e["path_b64"], "to_b64": base64.b64encode(raw2 + b"/f").decode()})
    assert r.status == 204, r.describe()
    assert client.get(fpath(sid, raw2 + b"/f")).body == b"again"
    assert_error(client.post(f"/v1/sandboxes/{sid}/files/mkdir",
                             {"path": "/tmp/x", "path_b64": base64.b64encode(raw2).decode()}),
                 400, "invalid_field")
    assert client.delete(fpath(sid, raw2)).status == 204
    assert_error(client.get(fpath(sid, raw2, "/stat")), 404, "not_found")
    # the audit log has them too, exactly
    recs = [json.loads(l) for l in client.get(f"/v1/sandboxes/{sid}/audit").body.splitlines()]
    moves = [r for r in recs if r.get("event") == "file.move" and "from_b64" in json.dumps(r)]
    assert moves, [r.get("event") for r in recs][-10:]


# ---------------------------------------------------------------------------------------------
# exec


def test_missing_command_is_named(client, sandbox):
    sid = sandbox["id"]
    res = client.exec(sid, argv=["no-such-cmd-xyz", "a"])
    assert res["exit_code"] == 127, res
    assert "command not found: no-such-cmd-xyz" in res["stderr"], res
    assert "execve" not in res["stderr"], res
    s = client.stream("POST", f"/v1/sandboxes/{sid}/processes", {"argv": ["no-such-cmd-xyz"]})
    out, err, ex = s.until_exit()
    assert b"command not found: no-such-cmd-xyz" in err and ex["exit_code"] == 127, (err, ex)
    res = client.exec(sid, argv=["/etc/hostname"])  # exists, not executable
    assert res["exit_code"] == 126 and "cannot run '/etc/hostname'" in res["stderr"], res
    res = client.exec(sid, argv=["true"], cwd="/nonexistent-dir")
    assert res["exit_code"] == 127 and "/nonexistent-dir" in res["stderr"], res


def test_exec_output_base64_keeps_nul(client, sandbox):
    sid = sandbox["id"]
    cmd = "printf 'a\\000b\\377'; printf 'e\\000' >&2"
    text = client.exec(sid, cmd=cmd)
    assert text["stdout"] == "a\ufffdb\ufffd" and "encoding" not in text, text  # documented
    res = client.exec(sid, cmd=cmd, encoding="base64")
    assert res["encoding"] == "base64", res
    assert base64.b64decode(res["stdout"]) == b"a\0b\xff", res
    assert base64.b64decode(res["stderr"]) == b"e\0", res
    assert_error(client.post(f"/v1/sandboxes/{sid}/exec", {"cmd": "true", "encoding": "hex"}),
                 400, "invalid_field")


def test_process_limit_is_429(client, fresh):
    """A sandbox whose pids limit is used up refuses another process with 429, for exec and
    for a started process, instead of 200 with exit 126."""
    sb = fresh(limits={"pids": 16})
    sid = sb["id"]
    streams, refused = [], None
    try:
        for _ in range(20):
            r = client.stream("POST", f"/v1/sandboxes/{sid}/processes",
                              {"argv": ["sleep", "60"], "timeout_s": 120})
            if not hasattr(r, "next"):
                refused = r
                break
            ev = r.next()
            assert ev["type"] == "start", ev
            r.pid = ev["pid"]
            streams.append(r)
        assert refused is not None, "20 processes started under a pids limit of 16"
        e = assert_error(refused, 429, "quota_exceeded")
        assert "limits.pids" in e["message"], e
        r = client.post(f"/v1/sandboxes/{sid}/exec", {"argv": ["true"]})
        assert_error(r, 429, "quota_exceeded")
    finally:
        for s in streams:
            client.post(f"/v1/sandboxes/{sid}/processes/{s.pid}/signal", {"signal": "KILL"})
            s.until_exit()
    # room again: processes run
    assert client.exec(sid, argv=["true"])["exit_code"] == 0
