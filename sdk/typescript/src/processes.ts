/** Background processes: sbx.processes.start(...) and the NDJSON event stream. */
import { StringDecoder } from "node:string_decoder";
import { Conflict, CordonError, CordonUnavailable, InternalError, NotFound, StreamLagged } from "./errors.js";
import type { Stream } from "./http.js";
import { processInfo, type ProcessInfo, type ProcessResult } from "./models.js";
import type { Sandbox } from "./sandbox.js";

export const DEFAULT_MAX_OUTPUT = 64 * 1024 * 1024;
const STDIN_CHUNK = 512 * 1024; // raw bytes per request: base64 keeps the JSON body under 1 MiB

export type Command = string | string[];

/** A string is a shell command line (`cmd`); an array is an `argv`. */
export function commandFields(cmd: Command): Record<string, unknown> {
  if (typeof cmd === "string") return { cmd };
  if (!Array.isArray(cmd) || cmd.length === 0) throw new TypeError("argv must be a non-empty array of strings");
  return { argv: cmd.map(String) };
}

export interface ProcessEvent {
  type: "start" | "stdout" | "stderr" | "exit" | "lagged" | string;
  pid?: number;
  data?: string;
  [k: string]: unknown;
}

export interface StreamCallbacks {
  /** text of each write as it came (UTF-8, characters never split); a line each with `lines` */
  onStdout?: (text: string) => void;
  onStderr?: (text: string) => void;
  onStdoutBytes?: (data: Buffer) => void;
  onStderrBytes?: (data: Buffer) => void;
  onExit?: (result: ProcessResult) => void;
  /** bytes of each stream kept for the result (default 64 MiB) */
  maxOutput?: number;
  /** onStdout/onStderr get whole lines without their newline */
  lines?: boolean;
}

export interface StartOptions extends StreamCallbacks {
  cwd?: string;
  env?: Record<string, string>;
  user?: string;
  /** seconds before it is killed (server default 60; 0: as long as the sandbox lives) */
  timeout?: number;
  tag?: string;
}

type Kind = "stdout" | "stderr";

/** How a wrapper of a Process (a PTY) follows its stream: `keepEvents` false keeps no event
 * for events(); `gate` is awaited after each event, before the next is read (its reader's
 * backpressure: the daemon pauses the process's output meanwhile). */
export interface Follow {
  keepEvents?: boolean;
  gate?: () => Promise<void> | void;
}

class Output {
  private chunks: Buffer[] = [];
  size = 0;
  truncated = false;
  private decoder = new StringDecoder("utf8");
  private partial = "";

  constructor(private readonly max: number, private readonly text?: (s: string) => void,
              private readonly bytes?: (b: Buffer) => void, private readonly lines = false) {}

  add(data: Buffer): void {
    const room = this.max - this.size;
    if (room >= data.length) {
      this.chunks.push(data);
      this.size += data.length;
    } else {
      if (room > 0) {
        this.chunks.push(data.subarray(0, room));
        this.size += room;
      }
      this.truncated = true;
    }
    this.bytes?.(data);
    if (this.text) this.emit(this.decoder.write(data), false);
  }

  finish(): void {
    if (this.text) this.emit(this.decoder.end(), true);
  }

  private emit(text: string, final: boolean): void {
    if (!this.lines) {
      if (text) this.text!(text);
      return;
    }
    const parts = (this.partial + text).split("\n");
    this.partial = parts.pop()!;
    if (final && this.partial) {
      parts.push(this.partial);
      this.partial = "";
    }
    for (const line of parts) this.text!(line);
  }

  get buffer(): Buffer {
    return Buffer.concat(this.chunks);
  }
}

/**
 * A process running in a sandbox, fed by its event stream. Callbacks run in order as events
 * arrive; wait() resolves with the ProcessResult. Iterate `events()` instead of passing
 * callbacks to read the raw events yourself (then wait() still works once they end).
 */
export class Process {
  pid = 0;
  tag: string | undefined;
  private out: Record<Kind, Output>;
  private result_: ProcessResult | undefined;
  private error: Error | undefined;
  private readonly finished: Promise<void>;
  private detached = false;
  private queue: ProcessEvent[] = [];
  private wake: (() => void) | undefined;
  private ended = false;

  private constructor(readonly sandbox: Sandbox, private stream: Stream, private readonly cb: StreamCallbacks,
                      first: ProcessEvent, private readonly iter: AsyncIterator<any>, private readonly follow: Follow) {
    const max = cb.maxOutput ?? DEFAULT_MAX_OUTPUT;
    this.out = {
      stdout: new Output(max, cb.onStdout, cb.onStdoutBytes, cb.lines),
      stderr: new Output(max, cb.onStderr, cb.onStderrBytes, cb.lines),
    };
    this.pid = first.pid as number;
    if (typeof first.tag === "string") this.tag = first.tag;
    if (first.type !== "start") this.handle(first);
    else if (follow.keepEvents !== false) this.queue.push(first);
    this.finished = this.run();
  }

