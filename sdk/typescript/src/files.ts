/** sbx.files: file operations inside a sandbox. Every path is absolute, resolved inside it. */
import { InvalidPath, NotFound } from "./errors.js";
import type { RequestOptions, Stream } from "./http.js";
import { fileEntry, type FileEntry } from "./models.js";
import { packDir, readMembers, writeMembers } from "./tar.js";
import type { Sandbox } from "./sandbox.js";

/** A path: a string (UTF-8), or the exact bytes of a name that is not UTF-8 (FileEntry.pathBytes). */
export type SandboxPath = string | Uint8Array;
const MAX_PAGES = 10000;
const MAX_UNPACKED = 64 * 2 ** 30; // file data downloadDir() unpacks at most, by default

function checkPath(path: SandboxPath): Buffer {
  const p = typeof path === "string" ? Buffer.from(path, "utf8") : Buffer.from(path);
  if (p[0] !== 0x2f)
    throw new InvalidPath("invalid_path", `paths inside a sandbox are absolute: ${JSON.stringify(p.toString("utf8"))}`);
  if (p.includes(0)) throw new InvalidPath("invalid_path", "paths must not contain NUL bytes");
  return p;
}

const isUtf8 = (b: Buffer) => Buffer.from(b.toString("utf8"), "utf8").equals(b);

/** A path in a JSON body: `name` when it is UTF-8, else `name_b64`, its exact bytes. */
function pathField(name: string, p: Buffer): Record<string, string> {
  return isUtf8(p) ? { [name]: p.toString("utf8") } : { [name + "_b64"]: p.toString("base64") };
}

/** `?path=` with the exact bytes percent-encoded, then the other parameters. */
function pathQuery(p: Buffer, extra: Record<string, unknown> = {}): string {
  let q = "?path=";
  for (const byte of p) {
    const c = String.fromCharCode(byte);
    q += /[A-Za-z0-9_.~\/-]/.test(c) ? c : "%" + byte.toString(16).toUpperCase().padStart(2, "0");
  }
  for (const [k, v] of Object.entries(extra)) if (v !== undefined && v !== null) q += `&${k}=${encodeURIComponent(String(v))}`;
  return q;
}

/** The entries of Files.list, with how the listing ended. */
export interface FileList extends Array<FileEntry> {
  /** only part of the entries is here; nextCursor continues it */
  truncated: boolean;
  nextCursor: string | undefined;
  /** entries with a path over 4095 bytes below the listed path were left out */
  omitted: boolean;
}

/** One change under a watched directory. */
export interface WatchEvent {
  /** create (a move into the tree too), write, remove, rename (a move out of its name),
   * chmod (any attribute), overflow (events were lost: a reader too slow, or a flood) */
  type: "create" | "write" | "remove" | "rename" | "chmod" | "overflow" | string;
  /** absolute, under the watched path (U+FFFD for bytes that are not UTF-8) */
  path: string;
  /** the exact bytes of `path`, when it is not UTF-8 */
  pathBytes?: Buffer;
  raw: Record<string, any>;
}

/** An open directory watch (Files.watch): `for await` its events; close() to stop. */
export class Watch implements AsyncIterable<WatchEvent> {
  constructor(private readonly stream: Stream) {}

  async *[Symbol.asyncIterator](): AsyncGenerator<WatchEvent> {
    try {
      for await (const ev of this.stream) {
        if (!ev || typeof ev !== "object") continue;
        yield { type: ev.type ?? "", path: ev.path ?? "", pathBytes: ev.path_b64 ? Buffer.from(ev.path_b64, "base64") : undefined, raw: ev };
      }
    } finally {
      this.stream.close();
    }
  }

  close(): void {
    this.stream.close();
  }

  /** `await using w = await sbx.files.watch(...)` closes it at the end of the block. */
  async [Symbol.asyncDispose ?? Symbol.for("Symbol.asyncDispose")](): Promise<void> {
    this.close();
  }
}

export class Files {
  constructor(private readonly sandbox: Sandbox) {}

  private req(method: string, route: string, path: Buffer | undefined, o: RequestOptions & { params?: Record<string, unknown> } = {}) {
    const target = this.sandbox.path(...route.split("/")) + (path ? pathQuery(path, o.params) : "");
    return this.sandbox.client.request(method, target, o);
  }

  /**
   * Watches directory `path` (with `recursive`, every directory beneath it too, new ones
   * included); resolves once the watch is in place. Its events come as they happen.
   */
  async watch(path: SandboxPath, opts: { recursive?: boolean } = {}): Promise<Watch> {
    const target = this.sandbox.path("files", "watch") + pathQuery(checkPath(path), { recursive: opts.recursive ? "1" : undefined });
    return new Watch(await this.sandbox.client.stream("GET", target, { timeoutMs: this.sandbox.client.requestTimeoutMs }));
  }

