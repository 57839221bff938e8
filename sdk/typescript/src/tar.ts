/**
 * Directories as tar, for Files.uploadDir/downloadDir: a writer of what a host directory
 * holds (files, directories, symlinks as links; PAX records for long names), and a checked
 * reader of what a sandbox sends (what comes out of a sandbox is hostile): every member is
 * checked before anything is written, then each is written through no symlink.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { IsADirectory, PayloadTooLarge, UnsafeArchive } from "./errors.js";

const BLOCK = 512;

function octal(n: number, width: number): string {
  return n.toString(8).padStart(width - 1, "0") + "\0";
}

function header(name: string, type: string, size: number, mode: number, mtime: number, link = ""): Buffer {
  const h = Buffer.alloc(BLOCK);
  h.write(name, 0, 100, "utf8");
  h.write(octal(mode & 0o7777, 8), 100, "ascii");
  h.write(octal(0, 8), 108, "ascii");
  h.write(octal(0, 8), 116, "ascii");
  h.write(octal(size, 12), 124, "ascii");
  h.write(octal(Math.max(0, Math.floor(mtime)), 12), 136, "ascii");
  h.write("        ", 148, "ascii");
  h.write(type, 156, "ascii");
  h.write(link, 157, 100, "utf8");
  h.write("ustar\u000000", 257, "binary");
  let sum = 0;
  for (const b of h) sum += b;
  h.write(octal(sum, 7) + " ", 148, "ascii");
  return h;
}

const pad = (n: number) => Buffer.alloc((BLOCK - (n % BLOCK)) % BLOCK);

/** A PAX record set for a name or link target that does not fit ustar's 100 bytes. */
function paxFor(name: string, link: string): Buffer[] {
  const recs: string[] = [];
  const rec = (k: string, v: string) => {
    const body = ` ${k}=${v}\n`;
    let len = Buffer.byteLength(body) + 1;
    while (String(len).length + Buffer.byteLength(body) !== len) len = String(len).length + Buffer.byteLength(body);
    recs.push(`${len}${body}`);
  };
  if (Buffer.byteLength(name) > 100) rec("path", name);
  if (Buffer.byteLength(link) > 100) rec("linkpath", link);
  if (!recs.length) return [];
  const data = Buffer.from(recs.join(""), "utf8");
  return [header("PaxHeader", "x", data.length, 0o644, 0), data, pad(data.length)];
}

/** The contents of host directory @top as a tar (names relative to it, sorted). */
export function packDir(top: string): Buffer {
  if (!fs.statSync(top).isDirectory()) throw new Error(`${top} is not a directory`);
  const out: Buffer[] = [];
  const walk = (rel: string) => {
    for (const name of fs.readdirSync(path.join(top, rel)).sort()) {
      const r = rel ? `${rel}/${name}` : name;
      const p = path.join(top, r);
      const st = fs.lstatSync(p);
      if (st.isDirectory()) {
        out.push(...paxFor(r + "/", ""), header((r + "/").slice(0, 100), "5", 0, st.mode, st.mtimeMs / 1000));
        walk(r);
      } else if (st.isSymbolicLink()) {
        const link = fs.readlinkSync(p);
        out.push(...paxFor(r, link), header(r.slice(0, 100), "2", 0, st.mode, st.mtimeMs / 1000, link.slice(0, 100)));
      } else if (st.isFile()) {
        const data = fs.readFileSync(p);
        out.push(...paxFor(r, ""), header(r.slice(0, 100), "0", data.length, st.mode, st.mtimeMs / 1000), data, pad(data.length));
      } // sockets, fifos, devices: left out
    }
  };
  walk("");
  out.push(Buffer.alloc(BLOCK * 2));
  return Buffer.concat(out);
}

interface Member {
  name: string;
  type: "file" | "dir" | "symlink" | "hardlink";
  mode: number;
  link: string;
  data: Buffer;
}

const unsafe = (why: string, name = "") =>
  new UnsafeArchive("unsafe_archive", name ? `${why} (${JSON.stringify(name.slice(0, 100))})` : why, 400);

function cstr(b: Buffer): string {
  const i = b.indexOf(0);
  return b.subarray(0, i < 0 ? b.length : i).toString("utf8");
}

function norm(name: string): string {
  while (name.startsWith("./")) name = name.slice(2).replace(/^\/+/, "");
  return name === "." || name === "" ? "" : name.replace(/\/+$/, "");
}

const nameSafe = (n: string) => !!n && !n.startsWith("/") && n.split("/").every((c) => c !== "" && c !== "." && c !== "..");

/** A symlink at @name pointing at @target stays inside the tree (tar.h's rule). */
function linkSafe(name: string, target: string): boolean {
  if (!target || target.startsWith("/")) return false;
  let depth = name.split("/").length - 1;
  for (const c of target.split("/")) {
    if (c === "..") {
      if (--depth < 0) return false;
    } else if (c !== "" && c !== ".") depth++;
  }
  return true;
}

