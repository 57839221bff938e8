// The SDK's pure parts: the error table against the API contract, URL parsing, error mapping.
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import * as cordon from "../dist/index.js";
import { REPO } from "./daemon.mjs";

/** The codes of docs/api/openapi.yaml's components.schemas.Error (code: enum:). */
function openapiErrorCodes() {
  const text = fs.readFileSync(path.join(REPO, "docs/api/openapi.yaml"), "utf8");
  const start = text.indexOf("\n    Error:\n");
  assert.ok(start > 0, "openapi.yaml has components.schemas.Error");
  const rest = text.slice(start).split("\n");
  const i = rest.findIndex((l) => /^\s+enum:\s*$/.test(l));
  const codes = [];
  for (const l of rest.slice(i + 1)) {
    const m = /^\s+- ([a-z_]+)\s*$/.exec(l);
    if (!m) break;
    codes.push(m[1]);
  }
  return codes;
}

test("every error code of the API contract has its class", () => {
  const codes = openapiErrorCodes();
  assert.ok(codes.length >= 29, `read ${codes.length} codes`);
  for (const code of codes) {
    const cls = cordon.errorsByCode.get(code);
    assert.ok(cls, `no error class for code ${code}`);
    assert.equal(cls.code, code);
    const e = cordon.errorFromResponse(cls.defaultStatus, JSON.stringify({ error: { code, message: "m" } }));
    assert.ok(e instanceof cls && e instanceof cordon.CordonError, code);
    assert.equal(e.code, code);
    assert.equal(e.detail, "m");
    // each class is exported under its name
    assert.equal(cordon[cls.name], cls, `${cls.name} is exported`);
  }
});

test("specific codes are subclasses of their status's class", () => {
  const e = cordon.errorFromResponse(409, '{"error":{"code":"is_a_directory","message":"x"}}');
  assert.ok(e instanceof cordon.IsADirectory && e instanceof cordon.Conflict);
  assert.equal(e.name, "IsADirectory");
  assert.equal(e.status, 409);
  assert.ok(cordon.errorFromResponse(400, '{"error":{"code":"invalid_field"}}') instanceof cordon.BadRequest);
  // an unknown code falls back to its status's class; a body that is not JSON is the message
  const u = cordon.errorFromResponse(429, '{"error":{"code":"new_code","message":"m"}}');
  assert.ok(u instanceof cordon.QuotaExceeded);
  assert.equal(u.code, "new_code");
  const t = cordon.errorFromResponse(502, "bad gateway", "3");
  assert.ok(t instanceof cordon.InternalError);
  assert.equal(t.retryAfter, 3);
  assert.match(t.message, /bad gateway/);
  assert.ok(new cordon.CordonUnavailable() instanceof cordon.Unavailable);
});

test("endpoints from URLs and the environment", () => {
  assert.deepEqual(cordon.parseUrl("http://h:81/p/"), { scheme: "http", host: "h", port: 81, prefix: "/p" });
  assert.equal(cordon.parseUrl("https://h").port, 443);
  assert.equal(cordon.parseUrl("unix:/run/x.sock").socketPath, "/run/x.sock");
  assert.equal(cordon.parseUrl("unix:///run/x.sock").socketPath, "/run/x.sock");
  assert.equal(cordon.parseUrl("http+unix://%2Frun%2Fx.sock").socketPath, "/run/x.sock");
  assert.equal(cordon.parseUrl("http://[::1]:8080").host, "::1");
  assert.throws(() => cordon.parseUrl("ftp://h"), /scheme/);
  const env = { CORDON_URL: "http://127.0.0.1:9", CORDON_SOCKET: "/s" };
  assert.equal(cordon.resolveEndpoint({ env }).port, 9);
  assert.equal(cordon.resolveEndpoint({ env: { CORDON_SOCKET: "/s" } }).socketPath, "/s");
  assert.equal(cordon.resolveEndpoint({ env: {} }).socketPath, cordon.DEFAULT_SOCKET);
  assert.equal(cordon.resolveEndpoint({ socket: "/x", env }).socketPath, "/x");
  assert.throws(() => cordon.resolveEndpoint({ socket: "/x", url: "http://h" }));
  assert.equal(new cordon.Client({ env: { CORDON_API_KEY: "k" } }).apiKey, "k");
});

