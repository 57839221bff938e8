// The TypeScript SDK against a real cordond (build/cordond): one daemon on a unix socket and
// one on TCP with API keys. Skipped without root or without the daemon binary.
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as net from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";
import * as cordon from "../dist/index.js";
import { Daemon, skipReason } from "./daemon.mjs";

const { Sandbox, NotFound, Unauthorized, InvalidField, UnknownField, Client } = cordon;
const skip = skipReason();

describe("against cordond", { skip }, () => {
  let d;
  let client;
  before(async () => {
    d = await Daemon.start();
    client = new Client({ socket: d.socket });
  });
  after(async () => {
    client?.close();
    const alive = d?.alive;
    await d?.stop();
    assert.ok(alive, "cordond died during the tests");
  });

  const withSandbox = async (opts, fn) => {
    const sbx = await Sandbox.create({ client, template: "host", timeout: 120, ...opts });
    try {
      return await fn(sbx);
    } finally {
      await sbx.kill();
    }
  };

  test("the README example", async () => {
    const env = { CORDON_SOCKET: d.socket };
    const c = new Client({ env });
    const sbx = await Sandbox.create({ client: c, template: "host", timeout: 60, env: { X: "1" }, metadata: { task: "t1" } });
    const r = await sbx.exec("python3 -c 'print(6*7)'");
    assert.deepEqual([r.exitCode, r.stdout, r.signal, r.timedOut, r.oom], [0, "42\n", 0, false, false]);
    assert.ok(r.ok && r.stderr === "" && r.durationMs >= 0 && r.stdoutTruncated === false);

    const out = [];
    const p = await sbx.processes.start(["sh", "-c", "cat"], { onStdout: (t) => out.push(t) });
    assert.ok(p.pid > 0);
    await p.sendStdin("hi\n");
    await p.closeStdin();
    const res = await p.wait(30_000);
    assert.equal(res.exitCode, 0);
    assert.equal(out.join(""), "hi\n");
    assert.equal(res.stdout, "hi\n");

    await sbx.files.write("/home/user/a.txt", "data");
    assert.equal((await sbx.files.read("/home/user/a.txt")).toString(), "data");
    assert.ok((await sbx.files.list("/home/user")).map((e) => e.name).includes("a.txt"));
    assert.equal((await sbx.setTimeout(120)).id, sbx.id);
    assert.deepEqual((await Sandbox.list({ client: c, metadata: { task: "t1" } })).map((s) => s.id), [sbx.id]);
    assert.equal(await sbx.kill(), true);
    await assert.rejects(Sandbox.connect(sbx.id, { client: c }), NotFound);
    c.close();
  });

  test("info, connect, list filters, kill", async () => {
    await withSandbox({ metadata: { suite: "ts", team: "a b+c" } }, async (sbx) => {
      const info = await sbx.info();
      assert.equal(info.template, "host");
      assert.equal(info.runtime, "jail");
      assert.deepEqual(info.metadata, { suite: "ts", team: "a b+c" });
      assert.equal(info.timeoutS, 120);
      assert.ok(info.createdAt && info.expiresAt);
      assert.ok(await sbx.isRunning());
      const again = await Sandbox.connect(sbx.id, { client });
      assert.equal((await again.exec("echo same")).stdout, "same\n");
      assert.deepEqual((await Sandbox.list({ client, metadata: { team: "a b+c" } })).map((s) => s.id), [sbx.id]);
      assert.deepEqual(await Sandbox.list({ client, metadata: { team: "nope" } }), []);
      const records = await sbx.audit();
      assert.ok(records.length > 0 && records.every((r) => typeof r === "object"), JSON.stringify(records).slice(0, 300));
      for await (const rec of sbx.auditFollow()) {   // the records so far, then it would wait for more
        assert.equal(typeof rec, "object");
        break;
      }
      const later = await sbx.setTimeout(300);
      assert.equal(later.timeoutS, 300);
      assert.ok(later.expiresAt >= info.expiresAt);
    });
    const disposed = await Sandbox.create({ client, timeout: 60 });
    await disposed[Symbol.asyncDispose]();   // what `await using` calls
    assert.equal(await disposed.isRunning(), false);
    const gone = await Sandbox.create({ client, timeout: 60 });
    assert.equal(await Sandbox.kill(gone.id, { client }), true);
    assert.equal(await gone.kill(), false);
    assert.equal(await gone.isRunning(), false);
    await assert.rejects(gone.info(), (e) => e instanceof NotFound && e.status === 404 && e.code === "not_found");
  });

  test("exec: argv, env, cwd, user, stdin, exit codes, signals, timeout, bytes", async () => {
    await withSandbox({ env: { X: "1" } }, async (sbx) => {
      assert.equal((await sbx.exec(["echo", "a b", "c"])).stdout, "a b c\n");
      assert.equal((await sbx.exec("echo $X")).stdout, "1\n");
      assert.equal((await sbx.exec("echo $Y", { env: { Y: "two" } })).stdout, "two\n");
      assert.equal((await sbx.exec("pwd", { cwd: "/tmp" })).stdout, "/tmp\n");
      assert.equal((await sbx.exec("id -u")).stdout, "1000\n");
      assert.equal((await sbx.exec("id -u", { user: "root" })).stdout, "0\n");
      assert.equal((await sbx.exec("cat", { stdin: "in put" })).stdout, "in put");
      const r = await sbx.exec("echo err >&2; exit 3");
      assert.deepEqual([r.exitCode, r.stderr, r.ok], [3, "err\n", false]);
      assert.equal((await sbx.exec("no-such-command-xyz")).exitCode, 127);
      const k = await sbx.exec("kill -9 $$");
      assert.deepEqual([k.exitCode, k.signal], [-1, 9]);
      const t0 = Date.now();
      const t = await sbx.exec("sleep 30", { timeout: 1 });
      assert.ok(t.timedOut && t.exitCode === -1 && Date.now() - t0 < 15_000);
      assert.equal((await sbx.exec(["printf", "a\\377b"])).stdout, "a\ufffdb");
      const b = await sbx.exec(["printf", "a\\377\\000b"], { encoding: "base64" });
      assert.deepEqual([...b.stdoutBytes], [0x61, 0xff, 0, 0x62]);
      await assert.rejects(sbx.exec("true", { timeout: "x" }), InvalidField);
    });
  });

  test("processes: streams, lines, events, list, signals, reattach", async () => {
    await withSandbox({}, async (sbx) => {
      const out = [], err = [], raw = [], exits = [];
      const p = await sbx.processes.start("echo one; echo two >&2; printf '\\303\\251'", {
        onStdout: (t) => out.push(t), onStderr: (t) => err.push(t), onStdoutBytes: (b) => raw.push(b),
        onExit: (r) => exits.push(r) });
      const res = await p.wait(30_000);
      assert.equal(res.exitCode, 0);
      assert.equal(out.join(""), "one\n\u00e9");
      assert.equal(err.join(""), "two\n");
      assert.equal(Buffer.concat(raw).toString(), "one\n\u00e9");
      assert.equal(exits.length, 1);

      const lines = [];
      await sbx.processes.run("printf 'a\\nb\\nc'", { lines: true, onStdout: (l) => lines.push(l) });
      assert.deepEqual(lines, ["a", "b", "c"]);

      const ev = await sbx.processes.start(["sh", "-c", "echo x"]);
      const types = [];
      for await (const e of ev.events()) types.push(e.type);
      assert.equal(types[0], "start");
      assert.equal(types.at(-1), "exit");

      const sleeper = await sbx.processes.start("sleep 60", { tag: "sl" });
      assert.equal(sleeper.tag, "sl");
      const listed = await sbx.processes.list();
      assert.ok(listed.some((i) => i.pid === sleeper.pid && i.tag === "sl"));
      const again = await sbx.processes.connect(sleeper.pid);
      await sleeper.signal("TERM");
      const sr = await again.wait(20_000);
      assert.equal(sr.signal, 15);
      assert.equal((await sleeper.wait(20_000)).signal, 15);
      assert.equal(await sleeper.kill(), false);

      const cat = await sbx.processes.start("cat");
      const big = Buffer.alloc(700 * 1024, 0x61);
      await cat.sendStdin(big, true);
      const cr = await cat.wait(30_000);
      assert.equal(cr.stdoutBytes.length, big.length);
      await assert.rejects(sbx.processes.signal(999999, "TERM"), NotFound);
    });
  });

  test("files: write, read, list, stat, mkdir, move, remove, archives, errors", async () => {
    await withSandbox({}, async (sbx) => {
      const f = sbx.files;
      const e = await f.write("/home/user/b.bin", Buffer.from([0, 1, 2, 255]));
      assert.equal(e.size, 4);
      assert.deepEqual([...(await f.read("/home/user/b.bin"))], [0, 1, 2, 255]);
      await f.mkdir("/home/user/d/e", { parents: true });
      assert.ok((await f.stat("/home/user/d")).isDir);
      await f.write("/home/user/d/e/t.txt", "text é");
      assert.equal(await f.readText("/home/user/d/e/t.txt"), "text é");
      const deep = await f.list("/home/user/d", { depth: 3 });
      assert.deepEqual(deep.map((x) => x.path).sort(), ["/home/user/d/e", "/home/user/d/e/t.txt"]);
      assert.equal(deep.truncated, false);
      await f.move("/home/user/d/e/t.txt", "/home/user/t2.txt");
      assert.ok(await f.exists("/home/user/t2.txt"));
      assert.ok(!(await f.exists("/home/user/d/e/t.txt")));
      const tar = await f.downloadArchive("/home/user/d");
      assert.ok(tar.length >= 512);
      const up = await f.uploadArchive("/home/user/copy", tar);
      assert.ok(up.entries >= 1);
      assert.ok((await f.stat("/home/user/copy/e")).isDir);
      const os = await import("node:os");
      const fs = await import("node:fs");
      const path = await import("node:path");
      const local = fs.mkdtempSync(path.join(os.tmpdir(), "cordon-tsdir-"));
      try {
        fs.mkdirSync(path.join(local, "src", "sub"), { recursive: true });
        fs.writeFileSync(path.join(local, "src", "sub", "x.txt"), "x");
        fs.symlinkSync("sub/x.txt", path.join(local, "src", "ln"));
        const up2 = await f.uploadDir(path.join(local, "src"), "/home/user/tree");
        assert.ok(up2.entries >= 3);
        assert.equal(await f.readText("/home/user/tree/sub/x.txt"), "x");
        assert.equal((await f.stat("/home/user/tree/ln")).type, "symlink");
        assert.ok((await f.downloadDir("/home/user/tree", path.join(local, "back"))) >= 3);
        assert.equal(fs.readFileSync(path.join(local, "back", "sub", "x.txt"), "utf8"), "x");
        assert.equal(fs.readlinkSync(path.join(local, "back", "ln")), "sub/x.txt");
      } finally {
        fs.rmSync(local, { recursive: true, force: true });
      }
      await f.remove("/home/user/d");
      assert.ok(!(await f.exists("/home/user/d")));
      await assert.rejects(f.read("/home/user/none"), NotFound);
      await assert.rejects(f.read("/home/user"), cordon.IsADirectory);
      await assert.rejects(f.write("/home/user/no/dir/x", "x"), NotFound);
      await assert.rejects(f.uploadArchive("/home/user/bad", Buffer.alloc(1024, 7)), cordon.UnsafeArchive);
    });
  });

  test("network policy, pause/resume, snapshot and fork, templates, errors", async () => {
    await withSandbox({ network: "deny" }, async (sbx) => {
      const net = await sbx.setNetwork("allow", ["example.com:443"]);
      assert.equal(net.policy, "allow");
      assert.deepEqual((await sbx.info()).network.allow, ["example.com:443"]);
      await sbx.pause();
      assert.equal((await sbx.info()).state, "paused");
      await assert.rejects(sbx.exec("true"), cordon.SandboxPaused);
      await sbx.resume();
      assert.equal((await sbx.exec("echo back")).stdout, "back\n");
      await sbx.files.write("/home/user/snap.txt", "kept");
      const snap = await sbx.snapshot();
      assert.ok(snap.id && snap.memory === false);
      const snaps = new cordon.Snapshots({ client });
      assert.ok((await snaps.list()).some((s) => s.id === snap.id));
      const child = await Sandbox.create({ client, snapshot: snap });
      try {
        assert.equal((await child.files.readText("/home/user/snap.txt")), "kept");
      } finally {
        await child.kill();
      }
      const kids = await sbx.fork(1, { timeout: 60 });
      assert.equal(kids.length, 1);
      assert.ok(kids[0] instanceof Sandbox, String(kids[0]));
      assert.equal((await kids[0].files.readText("/home/user/snap.txt")), "kept");
      await kids[0].kill();
      await snaps.delete(snap.id);
      await assert.rejects(snaps.get(snap.id), NotFound);
    });
    const t = new cordon.Templates({ client });
    const all = await t.list();
    assert.ok(Array.isArray(all));
    for (const x of all) assert.equal((await t.get(x.name)).name, x.name);
    await assert.rejects(t.get("no-such-template"), NotFound);
    await assert.rejects(Sandbox.create({ client, template: "no-such-template" }), NotFound);
    await assert.rejects(client.request("POST", "/v1/sandboxes", { json: { bogus: 1 } }), UnknownField);
    assert.equal((await cordon.health({ socket: d.socket })).status, "ok");
  });

  test("secrets: the value never in the sandbox, rotated, revoked", async () => {
    await assert.rejects(Sandbox.create({ client, secrets: { K: { value: "v", hosts: ["1.2.3.4"] } } }), InvalidField);
    await withSandbox({ secrets: { API_KEY: { value: "sk-ts-secret", hosts: ["api.example.test"] } } }, async (sbx) => {
      assert.deepEqual((await sbx.info()).secrets, [{ name: "API_KEY", hosts: ["api.example.test"], in: ["header"] }]);
      const seen = (await sbx.exec("echo $API_KEY")).stdout;
      assert.ok(seen.trim() && !seen.includes("sk-ts-secret"), seen); // a placeholder
      assert.deepEqual((await sbx.setSecret("API_KEY", "sk-ts-2", { where: ["header", "query"] })).in, ["header", "query"]);
      await sbx.deleteSecret("API_KEY");
      await assert.rejects(sbx.deleteSecret("API_KEY"), NotFound);
      await assert.rejects(sbx.setSecret("API_KEY", "x"), NotFound);
    });
  });

  test("volumes: data kept across sandboxes, read-only mounts, one writer, typed errors", async () => {
    const vols = new cordon.Volumes({ client });
    const released = async (name) => {
      for (let i = 0; i < 200 && (await vols.get(name)).in_use; i++) await new Promise((r) => setTimeout(r, 50));
      return !(await vols.get(name)).in_use;
    };
    const v = await vols.create("tsdata", 32);
    assert.equal(v.name, "tsdata");
    assert.equal(v.size_mb, 32);
    assert.ok((await vols.list()).some((x) => x.name === "tsdata"));
    await assert.rejects(vols.create("tsdata", 32), cordon.VolumeExists);
    await assert.rejects(vols.create("Bad", 32), InvalidField);
    await withSandbox({ volumes: ["tsdata:/data"] }, async (sbx) => {
      assert.deepEqual((await sbx.info()).volumes, [{ name: "tsdata", path: "/data", read_only: false }]);
      await sbx.files.write("/data/kept.txt", "kept");
      await assert.rejects(Sandbox.create({ client, volumes: ["tsdata:/other"] }), cordon.VolumeInUse);
      await assert.rejects(vols.delete("tsdata"), cordon.VolumeInUse);
      await withSandbox({ volumes: [{ name: "tsdata", path: "/ro", read_only: true }] }, async (ro) => {
        assert.equal(await ro.files.readText("/ro/kept.txt"), "kept");
        await assert.rejects(ro.files.write("/ro/nope", "x"), cordon.ReadOnly);
      });
    });
    assert.ok(await released("tsdata"));
    await withSandbox({ volumes: ["tsdata:/again"] }, async (sbx) => assert.equal(await sbx.files.readText("/again/kept.txt"), "kept"));
    assert.ok(await released("tsdata"));
    await vols.delete("tsdata");
    await assert.rejects(vols.get("tsdata"), NotFound);
    await assert.rejects(Sandbox.create({ client, volumes: ["nocolon"] }), /NAME:PATH/);
  });

  test("the code interpreter (runCode, contexts)", async (t) => {
    // the route first, on any sandbox: 404 "no such route" in a build without it
    let absent = false;
    await withSandbox({}, async (sbx) => {
      try {
        await sbx.code.listContexts();
      } catch (e) {
        if (e instanceof NotFound && /no such route/.test(e.detail)) {
          absent = true;
          return t.skip(`POST /v1/sandboxes/{id}/code is not in this cordond build (404: ${e.detail})`);
        }
        if (!(e instanceof cordon.NoInterpreter)) throw e;
      }
      await assert.rejects(sbx.runCode("1+1"), cordon.NoInterpreter); // the host template has no kernel
    });
    if (absent) return;
    try {
      await new cordon.Templates({ client }).get("code-interpreter");
    } catch (e) {
      if (e instanceof NotFound) return t.skip("no code-interpreter template in the store (build recipes/code-interpreter)");
      throw e;
    }
    await withSandbox({ template: "code-interpreter" }, async (sbx) => {
      const ex = await sbx.runCode("1+1");
      assert.equal(ex.text, "2");
      assert.equal(ex.error, undefined);
      const ctx = await sbx.createCodeContext({ language: "python" });
      await sbx.runCode("x = 41", { context: ctx });
      const out = [];
      const ex2 = await sbx.runCode("print(x + 1)", { context: ctx, onStdout: (s) => out.push(s) });
      assert.equal(out.join(""), "42\n");
      assert.deepEqual(ex2.logs.stdout, out);
      const err = await sbx.runCode("1/0", { context: ctx });
      assert.equal(err.error.name, "ZeroDivisionError");
      const fig = await sbx.runCode("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()");
      assert.ok(fig.results.some((r) => r.png && r.formats.includes("image/png")), JSON.stringify(fig.results.map((r) => r.formats)));
      // the figure described as data (a store built from an older recipe has no charts)
      const charted = fig.results.find((r) => r.chart);
      if (charted) {
        assert.equal(charted.chart.type, "line");
        assert.ok(charted.formats.includes("chart"));
        assert.deepEqual(charted.chart.elements[0].points.map((p) => p[1]), [1, 2, 3]);
      }
      assert.ok((await sbx.code.listContexts()).some((c) => c.id === ctx.id));
      assert.equal((await sbx.code.restartContext(ctx)).id, ctx.id);
      await sbx.code.removeContext(ctx);
      await assert.rejects(sbx.runCode("1", { context: ctx.id }), NotFound);
      await assert.rejects(sbx.runCode("1", { language: "no-such-language" }), InvalidField);
    });
  });
});

