/**
 * Approval gates: requests the egress proxy holds for a person's decision.
 *
 * A sandbox whose network has an approve rule (`{ approve: "api.stripe.com", methods:
 * ["POST"], paths: ["/v1/charges"], timeout_s: 300 }`) gets a slow answer, not an error, for a
 * matching request while it waits; allowed, the request goes on as it was sent; denied or timed
 * out, the sandbox gets a 403 saying it was denied by policy.
 *
 *     const sbx = await Sandbox.create({ network: { policy: "allow", approve: [...] },
 *                                        onApproval: (ap) => ap.method === "POST" });
 *     const aps = new Approvals();                    // or by hand, from anywhere
 *     for (const ap of await aps.list()) await aps.deny(ap.id, "not today");
 */
import { CordonError, NotFound } from "./errors.js";
import { quoteSegment, type Client, type Stream } from "./http.js";
import { clientOf, type ConnectOptions } from "./sandbox.js";

/** The answer to a decision. */
export interface Decision {
  id: string;
  sandbox: string;
  decision: "allow" | "deny";
  decider: string;
  reason?: string;
}

/** What on_approval answers: true allows, false denies, undefined leaves it pending. */
export type ApprovalCallback = (approval: Approval) => boolean | undefined | void | Promise<boolean | undefined | void>;

/** One held request. `preview`: headers and the start of the body, secrets redacted. */
export class Approval {
  readonly id: string;
  readonly sandbox: string;
  readonly method: string;
  readonly host: string;
  readonly port: number;
  readonly path: string;
  readonly rule: string | undefined;
  readonly preview: { headers?: string[][]; body?: string; body_bytes?: number; chunked?: boolean };
  readonly timeoutS: number | undefined;
  /** in a list: seconds it has waited */
  readonly ageS: number | undefined;

  constructor(readonly raw: Record<string, any>, private readonly approvals: Approvals) {
    this.id = raw.id;
    this.sandbox = raw.sandbox ?? "";
    this.method = raw.method ?? "";
    this.host = raw.host ?? "";
    this.port = raw.port ?? 0;
    this.path = raw.path ?? "";
    this.rule = raw.rule ?? undefined;
    this.preview = raw.preview ?? {};
    this.timeoutS = raw.timeout_s ?? undefined;
    this.ageS = raw.age_s ?? undefined;
  }

  allow(reason?: string): Promise<Decision> {
    return this.approvals.allow(this.id, reason);
  }

  deny(reason?: string): Promise<Decision> {
    return this.approvals.deny(this.id, reason);
  }
}

/** The pending approvals of one cordond (/v1/approvals); a TCP client sees its own sandboxes'. */
export class Approvals {
  readonly client: Client;
  constructor(o: ConnectOptions = {}) {
    this.client = clientOf(o);
  }

  /** Oldest first; `sandbox`: that sandbox's only. */
  async list(o: { sandbox?: string } = {}): Promise<Approval[]> {
    const doc = (await this.client.request("GET", "/v1/approvals", { query: { sandbox: o.sandbox } })).json() ?? {};
    return (doc.approvals ?? []).map((a: Record<string, any>) => new Approval(a, this));
  }

  private async decide(id: string, decision: "allow" | "deny", reason?: string): Promise<Decision> {
    const body: Record<string, unknown> = { decision };
    if (reason !== undefined) body.reason = reason;
    return (await this.client.request("POST", `/v1/approvals/${quoteSegment(id)}`, { json: body })).json();
  }

  /** The request goes on. NotFound once it is decided, timed out or gone. */
  allow(id: string, reason?: string): Promise<Decision> {
    return this.decide(id, "allow", reason);
  }

  /** The sandbox gets a 403 naming `reason`. */
  deny(id: string, reason?: string): Promise<Decision> {
    return this.decide(id, "deny", reason);
  }
}

/**
 * Follows /v1/events for one sandbox's `approval.pending` and hands each to `callback`; ends
 * when the sandbox is destroyed or stop() is called. Its connection does not keep Node alive.
 */
export class ApprovalWatcher {
  private stopped = false;
  private readonly approvals: Approvals;

  private constructor(private readonly stream: Stream, client: Client, private readonly sandbox: string,
                      private readonly callback: ApprovalCallback) {
    this.approvals = new Approvals({ client });
  }

  /** Resolves once the stream is open (so that no approval after it is missed). */
  static async start(client: Client, sandbox: string, callback: ApprovalCallback): Promise<ApprovalWatcher> {
    const stream = await client.stream("GET", "/v1/events", {
      query: { follow: "1", sandbox, kind: "approval.pending,sandbox.destroyed" }, timeoutMs: client.requestTimeoutMs,
    });
    stream.unref();
    const w = new ApprovalWatcher(stream, client, sandbox, callback);
    void w.run();
    return w;
  }

  private async run(): Promise<void> {
    try {
      for await (const ev of this.stream) {
        if (this.stopped || ev?.kind === "sandbox.destroyed") return;
        if (ev?.kind === "approval.pending") await this.one(new Approval(ev, this.approvals));
      }
    } catch (e) {
      if (!this.stopped) process.emitWarning(`cordon: the approvals stream of ${this.sandbox} ended: ${(e as Error).message}`);
    } finally {
      this.stream.close();
    }
  }

  private async one(ap: Approval): Promise<void> {
    try {
      const verdict = await this.callback(ap);
      if (verdict === true) await ap.allow();
      else if (verdict === false) await ap.deny();
    } catch (e) {
      if (e instanceof NotFound) return; // decided already (a replayed event), timed out, or gone
      // a callback's failure must not end the watcher
      process.emitWarning(`cordon: onApproval failed for ${ap.id}: ${e instanceof CordonError ? e.message : String(e)}`);
    }
  }

  stop(): void {
    this.stopped = true;
    this.stream.close();
  }
}
