/** The Sandbox class: create, connect, list, exec, files, processes, ptys, code, lifecycle. */
import type * as net from "node:net";
import { ApprovalWatcher, type ApprovalCallback } from "./approvals.js";
import { CodeInterpreter, type CodeContext, type Execution, type RunCodeOptions } from "./code.js";
import { CordonError, errorFromResponse, NotFound } from "./errors.js";
import { Files } from "./files.js";
import { Client, quoteSegment, type ClientOptions } from "./http.js";
import { execResult, sandboxInfo, sandboxMetrics, snapshot, type ApproveRule, type ExecResult, type NetworkProfile,
         type Runtimes, type SandboxInfo, type SandboxMetrics, type Snapshot } from "./models.js";
import { commandFields, Processes, type Command } from "./processes.js";
import { Pty } from "./pty.js";

const EXEC_MARGIN_S = 30; // seconds the HTTP wait exceeds the command's own timeout
const DEFAULT_EXEC_TIMEOUT_S = 60;

/** Where cordond is (socket/url/apiKey, or a shared client). */
export interface ConnectOptions extends ClientOptions {
  client?: Client;
}

export interface Volume {
  name: string;
  path: string;
  read_only?: boolean;
}

export interface SecretSpec {
  value: string;
  hosts?: string[];
  in?: string[];
}

/** A sandbox's network: a policy, or a profile of the server's (narrowed by what else is given). */
export interface NetworkSpec {
  /** "deny" (loopback only), "allow" (only what `allow` lists) or "public" */
  policy?: string;
  /** "*.github.com:443", "10.0.0.0/8:5432", ... (with policy "allow") */
  allow?: string[];
  /** requests held until a person decides (Approvals, onApproval) */
  approve?: ApproveRule[];
  /** an egress profile of the server's (networkProfiles()) */
  profile?: string;
}

export interface CreateOptions extends ConnectOptions {
  /** the image (server default "host") */
  template?: string;
  /** seconds until it is destroyed (server default 300, capped by the server) */
  timeout?: number;
  /** "jail", "gvisor", "microvm" or "auto" */
  runtime?: string;
  /** { cpus, memory_mb, pids, disk_mb } */
  limits?: Record<string, number>;
  /** a policy name ("deny", "allow", "public") or { policy, allow: ["*.github.com:443"] }, or
   * { profile: "packages" } */
  network?: string | NetworkSpec;
  env?: Record<string, string>;
  metadata?: Record<string, string>;
  /** start from a snapshot (or its id) */
  snapshot?: string | Snapshot;
  secrets?: Record<string, SecretSpec>;
  /** "name:/path", "name:/path:ro" or { name, path, read_only } */
  volumes?: Array<string | Volume>;
  /** called for each request of this sandbox that an approve rule of its network holds: true
   * allows it, false denies it, undefined leaves it pending (Approvals); ends with the sandbox */
  onApproval?: ApprovalCallback;
}

export interface ExecOptions {
  cwd?: string;
  env?: Record<string, string>;
  user?: string;
  /** text written to its stdin, then closed */
  stdin?: string;
  /** seconds (server default 60), after which it is killed and timedOut is true */
  timeout?: number;
  tag?: string;
  /** "base64": the exact bytes in stdoutBytes/stderrBytes */
  encoding?: "base64" | "text";
}

function volumeMount(v: string | Volume): Volume {
  if (typeof v !== "string") return { ...v };
  const i = v.indexOf(":");
  const name = i < 0 ? "" : v.slice(0, i);
  let rest = i < 0 ? "" : v.slice(i + 1);
  const ro = rest.endsWith(":ro");
  if (ro) rest = rest.slice(0, -3);
  if (!name || !rest) throw new Error(`volume ${JSON.stringify(v)}: expected NAME:PATH or NAME:PATH:ro`);
  return { name, path: rest, read_only: ro };
}

export function clientOf(o: ConnectOptions): Client {
  if (o.client) {
    if (o.socket || o.url || o.apiKey) throw new Error("give either client or socket/url/apiKey, not both");
    return o.client;
  }
  return new Client(o);
}

function createBody(o: CreateOptions): Record<string, unknown> {
  const network = typeof o.network === "string" ? { policy: o.network } : o.network;
  const fields: Array<[string, unknown]> = [
    ["template", o.template], ["runtime", o.runtime], ["timeout_s", o.timeout], ["limits", o.limits],
    ["network", network], ["env", o.env], ["metadata", o.metadata],
    ["snapshot", typeof o.snapshot === "object" ? o.snapshot.id : o.snapshot], ["secrets", o.secrets],
    ["volumes", o.volumes?.map(volumeMount)],
  ];
  return Object.fromEntries(fields.filter(([, v]) => v !== undefined));
}

