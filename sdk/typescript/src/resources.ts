/** Templates, volumes and snapshots of one cordond. */
import * as fs from "node:fs";
import { gzipSync } from "node:zlib";
import { BuildFailed } from "./errors.js";
import { quoteSegment, type Client } from "./http.js";
import { snapshot, type Snapshot } from "./models.js";
import { clientOf, type ConnectOptions } from "./sandbox.js";
import { packDir } from "./tar.js";

/** A directory's contents as a base64 gzipped tar (names relative to it). */
function contextArchive(dir: string): string {
  if (!fs.existsSync(dir) || !fs.statSync(dir).isDirectory()) throw new Error(`context: ${JSON.stringify(dir)} is not a directory`);
  return gzipSync(packDir(dir)).toString("base64");
}

/** A template build that ran and failed; `events` are the events it streamed. */
export interface BuildFailedError extends Error {
  events: Array<Record<string, unknown>>;
}

export class Templates {
  private readonly client: Client;
  constructor(o: ConnectOptions = {}) {
    this.client = clientOf(o);
  }

  /** Every template's template.json. */
  async list(): Promise<Array<Record<string, any>>> {
    return (await this.client.request("GET", "/v1/templates")).json();
  }

  async get(name: string): Promise<Record<string, any>> {
    return (await this.client.request("GET", `/v1/templates/${quoteSegment(name)}`)).json();
  }

  async delete(name: string): Promise<void> {
    await this.client.request("DELETE", `/v1/templates/${quoteSegment(name)}`);
  }

  /**
   * Builds (or rebuilds) template `name` from the recipe text; every event (step, log,
   * step_done, done) goes to `onEvent`. `context`: a directory whose files COPY can read
   * (sent as a gzipped tar, at most 32 MiB; symlinks as links). Rejects with BuildFailed
   * when the build fails; the daemon's own refusals as the usual CordonError classes.
   */
  async build(name: string, recipe: string, o: { buildArgs?: Record<string, string>; noCache?: boolean;
    context?: string; onEvent?: (ev: Record<string, any>) => void } = {}): Promise<Record<string, any>> {
    const body: Record<string, unknown> = { name, recipe };
    if (o.context !== undefined) body.context = contextArchive(o.context);
    if (o.buildArgs) body.build_args = o.buildArgs;
    if (o.noCache) body.no_cache = true;
    const events: Array<Record<string, any>> = [];
    let status: unknown;
    let message = "";
    const s = await this.client.stream("POST", "/v1/templates", { json: body, timeoutMs: 0 });
    for await (const ev of s) {
      events.push(ev);
      if (ev.event === "error") message = ev.message ?? "";
      if (ev.event === "exit") status = ev.status;
      o.onEvent?.(ev);
    }
    if (status !== 0) {
      const e = new BuildFailed("build_failed", message || `the build ended with status ${status}`) as unknown as BuildFailedError;
      e.events = events;
      throw e;
    }
    return this.get(name);
  }
}

export class Volumes {
  private readonly client: Client;
  constructor(o: ConnectOptions = {}) {
    this.client = clientOf(o);
  }

  /** Makes volume `name` of `sizeMb` MiB. */
  async create(name: string, sizeMb: number): Promise<Record<string, any>> {
    return (await this.client.request("POST", "/v1/volumes", { json: { name, size_mb: sizeMb } })).json();
  }

  async list(): Promise<Array<Record<string, any>>> {
    return ((await this.client.request("GET", "/v1/volumes")).json() ?? {}).volumes ?? [];
  }

  async get(name: string): Promise<Record<string, any>> {
    return (await this.client.request("GET", `/v1/volumes/${quoteSegment(name)}`)).json();
  }

  async delete(name: string): Promise<void> {
    await this.client.request("DELETE", `/v1/volumes/${quoteSegment(name)}`);
  }
}

export class Snapshots {
  private readonly client: Client;
  constructor(o: ConnectOptions = {}) {
    this.client = clientOf(o);
  }

  async list(): Promise<Snapshot[]> {
    return (((await this.client.request("GET", "/v1/snapshots")).json() ?? {}).snapshots ?? []).map(snapshot);
  }

  async get(id: string): Promise<Snapshot> {
    return snapshot((await this.client.request("GET", `/v1/snapshots/${quoteSegment(id)}`)).json());
  }

  async delete(id: string): Promise<void> {
    await this.client.request("DELETE", `/v1/snapshots/${quoteSegment(id)}`);
  }
}
