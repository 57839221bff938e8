/**
 * The code interpreter: stateful cells in a Jupyter kernel inside the sandbox (the
 * `code-interpreter` template), `POST /v1/sandboxes/{id}/code` streaming NDJSON events.
 */
import { InternalError } from "./errors.js";
import type { Sandbox } from "./sandbox.js";

/** One output of a cell: a MIME bundle ("text/plain", "image/png" (base64), "text/html", ...). */
export interface Result {
  isMain: boolean;
  data: Record<string, string>;
  text?: string;
  html?: string;
  markdown?: string;
  png?: string;
  jpeg?: string;
  svg?: string;
  json?: string;
  /**
   * A matplotlib figure described as data (E2B's chart shape: its type, title, axis labels
   * and elements), when the cell displayed one; its picture is in `png` too.
   */
  chart?: Chart;
  /** the MIME types it carries, and "chart" when it has one */
  formats: string[];
}

/** E2B's chart: `type` is "line", "scatter", "bar", "pie", "box_and_whisker", "superchart" or "unknown". */
export interface Chart {
  type: string;
  title: string | null;
  elements: any[];
  [field: string]: unknown;
}

export interface ExecutionError {
  name: string;
  value: string;
  traceback: string;
}

export interface Execution {
  logs: { stdout: string[]; stderr: string[] };
  results: Result[];
  error: ExecutionError | undefined;
  executionCount: number | undefined;
  /** the cell's output bound cut its output */
  truncated: boolean;
  timedOut: boolean;
  /** the main result's text/plain, if any */
  text: string | undefined;
}

export interface CodeContext {
  id: string;
  language: string;
  cwd: string;
}

export interface RunCodeOptions {
  language?: string;
  /** a context id, or a CodeContext; default: the language's default context */
  context?: string | CodeContext;
  /** seconds the cell may run (then it is interrupted) */
  timeout?: number;
  onStdout?: (text: string) => void;
  onStderr?: (text: string) => void;
  onResult?: (result: Result) => void;
  onError?: (error: ExecutionError) => void;
}

const SHORT: Record<string, keyof Result> = {
  "text/plain": "text", "text/html": "html", "text/markdown": "markdown", "image/png": "png",
  "image/jpeg": "jpeg", "image/svg+xml": "svg", "application/json": "json",
};

function result(ev: any): Result {
  const data: Record<string, string> = ev.data && typeof ev.data === "object" ? ev.data : {};
  const r: Result = { isMain: !!ev.is_main, data, formats: Object.keys(data) };
  for (const [mime, key] of Object.entries(SHORT)) {
    const v = data[mime];
    if (v !== undefined) (r as any)[key] = typeof v === "string" ? v : JSON.stringify(v);
  }
  if (ev.chart && typeof ev.chart === "object") {
    r.chart = ev.chart as Chart;
    r.formats.push("chart");
  }
  return r;
}

function applyEvent(ex: Execution, ev: any, o: RunCodeOptions): boolean {
  switch (ev.type) {
    case "stdout":
    case "stderr": {
      const text = String(ev.text ?? "");
      ex.logs[ev.type as "stdout" | "stderr"].push(text);
      (ev.type === "stdout" ? o.onStdout : o.onStderr)?.(text);
      return false;
    }
    case "result": {
      const r = result(ev);
      ex.results.push(r);
      if (r.isMain) ex.text = r.text;
      o.onResult?.(r);
      return false;
    }
    case "error":
      ex.error = { name: String(ev.name ?? ""), value: String(ev.value ?? ""), traceback: String(ev.traceback ?? "") };
      o.onError?.(ex.error);
      return false;
    case "end":
      ex.executionCount = ev.execution_count;
      ex.truncated = !!ev.truncated;
      ex.timedOut = !!ev.timed_out;
      return true;
    default:
      return false;
  }
}

export class CodeInterpreter {
  constructor(private readonly sandbox: Sandbox) {}

  /** Runs one cell and resolves with its Execution once its `end` event came. */
  async run(code: string, o: RunCodeOptions = {}): Promise<Execution> {
    const body: Record<string, unknown> = { code };
    if (o.language !== undefined) body.language = o.language;
    if (o.context !== undefined) body.context = typeof o.context === "string" ? o.context : o.context.id;
    if (o.timeout !== undefined) body.timeout_s = o.timeout;
    const wait = o.timeout !== undefined ? (o.timeout + 30) * 1000 : undefined;
    const stream = await this.sandbox.client.stream("POST", this.sandbox.path("code"), { json: body, timeoutMs: wait });
    const ex: Execution = { logs: { stdout: [], stderr: [] }, results: [], error: undefined,
                            executionCount: undefined, truncated: false, timedOut: false, text: undefined };
    let ended = false;
    try {
      for await (const ev of stream) if (ev && typeof ev === "object" && applyEvent(ex, ev, o)) ended = true;
    } finally {
      stream.close();
    }
    if (!ended) throw new InternalError("internal", "the code stream ended without its end event (the cell's result is unknown)");
    return ex;
  }

  async createContext(o: { language?: string; cwd?: string } = {}): Promise<CodeContext> {
    return (await this.sandbox.client.request("POST", this.sandbox.path("code", "contexts"), { json: o })).json();
  }

  async listContexts(): Promise<CodeContext[]> {
    return ((await this.sandbox.client.request("GET", this.sandbox.path("code", "contexts"))).json() ?? {}).contexts ?? [];
  }

  async removeContext(ctx: string | CodeContext): Promise<void> {
    await this.sandbox.client.request("DELETE", this.sandbox.path("code", "contexts", typeof ctx === "string" ? ctx : ctx.id));
  }

  async restartContext(ctx: string | CodeContext): Promise<CodeContext> {
    const id = typeof ctx === "string" ? ctx : ctx.id;
    return (await this.sandbox.client.request("POST", this.sandbox.path("code", "contexts", id, "restart"))).json();
  }
}
