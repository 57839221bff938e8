"""`cordon mcp` without npm: the JSON-RPC side over stdio (initialize and version negotiation,
tools/list, protocol errors, the bounds on a message), its settings (flags, a --config file,
errors named), and --listen's loopback rule. No daemon: a tool call that passes its checks
fails as "cannot be reached", an isError result. The official MCP client's tests, with a
daemon, are in tests/mcp."""

import json
import subprocess

import pytest

from conftest import EXIT_USAGE

TIMEOUT = 30


def mcp(cordon_bin, lines, *args):
    """Runs `cordon mcp` with @lines on stdin; its answers, one JSON object per line."""
    p = subprocess.run([cordon_bin, "mcp", "--socket", "/nonexistent/cordon.sock", *args],
                       input="".join(l if l.endswith("\n") else l + "\n" for l in lines).encode(),
                       capture_output=True, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr.decode()
    return [json.loads(l) for l in p.stdout.decode().splitlines()]


def rpc(id_, method, params=None):
    m = {"jsonrpc": "2.0", "id": id_, "method": method}
    if params is not None:
        m["params"] = params
    return json.dumps(m)


def test_initialize_negotiates_and_lists_tools(cordon_bin):
    init = lambda v: rpc(1, "initialize", {"protocolVersion": v, "capabilities": {},
                                           "clientInfo": {"name": "t", "version": "1"}})
    out = mcp(cordon_bin, [init("2025-06-18"), json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                           rpc(2, "tools/list"), init("1999-01-01"), rpc(3, "ping")])
    assert [m["id"] for m in out] == [1, 2, 1, 3]  # the notification has no answer
    assert out[0]["result"]["protocolVersion"] == "2025-06-18"
    assert out[0]["result"]["serverInfo"]["name"] == "cordon"
    assert out[2]["result"]["protocolVersion"] == "2025-11-25"  # unknown: our latest
    names = {t["name"] for t in out[1]["result"]["tools"]}
    assert names == {"create_sandbox", "run_code", "run_command", "read_file", "write_file",
                     "list_files", "upload_file", "download_file", "get_sandbox",
                     "list_sandboxes", "kill_sandbox"}
    assert out[3]["result"] == {}


def test_protocol_errors_are_jsonrpc_errors(cordon_bin):
    out = mcp(cordon_bin, ["{not json", "[]", json.dumps({"jsonrpc": "1.0", "id": 1, "method": "ping"}),
                           rpc(2, "no/such"), rpc(3, "tools/call", {"name": "nope"}),
                           rpc(4, "tools/call", {"arguments": {}}), rpc(5, "tools/list", [1]),
                           json.dumps({"jsonrpc": "2.0", "id": None, "method": "ping"}),
                           json.dumps({"jsonrpc": "2.0", "id": 9, "result": {}})])
    codes = [(m["id"], m["error"]["code"]) for m in out]
    assert codes == [(None, -32700), (None, -32600), (1, -32600), (2, -32601), (3, -32602),
                     (4, -32602), (5, -32602), (None, -32600)]  # a response needs no answer


def test_tool_failures_are_results(cordon_bin):
    call = lambda i, name, args: rpc(i, "tools/call", {"name": name, "arguments": args})
    out = mcp(cordon_bin, [call(1, "run_command", {"sandbox_id": "sb-1"}),
                           call(2, "run_command", {"sandbox_id": "sb-1", "command": "x" * 70000}),
                           call(3, "get_sandbox", {"sandbox_id": "sb-1"}),
                           call(4, "create_sandbox", {"network": ["evil.example:443"]}),
                           call(5, "upload_file", {"sandbox_id": "sb-1", "local_path": "a", "path": "/a"})])
    texts = [m["result"]["content"][0]["text"] for m in out]
    assert all(m["result"]["isError"] for m in out)
    assert "'command' is required" in texts[0]
    assert "'command' is too long" in texts[1]
    assert "cannot be reached" in texts[2]
    assert "not allowed by the server's configuration (it allows no network at all)" in texts[3]
    assert "cannot be reached" in texts[4] or "host files are off" in texts[4]


def test_a_message_too_long_or_too_deep_is_refused_and_the_server_goes_on(cordon_bin):
    deep = 1
    for _ in range(20):
        deep = {"k": deep}
    out = mcp(cordon_bin, ["x" * (5 << 20), rpc(1, "ping", deep), "   ", rpc(2, "ping")])
    assert out[0]["error"]["code"] == -32600 and "too long" in out[0]["error"]["message"]
    assert "too deep" in out[1]["error"]["message"]
    assert out[2] == {"jsonrpc": "2.0", "id": 2, "result": {}}


def test_settings_from_flags_and_file(cordon_bin, tmp_path):
    cfg = tmp_path / "mcp.json"
    cfg.write_text(json.dumps({"allow": ["pypi.org:443"], "max_ttl": 60}))
    call = rpc(1, "tools/call", {"name": "create_sandbox", "arguments": {"network": ["pypi.org:443"], "timeout": 999}})
    out = mcp(cordon_bin, [call], "--config", str(cfg))
    texts = [c["text"] for c in out[0]["result"]["content"]]
    assert "timeout capped to 60" in texts[0] and "cannot be reached" in texts[-1]
    for bad, why in [({"max_ttl": "x"}, "expected an integer"), ({"nope": 1}, "unknown key 'nope'"),
                     ({"max_ttl": 0}, "out of range")]:
        cfg.write_text(json.dumps(bad))
        p = subprocess.run([cordon_bin, "mcp", "--config", str(cfg)], capture_output=True,
                           stdin=subprocess.DEVNULL, timeout=TIMEOUT)
        assert p.returncode == EXIT_USAGE and why in p.stderr.decode(), p.stderr.decode()
    p = subprocess.run([cordon_bin, "mcp", "--bogus"], capture_output=True, stdin=subprocess.DEVNULL, timeout=TIMEOUT)
    assert p.returncode == EXIT_USAGE and "--bogus" in p.stderr.decode()
    p = subprocess.run([cordon_bin, "mcp", "--help"], capture_output=True, timeout=TIMEOUT)
    assert p.returncode == 0 and b"--max-exec-timeout" in p.stdout and b"--files-dir" in p.stdout


@pytest.mark.parametrize("addr", ["0.0.0.0:8931", "[::]:8931", "192.0.2.1:8931", "nocolon"])
def test_listen_is_loopback_only(cordon_bin, addr):
    p = subprocess.run([cordon_bin, "mcp", "--listen", addr], capture_output=True,
                       stdin=subprocess.DEVNULL, timeout=TIMEOUT)
    assert p.returncode == EXIT_USAGE, p.stderr.decode()
    assert b"loopback" in p.stderr or b"ADDR:PORT" in p.stderr or b"--listen" in p.stderr
