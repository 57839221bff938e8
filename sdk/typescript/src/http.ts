/**
 * HTTP/1.1 transport to cordond over a unix socket or TCP, Node's standard library only.
 *
 * One keep-alive agent per {@link Client}; streams (process events, code cells, template
 * builds) are read as NDJSON, one parsed object per line, through an async iterator.
 */
import * as http from "node:http";
import * as https from "node:https";
import type * as net from "node:net";
import { ConnError, openSocket, Pool, upgradeOn, type Target } from "./conn.js";
import { errorFromResponse, CordonError, CordonUnavailable, InternalError, Timeout } from "./errors.js";

export const DEFAULT_SOCKET = "/run/cordon/cordon.sock";
export const DEFAULT_REQUEST_TIMEOUT_MS = 120_000;
export const SDK_VERSION = "0.1.0";
const USER_AGENT = `cordon-typescript/${SDK_VERSION}`;
const MAX_LINE = 4 * 1024 * 1024;

/** Where cordond is: a unix socket path, or an http(s) base URL. */
export interface Endpoint {
  scheme: "unix" | "http" | "https";
  socketPath?: string;
  host?: string;
  port?: number;
  prefix: string;
}

/** Parses `http://host:port[/prefix]`, `https://...`, `unix:/path`, `unix:///path`,
 * `http+unix://%2Fpath`. */
export function parseUrl(url: string): Endpoint {
  const u = new URL(url.trim());
  const scheme = u.protocol.replace(/:$/, "").toLowerCase();
  const bad = (why: string) => new Error(`invalid CORDON_URL ${JSON.stringify(url)}: ${why}`);
  if (scheme === "unix") {
    const path = u.host ? "/" + u.host + u.pathname : u.pathname;
    if (!path) throw bad("no socket path");
    return { scheme: "unix", socketPath: decodeURIComponent(path), prefix: "" };
  }
  if (scheme === "http+unix") {
    const path = decodeURIComponent(u.host);
    if (!path) throw bad("no socket path");
    return { scheme: "unix", socketPath: path, prefix: u.pathname.replace(/\/+$/, "") };
  }
  if (scheme === "http" || scheme === "https") {
    if (!u.hostname) throw bad("no host");
    const port = u.port ? Number(u.port) : scheme === "https" ? 443 : 80;
    const host = u.hostname.replace(/^\[(.*)\]$/, "$1");
    return { scheme, host, port, prefix: u.pathname.replace(/\/+$/, "") };
  }
  throw bad("the scheme must be http, https or unix");
}

export interface ClientOptions {
  /** unix socket path (default `$CORDON_SOCKET` or /run/cordon/cordon.sock) */
  socket?: string;
  /** `http://host:port` for TCP (default `$CORDON_URL`); exclusive with `socket` */
  url?: string;
  /** bearer key for TCP (default `$CORDON_API_KEY`) */
  apiKey?: string;
  /** milliseconds to wait for an answer to an ordinary request (default 120 s; 0: none) */
  requestTimeoutMs?: number;
  /** the environment to read (default process.env) */
  env?: Record<string, string | undefined>;
}

/** Picks the endpoint: explicit url, explicit socket, $CORDON_URL, $CORDON_SOCKET, default. */
export function resolveEndpoint(opts: ClientOptions = {}): Endpoint {
  const env = opts.env ?? process.env;
  if (opts.url && opts.socket) throw new Error("give either socket or url, not both");
  if (opts.url) return parseUrl(opts.url);
  if (opts.socket) return { scheme: "unix", socketPath: opts.socket, prefix: "" };
  if (env.CORDON_URL) return parseUrl(env.CORDON_URL);
  return { scheme: "unix", socketPath: env.CORDON_SOCKET || DEFAULT_SOCKET, prefix: "" };
}

export function describeEndpoint(e: Endpoint): string {
  if (e.scheme === "unix") return `unix socket ${e.socketPath}`;
  const host = e.host!.includes(":") ? `[${e.host}]` : e.host;
  return `${e.scheme}://${host}:${e.port}${e.prefix}`;
}