/** A sandbox in cordond. Make one with Sandbox.create or Sandbox.connect. */
export class Sandbox {
  readonly files: Files;
  readonly processes: Processes;
  readonly code: CodeInterpreter;
  readonly pty: Pty;
  private info_: SandboxInfo | undefined;
  private watcher: ApprovalWatcher | undefined;

  constructor(readonly id: string, readonly client: Client, info?: SandboxInfo) {
    this.info_ = info;
    this.files = new Files(this);
    this.processes = new Processes(this);
    this.code = new CodeInterpreter(this);
    this.pty = new Pty(this);
  }

  /** Creates a sandbox (claimed from the warm pool when one is ready). */
  static async create(o: CreateOptions = {}): Promise<Sandbox> {
    const c = clientOf(o);
    const info = sandboxInfo((await c.request("POST", "/v1/sandboxes", { json: createBody(o) })).json());
    const sbx = new Sandbox(info.id, c, info);
    if (o.onApproval) {
      try {
        sbx.watcher = await ApprovalWatcher.start(c, info.id, o.onApproval);
      } catch (e) {
        await sbx.kill().catch(() => false); // nothing half-made: no sandbox without its watcher
        throw e;
      }
    }
    return sbx;
  }

  /** Attaches to an existing sandbox by id; rejects with NotFound if there is none. */
  static async connect(id: string, o: ConnectOptions = {}): Promise<Sandbox> {
    const s = new Sandbox(id, clientOf(o));
    await s.info();
    return s;
  }

  /** The sandboxes (in creation order) whose metadata has every given key and value. */
  static async list(o: ConnectOptions & { metadata?: Record<string, string> } = {}): Promise<SandboxInfo[]> {
    const c = clientOf(o);
    const query = Object.entries(o.metadata ?? {}).map(([k, v]) => [`metadata.${k}`, v] as [string, unknown]);
    const doc = (await c.request("GET", "/v1/sandboxes", { query })).json() ?? {};
    return (doc.sandboxes ?? []).map(sandboxInfo);
  }

  /** Destroys a sandbox by id; false if it was already gone. */
  static async kill(id: string, o: ConnectOptions = {}): Promise<boolean> {
    return new Sandbox(id, clientOf(o)).kill();
  }

  /** "/v1/sandboxes/<id>/<part>/...", each part percent-encoded. */
  path(...parts: Array<string | number>): string {
    return "/v1/sandboxes/" + quoteSegment(this.id) + parts.map((p) => "/" + quoteSegment(p)).join("");
  }

  get sandboxId(): string {
    return this.id;
  }

  /** The sandbox's current state, limits, deadline and metadata. */
  async info(): Promise<SandboxInfo> {
    this.info_ = sandboxInfo((await this.client.request("GET", this.path())).json());
    return this.info_;
  }

  /** false once the sandbox is gone (killed, or past its deadline). */
  async isRunning(): Promise<boolean> {
    try {
      return !["stopped", "destroyed"].includes((await this.info()).state);
    } catch (e) {
      if (e instanceof NotFound) return false;
      throw e;
    }
  }

  /** Moves the deadline to now + `timeout` seconds (capped by the server's maximum). */
  async setTimeout(timeout: number): Promise<SandboxInfo> {
    this.info_ = sandboxInfo((await this.client.request("POST", this.path("timeout"), { json: { timeout_s: timeout } })).json());
    return this.info_;
  }

  /** Destroys the sandbox and everything in it; false if it was already gone. */
  async kill(): Promise<boolean> {
    this.watcher?.stop();
    try {
      await this.client.request("DELETE", this.path());
      return true;
    } catch (e) {
      if (e instanceof NotFound) return false;
      throw e;
    }
  }

  /** `await using sbx = await Sandbox.create()` destroys it at the end of the block. */
  async [Symbol.asyncDispose ?? Symbol.for("Symbol.asyncDispose")](): Promise<void> {
    await this.kill();
  }

  /** Freezes every process (state "paused"); exec and files raise SandboxPaused until resume. */
  async pause(): Promise<SandboxInfo> {
    this.info_ = sandboxInfo((await this.client.request("POST", this.path("pause"))).json());
    return this.info_;
  }

  /** Lets a paused sandbox run again; its TTL counts on from where it stopped. */
  async resume(): Promise<SandboxInfo> {
    this.info_ = sandboxInfo((await this.client.request("POST", this.path("resume"))).json());
    return this.info_;
  }

  /** A snapshot of the sandbox's filesystem, for Sandbox.create({snapshot}). */
  async snapshot(): Promise<Snapshot> {
    return snapshot((await this.client.request("POST", this.path("snapshots"))).json());
  }

  /** One snapshot, `n` (1..100) children started from it: a Sandbox per child made, or the
   * CordonError of one that was not, in order. */
  async fork(n = 1, opts: { timeout?: number } = {}): Promise<Array<Sandbox | CordonError>> {
    const body: Record<string, unknown> = { count: n };
    if (opts.timeout !== undefined) body.timeout_s = opts.timeout;
    const entries: any[] = (await this.client.request("POST", this.path("fork"), { json: body })).json();
    return entries.map((e) => "id" in e ? new Sandbox(e.id, this.client) : errorFromResponse(0, JSON.stringify({ error: e.error ?? {} })));
  }

