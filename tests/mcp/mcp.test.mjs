// cordon mcp against the official MCP TypeScript SDK client (@modelcontextprotocol/sdk):
// over stdio (StdioClientTransport spawning `cordon mcp`) and over Streamable HTTP
// (StreamableHTTPClientTransport to `cordon mcp --listen 127.0.0.1:PORT`), in front of a real
// cordond the test starts. Skips without root or without the binaries.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import * as fs from "node:fs";
import * as http from "node:http";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { LATEST_PROTOCOL_VERSION, McpError } from "@modelcontextprotocol/sdk/types.js";
import { BUILD, Daemon, freePort, skipReason } from "../../sdk/typescript/test/daemon.mjs";

const CORDON = path.join(BUILD, "cordon");
const skip = skipReason() ?? (fs.existsSync(CORDON) ? undefined : `${CORDON} is not built`);
const TOOLS = ["create_sandbox", "run_code", "run_command", "read_file", "write_file", "list_files",
  "upload_file", "download_file", "get_sandbox", "list_sandboxes", "kill_sandbox"];
const PNG = Buffer.from("89504e470d0a1a0a0000000d4948445200000001000000010806000000" +
  "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082", "hex");

const text = (res) => res.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");
const idOf = (res) => /sandbox_id: (\S+)/.exec(text(res))?.[1];

/** A request to cordond itself (over its unix socket), for what the MCP server must not do. */
function daemonRequest(socketPath, method, p, body) {
  return new Promise((resolve, reject) => {
    const data = body ? JSON.stringify(body) : undefined;
    const req = http.request({ socketPath, method, path: p, headers: data ? { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(data) } : {} }, (res) => {
      let s = "";
      res.on("data", (d) => (s += d));
      res.on("end", () => resolve({ status: res.statusCode, json: s ? JSON.parse(s) : null }));
    });
    req.on("error", reject);
    req.setTimeout(30_000, () => req.destroy(new Error("timeout")));
    req.end(data);
  });
}

/** Spawns `cordon mcp --listen` and waits for it to listen. */
async function startHttp(args) {
  const port = await freePort();
  const proc = spawn(CORDON, ["mcp", "--listen", `127.0.0.1:${port}`, ...args], { stdio: ["ignore", "ignore", "pipe"] });
  let err = "";
  await new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`cordon mcp --listen did not start: ${err}`)), 10_000);
    proc.stderr.on("data", (d) => {
      err += d;
      if (err.includes("listening on")) { clearTimeout(t); resolve(); }
    });
    proc.on("exit", (c) => { clearTimeout(t); reject(new Error(`cordon mcp exited ${c}: ${err}`)); });
  });
  return { port, proc, url: `http://127.0.0.1:${port}/mcp` };
}

async function connect(transport) {
  const client = new Client({ name: "cordon-mcp-test", version: "1.0.0" });
  await client.connect(transport);
  return client;
}