export type Query = Record<string, string | number | boolean | undefined | null> | Array<[string, unknown]>;

/** `?k=v&...`, %20 for spaces and %2B for '+'; undefined and null values left out. */
export function buildQuery(query?: Query): string {
  if (!query) return "";
  const items = Array.isArray(query) ? query : Object.entries(query);
  const pairs: string[] = [];
  for (const [k, v] of items) {
    if (v === undefined || v === null) continue;
    pairs.push(`${encodeURIComponent(k)}=${encodeURIComponent(String(v))}`);
  }
  return pairs.length ? "?" + pairs.join("&") : "";
}

export const quoteSegment = (v: string | number): string => encodeURIComponent(String(v));

export interface RequestOptions {
  query?: Query;
  json?: unknown;
  body?: Uint8Array | string;
  contentType?: string;
  headers?: Record<string, string>;
  /** this request's wait in ms (default the client's) */
  timeoutMs?: number;
  /** an error answer resolves instead of rejecting */
  allowError?: boolean;
}

/** A complete (non-streamed) answer. */
export class Response {
  constructor(readonly status: number, readonly headers: Record<string, string | string[] | undefined>,
              readonly body: Buffer) {}

  json<T = any>(): T {
    if (!this.body.length) return null as T;
    try {
      return JSON.parse(this.body.toString("utf8")) as T;
    } catch (e) {
      throw new InternalError("internal", `cordond answered HTTP ${this.status} with a body that is not JSON: ${this.body.subarray(0, 200).toString()}`, this.status);
    }
  }

  text(): string {
    return this.body.toString("utf8");
  }

  ndjson<T = any>(): T[] {
    return this.text().split("\n").map((l) => l.trim()).filter(Boolean).map((l) => JSON.parse(l) as T);
  }
}

/** A streamed answer: iterate it for one parsed JSON value per line; close() to stop early. */
export class Stream implements AsyncIterable<any> {
  private done = false;
  constructor(readonly status: number, readonly headers: http.IncomingHttpHeaders,
              private readonly res: http.IncomingMessage, private readonly req: http.ClientRequest) {}

  /** Raw lines (without their newline), then the end of the stream. */
  async *lines(): AsyncGenerator<string> {
    let pending = "";
    try {
      for await (const chunk of this.res) {
        pending += typeof chunk === "string" ? chunk : (chunk as Buffer).toString("utf8");
        let nl: number;
        while ((nl = pending.indexOf("\n")) >= 0) {
          const line = pending.slice(0, nl).trim();
          pending = pending.slice(nl + 1);
          if (line) yield line;
        }
        if (pending.length > MAX_LINE)
          throw new InternalError("internal", `an NDJSON line over ${MAX_LINE} bytes`);
      }
      if (pending.trim()) yield pending.trim();
    } catch (e) {
      if (this.done) return;
      if (e instanceof CordonError) throw e;
      throw new CordonUnavailable("unavailable", `the stream from cordond broke: ${(e as Error).message}`);
    } finally {
      this.close();
    }
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<any> {
    for await (const line of this.lines()) {
      let ev: unknown;
      try {
        ev = JSON.parse(line);
      } catch {
        continue; // a line that is not JSON is skipped, as the Python SDK does
      }
      yield ev;
    }
  }

  /** Its connection no longer keeps Node's event loop alive. */
  unref(): void {
    this.res.socket?.unref();
  }

  close(): void {
    if (this.done) return;
    this.done = true;
    this.res.destroy();
    this.req.destroy();
  }
}

/**
 * A connection to cordond. Requests share one keep-alive agent; each stream has its own
 * connection, closed when the stream ends.
 */
export class Client {
  readonly endpoint: Endpoint;
  readonly apiKey: string | undefined;
  readonly requestTimeoutMs: number;
  private readonly agent: http.Agent;
  private readonly pool: Pool;
  private readonly target: Target;