  /** Creates or replaces the file at `path` (its directory must exist); returns the new entry. */
  async write(path: SandboxPath, data: Uint8Array | string): Promise<FileEntry> {
    const p = checkPath(path);
    const doc = (await this.req("PUT", "files", p, { body: data, contentType: "application/octet-stream" })).json();
    return doc && typeof doc === "object" && "name" in doc ? fileEntry(doc) : this.stat(p);
  }

  /** The bytes of the file at `path`. */
  async read(path: SandboxPath): Promise<Buffer> {
    return (await this.req("GET", "files", checkPath(path))).body;
  }

  /** The file at `path` as UTF-8 text. */
  async readText(path: SandboxPath): Promise<string> {
    return (await this.read(path)).toString("utf8");
  }

  /**
   * The entries under directory `path`, depth-first; `depth` 1 (default) lists only its own
   * entries, up to 32. Follows every page to the end unless `pages` is given.
   */
  async list(path: SandboxPath, opts: { depth?: number; cursor?: string; pages?: number } = {}): Promise<FileList> {
    const p = checkPath(path);
    const out = [] as unknown as FileList;
    out.omitted = false;
    let cursor = opts.cursor;
    for (let i = 0; i < (opts.pages ?? MAX_PAGES); i++) {
      const doc = (await this.req("GET", "files/list", p, { params: { depth: opts.depth ?? 1, cursor } })).json() ?? {};
      for (const e of doc.entries ?? []) out.push(fileEntry(e));
      out.omitted ||= !!doc.omitted;
      cursor = doc.truncated ? doc.next_cursor : undefined;
      if (!cursor) break;
    }
    out.truncated = cursor !== undefined;
    out.nextCursor = cursor;
    return out;
  }

  /** Metadata of `path` (a symlink itself, not its target). */
  async stat(path: SandboxPath): Promise<FileEntry> {
    return fileEntry((await this.req("GET", "files/stat", checkPath(path))).json());
  }

  /** Whether `path` exists (a dangling symlink exists). */
  async exists(path: SandboxPath): Promise<boolean> {
    try {
      await this.stat(path);
      return true;
    } catch (e) {
      if (e instanceof NotFound) return false;
      throw e;
    }
  }

  /** Creates directory `path`; `parents` is mkdir -p (no error if it exists). */
  async mkdir(path: SandboxPath, opts: { parents?: boolean } = {}): Promise<FileEntry> {
    const body: Record<string, unknown> = pathField("path", checkPath(path));
    if (opts.parents) body.parents = true;
    return fileEntry((await this.req("POST", "files/mkdir", undefined, { json: body })).json());
  }

  /** Renames or moves `src` to `dst` (rename(2): CrossDevice between two file systems). */
  async move(src: SandboxPath, dst: SandboxPath): Promise<void> {
    await this.req("POST", "files/move", undefined, { json: { ...pathField("from", checkPath(src)), ...pathField("to", checkPath(dst)) } });
  }

  rename(src: SandboxPath, dst: SandboxPath): Promise<void> {
    return this.move(src, dst);
  }

  /** Removes a file, or a directory with everything in it. */
  async remove(path: SandboxPath): Promise<void> {
    await this.req("DELETE", "files", checkPath(path));
  }

  /**
   * Unpacks a tar (ustar/GNU/PAX: files, directories, symlinks inside the tree) into directory
   * `path` (made if missing), inside the sandbox; an unsafe member raises UnsafeArchive and
   * nothing is unpacked. Returns `{entries, bytes}`.
   */
  async uploadArchive(path: SandboxPath, tar: Uint8Array): Promise<{ entries: number; bytes: number }> {
    return (await this.req("PUT", "files/archive", checkPath(path), { body: tar, contentType: "application/x-tar" })).json();
  }

  /** The tree at `path` as a tar made inside the sandbox (checked by the daemon: what comes
   * out of a sandbox is hostile). */
  async downloadArchive(path: SandboxPath): Promise<Buffer> {
    return (await this.req("GET", "files/archive", checkPath(path))).body;
  }

  /**
   * Copies the contents of host directory @local into @path in the sandbox (made if
   * missing), as one tar unpacked inside the sandbox; symlinks go as links and must stay
   * inside the tree (UnsafeArchive otherwise). Resolves with {entries, bytes}.
   */
  async uploadDir(local: string, path: SandboxPath): Promise<{ entries: number; bytes: number }> {
    return this.uploadArchive(path, packDir(local));
  }

  /**
   * Copies the contents of @path in the sandbox into host directory @local (made if
   * missing); resolves with the number of entries. Every entry is checked first (no absolute
   * name, no "..", no link out of the tree, no device: UnsafeArchive, and nothing is
   * written), then written through no symlink of @local.
   */
  async downloadDir(path: SandboxPath, local: string, opts: { maxBytes?: number } = {}): Promise<number> {
    const members = readMembers(await this.downloadArchive(path), opts.maxBytes ?? MAX_UNPACKED);
    writeMembers(members, local);
    return members.length;
  }
}