describe("cordon mcp", { skip }, () => {
  let d, tmp, filesDir, common;
  before(async () => {
    d = await Daemon.start();
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), "cordon-mcp-"));
    filesDir = path.join(tmp, "files");
    fs.mkdirSync(filesDir);
    common = ["--socket", d.socket, "--owner", "t1", "--max-output", "4096", "--max-ttl", "600",
      "--max-exec-timeout", "20", "--allow", "example.com:443", "--files-dir", filesDir];
  });
  after(async () => {
    await d?.stop();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  describe("over stdio", () => {
    let client, transport;
    before(async () => {
      transport = new StdioClientTransport({ command: CORDON, args: ["mcp", ...common], stderr: "pipe" });
      client = await connect(transport);
    });
    after(async () => client?.close());

    test("initialize: the server, its capabilities, the protocol version", () => {
      const info = client.getServerVersion();
      assert.equal(info.name, "cordon");
      assert.ok(client.getServerCapabilities().tools);
      assert.match(client.getInstructions(), /create_sandbox/);
    });

    test("tools/list: every tool with a JSON Schema of its arguments", async () => {
      const { tools } = await client.listTools();
      assert.deepEqual(tools.map((t) => t.name).sort(), [...TOOLS].sort());
      for (const t of tools) {
        assert.equal(t.inputSchema.type, "object", t.name);
        assert.equal(t.inputSchema.additionalProperties, false, t.name);
        assert.ok(t.description.length > 10, t.name);
      }
      const run = tools.find((t) => t.name === "run_command");
      assert.deepEqual(run.inputSchema.required.sort(), ["command", "sandbox_id"]);
      assert.equal(tools.find((t) => t.name === "kill_sandbox").annotations.destructiveHint, true);
      assert.equal((await client.ping()).constructor, Object);
    });

    test("every tool, on one sandbox", async () => {
      const created = await client.callTool({ name: "create_sandbox", arguments: { template: "host", timeout: 120, metadata: { job: "j1" } } });
      assert.equal(created.isError, false, text(created));
      const id = idOf(created);
      assert.ok(id, text(created));
      try {
        const info = await client.callTool({ name: "get_sandbox", arguments: { sandbox_id: id } });
        const doc = JSON.parse(text(info).replace(/^sandbox:\n/, ""));
        assert.equal(doc.network.policy, "deny"); // safe by default
        assert.equal(doc.metadata["cordon-mcp"], "t1");
        assert.equal(doc.metadata.job, "j1");
        const listed = await client.callTool({ name: "list_sandboxes", arguments: {} });
        assert.match(text(listed), new RegExp(id));

        const r = await client.callTool({ name: "run_command", arguments: { sandbox_id: id, command: "echo hi; echo oops >&2; exit 3" } });
        assert.equal(r.isError, false);
        assert.match(text(r), /exit_code: 3/);
        assert.match(text(r), /stdout:\nhi\n/);
        assert.match(text(r), /stderr:\noops/);
        const big = await client.callTool({ name: "run_command", arguments: { sandbox_id: id, command: "head -c 100000 /dev/zero | tr '\\0' x" } });
        assert.match(text(big), /\[stdout cut: the first \d+ of 100000 bytes are shown\]/);
        assert.ok(text(big).length < 6000);
        const slow = await client.callTool({ name: "run_command", arguments: { sandbox_id: id, command: "sleep 5", timeout: 9999 } });
        assert.match(text(slow), /timeout capped to 20/);
        const killed = await client.callTool({ name: "run_command", arguments: { sandbox_id: id, command: "sleep 30", timeout: 1 } });
        assert.match(text(killed), /ran past its timeout/);

        const w = await client.callTool({ name: "write_file", arguments: { sandbox_id: id, path: "/home/user/new/dir/a.txt", content: "héllo\n" } });
        assert.equal(w.isError, false, text(w));
        const rd = await client.callTool({ name: "read_file", arguments: { sandbox_id: id, path: "/home/user/new/dir/a.txt" } });
        assert.match(text(rd), /héllo/);
        await client.callTool({ name: "write_file", arguments: { sandbox_id: id, path: "/home/user/p.png", content: PNG.toString("base64"), encoding: "base64" } });
        const img = await client.callTool({ name: "read_file", arguments: { sandbox_id: id, path: "/home/user/p.png" } });
        assert.deepEqual(img.content, [{ type: "image", mimeType: "image/png", data: PNG.toString("base64") }]);
        const ls = await client.callTool({ name: "list_files", arguments: { sandbox_id: id, path: "/home/user", depth: 3 } });
        assert.match(text(ls), /\/home\/user\/new\/dir\/a\.txt/);
        assert.match(text(ls), /dir +\d+ +\/home\/user\/new\n/);

        fs.writeFileSync(path.join(filesDir, "in.txt"), "from the host");
        const up = await client.callTool({ name: "upload_file", arguments: { sandbox_id: id, local_path: "in.txt", path: "/home/user/in.txt" } });
        assert.equal(up.isError, false, text(up));
        const down = await client.callTool({ name: "download_file", arguments: { sandbox_id: id, path: "/home/user/in.txt", local_path: "out.txt" } });
        assert.equal(down.isError, false, text(down));
        assert.equal(fs.readFileSync(path.join(filesDir, "out.txt"), "utf8"), "from the host");
        // host files stay below --files-dir: no "..", no absolute path, no symlink out
        fs.symlinkSync("/etc/passwd", path.join(filesDir, "link"));
        for (const local_path of ["../escape", "/etc/passwd", "link"]) {
          const bad = await client.callTool({ name: "upload_file", arguments: { sandbox_id: id, local_path, path: "/home/user/x" } });
          assert.equal(bad.isError, true, local_path);
          const badDown = await client.callTool({ name: "download_file", arguments: { sandbox_id: id, path: "/home/user/in.txt", local_path } });
          assert.equal(badDown.isError, true, local_path);
        }
        assert.equal(fs.readlinkSync(path.join(filesDir, "link")), "/etc/passwd");

        const code = await client.callTool({ name: "run_code", arguments: { sandbox_id: id, code: "print(6*7)" } });
        assert.equal(code.isError, true); // the host template has no interpreter, or this cordond no code route
        assert.match(text(code), /no code interpreter|no_interpreter|interpreter/);
      } finally {
        const k = await client.callTool({ name: "kill_sandbox", arguments: { sandbox_id: id } });
        assert.equal(k.isError, false, text(k));
      }
      const gone = await client.callTool({ name: "get_sandbox", arguments: { sandbox_id: id } });
      assert.equal(gone.isError, true);
    });

    test("errors: protocol errors as JSON-RPC errors, tool failures as isError results", async () => {
      await assert.rejects(client.callTool({ name: "no_such_tool", arguments: {} }),
        (e) => e instanceof McpError && e.code === -32602);
      const cases = [
        [{ name: "run_command", arguments: { sandbox_id: "sb-x" } }, /'command' is required/],
        [{ name: "run_command", arguments: { sandbox_id: "sb-x", command: 5 } }, /'command' must be a string/],
        [{ name: "get_sandbox", arguments: { sandbox_id: "sb-x", extra: 1 } }, /'extra' is not an argument/],
        [{ name: "get_sandbox", arguments: { sandbox_id: "../etc" } }, /not a sandbox id/],
        [{ name: "get_sandbox", arguments: { sandbox_id: "sb-nonexistent" } }, /no sandbox sb-nonexistent/],
        [{ name: "create_sandbox", arguments: { network: ["evil.com:443"] } }, /not allowed by the server's configuration/],
        [{ name: "create_sandbox", arguments: { memory_mb: 4096 } }, /configuration sets the memory/],
        [{ name: "create_sandbox", arguments: { metadata: { "cordon-mcp": "other" } } }, /server's own label/],
        [{ name: "create_sandbox", arguments: { template: "no-such-template" } }, /not_found/],
        [{ name: "read_file", arguments: { sandbox_id: "sb-x", path: "x".repeat(5000) } }, /'path' is too long/],
      ];
      for (const [call, re] of cases) {
        const r = await client.callTool(call);
        assert.equal(r.isError, true, JSON.stringify(call));
        assert.match(text(r), re, JSON.stringify(call));
      }
    });

    test("only its own sandboxes, and the allow-list the configuration gives", async () => {
      const other = await daemonRequest(d.socket, "POST", "/v1/sandboxes", { timeout_s: 60 });
      assert.equal(other.status, 201, JSON.stringify(other.json));
      try {
        for (const name of ["get_sandbox", "kill_sandbox"]) {
          const r = await client.callTool({ name, arguments: { sandbox_id: other.json.id } });
          assert.equal(r.isError, true, name);
        }
        const run = await client.callTool({ name: "run_command", arguments: { sandbox_id: other.json.id, command: "true" } });
        assert.equal(run.isError, true);
        assert.doesNotMatch(text(await client.callTool({ name: "list_sandboxes", arguments: {} })), new RegExp(other.json.id));
      } finally {
        await daemonRequest(d.socket, "DELETE", `/v1/sandboxes/${other.json.id}`);
      }
      const net = await client.callTool({ name: "create_sandbox", arguments: { network: ["example.com:443"], timeout: 60 } });
      assert.equal(net.isError, false, text(net));
      const id = idOf(net);
      const doc = (await daemonRequest(d.socket, "GET", `/v1/sandboxes/${id}`)).json;
      assert.equal(doc.network.policy, "allow");
      assert.deepEqual(doc.network.allow, ["example.com:443"]);
      assert.ok(doc.timeout_s <= 600);
      await client.callTool({ name: "kill_sandbox", arguments: { sandbox_id: id } });
    });
  });

  test("run_code: stateful, images as image content, tables as text", async (t) => {
    const tpl = await daemonRequest(d.socket, "GET", "/v1/templates/code-interpreter");
    if (tpl.status === 404) return t.skip("no code-interpreter template in the store (build recipes/code-interpreter)");
    // the first cell starts the interpreter and its kernel: time enough on a loaded machine
    const transport = new StdioClientTransport({ command: CORDON, args: ["mcp", ...common, "--max-exec-timeout", "180", "--exec-timeout", "180"], stderr: "pipe" });
    const client = await connect(transport);
    try {
      const c = await client.callTool({ name: "create_sandbox", arguments: { template: "code-interpreter", timeout: 300 } });
      const id = idOf(c);
      assert.ok(id, text(c));
      try {
        const first = await client.callTool({ name: "run_code", arguments: { sandbox_id: id, code: "x = 6 * 7\nprint('set')" } },
          undefined, { timeout: 180_000 }); // the client's own 60 s would cut a slow kernel start
        if (/no code interpreter/.test(text(first))) return t.skip("POST /v1/sandboxes/{id}/code is not in this cordond build");
        assert.equal(first.isError, false, text(first));
        assert.match(text(first), /stdout:\nset/);
        const again = await client.callTool({ name: "run_code", arguments: { sandbox_id: id, code: "x" } });
        assert.match(text(again), /result:\n42/);
        const fig = await client.callTool({ name: "run_code", arguments: { sandbox_id: id,
          code: "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()" } });
        const img = fig.content.find((x) => x.type === "image");
        assert.ok(img && img.mimeType === "image/png", JSON.stringify(fig.content).slice(0, 500));
        assert.equal(Buffer.from(img.data, "base64").subarray(1, 4).toString(), "PNG");
        const table = await client.callTool({ name: "run_code", arguments: { sandbox_id: id,
          code: "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})" } });
        assert.match(text(table), /a\s+b/);
        const err = await client.callTool({ name: "run_code", arguments: { sandbox_id: id, code: "1/0" } });
        assert.match(text(err), /ZeroDivisionError/);
        const long = await client.callTool({ name: "run_code", arguments: { sandbox_id: id, code: "print('y' * 100000)" } });
        assert.match(text(long), /cut/);
      } finally {
        await client.callTool({ name: "kill_sandbox", arguments: { sandbox_id: id } });
      }
    } finally {
      await client.close();
    }
  });

  test("stdio bounds: a line too long, JSON too deep, junk; the server goes on", async () => {
    const proc = spawn(CORDON, ["mcp", ...common], { stdio: ["pipe", "pipe", "ignore"] });
    let out = "";
    proc.stdout.on("data", (dd) => (out += dd));
    proc.stdin.write("x".repeat(5 * 1024 * 1024) + "\n");
    proc.stdin.write("[".repeat(100) + "]".repeat(100) + "\n");
    let deep = 1;
    for (let i = 0; i < 20; i++) deep = { k: deep };
    proc.stdin.write(JSON.stringify({ jsonrpc: "2.0", id: 1, method: "x", params: deep }) + "\n");
    proc.stdin.write('{"jsonrpc":"2.0","id":7,"method":"ping"}\n');
    proc.stdin.end();
    await new Promise((r) => proc.on("exit", r));
    const lines = out.trim().split("\n").map((l) => JSON.parse(l));
    assert.equal(lines.length, 4, out);
    assert.equal(lines[0].error.code, -32600);
    assert.match(lines[0].error.message, /too long/);
    assert.equal(lines[1].error.code, -32600);
    assert.match(lines[2].error.message, /too deep/);
    assert.deepEqual(lines[3], { jsonrpc: "2.0", id: 7, result: {} });
  });

  describe("over Streamable HTTP", () => {
    let srv, client, transport;
    before(async () => {
      srv = await startHttp(common);
      transport = new StreamableHTTPClientTransport(new URL(srv.url));
      client = await connect(transport);
    });
    after(async () => {
      await client?.close();
      srv?.proc.kill("SIGTERM");
    });

    test("initialize negotiates the client's version; tools over HTTP", async () => {
      assert.equal(transport.protocolVersion, LATEST_PROTOCOL_VERSION);
      assert.equal(client.getServerVersion().name, "cordon");
      assert.equal((await client.listTools()).tools.length, TOOLS.length);
      const c = await client.callTool({ name: "create_sandbox", arguments: { timeout: 60 } });
      const id = idOf(c);
      assert.ok(id, text(c));
      const r = await client.callTool({ name: "run_command", arguments: { sandbox_id: id, command: "echo over http" } });
      assert.match(text(r), /over http/);
      // a long call holds up no other: each connection has a process of its own
      const order = [];
      const slow = client.callTool({ name: "run_command", arguments: { sandbox_id: id, command: "sleep 6; echo slow" } })
        .then((r) => (order.push("slow"), r));
      await new Promise((r) => setTimeout(r, 300));
      const quick = await client.callTool({ name: "run_command", arguments: { sandbox_id: id, command: "echo quick" } });
      order.push("quick");
      assert.match(text(quick), /quick/);
      assert.match(text(await slow), /slow/);
      assert.deepEqual(order, ["quick", "slow"], "the quick call waited for the slow one");
      assert.equal((await client.callTool({ name: "kill_sandbox", arguments: { sandbox_id: id } })).isError, false);
      await assert.rejects(client.callTool({ name: "nope", arguments: {} }), (e) => e instanceof McpError && e.code === -32602);
    });

    test("the HTTP surface: SSE answers, 202, 405, 403, 404, 415, version checks", async () => {
      const post = (body, headers = {}) => fetch(srv.url, { method: "POST", body: typeof body === "string" ? body : JSON.stringify(body),
        headers: { "Content-Type": "application/json", Accept: "application/json, text/event-stream", ...headers } });
      const init = { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "1999-01-01", capabilities: {}, clientInfo: { name: "raw", version: "0" } } };
      const j = await (await post(init)).json();
      assert.equal(j.result.protocolVersion, LATEST_PROTOCOL_VERSION); // an unknown version: our latest
      const sse = await post({ jsonrpc: "2.0", id: 2, method: "ping" }, { Accept: "text/event-stream" });
      assert.equal(sse.status, 200);
      assert.match(sse.headers.get("content-type"), /text\/event-stream/);
      assert.equal(await sse.text(), 'event: message\ndata: {"jsonrpc":"2.0","id":2,"result":{}}\n\n');
      assert.equal((await post({ jsonrpc: "2.0", method: "notifications/initialized" })).status, 202);
      assert.equal((await fetch(srv.url, { headers: { Accept: "text/event-stream" } })).status, 405);
      assert.equal((await fetch(srv.url, { method: "DELETE" })).status, 405);
      assert.equal((await post(init, { Origin: "http://evil.example" })).status, 403);
      assert.equal((await post(init, { Origin: "http://localhost:3000" })).status, 200);
      assert.equal((await fetch(srv.url.replace("/mcp", "/other"), { method: "POST", body: "{}" })).status, 404);
      assert.equal((await post(init, { "Content-Type": "text/plain" })).status, 415);
      assert.equal((await post(init, { "MCP-Protocol-Version": "1999-01-01" })).status, 400);
      assert.equal((await post(init, { Accept: "text/html" })).status, 406);
      const bad = await (await post("{not json")).json();
      assert.equal(bad.error.code, -32700);
      const big = await post("x".repeat(5 * 1024 * 1024));
      assert.equal(big.status, 413);
    });

    test("--listen refuses an address that is not loopback", async () => {
      const proc = spawn(CORDON, ["mcp", "--listen", "0.0.0.0:1", "--socket", d.socket], { stdio: ["ignore", "ignore", "pipe"] });
      let err = "";
      proc.stderr.on("data", (x) => (err += x));
      const code = await new Promise((r) => proc.on("exit", r));
      assert.equal(code, 2);
      assert.match(err, /not a loopback address/);
    });
  });
});
