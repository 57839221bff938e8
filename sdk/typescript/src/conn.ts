/**
 * A minimal HTTP/1.1 keep-alive client over net/tls sockets for ordinary (non-streamed)
 * requests: node:http's machinery costs a quarter of a millisecond a request, which an exec
 * round trip of about one millisecond feels. Streams still go through node:http (http.ts).
 *
 * One request at a time per connection; idle connections wait in a pool. The answer's body is
 * read by Content-Length, chunked encoding, or to the end of the connection.
 */
import * as net from "node:net";
import * as tls from "node:tls";

export interface Target {
  socketPath?: string;
  host?: string;
  port?: number;
  tls?: boolean;
}

export interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
}

const HEAD_MAX = 64 * 1024;
const BODY_MAX = 256 * 1024 * 1024;

/** The HTTP answer could not be read: the connection broke or the bytes are not HTTP. */
export class ConnError extends Error {
  constructor(message: string, readonly errno?: string, readonly sent = true) {
    super(message);
  }
}

class Conn {
  private chunks: Buffer[] = [];
  private size = 0;
  private onData: (() => void) | undefined;
  closed = false;
  error: Error | undefined;

  /** closed, or holding bytes no request asked for: not to be used again */
  get stale(): boolean {
    return this.closed || this.size > 0;
  }

  constructor(readonly socket: net.Socket) {
    socket.setNoDelay(true);
    socket.on("data", (d: Buffer) => {
      this.chunks.push(d);
      this.size += d.length;
      this.onData?.();
    });
    const end = (e?: Error) => {
      this.closed = true;
      if (e) this.error = e;
      this.onData?.();
    };
    socket.on("end", () => end());
    socket.on("close", () => end());
    socket.on("error", (e) => end(e));
  }

