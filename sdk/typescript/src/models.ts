/** Plain result types built from the daemon's JSON answers; each keeps the whole object in `raw`. */

export interface SandboxInfo {
  id: string;
  template: string;
  runtime: string;
  state: string;
  createdAt: string;
  expiresAt: string;
  timeoutS: number;
  limits: Record<string, unknown>;
  network: { policy?: string; allow?: string[]; approve?: Array<Record<string, unknown>>; profile?: string; [k: string]: unknown };
  metadata: Record<string, string>;
  secrets: Array<Record<string, unknown>>;
  volumes: Array<Record<string, unknown>>;
  raw: Record<string, any>;
}

export function sandboxInfo(doc: any): SandboxInfo {
  return {
    id: doc.id,
    template: doc.template ?? "",
    runtime: doc.runtime ?? "",
    state: doc.state ?? "",
    createdAt: doc.created_at ?? "",
    expiresAt: doc.expires_at ?? "",
    timeoutS: doc.timeout_s ?? 0,
    limits: doc.limits ?? {},
    network: doc.network ?? {},
    metadata: doc.metadata ?? {},
    secrets: doc.secrets ?? [],
    volumes: doc.volumes ?? [],
    raw: doc,
  };
}

/** The outcome of Sandbox.exec: exitCode -1 when a signal killed it (then `signal` is set). */
export interface ExecResult {
  exitCode: number;
  signal: number;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  oom: boolean;
  durationMs: number;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  /** the exact bytes (with `encoding: "base64"`, NUL and invalid UTF-8 included) */
  stdoutBytes: Buffer;
  stderrBytes: Buffer;
  /** exited with 0 by itself */
  ok: boolean;
  raw: Record<string, any>;
}

export function execResult(doc: any): ExecResult {
  const bytes = (k: string) => {
    const v = typeof doc[k] === "string" ? doc[k] : "";
    return doc.encoding === "base64" ? Buffer.from(v, "base64") : Buffer.from(v, "utf8");
  };
  const stdoutBytes = bytes("stdout");
  const stderrBytes = bytes("stderr");
  const exitCode = doc.exit_code ?? -1;
  const signal = doc.signal ?? 0;
  const timedOut = !!doc.timed_out;
  return {
    exitCode, signal, timedOut,
    stdout: stdoutBytes.toString("utf8"),
    stderr: stderrBytes.toString("utf8"),
    oom: !!doc.oom,
    durationMs: doc.duration_ms ?? 0,
    stdoutTruncated: !!doc.stdout_truncated,
    stderrTruncated: !!doc.stderr_truncated,
    stdoutBytes, stderrBytes,
    ok: exitCode === 0 && !signal && !timedOut,
    raw: doc,
  };
}

/** The outcome of a process started with sbx.processes.start (its `exit` event). */
export interface ProcessResult {
  pid: number;
  exitCode: number;
  signal: number;
  timedOut: boolean;
  oom: boolean;
  durationMs: number;
  stdout: string;
  stderr: string;
  stdoutBytes: Buffer;
  stderrBytes: Buffer;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  ok: boolean;
  raw: Record<string, any>;
}

/** A running process (GET /v1/sandboxes/{id}/processes). */
export interface ProcessInfo {
  pid: number;
  argv: string[];
  cwd: string;
  user: string;
  startedAt: string;
  tag?: string;
  raw: Record<string, any>;
}

export function processInfo(doc: any): ProcessInfo {
  return { pid: doc.pid, argv: doc.argv ?? [], cwd: doc.cwd ?? "", user: doc.user ?? "",
           startedAt: doc.started_at ?? "", tag: doc.tag ?? undefined, raw: doc };
}

/** A file's metadata: type "file", "dir", "symlink" or "other"; mode the permission bits. */
export interface FileEntry {
  name: string;
  path: string;
  type: string;
  size: number;
  mode: number;
  mtime: string;
  symlinkTarget?: string;
  /** set only when the name is not valid UTF-8: its exact bytes */
  nameBytes?: Buffer;
  pathBytes?: Buffer;
  isDir: boolean;
  isFile: boolean;
  raw: Record<string, any>;
}

