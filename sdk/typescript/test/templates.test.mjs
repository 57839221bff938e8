// Templates against a real cordond whose store is a temporary directory, as
// sdk/python/tests/test_templates_sdk.py: the base built first with the CLI from the host's
// static busybox, then builds through the SDK (events streamed, build args, a context
// directory), a sandbox from one, a failed build, delete.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";
import * as cordon from "../dist/index.js";
import { BUILD, Daemon, skipReason } from "./daemon.mjs";

const skip = skipReason() ?? (fs.existsSync("/bin/busybox") ? undefined : "needs /bin/busybox");

describe("templates", { skip }, () => {
  let d, root, client, t;
  before(async () => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), "cordon-tstpl-"));
    const store = path.join(root, "store");
    fs.copyFileSync("/bin/busybox", path.join(root, "busybox"));
    fs.writeFileSync(path.join(root, "Cordonfile"),
      'FROM scratch\nCOPY busybox /bin/busybox\nRUN ["/bin/busybox", "--install", "-s", "/bin"]\n');
    execFileSync(path.join(BUILD, "cordon"), ["template", "build", "tsbase", "-f", path.join(root, "Cordonfile")],
      { env: { ...process.env, CORDON_TEMPLATES: store }, timeout: 120_000, stdio: "pipe" });
    d = await Daemon.start({ env: { CORDON_TEMPLATES: store } });
    client = new cordon.Client({ socket: d.socket });
    t = new cordon.Templates({ client });
  });
  after(async () => {
    client?.close();
    await d?.stop();
    fs.rmSync(root, { recursive: true, force: true });
  });

  test("build with events and args, list, get, use, delete", async () => {
    const seen = [];
    const meta = await t.build("tsweb", "FROM tsbase\nARG WHO=world\nRUN echo hello $WHO > /hello\nENV A=1\n",
      { buildArgs: { WHO: "ts" }, onEvent: (e) => seen.push(e) });
    assert.equal(meta.name, "tsweb");
    assert.ok(meta.env.includes("A=1"));
    const kinds = seen.map((e) => e.event);
    assert.equal(kinds[0], "step");
    assert.ok(kinds.includes("done"));
    assert.equal(kinds.at(-1), "exit");
    assert.ok((await t.list()).some((m) => m.name === "tsweb"));
    assert.equal((await t.get("tsweb")).key, meta.key);
    const sbx = await cordon.Sandbox.create({ client, template: "tsweb" });
    try {
      assert.equal((await sbx.exec("cat /hello; echo $A")).stdout, "hello ts\n1\n");
    } finally {
      await sbx.kill();
    }
    await t.delete("tsweb");
    await assert.rejects(t.get("tsweb"), cordon.NotFound);
  });

  test("a failed build rejects with the line and the build's output", async () => {
    await assert.rejects(t.build("tsbad", "FROM tsbase\nRUN echo about to fail; exit 4\n"), (e) =>
      e instanceof cordon.BuildFailed && /line 2/.test(e.detail) && /status 4/.test(e.detail) &&
      e.events.some((ev) => ev.event === "log" && /about to fail/.test(ev.data ?? "")));
    await assert.rejects(t.get("tsbad"), cordon.NotFound);
    await assert.rejects(t.build("BAD NAME", "FROM tsbase\n"), cordon.BadRequest);
  });

  test("a context directory for COPY", async () => {
    const ctx = path.join(root, "ctx");
    fs.mkdirSync(path.join(ctx, "pkg"), { recursive: true });
    fs.writeFileSync(path.join(ctx, "pkg", "hello.txt"), "from the context\n");
    await t.build("tsctx", "FROM tsbase\nCOPY pkg/ /opt/pkg/\n", { context: ctx });
    const sbx = await cordon.Sandbox.create({ client, template: "tsctx" });
    try {
      assert.equal((await sbx.exec("cat /opt/pkg/hello.txt")).stdout, "from the context\n");
    } finally {
      await sbx.kill();
    }
    await t.delete("tsctx");
    await assert.rejects(t.build("tsctx", "FROM tsbase\n", { context: path.join(root, "missing") }), /not a directory/);
  });
});