  /** Reads the first event (so that `pid` is known) and follows the rest in the background. */
  static async attach(sandbox: Sandbox, stream: Stream, cb: StreamCallbacks, follow: Follow = {}): Promise<Process> {
    const iter = stream[Symbol.asyncIterator]();
    let first: IteratorResult<any>;
    for (;;) {
      first = await iter.next();
      if (first.done || (first.value && typeof first.value === "object")) break;
    }
    if (first.done) {
      stream.close();
      throw new InternalError("internal", "the process event stream ended before its start event");
    }
    if (typeof first.value.pid !== "number") {
      stream.close();
      throw new InternalError("internal", `process event without an integer pid: ${JSON.stringify(first.value)}`);
    }
    return new Process(sandbox, stream, cb, first.value, iter, follow);
  }

  private handle(ev: ProcessEvent): void {
    if (this.follow.keepEvents !== false) this.queue.push(ev);
    this.wake?.();
    switch (ev.type) {
      case "stdout":
      case "stderr": {
        const data = Buffer.from(typeof ev.data === "string" ? ev.data : "", "base64");
        if (data.length) this.safe(() => this.out[ev.type as Kind].add(data));
        break;
      }
      case "exit":
        this.finish(ev);
        break;
      case "lagged":
        this.error = new StreamLagged("lagged", `process ${this.pid}: ${typeof ev.message === "string" ? ev.message : "lagged"} (received ${this.out.stdout.size} bytes of stdout, ${this.out.stderr.size} of stderr)`);
        break;
    }
  }

  private safe(fn: () => void): void {
    try {
      fn();
    } catch (e) {
      // a callback that throws is reported and the stream goes on, as in the Python SDK
      process.emitWarning(`cordon: a callback of process ${this.pid} threw: ${(e as Error).message}`);
    }
  }

  private finish(ev: ProcessEvent): void {
    this.safe(() => this.out.stdout.finish());
    this.safe(() => this.out.stderr.finish());
    const o = this.out.stdout.buffer;
    const e = this.out.stderr.buffer;
    const exitCode = typeof ev.exit_code === "number" ? ev.exit_code : -1;
    const signal = typeof ev.signal === "number" ? ev.signal : 0;
    const timedOut = !!ev.timed_out;
    this.result_ = {
      pid: this.pid, exitCode, signal, timedOut, oom: !!ev.oom,
      durationMs: typeof ev.duration_ms === "number" ? ev.duration_ms : 0,
      stdout: o.toString("utf8"), stderr: e.toString("utf8"), stdoutBytes: o, stderrBytes: e,
      stdoutTruncated: this.out.stdout.truncated, stderrTruncated: this.out.stderr.truncated,
      ok: exitCode === 0 && !signal && !timedOut, raw: ev,
    };
    const r = this.result_;
    this.safe(() => this.cb.onExit?.(r));
  }

  private async run(): Promise<void> {
    try {
      while (!this.result_ && !this.error) {
        const n = await this.iter.next();
        if (n.done) break;
        if (n.value && typeof n.value === "object") this.handle(n.value);
        if (this.follow.gate) await this.follow.gate();
      }
    } catch (e) {
      if (!this.detached) this.error = e as Error;
    } finally {
      this.stream.close();
      this.ended = true;
      this.wake?.();
      if (!this.result_ && !this.error && !this.detached)
        this.error = new CordonUnavailable("unavailable", `process ${this.pid}: lost its event stream`);
    }
  }

  /** The events from the first one on (start, stdout, stderr, exit or lagged), as they come. */
  async *events(): AsyncGenerator<ProcessEvent> {
    let i = 0;
    for (;;) {
      if (i < this.queue.length) {
        yield this.queue[i++]!;
        continue;
      }
      if (this.ended) return;
      await new Promise<void>((r) => (this.wake = r));
    }
  }

  get exited(): boolean {
    return this.result_ !== undefined;
  }

  get exitCode(): number | undefined {
    return this.result_?.exitCode;
  }

  get result(): ProcessResult | undefined {
    return this.result_;
  }

  /** The output received so far. */
  get stdout(): string {
    return this.out.stdout.buffer.toString("utf8");
  }

  get stderr(): string {
    return this.out.stderr.buffer.toString("utf8");
  }