export function fileEntry(doc: any): FileEntry {
  return {
    name: doc.name ?? "", path: doc.path ?? "", type: doc.type ?? "file", size: doc.size ?? 0,
    mode: doc.mode ?? 0, mtime: doc.mtime ?? "", symlinkTarget: doc.symlink_target ?? undefined,
    nameBytes: doc.name_b64 ? Buffer.from(doc.name_b64, "base64") : undefined,
    pathBytes: doc.path_b64 ? Buffer.from(doc.path_b64, "base64") : undefined,
    isDir: doc.type === "dir", isFile: (doc.type ?? "file") === "file", raw: doc,
  };
}

export interface Snapshot {
  id: string;
  sandbox: string;
  template: string;
  runtime: string;
  memory: boolean;
  sizeBytes: number;
  createdAt: string;
  limits: Record<string, unknown>;
  raw: Record<string, any>;
}

export function snapshot(doc: any): Snapshot {
  return { id: doc.id, sandbox: doc.sandbox ?? "", template: doc.template ?? "",
           runtime: doc.runtime ?? "", memory: !!doc.memory, sizeBytes: doc.size_bytes ?? 0,
           createdAt: doc.created_at ?? "", limits: doc.limits ?? {}, raw: doc };
}

/** One sample of what a sandbox uses. */
export interface UsageSample {
  timestamp: string;
  /** CPU time of every process of the sandbox so far */
  cpuMs: number;
  /** of one CPU, since the sample before (0 for the first) */
  cpuPct: number;
  memoryBytes: number;
  diskUsedBytes: number;
  diskTotalBytes: number;
  raw: Record<string, any>;
}

export function usageSample(doc: any): UsageSample {
  return { timestamp: doc.timestamp ?? "", cpuMs: doc.cpu_ms ?? 0, cpuPct: doc.cpu_pct ?? 0,
           memoryBytes: doc.memory_bytes ?? 0, diskUsedBytes: doc.disk_used_bytes ?? 0,
           diskTotalBytes: doc.disk_total_bytes ?? 0, raw: doc };
}

/** Sandbox.metrics(): now, and the samples of the last minutes (oldest first). */
export interface SandboxMetrics {
  id: string;
  /** seconds between samples */
  intervalS: number;
  current: UsageSample;
  samples: UsageSample[];
  raw: Record<string, any>;
}

export function sandboxMetrics(doc: any): SandboxMetrics {
  return { id: doc.id ?? "", intervalS: doc.interval_s ?? 0, current: usageSample(doc.current ?? {}),
           samples: (doc.samples ?? []).map(usageSample), raw: doc };
}

/** One runtime of the server's registry (runtimes()). */
export interface RuntimeInfo {
  name: string;
  available: boolean;
  /** why it cannot run here, or null */
  reason: string | null;
  /** how an available runtime with a choice runs here (microvm: kvm or tcg) */
  mode?: { name: string; reason: string | null };
  capabilities: string[];
}

/** runtimes(): every runtime, strongest first; what "auto" and no runtime at all get. */
export interface Runtimes {
  default: string;
  auto: string | null;
  runtimes: RuntimeInfo[];
}

/** An egress profile of the server's (cordond --network-profiles). */
export interface NetworkProfile {
  name: string;
  description?: string;
  policy: "deny" | "allow" | "public";
  allow?: string[];
  approve?: ApproveRule[];
  secret_hosts?: string[];
  limits?: { connections?: number; connections_per_s?: number; bytes_per_s?: number };
}

/** Requests these match are held until a person decides (Approvals). */
export interface ApproveRule {
  approve: string;
  methods?: string[];
  paths?: string[];
  timeout_s?: number;
}
