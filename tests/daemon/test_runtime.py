"""The `runtime` field of POST /v1/sandboxes against a real cordond: the runtime used is the
one reported (GET /v1/sandboxes/{id}, the audit log's sandbox.create), `auto` resolves to the
strongest this host runs (gvisor where runsc works, else jail), and a runtime the host cannot
run (microvm where QEMU or its guest kernel is missing; gvisor where runsc is missing) or an unknown one is refused with a 400 naming the ones it can,
leaving nothing behind. Also: the PID 1 of an agent-mode sandbox holds its agent channel and
nothing of cordond's (its stdout and stderr used to be fds 1 and 2 of every cordon-init)."""

import json
import os
import stat

import pytest

from conftest import assert_error, requires_daemon

pytestmark = requires_daemon


def audit_create(daemon, sid):
    with open(os.path.join(daemon.audit_dir, f"{sid}.jsonl")) as f:
        recs = [json.loads(x) for x in f if x.strip()]
    return [r["fields"] for r in recs if r["event"] == "sandbox.create"]


def auto_runtime(client):
    return client.get("/v1/runtimes").json()["auto"]


@pytest.mark.parametrize("body", [{}, {"runtime": "jail"}, {"runtime": "auto"}],
                         ids=["default", "jail", "auto"])
def test_runtime_reported(client, daemon, body):
    want = auto_runtime(client) if body.get("runtime") == "auto" else "jail"
    sb = client.create(body)
    try:
        assert sb["runtime"] == want, sb
        assert client.info(sb["id"])["runtime"] == want
        creates = audit_create(daemon, sb["id"])
        assert len(creates) == 1 and creates[0]["runtime"] == want, creates
        assert client.sh(sb["id"], "echo ok") == "ok\n"
    finally:
        client.destroy(sb["id"])


def live_ids(client):
    return {s["id"] for s in client.list()}


@pytest.mark.parametrize("name", ["gvisor", "microvm"])
def test_unavailable_runtime_refused(client, daemon, name):
    avail = {x["name"]: x for x in client.get("/v1/runtimes").json()["runtimes"]}[name]
    if avail["available"]:
        pytest.skip(f"{name} runs on this host (tests/gvisor)")
    before, slots = live_ids(client), daemon.slot_files()
    r = client.post("/v1/sandboxes", {"runtime": name})
    e = assert_error(r, 400, "unsupported_runtime")
    assert name in e["message"] and avail["reason"] in e["message"], e
    assert "jail" in e["message"], f"the message does not name what the host can run: {e}"
    assert live_ids(client) == before and daemon.slot_files() == slots
    assert daemon.alive()


@pytest.mark.parametrize("name", ["runc", "Jail", "", 5, None])
def test_unknown_runtime_refused(client, daemon, name):
    before = live_ids(client)
    r = client.post("/v1/sandboxes", {"runtime": name})
    if name is None:  # null is "not given" for every field of the contract
        assert r.status == 201, r.describe()
        assert r.json()["runtime"] == "jail"
        client.destroy(r.json()["id"])
        return
    e = assert_error(r, 400, "invalid_field")
    assert "runtime" in e["message"], e
    assert live_ids(client) == before


def sandbox_inits(daemon):
    """PIDs of cordond's children that are a sandbox's PID 1 in agent mode."""
    kids = set()
    for t in os.listdir(f"/proc/{daemon.proc.pid}/task"):
        with open(f"/proc/{daemon.proc.pid}/task/{t}/children") as f:
            kids |= {int(k) for k in f.read().split()}
    out = []
    for k in kids:
        try:
            with open(f"/proc/{k}/cmdline", "rb") as f:
                if f.read().split(b"\0")[:2] == [b"cordon-init", b"--agent"]:
                    out.append(k)
        except OSError:
            pass
    return out


DEV_NULL = os.makedev(1, 3)
# What cordon-init makes for itself after exec (agent.c): its signalfd, its epoll set.
OWN = ("anon_inode:[signalfd]", "anon_inode:[eventpoll]", "anon_inode:[pidfd]")


def test_agent_pid1_holds_only_its_channel(client, daemon):
    """From the host: every fd of an agent-mode cordon-init is /dev/null (0-2), its channel
    (3, a socket), or one it made itself; never a file, pipe or socket of cordond's."""
    sb = client.create({})
    try:
        client.sh(sb["id"], "true")
        pids = sandbox_inits(daemon)
        assert pids, "no cordon-init child of cordond found"
        for pid in pids:
            fds = {int(n): os.readlink(f"/proc/{pid}/fd/{n}") for n in os.listdir(f"/proc/{pid}/fd")}
            for n in (0, 1, 2):
                st = os.stat(f"/proc/{pid}/fd/{n}")
                assert stat.S_ISCHR(st.st_mode) and st.st_rdev == DEV_NULL, \
                    f"fd {n} of PID 1 {pid} is {fds.get(n)!r}, not /dev/null: {fds}"
            assert fds[3].startswith("socket:"), fds
            extra = {n: t for n, t in fds.items() if n > 3 and t not in OWN}
            assert not extra, f"PID 1 {pid} holds more than its channel: {fds}"
    finally:
        client.destroy(sb["id"])


