// A real cordond for the tests (like sdk/python/tests): its own temporary socket, state and
// runtime directories; stopped (SIGTERM, then SIGKILL) at the end. Skips without root or
// without the binary.
import { spawn } from "node:child_process";
import * as fs from "node:fs";
import * as net from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import { fileURLToPath } from "node:url";

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
export const BUILD = process.env.CORDON_BUILD || path.join(REPO, "build");
export const CORDOND = process.env.CORDOND || path.join(BUILD, "cordond");

/** Why the daemon tests cannot run here, or undefined. */
export function skipReason() {
  if (process.geteuid && process.geteuid() !== 0) return "cordond needs root";
  if (!fs.existsSync(CORDOND)) return `${CORDOND} is not built (ninja -C build)`;
  return undefined;
}

export async function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on("error", reject);
  });
}

function healthy(socketPath) {
  return new Promise((resolve) => {
    const c = net.createConnection(socketPath);
    let data = "";
    c.setTimeout(2000, () => { c.destroy(); resolve(false); });
    c.on("connect", () => c.write("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    c.on("data", (d) => (data += d));
    c.on("end", () => resolve(/^HTTP\/1\.1 200/.test(data)));
    c.on("error", () => resolve(false));
  });
}

function tcpUp(port) {
  return new Promise((resolve) => {
    const c = net.createConnection(port, "127.0.0.1");
    c.on("connect", () => { c.destroy(); resolve(true); });
    c.on("error", () => resolve(false));
  });
}

// Daemons still running when this process exits (a cancelled test, a hook not run) are
// stopped with it: a test never leaves a cordond behind.
const running = new Set();
process.on("exit", () => {
  for (const d of running) {
    d.proc.kill("SIGKILL");
    fs.rmSync(d.tmp, { recursive: true, force: true });
  }
});

export class Daemon {
  static async start({ tcp = false, extra = [], env: extraEnv = {} } = {}) {
    const d = new Daemon();
    d.tmp = fs.mkdtempSync(path.join(os.tmpdir(), "cordon-tssdk-"));
    d.socket = path.join(d.tmp, "cordon.sock");
    const state = path.join(d.tmp, "state");
    const run = path.join(d.tmp, "run");
    fs.mkdirSync(state);
    fs.mkdirSync(run);
    d.logPath = path.join(d.tmp, "cordond.log");
    const args = ["--socket", d.socket, "--state-dir", state, "--runtime-dir", run,
      "--pool", process.env.CORDON_SDK_POOL || "1", "--max-sandboxes", "8", "--max-timeout", "600", ...extra];
    if (tcp) {
      d.port = await freePort();
      d.url = `http://127.0.0.1:${d.port}`;
      d.keys = { alice: "k-alice-0123456789", bob: "k-bob-0123456789" };
      const keyfile = path.join(d.tmp, "api-keys");
      fs.writeFileSync(keyfile, "# test keys\n" + Object.entries(d.keys).map(([n, k]) => `${k} ${n} 4\n`).join(""), { mode: 0o600 });
      args.push("--listen", `127.0.0.1:${d.port}`, "--api-keys", keyfile);
    }
    const log = fs.openSync(d.logPath, "w");
    // CORDON_TEST_CODE_STORE: a template store holding code-interpreter (as tests/daemon's)
    const env = { ...process.env, ...extraEnv };
    if (process.env.CORDON_TEST_CODE_STORE && !extraEnv.CORDON_TEMPLATES) env.CORDON_TEMPLATES = process.env.CORDON_TEST_CODE_STORE;
    d.proc = spawn(CORDOND, args, { stdio: ["ignore", log, log], env });
    running.add(d);
    fs.closeSync(log);
    d.exited = new Promise((r) => d.proc.on("exit", (code, sig) => r({ code, sig })));
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline) {
      if (d.proc.exitCode !== null) throw new Error(`cordond exited with ${d.proc.exitCode}:\n${d.logs()}`);
      if (fs.existsSync(d.socket) && await healthy(d.socket) && (!tcp || await tcpUp(d.port))) return d;
      await new Promise((r) => setTimeout(r, 50));
    }
    await d.stop();
    throw new Error(`cordond did not become ready in 30 s:\n${d.logs()}`);
  }

  logs() {
    try {
      return fs.readFileSync(this.logPath, "utf8").slice(-4000);
    } catch {
      return "";
    }
  }

  get alive() {
    return this.proc.exitCode === null && this.proc.signalCode === null;
  }

  async stop() {
    running.delete(this);
    if (this.alive) {
      this.proc.kill("SIGTERM");
      const t = setTimeout(() => this.proc.kill("SIGKILL"), 20_000);
      await this.exited;
      clearTimeout(t);
    }
    fs.rmSync(this.tmp, { recursive: true, force: true });
  }
}