  constructor(opts: ClientOptions = {}) {
    const env = opts.env ?? process.env;
    this.endpoint = resolveEndpoint(opts);
    this.apiKey = opts.apiKey ?? (env.CORDON_API_KEY || undefined);
    this.requestTimeoutMs = opts.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
    const agentOpts = { keepAlive: true, maxSockets: 16 };
    this.agent = this.endpoint.scheme === "https" ? new https.Agent(agentOpts) : new http.Agent(agentOpts);
    const e = this.endpoint;
    this.target = e.scheme === "unix" ? { socketPath: e.socketPath } : { host: e.host, port: e.port, tls: e.scheme === "https" };
    this.pool = new Pool(this.target);
  }

  toString(): string {
    return `Client(${describeEndpoint(this.endpoint)})`;
  }

  /** Closes every kept-alive connection. */
  close(): void {
    this.agent.destroy();
    this.pool.close();
  }

  private headers(o: RequestOptions, hasBody: boolean, accept: string): Record<string, string> {
    const h: Record<string, string> = { "User-Agent": USER_AGENT, Accept: accept };
    if (this.apiKey) h.Authorization = `Bearer ${this.apiKey}`;
    if (hasBody) h["Content-Type"] = o.contentType ?? (o.json !== undefined ? "application/json" : "application/octet-stream");
    return { ...h, ...(o.headers ?? {}) };
  }

  private payload(o: RequestOptions): Buffer | undefined {
    if (o.json !== undefined) return Buffer.from(JSON.stringify(o.json), "utf8");
    if (o.body !== undefined) return typeof o.body === "string" ? Buffer.from(o.body, "utf8") : Buffer.from(o.body);
    return undefined;
  }

  private unreachable(err: NodeJS.ErrnoException): CordonError {
    const where = describeEndpoint(this.endpoint);
    const hints: Record<string, string> = this.endpoint.scheme === "unix" ? {
      ENOENT: " (no such socket: is cordond running? set CORDON_SOCKET or pass socket)",
      ECONNREFUSED: " (nobody listens on it: is cordond running?)",
      EACCES: " (permission denied: the socket is mode 0660; join its group or run as root)",
    } : { ECONNREFUSED: " (is cordond running with --listen? set CORDON_URL)" };
    const hint = (err.code && hints[err.code]) || "";
    return new CordonUnavailable("unavailable", `cannot reach cordond at ${where}: ${err.code ?? err.name}: ${err.message}${hint}`);
  }

  private open(method: string, path: string, o: RequestOptions, accept: string, agent: http.Agent | false,
               timeoutMs: number): Promise<{ req: http.ClientRequest; res: http.IncomingMessage }> {
    const data = this.payload(o);
    const hasBody = data !== undefined || method === "POST" || method === "PUT";
    const headers = this.headers(o, data !== undefined, accept);
    if (hasBody) headers["Content-Length"] = String(data?.length ?? 0);
    const e = this.endpoint;
    const target = e.prefix + path + buildQuery(o.query);
    const common: http.RequestOptions = { method, path: target, headers, agent };
    const where = e.scheme === "unix" ? { socketPath: e.socketPath } : { host: e.host, port: e.port };
    const mod = e.scheme === "https" ? https : http;
    return new Promise((resolve, reject) => {
      const req = mod.request({ ...common, ...where });
      let timer: NodeJS.Timeout | undefined;
      if (timeoutMs > 0) {
        timer = setTimeout(() => {
          req.destroy();
          reject(new Timeout("timeout", `no answer from cordond at ${describeEndpoint(e)} to ${method} ${path} within ${timeoutMs / 1000} s`));
        }, timeoutMs);
      }
      req.on("response", (res) => {
        if (timer) clearTimeout(timer);
        resolve({ req, res });
      });
      req.on("error", (err: NodeJS.ErrnoException) => {
        if (timer) clearTimeout(timer);
        reject(this.unreachable(err));
      });
      req.end(data);
    });
  }

  private async readAll(res: http.IncomingMessage, timeoutMs: number): Promise<Buffer> {
    const chunks: Buffer[] = [];
    const timer = timeoutMs > 0 ? setTimeout(() => res.destroy(new Error("timed out reading the answer")), timeoutMs) : undefined;
    try {
      for await (const c of res) chunks.push(c as Buffer);
    } catch (e) {
      throw new CordonUnavailable("unavailable", `the answer from cordond broke: ${(e as Error).message}`);
    } finally {
      if (timer) clearTimeout(timer);
    }
    return Buffer.concat(chunks);
  }

