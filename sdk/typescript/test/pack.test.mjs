// `npm pack` makes an installable tarball: installed into a fresh project (offline: it has no
// runtime dependencies), it imports, and its type declarations compile against a user's code.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const PKG = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const run = (cmd, args, cwd) => execFileSync(cmd, args, { cwd, encoding: "utf8", timeout: 120_000, stdio: ["ignore", "pipe", "pipe"] });

test("npm pack, install the tarball, import it, type-check against it", () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "cordon-tspack-"));
  try {
    const out = JSON.parse(run("npm", ["pack", "--json", "--pack-destination", tmp], PKG));
    const tarball = path.join(tmp, out[0].filename);
    const files = out[0].files.map((f) => f.path);
    assert.ok(files.includes("dist/index.js") && files.includes("dist/index.d.ts"), files.join(" "));
    assert.ok(!files.some((f) => f.startsWith("src/") || f.startsWith("test/")), "only dist/ and the README");
    const proj = path.join(tmp, "app");
    fs.mkdirSync(proj);
    fs.writeFileSync(path.join(proj, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
    run("npm", ["install", "--offline", "--no-audit", "--no-fund", tarball], proj);
    fs.writeFileSync(path.join(proj, "main.mjs"),
      'import { Sandbox, NotFound, errorsByCode } from "@cordon/sdk";\n' +
      'console.log(typeof Sandbox.create, NotFound.code, errorsByCode.size > 20);\n');
    assert.equal(run("node", ["main.mjs"], proj).trim(), "function not_found true");
    // the declarations: a user's TypeScript compiles against them (tsc from this package)
    fs.writeFileSync(path.join(proj, "main.ts"),
      'import { Sandbox, Approvals, type ExecResult, type PtyProcess, type WatchEvent } from "@cordon/sdk";\n' +
      'import type { Socket } from "node:net";\n' +
      'export async function f(): Promise<number> { const s = await Sandbox.create({ template: "host", network: { profile: "p" },\n' +
      '    onApproval: (ap) => ap.method === "GET" });\n' +
      '  const t: PtyProcess = await s.pty.create({ cols: 80, rows: 24, cmd: ["sh"] });\n' +
      '  for await (const chunk of t) { const b: Buffer = chunk; void b; break; }\n' +
      '  for await (const ev of await s.files.watch("/tmp", { recursive: true })) { const e: WatchEvent = ev; void e; break; }\n' +
      '  const sock: Socket = await s.connectPort(8080); sock.end();\n' +
      '  const m = await s.metrics(); void m.current.cpuPct; void (await new Approvals().list());\n' +
      '  void (await Sandbox.runtimes()).runtimes[0]?.available; void (await Sandbox.networkProfiles())[0]?.policy;\n' +
      '  const r: ExecResult = await s.exec(["true"]); return r.exitCode; }\n');
    const tsc = path.join(PKG, "node_modules", "typescript", "bin", "tsc");
    run("node", [tsc, "--noEmit", "--strict", "--module", "NodeNext", "--moduleResolution", "NodeNext",
      "--target", "ES2022", "--types", "node", "--typeRoots", path.join(PKG, "node_modules", "@types"), "main.ts"], proj);
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});