  private take(): Buffer {
    const b = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks);
    this.chunks = [];
    this.size = 0;
    return b;
  }

  private push(b: Buffer): void {
    if (b.length) {
      this.chunks.unshift(b);
      this.size += b.length;
    }
  }

  /** Waits for more bytes (or the end); resolves with all unread bytes so far. */
  private more(): Promise<Buffer | undefined> {
    if (this.size) return Promise.resolve(this.take());
    if (this.closed) return Promise.resolve(undefined);
    return new Promise((resolve) => {
      this.onData = () => {
        this.onData = undefined;
        resolve(this.size ? this.take() : undefined);
      };
    });
  }

  /** Sends @head and @body, reads the whole answer. */
  async roundTrip(head: string, body: Buffer | undefined, method: string): Promise<RawResponse & { keepAlive: boolean }> {
    if (this.closed) throw new ConnError("the connection is closed", "ECONNRESET", false);
    // "sent" as the Python SDK has it: the request reached the socket. A write that failed
    // (the peer had closed: EPIPE) was not sent, and any request may go again.
    let writeFailed = false;
    const onWrite = (e?: Error | null) => {
      if (e) writeFailed = true;
    };
    this.socket.write(body && body.length < 16384 ? Buffer.concat([Buffer.from(head, "latin1"), body]) : head, onWrite);
    if (body && body.length >= 16384) this.socket.write(body, onWrite);
    let buf = Buffer.alloc(0);
    let at = -1;
    while ((at = buf.indexOf("\r\n\r\n")) < 0) {
      if (buf.length > HEAD_MAX) throw new ConnError("the answer's head is too large");
      const b = await this.more();
      if (!b) {
        await new Promise((r) => setImmediate(r)); // let a failed write report itself
        throw new ConnError(this.error?.message ?? "the connection was closed before an answer",
                            (this.error as NodeJS.ErrnoException)?.code ?? "ECONNRESET", !writeFailed);
      }
      buf = buf.length ? Buffer.concat([buf, b]) : b;
    }
    const { status, headers } = parseHead(buf.subarray(0, at).toString("latin1"));
    this.push(buf.subarray(at + 4));
    const noBody = method === "HEAD" || status === 204 || status === 304 || (status >= 100 && status < 200);
    let out: Buffer;
    let keepAlive = !/close/i.test(headers.connection ?? "");
    if (noBody) out = Buffer.alloc(0);
    else if (/chunked/i.test(headers["transfer-encoding"] ?? "")) out = await this.chunked();
    else if (headers["content-length"] !== undefined) out = await this.exactly(Number(headers["content-length"]));
    else {
      out = await this.toEnd();
      keepAlive = false;
    }
    return { status, headers, body: out, keepAlive };
  }

  private async exactly(n: number): Promise<Buffer> {
    if (!Number.isSafeInteger(n) || n < 0 || n > BODY_MAX) throw new ConnError("a bad Content-Length");
    const parts: Buffer[] = [];
    let got = 0;
    while (got < n) {
      const b = await this.more();
      if (!b) throw new ConnError("the connection was closed in the middle of the answer", "ECONNRESET");
      const use = b.subarray(0, n - got);
      parts.push(use);
      got += use.length;
      this.push(b.subarray(use.length));
    }
    return parts.length === 1 ? parts[0]! : Buffer.concat(parts);
  }

  private async line(): Promise<string> {
    let buf = Buffer.alloc(0);
    for (;;) {
      const i = buf.indexOf("\r\n");
      if (i >= 0) {
        this.push(buf.subarray(i + 2));
        return buf.subarray(0, i).toString("latin1");
      }
      if (buf.length > 1024) throw new ConnError("a bad chunk size line");
      const b = await this.more();
      if (!b) throw new ConnError("the connection was closed in the middle of the answer", "ECONNRESET");
      buf = Buffer.concat([buf, b]);
    }
  }

  private async chunked(): Promise<Buffer> {
    const parts: Buffer[] = [];
    let total = 0;
    for (;;) {
      const size = parseInt((await this.line()).split(";")[0]!.trim(), 16);
      if (!Number.isSafeInteger(size) || size < 0 || (total += size) > BODY_MAX) throw new ConnError("a bad chunk size");
      if (size === 0) {
        while ((await this.line()) !== "");  // trailers, then the empty line
        return Buffer.concat(parts);
      }
      parts.push(await this.exactly(size));
      await this.exactly(2);
    }
  }

  private async toEnd(): Promise<Buffer> {
    const parts: Buffer[] = [];
    let total = 0;
    for (let b; (b = await this.more());) {
      parts.push(b);
      if ((total += b.length) > BODY_MAX) throw new ConnError("the answer is too large");
    }
    return Buffer.concat(parts);
  }

  close(): void {
    this.closed = true;
    this.socket.destroy();
  }
}

/** A connected socket to @t (TLS when it says); a failure rejects with a ConnError not sent. */
export function openSocket(t: Target, timeoutMs: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = t.socketPath ? net.createConnection(t.socketPath)
      : t.tls ? tls.connect({ host: t.host, port: t.port, servername: t.host && net.isIP(t.host) ? undefined : t.host })
        : net.createConnection(t.port!, t.host);
    const timer = timeoutMs > 0 ? setTimeout(() => s.destroy(Object.assign(new Error("connect timed out"), { code: "ETIMEDOUT" })), timeoutMs) : undefined;
    s.once(t.tls ? "secureConnect" : "connect", () => {
      clearTimeout(timer);
      s.removeAllListeners("error");
      resolve(s);
    });
    s.once("error", (e: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      reject(new ConnError(e.message, e.code, false));
    });
  });
}

/** Idle keep-alive connections to one endpoint. */
export class Pool {
  private idle: Conn[] = [];
  constructor(private readonly target: Target, private readonly max = 16) {}

  private async connect(timeoutMs: number): Promise<Conn> {
    return new Conn(await openSocket(this.target, timeoutMs));
  }