SDK = os.path.join(os.path.dirname(__file__), "..", "..", "sdk", "python")


def test_sdk_runtime(daemon):
    """The SDK's runtime=: auto is reported as what it resolved to; an unavailable runtime is
    its own exception (a BadRequest) carrying the server's reason."""
    import sys
    sys.path.insert(0, SDK)
    try:
        import cordon
    finally:
        sys.path.remove(SDK)
    with cordon.Sandbox.create(runtime="auto", socket=daemon.sock) as sbx:
        assert sbx.info().runtime == auto_runtime(daemon.client())
    with pytest.raises(cordon.InvalidField):
        cordon.Sandbox.create(runtime="runc", socket=daemon.sock)


def test_runtimes_listing(client):
    """GET /v1/runtimes: every known runtime, whether this host can run it and why not, what
    it can do; `auto` names what auto resolves to."""
    r = client.get("/v1/runtimes")
    assert r.status == 200, r.describe()
    body = r.json()
    assert set(body) == {"runtimes", "default", "auto"}, body
    assert body["default"] == "jail", body
    by_name = {x["name"]: x for x in body["runtimes"]}
    assert list(by_name) == ["microvm", "gvisor", "jail"], body
    for x in body["runtimes"]:
        assert set(x) - {"mode"} == {"name", "available", "reason", "capabilities"}, x
    jail = by_name["jail"]
    assert jail["available"] is True and jail["reason"] is None, jail
    assert {"oneshot", "agent", "egress", "limits", "stats", "overlay", "pause",
            "snapshot"} == set(jail["capabilities"])
    mv = by_name["microvm"]
    assert (mv["reason"] is None) == mv["available"], mv
    assert not mv["available"] or mv["mode"]["name"] in ("kvm", "tcg"), mv
    gv = by_name["gvisor"]
    assert {"oneshot", "agent", "egress", "limits", "stats", "pause",
            "snapshot"} == set(gv["capabilities"]), gv
    assert (gv["reason"] is None) == gv["available"], gv
    # auto takes the strongest with a network, microvm only under KVM (TCG: named).
    mv_auto = mv["available"] and mv["mode"]["name"] == "kvm"
    assert body["auto"] == ("microvm" if mv_auto else "gvisor" if gv["available"] else "jail"), body
    # Every runtime the listing says is available with agent mode is one a create accepts,
    # and none that is not available.
    for x in body["runtimes"]:
        if x["available"] and "agent" not in x["capabilities"]:
            continue
        r = client.post("/v1/sandboxes", {"runtime": x["name"]})
        if x["available"] and r.status == 503:
            # accepted, its template's image or snapshot not made yet: made off cordond's
            # loop meanwhile (a microvm's first create; tests/microvm waits for it)
            e = assert_error(r, 503, "unavailable")
            assert "being made" in e["message"], e
        elif x["available"]:
            assert r.status == 201, r.describe()
            client.destroy(r.json()["id"])
        else:
            assert_error(r, 400, "unsupported_runtime")


def test_cordon_init_agent_mode_drops_what_it_inherits(tmp_path):
    """cordon-init itself (not only the jail) leaves agent mode with /dev/null on 0-2 and its
    channel on 3: started outside any sandbox with a pipe on 1-2 and a stray file on 7 (what
    a runtime that hands PID 1 a console or a leaked fd would give it)."""
    import socket
    import subprocess
    import time
    from conftest import BUILD
    init = os.path.join(BUILD, "cordon-init")
    host_end, init_end = socket.socketpair()
    stray = open(tmp_path / "stray", "w")
    r, w = os.pipe()
    # A wrapper puts the channel on 3 and the stray file on 7 and execs cordon-init, leaving
    # its own copies open too (more strays).
    wrap = ("import os, sys\n"
            "os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 7)\n"
            "os.execv(sys.argv[3], [sys.argv[3], '--agent'])\n")
    p = subprocess.Popen(["/usr/bin/python3", "-c", wrap, str(init_end.fileno()), str(stray.fileno()), init],
                         stdin=subprocess.DEVNULL, stdout=w, stderr=w,
                         pass_fds=(init_end.fileno(), stray.fileno()))
    os.close(w)
    try:
        deadline = time.monotonic() + 5
        while True:
            fds = {int(n): os.readlink(f"/proc/{p.pid}/fd/{n}") for n in os.listdir(f"/proc/{p.pid}/fd")}
            if "anon_inode:[signalfd]" in fds.values() or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        for n in (0, 1, 2):
            st = os.stat(f"/proc/{p.pid}/fd/{n}")
            assert stat.S_ISCHR(st.st_mode) and st.st_rdev == DEV_NULL, fds
        assert fds[3].startswith("socket:"), fds
        extra = {n: t for n, t in fds.items() if n > 3 and t not in OWN}
        assert not extra, f"cordon-init kept {extra}: {fds}"
    finally:
        host_end.close()
        init_end.close()
        stray.close()
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        os.close(r)