  /**
   * Waits for the process to end. Rejects with a TimeoutError-named Error after `timeoutMs`
   * (the process keeps running), or with a CordonError if its events could not be followed.
   */
  async wait(timeoutMs?: number): Promise<ProcessResult> {
    if (timeoutMs !== undefined) {
      let timer: NodeJS.Timeout | undefined;
      const t = new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          const e = new Error(`process ${this.pid} still runs after ${timeoutMs / 1000} s`);
          e.name = "TimeoutError";
          reject(e);
        }, timeoutMs);
      });
      try {
        await Promise.race([this.finished, t]);
      } finally {
        clearTimeout(timer);
      }
    } else {
      await this.finished;
    }
    if (this.result_) return this.result_;
    throw this.error ?? new CordonUnavailable("unavailable", `process ${this.pid}: detached before it exited`);
  }

  private path(what: string): string {
    return this.sandbox.path("processes", this.pid, what);
  }

  /** Writes to the process's stdin (a string as UTF-8); `eof` closes it after. */
  async sendStdin(data: Uint8Array | string, eof = false): Promise<void> {
    const buf = typeof data === "string" ? Buffer.from(data, "utf8") : Buffer.from(data);
    if (!buf.length) {
      if (eof) await this.sandbox.client.request("POST", this.path("stdin"), { json: { eof: true } });
      return;
    }
    for (let off = 0; off < buf.length; off += STDIN_CHUNK) {
      const body: Record<string, unknown> = { data: buf.subarray(off, off + STDIN_CHUNK).toString("base64") };
      if (eof && off + STDIN_CHUNK >= buf.length) body.eof = true;
      await this.sandbox.client.request("POST", this.path("stdin"), { json: body });
    }
  }

  /** Closes the process's stdin (it reads end of file). */
  async closeStdin(): Promise<void> {
    await this.sandbox.client.request("POST", this.path("stdin"), { json: { eof: true } });
  }

  /** Sends a signal: a name with or without SIG ("TERM", "SIGINT") or a number. */
  async signal(sig: string | number = "TERM"): Promise<void> {
    await this.sandbox.processes.signal(this.pid, sig);
  }

  /** SIGKILLs the process; false if it had already exited. */
  async kill(): Promise<boolean> {
    return this.sandbox.processes.kill(this.pid);
  }

  /** Stops following the process (it keeps running; reattach with processes.connect). */
  detach(): void {
    this.detached = true;
    this.stream.close();
  }
}

/** sbx.processes: start, list and reattach to background processes, signal them. */
export class Processes {
  constructor(private readonly sandbox: Sandbox) {}

  /** Starts a process and resolves once it has started (its pid known). */
  async start(cmd: Command, opts: StartOptions = {}): Promise<Process> {
    const body = commandFields(cmd);
    const fields: Array<[string, unknown]> = [["cwd", opts.cwd], ["env", opts.env], ["user", opts.user],
      ["timeout_s", opts.timeout], ["tag", opts.tag]];
    for (const [k, v] of fields) if (v !== undefined) body[k] = v;
    const stream = await this.sandbox.client.stream("POST", this.sandbox.path("processes"), { json: body });
    return Process.attach(this.sandbox, stream, opts);
  }

  /** start(cmd, opts).wait() */
  async run(cmd: Command, opts: StartOptions = {}): Promise<ProcessResult> {
    return (await this.start(cmd, opts)).wait();
  }

  /** The processes started through the API that still run. */
  async list(): Promise<ProcessInfo[]> {
    const doc = (await this.sandbox.client.request("GET", this.sandbox.path("processes"))).json() ?? {};
    return (doc.processes ?? []).map(processInfo);
  }

  /** Reattaches to a process by pid: its output from now on, then its exit. */
  async connect(pid: number, cb: StreamCallbacks = {}): Promise<Process> {
    const stream = await this.sandbox.client.stream("GET", this.sandbox.path("processes", pid, "events"));
    return Process.attach(this.sandbox, stream, cb);
  }

  async signal(pid: number, sig: string | number = "TERM"): Promise<void> {
    if (typeof sig !== "string" && typeof sig !== "number") throw new TypeError("signal must be a name or a number");
    const value = typeof sig === "string" ? sig.toUpperCase() : Math.trunc(sig);
    await this.sandbox.client.request("POST", this.sandbox.path("processes", pid, "signal"), { json: { signal: value } });
  }

  /** SIGKILLs a process by pid; false if it no longer runs. */
  async kill(pid: number): Promise<boolean> {
    try {
      await this.signal(pid, "KILL");
      return true;
    } catch (e) {
      if (e instanceof NotFound || e instanceof Conflict) return false;
      throw e;
    }
  }
}

export { CordonError };
