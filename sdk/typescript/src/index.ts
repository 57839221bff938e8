/**
 * TypeScript SDK for Cordon, the sandbox service for untrusted AI-generated code.
 *
 *     import { Sandbox } from "@cordon/sdk";
 *     const sbx = await Sandbox.create({ template: "host", timeout: 60 });
 *     console.log((await sbx.exec("python3 -c 'print(6*7)'")).stdout);
 *     await sbx.kill();
 *
 * Node's standard library only. Talks to cordond over its unix socket ($CORDON_SOCKET,
 * default /run/cordon/cordon.sock) or over TCP ($CORDON_URL + $CORDON_API_KEY).
 */
import { Client, type ClientOptions } from "./http.js";

export * from "./errors.js";
export { Client, DEFAULT_SOCKET, Response, Stream, parseUrl, resolveEndpoint, describeEndpoint, SDK_VERSION } from "./http.js";
export type { ClientOptions, Endpoint, Query, RequestOptions } from "./http.js";
export * from "./models.js";
export { Files, Watch, type FileList, type SandboxPath, type WatchEvent } from "./files.js";
export { Process, Processes, commandFields, DEFAULT_MAX_OUTPUT } from "./processes.js";
export type { Command, ProcessEvent, StartOptions, StreamCallbacks } from "./processes.js";
export { Pty, PtyProcess, type PtyOptions } from "./pty.js";
export { Approval, Approvals, type ApprovalCallback, type Decision } from "./approvals.js";
export { CodeInterpreter } from "./code.js";
export type { Chart, CodeContext, Execution, ExecutionError, Result, RunCodeOptions } from "./code.js";
export { Sandbox } from "./sandbox.js";
export type { ConnectOptions, CreateOptions, ExecOptions, NetworkSpec, SecretSpec, Volume } from "./sandbox.js";
export { Snapshots, Templates, Volumes, type BuildFailedError } from "./resources.js";

/** GET /healthz: the daemon's liveness, e.g. {status: "ok"}; CordonUnavailable when unreachable. */
export async function health(o: ClientOptions = {}): Promise<Record<string, unknown>> {
  const c = new Client({ requestTimeoutMs: 5000, ...o });
  try {
    return (await c.request("GET", "/healthz")).json();
  } finally {
    c.close();
  }
}