function paxRecords(data: Buffer): Record<string, string> {
  const out: Record<string, string> = {};
  let s = data.toString("utf8");
  while (s.length) {
    const m = /^(\d+) ([^=]+)=/.exec(s);
    if (!m) break;
    const len = Number(m[1]);
    const rec = Buffer.from(s, "utf8").subarray(0, len).toString("utf8");
    out[m[2]!] = rec.slice(m[0].length, -1);
    s = Buffer.from(s, "utf8").subarray(len).toString("utf8");
  }
  return out;
}

/** The members of @tar, each checked as cordond checks them; throws UnsafeArchive. */
export function readMembers(tar: Buffer, maxBytes: number): Member[] {
  const out: Member[] = [];
  let total = 0;
  let longName: string | undefined, longLink: string | undefined;
  for (let off = 0; off + BLOCK <= tar.length;) {
    const h = tar.subarray(off, off + BLOCK);
    if (h.every((b) => b === 0)) break;
    const size = parseInt(cstr(h.subarray(124, 136)).trim() || "0", 8);
    if (!Number.isSafeInteger(size) || size < 0 || off + BLOCK + size > tar.length) throw unsafe("a malformed header");
    const data = tar.subarray(off + BLOCK, off + BLOCK + size);
    off += BLOCK + Math.ceil(size / BLOCK) * BLOCK;
    const type = String.fromCharCode(h[156]!);
    if (type === "x" || type === "L" || type === "K") {
      if (type === "x") {
        const r = paxRecords(data);
        longName = r.path ?? longName;
        longLink = r.linkpath ?? longLink;
      } else if (type === "L") longName = cstr(data);
      else longLink = cstr(data);
      continue;
    }
    if (type === "g") continue;
    const prefix = cstr(h.subarray(345, 500));
    const raw = longName ?? (prefix ? `${prefix}/${cstr(h.subarray(0, 100))}` : cstr(h.subarray(0, 100)));
    const link = longLink ?? cstr(h.subarray(157, 257));
    longName = longLink = undefined;
    const kinds: Record<string, Member["type"]> = { "0": "file", "\0": "file", "7": "file", "5": "dir", "2": "symlink", "1": "hardlink" };
    const kind: Member["type"] | undefined = kinds[type];
    const name = norm(raw);
    if (!name) {
      if (kind !== "dir") throw unsafe("the root is not a directory");
      continue;
    }
    if (!nameSafe(name)) throw unsafe("an absolute name or '..'", raw);
    if (!kind) throw unsafe("a device, fifo or other special entry", raw);
    if (kind === "symlink" && !linkSafe(name, link)) throw unsafe("a symlink out of the tree", raw);
    if (kind === "hardlink" && !nameSafe(norm(link))) throw unsafe("a hard link out of the tree", raw);
    if ((total += kind === "file" ? size : 0) > maxBytes || out.length >= 1 << 20)
      throw new PayloadTooLarge("payload_too_large", "the archive is too large", 413);
    out.push({ name, type: kind, mode: parseInt(cstr(h.subarray(100, 108)).trim() || "644", 8) & 0o777, link, data });
  }
  return out;
}

/** @rel's parent under @root, made if missing; refuses a component that is a symlink. */
function parentOf(root: string, rel: string): string {
  let dir = root;
  for (const c of rel.split("/").slice(0, -1)) {
    dir = path.join(dir, c);
    let st: fs.Stats | undefined;
    try {
      st = fs.lstatSync(dir);
    } catch {
      fs.mkdirSync(dir, { mode: 0o755 });
      continue;
    }
    if (!st.isDirectory()) throw unsafe("a path through a symlink or a file", rel);
  }
  return dir;
}

/** Writes the checked @members under @root (made if missing), through no symlink of it. */
export function writeMembers(members: Member[], root: string): void {
  fs.mkdirSync(root, { recursive: true });
  for (const m of members) {
    const dst = path.join(parentOf(root, m.name), path.basename(m.name));
    let st: fs.Stats | undefined;
    try {
      st = fs.lstatSync(dst);
    } catch {
      /* absent */
    }
    if (st && !st.isDirectory()) fs.unlinkSync(dst);
    if (m.type === "dir") {
      if (!st?.isDirectory()) fs.mkdirSync(dst, { mode: m.mode | 0o700 });
    } else if (st?.isDirectory()) {
      throw new IsADirectory("is_a_directory", `${JSON.stringify(m.name)} is a directory here`, 409);
    } else if (m.type === "symlink") {
      fs.symlinkSync(m.link, dst);
    } else if (m.type === "hardlink") {
      const src = path.join(parentOf(root, norm(m.link)), path.basename(norm(m.link)));
      if (fs.lstatSync(src).isSymbolicLink()) throw unsafe("a hard link to a symlink", m.name);
      fs.linkSync(src, dst);
    } else {
      const fd = fs.openSync(dst, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW, m.mode);
      try {
        fs.writeSync(fd, m.data);
      } finally {
        fs.closeSync(fd);
      }
    }
  }
}