test("an absent daemon is CordonUnavailable with a hint", async () => {
  const c = new cordon.Client({ socket: "/nonexistent/cordon.sock" });
  await assert.rejects(cordon.Sandbox.list({ client: c }), (e) =>
    e instanceof cordon.CordonUnavailable && /no such socket/.test(e.message));
});

test("paths are checked before any request", async () => {
  const sbx = new cordon.Sandbox("x", new cordon.Client({ socket: "/nonexistent" }));
  await assert.rejects(sbx.files.read("relative"), cordon.InvalidPath);
  await assert.rejects(sbx.files.read("/a\0b"), cordon.InvalidPath);
  assert.deepEqual(cordon.commandFields("echo"), { cmd: "echo" });
  assert.deepEqual(cordon.commandFields(["a", "b"]), { argv: ["a", "b"] });
  assert.throws(() => cordon.commandFields([]));
});

test("the transport: chunked, length and close-delimited bodies, stale keep-alive, errors", async () => {
  const http = await import("node:http");
  const net = await import("node:net");
  const os = await import("node:os");
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "cordon-tsconn-"));
  const sock = path.join(dir, "s.sock");
  let conns = 0;
  const server = http.createServer((req, res) => {
    if (req.url === "/chunked") {
      res.write("{\"a\":");
      setTimeout(() => res.end("1}"), 5);
    } else if (req.url === "/error") {
      res.writeHead(409, { "Content-Type": "application/json", "Retry-After": "2" });
      res.end('{"error":{"code":"sandbox_paused","message":"paused"}}');
    } else {
      let body = "";
      req.on("data", (d) => (body += d));
      req.on("end", () => {
        const out = JSON.stringify({ method: req.method, url: req.url, body, auth: req.headers.authorization ?? null });
        res.writeHead(200, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(out) });
        res.end(out);
        // after /x, the server drops the kept-alive connection: the client must notice
        if (req.url.startsWith("/x")) res.on("finish", () => setTimeout(() => req.socket.destroy(), 20));
      });
    }
  });
  server.on("connection", () => conns++);
  await new Promise((r) => server.listen(sock, r));
  const raw = net.createServer((s) => s.end("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{\"eof\":true}"));
  const rawSock = path.join(dir, "raw.sock");
  await new Promise((r) => raw.listen(rawSock, r));
  const c = new cordon.Client({ socket: sock, apiKey: "k" });
  try {
    assert.deepEqual((await c.request("GET", "/chunked")).json(), { a: 1 });
    const r = (await c.request("POST", "/x", { json: { é: 1 }, query: { a: "b c" } })).json();
    assert.deepEqual(r, { method: "POST", url: "/x?a=b%20c", body: '{"é":1}', auth: "Bearer k" });
    await new Promise((r) => setTimeout(r, 200)); // the kept-alive connection is closed now
    assert.equal((await c.request("GET", "/again")).json().url, "/again");
    assert.ok(conns >= 2);
    await assert.rejects(c.request("GET", "/error"), (e) =>
      e instanceof cordon.SandboxPaused && e.status === 409 && e.retryAfter === 2 && e.detail === "paused");
    const silent = net.createServer(() => {}); // accepts, never answers
    const silentSock = path.join(dir, "silent.sock");
    await new Promise((r) => silent.listen(silentSock, r));
    const sc = new cordon.Client({ socket: silentSock, requestTimeoutMs: 200 });
    await assert.rejects(sc.request("GET", "/"), (e) => e instanceof cordon.Timeout && /within 0.2 s/.test(e.message));
    await assert.rejects(sc.request("POST", "/", { json: {} }), cordon.Timeout);
    await new Promise((r) => setTimeout(r, 50)); // a late rejection would surface here
    sc.close();
    silent.close();
    const rc = new cordon.Client({ socket: rawSock });
    assert.deepEqual((await rc.request("GET", "/")).json(), { eof: true });
    rc.close();
    await assert.rejects(new cordon.Client({ socket: path.join(dir, "none") }).request("GET", "/"), cordon.CordonUnavailable);
  } finally {
    c.close();
    server.close();
    raw.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("directories as tar: packed, read back, hostile members refused before writing", async () => {
  const os = await import("node:os");
  const tar = await import("../dist/tar.js");
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "cordon-tstar-"));
  try {
    const src = path.join(dir, "src");
    const long = "d".repeat(60) + "/" + "f".repeat(80);
    fs.mkdirSync(path.join(src, "d".repeat(60)), { recursive: true });
    fs.writeFileSync(path.join(src, long), "long");
    fs.writeFileSync(path.join(src, "a.txt"), "A");
    fs.symlinkSync("a.txt", path.join(src, "ln"));
    const members = tar.readMembers(tar.packDir(src), 1 << 20);
    assert.deepEqual(members.map((m) => [m.name, m.type]).sort(),
      [["a.txt", "file"], ["d".repeat(60), "dir"], [long, "file"], ["ln", "symlink"]]);
    tar.writeMembers(members, path.join(dir, "out"));
    assert.equal(fs.readFileSync(path.join(dir, "out", long), "utf8"), "long");
    assert.equal(fs.readlinkSync(path.join(dir, "out", "ln")), "a.txt");
    // hostile archives: a raw ustar member each
    const one = (name, type, link = "") => {
      const h = Buffer.alloc(512);
      h.write(name, 0);
      h.write("0000644\0", 100);
      h.write("00000000000\0", 124);
      h.write("        ", 148);
      h.write(type, 156);
      h.write(link, 157);
      h.write("ustar\u000000", 257, "binary");
      let sum = 0;
      for (const b of h) sum += b;
      h.write(sum.toString(8).padStart(6, "0") + "\0 ", 148);
      return Buffer.concat([h, Buffer.alloc(1024)]);
    };
    for (const [name, type, link] of [["/etc/x", "0"], ["a/../../x", "0"], ["l", "2", "../../etc"], ["l", "2", "/etc"],
      ["dev", "3"], ["h", "1", "../x"]]) {
      assert.throws(() => tar.readMembers(one(name, type, link), 1 << 20), cordon.UnsafeArchive, `${name} ${type} ${link}`);
    }
    // a symlink of the tree does not lead a later member out of it
    fs.mkdirSync(path.join(dir, "victim"));
    fs.symlinkSync(path.join(dir, "victim"), path.join(dir, "out", "esc"));
    assert.throws(() => tar.writeMembers(tar.readMembers(one("esc/x", "0"), 1 << 20), path.join(dir, "out")), cordon.UnsafeArchive);
    assert.deepEqual(fs.readdirSync(path.join(dir, "victim")), []);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("upgrade: the bytes after a 101 stay in the socket; an error answer is its typed error", async () => {
  const net = await import("node:net");
  const os = await import("node:os");
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "cordon-tsupg-"));
  const sock = path.join(dir, "s.sock");
  const heads = [];
  const server = net.createServer((s) => {
    let head = "";
    s.on("data", (d) => {
      head += d.toString("latin1");
      if (!head.includes("\r\n\r\n")) return;
      heads.push(head);
      if (head.startsWith("GET /ok ")) {
        // the head and the tunnel's first bytes in one write, then an echo
        s.write("HTTP/1.1 101 Switching Protocols\r\nUpgrade: tcp\r\nConnection: Upgrade\r\n\r\nHELLO ");
        s.removeAllListeners("data");
        s.on("data", (x) => s.write(x));
        s.on("end", () => s.end());
      } else {
        const body = '{"error":{"code":"port_unreachable","message":"nothing listens on 9"}}';
        s.end(`HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`);
      }
    });
  });
  await new Promise((r) => server.listen(sock, r));
  const c = new cordon.Client({ socket: sock, apiKey: "k" });
  try {
    const s = await c.upgrade("/ok");
    s.end("world");
    const chunks = [];
    for await (const x of s) chunks.push(x);
    assert.equal(Buffer.concat(chunks).toString(), "HELLO world");
    assert.match(heads[0], /^GET \/ok HTTP\/1\.1\r\n/);
    assert.match(heads[0], /\r\nUpgrade: tcp\r\n/);
    assert.match(heads[0], /\r\nAuthorization: Bearer k\r\n/);
    await assert.rejects(c.upgrade("/no"), (e) =>
      e instanceof cordon.PortUnreachable && e.status === 502 && e.detail === "nothing listens on 9");
    const gone = new cordon.Client({ socket: path.join(dir, "none.sock") });
    await assert.rejects(gone.upgrade("/ok"), cordon.CordonUnavailable);
  } finally {
    c.close();
    server.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

// onApproval's watcher against a stand-in for the daemon's two routes it uses (a real approval
// needs tests/net's fake internet, where tests/net/test_approvals.py drives the Python SDK's):
// the events it asks for, the verdict each answer of the callback sends, and its end.
test("onApproval: follows /v1/events, allows, denies, leaves pending, survives a throw, ends", async () => {
  const http = await import("node:http");
  const os = await import("node:os");
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "cordon-tsap-"));
  const sock = path.join(dir, "s.sock");
  const decisions = [];
  let eventsUrl;
  let events;
  const server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (d) => (body += d));
    req.on("end", () => {
      if (req.method === "POST" && req.url === "/v1/sandboxes") {
        res.writeHead(201, { "Content-Type": "application/json" });
        return res.end(JSON.stringify({ id: "sb-1", state: "running" }));
      }
      if (req.url.startsWith("/v1/events")) {
        eventsUrl = req.url;
        res.writeHead(200, { "Content-Type": "application/x-ndjson" });
        res.write("\n");
        events = res;
        return;
      }
      const m = /^\/v1\/approvals\/(ap-[0-9a-f]+)$/.exec(req.url);
      if (req.method === "POST" && m) {
        decisions.push([m[1], JSON.parse(body)]);
        if (m[1] === "ap-dead") {
          res.writeHead(404, { "Content-Type": "application/json" });
          return res.end('{"error":{"code":"not_found","message":"no such approval"}}');
        }
        res.writeHead(200, { "Content-Type": "application/json" });
        return res.end(JSON.stringify({ id: m[1], decision: JSON.parse(body).decision }));
      }
      res.writeHead(404);
      res.end();
    });
  });
  await new Promise((r) => server.listen(sock, r));
  const c = new cordon.Client({ socket: sock });
  const seen = [];
  const warnings = [];
  const onWarning = (w) => warnings.push(w.message);
  process.on("warning", onWarning);
  try {
    const sbx = await cordon.Sandbox.create({ client: c, onApproval: async (ap) => {
      seen.push([ap.id, ap.method, ap.host, ap.path, ap.timeoutS]);
      if (ap.id === "ap-3") throw new Error("boom");
      return { "ap-1": true, "ap-2": false, "ap-dead": true }[ap.id];
    } });
    const q = new URL(eventsUrl, "http://x").searchParams;
    assert.deepEqual([q.get("follow"), q.get("sandbox"), q.get("kind")], ["1", "sb-1", "approval.pending,sandbox.destroyed"]);
    const pending = (id) => JSON.stringify({ kind: "approval.pending", id, sandbox: "sb-1", method: "POST",
      host: "api.example.test", port: 443, path: "/v1/charges", timeout_s: 60 }) + "\n";
    for (const id of ["ap-1", "ap-2", "ap-3", "ap-4", "ap-dead", "ap-5"]) events.write(pending(id));
    events.write(JSON.stringify({ kind: "sandbox.destroyed", sandbox: "sb-1" }) + "\n");
    events.write(pending("ap-6"));   // after the end: not handed over
    for (let i = 0; i < 100 && seen.length < 6; i++) await new Promise((r) => setTimeout(r, 20));
    await new Promise((r) => setTimeout(r, 100));
    assert.deepEqual(seen.map((s) => s[0]), ["ap-1", "ap-2", "ap-3", "ap-4", "ap-dead", "ap-5"]);
    assert.deepEqual(seen[0], ["ap-1", "POST", "api.example.test", "/v1/charges", 60]);
    assert.deepEqual(decisions, [["ap-1", { decision: "allow" }], ["ap-2", { decision: "deny" }], ["ap-dead", { decision: "allow" }]]);
    assert.ok(warnings.some((w) => /onApproval failed for ap-3: .*boom/.test(w)), warnings.join("; "));
    assert.ok(!warnings.some((w) => /ap-dead/.test(w)), "a NotFound decision is quiet");
    void sbx;
  } finally {
    process.off("warning", onWarning);
    events?.end();
    c.close();
    server.closeAllConnections?.();
    server.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