describe("over TCP with API keys", { skip }, () => {
  let d;
  before(async () => {
    d = await Daemon.start({ tcp: true });
  });
  after(async () => {
    await d?.stop();
  });

  test("a key is needed and sandboxes are per key", async () => {
    await assert.rejects(Sandbox.list({ url: d.url, env: {} }), Unauthorized);
    await assert.rejects(Sandbox.list({ url: d.url, apiKey: "wrong-key-0123456789" }), Unauthorized);
    const alice = new Client({ env: { CORDON_URL: d.url, CORDON_API_KEY: d.keys.alice } });
    const bob = new Client({ url: d.url, apiKey: d.keys.bob });
    const sbx = await Sandbox.create({ client: alice, timeout: 60 });
    try {
      assert.equal((await sbx.exec("echo tcp")).stdout, "tcp\n");
      const p = await sbx.processes.start("read l; echo got $l");   // a stream over TCP, with the key
      await p.sendStdin("x\n", true);
      assert.equal((await p.wait(30_000)).stdout, "got x\n");
      await sbx.files.write("/home/user/t", "over tcp");
      assert.equal(await sbx.files.readText("/home/user/t"), "over tcp");
      assert.deepEqual((await Sandbox.list({ client: alice })).map((s) => s.id), [sbx.id]);
      assert.deepEqual(await Sandbox.list({ client: bob }), []);
      await assert.rejects(Sandbox.connect(sbx.id, { client: bob }), NotFound);
      // a tunnel over TCP, with the key: nothing listens, so the agent's answer is the error
      await assert.rejects(sbx.connectPort(8799), cordon.PortUnreachable);
      await assert.rejects(new Sandbox(sbx.id, bob).connectPort(8799), NotFound);
      assert.deepEqual(await new cordon.Approvals({ client: bob }).list(), []);
    } finally {
      await sbx.kill();
      alice.close();
      bob.close();
    }
  });
});