  /**
   * One request. A kept-alive connection that the server closed meanwhile is dropped and the
   * request is sent once more on a new one when @retry allows it (idempotent, or not sent).
   */
  async request(method: string, head: string, body: Buffer | undefined, timeoutMs: number, retry: boolean): Promise<RawResponse> {
    for (let attempt = 0; ; attempt++) {
      let conn = this.idle.pop();
      const reused = conn !== undefined;
      while (conn?.stale) {
        conn.close();
        conn = this.idle.pop();
      }
      conn ??= await this.connect(timeoutMs);
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<never>((_, reject) => {
        if (timeoutMs > 0) timer = setTimeout(() => reject(new ConnError("timed out", "ETIMEDOUT")), timeoutMs);
      });
      try {
        const trip = conn.roundTrip(head, body, method);
        trip.catch(() => {}); // after a timeout it fails too, when its connection is closed
        const r = await (timeoutMs > 0 ? Promise.race([trip, timeout]) : trip);
        if (r.keepAlive && this.idle.length < this.max && !conn.closed) this.idle.push(conn);
        else conn.close();
        return r;
      } catch (e) {
        conn.close();
        const stale = e instanceof ConnError && e.errno === "ECONNRESET" && reused;
        if (stale && attempt === 0 && (retry || !e.sent)) continue;
        throw e;
      } finally {
        clearTimeout(timer);
      }
    }
  }

  close(): void {
    for (const c of this.idle) c.close();
    this.idle = [];
  }
}

/** The answer to an upgrade request: its status and headers, and the bytes after its head
 * (the body of an error answer, read to its end). */
export interface UpgradeAnswer {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
}

function parseHead(text: string): { status: number; headers: Record<string, string> } {
  const lines = text.split("\r\n");
  const m = /^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? "");
  if (!m) throw new ConnError(`not an HTTP answer: ${JSON.stringify((lines[0] ?? "").slice(0, 80))}`);
  const headers: Record<string, string> = {};
  for (const l of lines.slice(1)) {
    const i = l.indexOf(":");
    if (i > 0) headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
  }
  return { status: Number(m[1]), headers };
}

/**
 * Sends @head on @sock and reads the answer's head. A 101 resolves with the socket's bytes
 * after the head put back into it (read from it as from any socket); any other status reads
 * the body to the end of the connection (an error answer closes it) or its Content-Length.
 */
export function upgradeOn(sock: net.Socket, head: string, timeoutMs: number): Promise<UpgradeAnswer> {
  return new Promise((resolve, reject) => {
    let buf = Buffer.alloc(0);
    let answer: { status: number; headers: Record<string, string> } | undefined;
    let at = 0;
    const timer = timeoutMs > 0 ? setTimeout(() => fail(new ConnError("timed out", "ETIMEDOUT")), timeoutMs) : undefined;
    const done = () => {
      clearTimeout(timer);
      sock.removeListener("readable", onReadable);
      sock.removeListener("end", onEnd);
      sock.removeListener("error", fail);
    };
    const fail = (e: Error) => {
      done();
      reject(e instanceof ConnError ? e : new ConnError(e.message, (e as NodeJS.ErrnoException).code ?? "ECONNRESET"));
    };
    const finish = () => {
      done();
      resolve({ ...answer!, body: buf.subarray(at) });
    };
    const onEnd = () => {
      if (answer) finish();
      else fail(new ConnError("the connection was closed before an answer", "ECONNRESET"));
    };
    const onReadable = () => {
      for (let b: Buffer | null; (b = sock.read() as Buffer | null) !== null;) {
        buf = buf.length ? Buffer.concat([buf, b]) : b;
        if (!answer) {
          const end = buf.indexOf("\r\n\r\n");
          if (end < 0) {
            if (buf.length > HEAD_MAX) return fail(new ConnError("the answer's head is too large"));
            continue;
          }
          try {
            answer = parseHead(buf.subarray(0, end).toString("latin1"));
          } catch (e) {
            return fail(e as ConnError);
          }
          at = end + 4;
          if (answer.status === 101) {
            if (buf.length > at) sock.unshift(buf.subarray(at)); // the tunnel's first bytes
            buf = Buffer.alloc(0);
            at = 0;
            return finish();
          }
        }
        const cl = answer.headers["content-length"];
        if (cl !== undefined && buf.length - at >= Number(cl)) return finish();
        if (buf.length > HEAD_MAX + BODY_MAX) return fail(new ConnError("the answer is too large"));
      }
    };
    sock.on("readable", onReadable);
    sock.once("end", onEnd);
    sock.once("error", fail);
    sock.write(head);
  });
}
