/**
 * Interactive processes on a pseudo-terminal: `sbx.pty.create({ cols, rows, cmd })`.
 *
 * The terminal lives inside the sandbox (its own devpts); the process leads a new session with
 * it as its controlling terminal, so job control, Ctrl-C (send "\x03") and full-screen
 * programs work. Its output (stdout and stderr are the terminal) comes as Buffers: iterate the
 * handle with `for await`, or pass `onData`. A reader that does not keep up holds the process
 * back (the SDK stops reading, the daemon pauses its output at the source); nothing is
 * buffered without bound.
 */
import type { Stream } from "./http.js";
import type { ProcessResult } from "./models.js";
import { commandFields, Process, type Command } from "./processes.js";
import type { Sandbox } from "./sandbox.js";

const QUEUE_CHUNKS = 256; // chunks held for the iterator; past that the stream is not read
const MAX_OUTPUT = 1 << 20; // output kept in the ProcessResult

export interface PtyOptions {
  /** the terminal's size (default 80x24) */
  cols?: number;
  rows?: number;
  /** a shell line or an argv (default an interactive bash) */
  cmd?: Command;
  /** TERM is xterm-256color unless given here */
  env?: Record<string, string>;
  cwd?: string;
  user?: string;
  /** seconds before it is killed (default 0: as long as the sandbox lives) */
  timeout?: number;
  /** each chunk of output as it comes, instead of the iterator */
  onData?: (data: Buffer) => void;
}

/** A process on a terminal: `for await (const chunk of pty)` reads its output until it exits. */
export class PtyProcess implements AsyncIterable<Buffer> {
  private proc!: Process;
  private chunks: Buffer[] = [];
  private wake: (() => void) | undefined;
  private room: (() => void) | undefined;
  private ended = false;
  private failure: unknown;

  private constructor(readonly sandbox: Sandbox, private readonly onData?: (data: Buffer) => void) {}

  /** Follows the stream of a process started with `pty` (internal: use sbx.pty.create). */
  static async attach(sandbox: Sandbox, stream: Stream, onData?: (data: Buffer) => void): Promise<PtyProcess> {
    const t = new PtyProcess(sandbox, onData);
    const p = await Process.attach(sandbox, stream, { onStdoutBytes: (b) => t.data(b), maxOutput: MAX_OUTPUT },
                                   { keepEvents: false, gate: () => t.gate() });
    t.proc = p;
    p.wait().then(() => t.end(undefined), (e) => t.end(e));
    return t;
  }

  /** the Process beneath (its result, stdout so far, signal()) */
  get process(): Process {
    return this.proc;
  }

  get pid(): number {
    return this.process.pid;
  }

  get exitCode(): number | undefined {
    return this.process.exitCode;
  }

  private data(b: Buffer): void {
    if (this.onData) return this.onData(b);
    this.chunks.push(b);
    this.wake?.();
  }

  private gate(): Promise<void> | void {
    if (this.chunks.length < QUEUE_CHUNKS) return;
    return new Promise((r) => (this.room = r));
  }

  private end(e: unknown): void {
    this.ended = true;
    this.failure = e;
    this.wake?.();
  }

  /** The output, chunk by chunk, until the process exits; rejects if its stream was lost. */
  async *[Symbol.asyncIterator](): AsyncGenerator<Buffer> {
    for (;;) {
      const b = this.chunks.shift();
      if (b) {
        if (this.chunks.length < QUEUE_CHUNKS && this.room) {
          const r = this.room;
          this.room = undefined;
          r();
        }
        yield b;
        continue;
      }
      if (this.ended) {
        if (this.failure) throw this.failure;
        return;
      }
      await new Promise<void>((r) => (this.wake = r));
      this.wake = undefined;
    }
  }

  /** Bytes (or UTF-8 text) typed at the terminal: "ls\n", "\x03" for Ctrl-C. */
  async sendInput(data: Uint8Array | string): Promise<void> {
    await this.process.sendStdin(data);
  }

  /** The terminal's new size; its foreground process gets SIGWINCH. */
  async resize(cols: number, rows: number): Promise<void> {
    await this.sandbox.client.request("POST", this.sandbox.path("processes", this.pid, "resize"),
                                      { json: { cols: Math.trunc(cols), rows: Math.trunc(rows) } });
  }

  /** SIGKILLs the process and every process of its session; false if it had exited. */
  kill(): Promise<boolean> {
    return this.process.kill();
  }

  wait(timeoutMs?: number): Promise<ProcessResult> {
    return this.process.wait(timeoutMs);
  }
}

/** sbx.pty: processes on a pseudo-terminal. */
export class Pty {
  constructor(private readonly sandbox: Sandbox) {}

  /** Starts `cmd` on a `cols` x `rows` terminal; resolves once it has started. */
  async create(o: PtyOptions = {}): Promise<PtyProcess> {
    const body = commandFields(o.cmd ?? ["bash", "-i"]);
    body.pty = { cols: Math.trunc(o.cols ?? 80), rows: Math.trunc(o.rows ?? 24) };
    const fields: Array<[string, unknown]> = [["cwd", o.cwd], ["env", o.env], ["user", o.user], ["timeout_s", o.timeout ?? 0]];
    for (const [k, v] of fields) if (v !== undefined) body[k] = v;
    const stream = await this.sandbox.client.stream("POST", this.sandbox.path("processes"), { json: body });
    return PtyProcess.attach(this.sandbox, stream, o.onData);
  }
}