// PTYs, directory watch, port tunnels, metrics, approvals, runtimes and egress profiles: one
// daemon with a profile of its own (a deny-policy one: no egress proxy needed to create with it).
describe("ptys, watch, ports, metrics, approvals, runtimes, profiles", { skip }, () => {
  let d;
  let client;
  let sbx;
  let profiles;
  before(async () => {
    profiles = fs.mkdtempSync(path.join(os.tmpdir(), "cordon-tsprof-"));
    const file = path.join(profiles, "profiles.json");
    fs.writeFileSync(file, JSON.stringify({ quiet: { description: "loopback only", policy: "deny" } }));
    d = await Daemon.start({ extra: ["--network-profiles", file] });
    client = new Client({ socket: d.socket });
    sbx = await Sandbox.create({ client, template: "host", timeout: 300 });
  });
  after(async () => {
    await sbx?.kill();
    client?.close();
    const alive = d?.alive;
    await d?.stop();
    fs.rmSync(profiles, { recursive: true, force: true });
    assert.ok(alive, "cordond died during the tests");
  });

  /** Reads the iterator @it into @got until @needle is in it; false if it ended first. */
  const readUntil = async (it, needle, got) => {
    for (;;) {
      if (got.text.includes(needle)) return true;
      const n = await it.next();
      if (n.done) return false;
      got.text += n.value.toString("latin1");
    }
  };

  test("pty: a shell, input, output, resize, kill", async () => {
    const t = await sbx.pty.create({ cols: 90, rows: 30, cmd: ["sh", "-i"], env: { PS1: "$ " } });
    assert.ok(t.pid > 0);
    const it = t[Symbol.asyncIterator]();
    const got = { text: "" };
    await t.sendInput("echo hi-$((6*7))\n");
    assert.ok(await readUntil(it, "hi-42", got), got.text);
    await t.sendInput("stty size; echo TERM=$TERM\n");
    assert.ok(await readUntil(it, "30 90", got), got.text);
    assert.ok(await readUntil(it, "TERM=xterm-256color", got), got.text);
    await t.resize(100, 40);
    await t.sendInput("stty size\n");
    assert.ok(await readUntil(it, "40 100", got), got.text);
    assert.equal(await t.kill(), true);
    assert.equal((await t.wait(10_000)).signal, 9);
    while (!(await it.next()).done);   // the iterator ends after the exit
    assert.equal(await t.kill(), false);
  });

  test("pty: output held back while nobody reads, nothing lost", async () => {
    const t = await sbx.pty.create({ cmd: "seq 1 300000; echo END", cols: 200 });
    await new Promise((r) => setTimeout(r, 1000));   // not read: the process is held back
    assert.equal(t.exitCode, undefined);
    let text = "";
    for await (const c of t) text += c.toString("latin1");
    assert.equal((await t.wait(10_000)).exitCode, 0);
    const lines = text.split(/\r?\n/);
    assert.ok(lines.includes("300000") && lines.includes("150000") && text.trimEnd().endsWith("END"), text.slice(-100));
  });

  test("pty: onData, the exit code, a terminal it is on; resize of a plain process", async () => {
    const seen = [];
    const t = await sbx.pty.create({ cmd: "tty; exit 3", onData: (b) => seen.push(b) });
    const r = await t.wait(20_000);
    assert.equal(r.exitCode, 3);
    assert.equal(t.exitCode, 3);
    assert.match(Buffer.concat(seen).toString(), /\/dev\/pts\//);
    const p = await sbx.processes.start(["sleep", "30"]);
    await assert.rejects(sbx.client.request("POST", sbx.path("processes", p.pid, "resize"), { json: { cols: 80, rows: 24 } }),
      (e) => e instanceof cordon.NotATerminal && e instanceof cordon.Conflict && e.code === "not_a_terminal");
    await p.kill();
    await assert.rejects(sbx.pty.create({ cols: 0, cmd: "true" }), InvalidField);
  });

  test("watch: create, write, remove events", async () => {
    await sbx.exec("rm -rf /home/user/tsw && mkdir /home/user/tsw");
    const w = await sbx.files.watch("/home/user/tsw", { recursive: true });
    const got = [];
    try {
      await sbx.exec("mkdir /home/user/tsw/d && sleep 0.2 && echo x > /home/user/tsw/d/f && rm /home/user/tsw/d/f");
      for await (const ev of w) {
        got.push([ev.type, ev.path]);
        if (ev.type === "remove" && ev.path === "/home/user/tsw/d/f") break;
      }
    } finally {
      w.close();
    }
    const has = (t, p) => got.some(([a, b]) => a === t && b === p);
    assert.ok(has("create", "/home/user/tsw/d"), JSON.stringify(got));
    assert.ok(has("create", "/home/user/tsw/d/f"), JSON.stringify(got));
    assert.ok(has("write", "/home/user/tsw/d/f"), JSON.stringify(got));
    await assert.rejects(sbx.files.watch("/home/user/no-such-dir"), NotFound);
    await assert.rejects(sbx.files.watch("relative"), cordon.InvalidPath);
  });

  test("connectPort: an http.server inside the sandbox, PortUnreachable", async () => {
    await sbx.exec("mkdir -p /tmp/tsport && echo via-ts-sdk > /tmp/tsport/i.txt");
    const p = await sbx.processes.start(["python3", "-m", "http.server", "8765", "--bind", "127.0.0.1",
      "--directory", "/tmp/tsport"], { timeout: 0 });
    try {
      let s;
      for (let i = 0; !s; i++) {
        try {
          s = await sbx.connectPort(8765);
        } catch (e) {
          if (!(e instanceof cordon.PortUnreachable) || i > 50) throw e;
          await new Promise((r) => setTimeout(r, 200));
        }
      }
      assert.ok(s instanceof net.Socket);
      s.write("GET /i.txt HTTP/1.0\r\n\r\n");
      const chunks = [];
      for await (const c of s) chunks.push(c);
      const data = Buffer.concat(chunks).toString();
      assert.match(data, /^HTTP\/1\.0 200/);
      assert.ok(data.endsWith("via-ts-sdk\n"), data.slice(-200));
      await assert.rejects(sbx.connectPort(8766), (e) => e instanceof cordon.PortUnreachable && e.status === 502);
      await assert.rejects(sbx.connectPort(0), RangeError);
    } finally {
      await p.kill();
    }
  });

  test("metrics", async () => {
    const m = await sbx.metrics();
    assert.equal(m.id, sbx.id);
    assert.equal(m.intervalS, 5);
    // the disk figures come from the agent's report, which may not have come yet (0 then)
    assert.ok(m.current.memoryBytes > 0 && m.current.diskTotalBytes >= m.current.diskUsedBytes, JSON.stringify(m.raw.current));
    assert.ok(m.current.cpuMs >= 0 && typeof m.current.timestamp === "string" && m.current.timestamp);
    assert.ok(Array.isArray(m.samples) && m.samples.every((x) => typeof x.cpuPct === "number"));
    await assert.rejects(new Sandbox("sb-nope", client).metrics(), NotFound);
  });

  test("approvals: the list, decisions on an unknown id, onApproval's watcher", async () => {
    const aps = new cordon.Approvals({ client });
    assert.deepEqual(await aps.list(), []);
    assert.deepEqual(await aps.list({ sandbox: sbx.id }), []);
    await assert.rejects(aps.allow("ap-123abc"), NotFound);
    await assert.rejects(aps.deny("ap-123abc", "not today"), NotFound);
    await assert.rejects(aps.deny("ap-1", "x".repeat(201)), (e) => e instanceof cordon.BadRequest);
    // the watcher follows /v1/events from before create resolves, and ends with the sandbox
    const calls = [];
    const w = await Sandbox.create({ client, timeout: 60, onApproval: (ap) => (calls.push(ap), true) });
    assert.equal((await w.exec("echo gated")).stdout, "gated\n");
    assert.equal(await w.kill(), true);
    assert.deepEqual(calls, []);
  });

  test("runtimes and egress profiles", async () => {
    const r = await Sandbox.runtimes({ client });
    const jail = r.runtimes.find((x) => x.name === "jail");
    assert.ok(jail && jail.available && jail.reason === null, JSON.stringify(r));
    assert.ok(jail.capabilities.includes("agent"));
    assert.equal(typeof r.default, "string");
    assert.ok(r.runtimes.some((x) => x.name === r.default));
    const ps = await Sandbox.networkProfiles({ client });
    const quiet = ps.find((p) => p.name === "quiet");
    assert.deepEqual([quiet?.policy, quiet?.description], ["deny", "loopback only"], JSON.stringify(ps));
    const q = await Sandbox.create({ client, timeout: 60, network: { profile: "quiet" } });
    try {
      assert.equal((await q.info()).network.profile, "quiet");
      assert.equal((await q.setNetwork("deny")).profile, undefined);
      assert.equal((await q.setNetwork({ profile: "quiet" })).profile, "quiet");
    } finally {
      await q.kill();
    }
    await assert.rejects(Sandbox.create({ client, network: { profile: "no-such" } }), cordon.BadRequest);
  });
});