  /** Replaces the network policy ("deny"/"allow"/"public", or a whole NetworkSpec such as
   * { profile: "packages" }); resolves with the one in force. */
  async setNetwork(policy: string | NetworkSpec, allow?: string[]): Promise<Record<string, unknown>> {
    const body: Record<string, unknown> = typeof policy === "string" ? { policy } : { ...policy };
    if (allow !== undefined) body.allow = allow;
    return (await this.client.request("PUT", this.path("network"), { json: body })).json();
  }

  /** Rotates secret `name` (one the sandbox was created with). */
  async setSecret(name: string, value: string, opts: { hosts?: string[]; where?: string[] } = {}): Promise<Record<string, unknown>> {
    const body: Record<string, unknown> = { value };
    if (opts.hosts !== undefined) body.hosts = opts.hosts;
    if (opts.where !== undefined) body.in = opts.where;
    return (await this.client.request("PUT", this.path("secrets", name), { json: body })).json();
  }

  /** Revokes secret `name`: its placeholder is substituted no more. */
  async deleteSecret(name: string): Promise<void> {
    await this.client.request("DELETE", this.path("secrets", name));
  }

  /**
   * Runs a command and waits for it. A string runs through /bin/sh -c; an array is an argv.
   * A command that cannot start resolves with exit code 127 or 126; it does not reject.
   */
  async exec(cmd: Command, o: ExecOptions = {}): Promise<ExecResult> {
    const body = commandFields(cmd);
    const fields: Array<[string, unknown]> = [["cwd", o.cwd], ["env", o.env], ["user", o.user], ["stdin", o.stdin],
      ["timeout_s", o.timeout], ["tag", o.tag], ["encoding", o.encoding]];
    for (const [k, v] of fields) if (v !== undefined) body[k] = v;
    const secs = o.timeout && o.timeout > 0 ? o.timeout : DEFAULT_EXEC_TIMEOUT_S;
    const wait = this.client.requestTimeoutMs > 0 ? Math.max(this.client.requestTimeoutMs, (secs + EXEC_MARGIN_S) * 1000) : 0;
    return execResult((await this.client.request("POST", this.path("exec"), { json: body, timeoutMs: wait })).json());
  }

  /** Runs a code cell in the sandbox's interpreter (the code-interpreter template). */
  runCode(code: string, o: RunCodeOptions = {}): Promise<Execution> {
    return this.code.run(code, o);
  }

  createCodeContext(o: { language?: string; cwd?: string } = {}): Promise<CodeContext> {
    return this.code.createContext(o);
  }

  /**
   * A connected socket to 127.0.0.1:`port` inside the sandbox, through cordond and the
   * sandbox's agent (the sandbox needs no network): write and read it as any TCP connection,
   * end() it when done. Rejects with PortUnreachable when nothing listens there.
   */
  async connectPort(port: number, o: { timeoutMs?: number } = {}): Promise<net.Socket> {
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw new RangeError(`port ${port}: 1..65535`);
    return this.client.upgrade(this.path("ports", port), o.timeoutMs ?? 30_000);
  }

  /** CPU, memory and disk now, and every 5 s over the last five minutes. */
  async metrics(): Promise<SandboxMetrics> {
    return sandboxMetrics((await this.client.request("GET", this.path("metrics"))).json());
  }

  /** The runtimes the server knows, strongest first, and which it can run here. */
  static async runtimes(o: ConnectOptions = {}): Promise<Runtimes> {
    return (await clientOf(o).request("GET", "/v1/runtimes")).json();
  }

  /** The egress profiles a create may name: `network: { profile }`. */
  static async networkProfiles(o: ConnectOptions = {}): Promise<NetworkProfile[]> {
    return ((await clientOf(o).request("GET", "/v1/network-profiles")).json() ?? {}).profiles ?? [];
  }

  /** The sandbox's audit records so far, oldest first. */
  async audit(): Promise<Array<Record<string, unknown>>> {
    const r = await this.client.request("GET", this.path("audit"), { headers: { Accept: "application/x-ndjson, application/json" } });
    try {
      return r.ndjson();
    } catch {
      const doc = r.json();
      return Array.isArray(doc) ? doc : doc?.events ?? [];
    }
  }

  /** The audit records, then new ones as they happen, until the sandbox is destroyed. */
  async *auditFollow(): AsyncGenerator<Record<string, unknown>> {
    const s = await this.client.stream("GET", this.path("audit"), { query: { follow: "1" }, timeoutMs: 0 });
    try {
      yield* s;
    } finally {
      s.close();
    }
  }
}