  private head(method: string, path: string, o: RequestOptions, data: Buffer | undefined): string {
    const e = this.endpoint;
    const target = e.prefix + path + buildQuery(o.query);
    const host = e.scheme === "unix" ? "localhost" : e.host!.includes(":") ? `[${e.host}]:${e.port}` : `${e.host}:${e.port}`;
    const h = this.headers(o, data !== undefined, "application/json");
    if (data !== undefined || method === "POST" || method === "PUT") h["Content-Length"] = String(data?.length ?? 0);
    let head = `${method} ${target} HTTP/1.1\r\nHost: ${host}\r\n`;
    for (const [k, v] of Object.entries(h)) {
      if (/[\r\n]/.test(k + v)) throw new TypeError(`header ${k}: no CR or LF`);
      head += `${k}: ${v}\r\n`;
    }
    return head + "\r\n";
  }

  private connFailure(e: unknown, method: string, path: string, tmo: number): unknown {
    if (!(e instanceof ConnError)) return e;
    if (e.errno === "ETIMEDOUT")
      return new Timeout("timeout", `no answer from cordond at ${describeEndpoint(this.endpoint)} to ${method} ${path} within ${tmo / 1000} s`);
    return this.unreachable(Object.assign(new Error(e.message), { code: e.errno }));
  }

  /** Sends a request and reads the whole answer; an error answer rejects with its typed error. */
  async request(method: string, path: string, o: RequestOptions = {}): Promise<Response> {
    const tmo = o.timeoutMs ?? this.requestTimeoutMs;
    const data = this.payload(o);
    let raw;
    try {
      raw = await this.pool.request(method, this.head(method, path, o, data), data, tmo,
                                    ["GET", "HEAD", "PUT", "DELETE"].includes(method));
    } catch (e) {
      throw this.connFailure(e, method, path, tmo);
    }
    const r = new Response(raw.status, raw.headers, raw.body);
    if (r.status >= 400 && !o.allowError) throw errorFromResponse(r.status, raw.body, raw.headers["retry-after"]);
    return r;
  }

  /** Sends a request on a connection of its own and returns the answer as an open Stream. */
  async stream(method: string, path: string, o: RequestOptions = {}): Promise<Stream> {
    const tmo = o.timeoutMs ?? this.requestTimeoutMs;
    const { req, res } = await this.open(method, path, o, "application/x-ndjson, application/json", false, tmo);
    const status = res.statusCode ?? 0;
    if (status >= 400) {
      const body = await this.readAll(res, tmo).catch(() => Buffer.alloc(0));
      req.destroy();
      throw errorFromResponse(status, body, res.headers["retry-after"]);
    }
    res.setEncoding("utf8");
    return new Stream(status, res.headers, res, req);
  }

  /**
   * A GET with `Upgrade: tcp` on a connection of its own. Resolves with the socket once
   * cordond answered 101 (what came after the head is still to be read from it; from then on
   * it carries raw bytes); an error answer rejects with its typed error.
   */
  async upgrade(path: string, timeoutMs = this.requestTimeoutMs): Promise<net.Socket> {
    const head = this.head("GET", path, { headers: { Upgrade: "tcp", Connection: "Upgrade" } }, undefined);
    let sock: net.Socket;
    let answer;
    try {
      sock = await openSocket(this.target, timeoutMs);
    } catch (e) {
      throw this.connFailure(e, "GET", path, timeoutMs);
    }
    try {
      answer = await upgradeOn(sock, head, timeoutMs);
    } catch (e) {
      sock.destroy();
      throw this.connFailure(e, "GET", path, timeoutMs);
    }
    if (answer.status === 101) return sock;
    sock.destroy();
    throw errorFromResponse(answer.status, answer.body, answer.headers["retry-after"]);
  }
}
