/**
 * Typed errors for the Cordon API.
 *
 * Every error answer of cordond is `{"error": {"code": "...", "message": "..."}}` with a
 * matching HTTP status; {@link errorFromResponse} turns it into the subclass of
 * {@link CordonError} registered for its stable `code`. The classes are made from one table
 * (ERROR_TABLE below), the same codes as docs/api/openapi.yaml's Error enum; a test checks
 * that every code of the enum has its class. A daemon that cannot be reached at all raises
 * {@link CordonUnavailable}.
 */

export class CordonError extends Error {
  /** the stable error code ("not_found", "invalid_field", ...) */
  code: string;
  /** the HTTP status, or undefined when no answer was received */
  status: number | undefined;
  /** the Retry-After header in seconds, when the daemon sent one */
  retryAfter: number | undefined;
  static readonly code: string = "error";
  static readonly defaultStatus: number | undefined = undefined;

  constructor(code?: string, message = "", status?: number, retryAfter?: number) {
    const ctor = new.target as unknown as typeof CordonError;
    const c = code || ctor.code;
    const s = status ?? ctor.defaultStatus;
    super(message ? `${s ? s + " " : ""}${c}: ${message}` : `${s ? s + " " : ""}${c}`);
    this.name = ctor.name;
    this.code = c;
    this.status = s;
    this.retryAfter = retryAfter;
    this.detail = message;
  }

  /** the daemon's one-line message (names the offending field if any) */
  detail: string;
}

type ErrorClass = typeof CordonError;

function define(name: string, code: string, status: number | undefined, parent: ErrorClass): ErrorClass {
  const cls = {
    [name]: class extends parent {
      static override readonly code = code;
      static override readonly defaultStatus = status;
    },
  }[name] as ErrorClass;
  return cls;
}

/**
 * The table: class name, code, HTTP status, parent class name. A specific code is a
 * subclass of the general class of its status, so `instanceof Conflict` still catches
 * `IsADirectory`.
 */
export const ERROR_TABLE = [
  ["BadRequest", "bad_request", 400, "CordonError"],
  ["InvalidField", "invalid_field", 400, "BadRequest"],
  ["UnknownField", "unknown_field", 400, "BadRequest"],
  ["UnsupportedRuntime", "unsupported_runtime", 400, "BadRequest"],
  ["InvalidPath", "invalid_path", 400, "BadRequest"],
  ["UnsafeArchive", "unsafe_archive", 400, "BadRequest"],
  ["Unauthorized", "unauthorized", 401, "CordonError"],
  ["Forbidden", "forbidden", 403, "CordonError"],
  ["NotFound", "not_found", 404, "CordonError"],
  ["MethodNotAllowed", "method_not_allowed", 405, "CordonError"],
  ["Conflict", "conflict", 409, "CordonError"],
  ["ReadOnly", "read_only", 409, "Conflict"],
  ["NoSpace", "no_space", 409, "Conflict"],
  ["NotADirectory", "not_a_directory", 409, "Conflict"],
  ["IsADirectory", "is_a_directory", 409, "Conflict"],
  ["CrossDevice", "cross_device", 409, "Conflict"],
  ["SandboxPaused", "sandbox_paused", 409, "Conflict"],
  ["SandboxBusy", "sandbox_busy", 409, "Conflict"],
  ["VolumeInUse", "volume_in_use", 409, "Conflict"],
  ["VolumeExists", "volume_exists", 409, "Conflict"],
  ["NoInterpreter", "no_interpreter", 409, "Conflict"],
  ["NotATerminal", "not_a_terminal", 409, "Conflict"],
  ["LengthRequired", "length_required", 411, "CordonError"],
  ["PayloadTooLarge", "payload_too_large", 413, "CordonError"],
  ["QuotaExceeded", "quota_exceeded", 429, "CordonError"],
  ["InternalError", "internal", 500, "CordonError"],
  ["PortUnreachable", "port_unreachable", 502, "CordonError"],
  ["Unavailable", "unavailable", 503, "CordonError"],
  ["CapacityError", "capacity", 503, "CordonError"],
  ["AuditUnavailable", "audit_unavailable", 503, "Unavailable"],
  ["Timeout", "timeout", 504, "CordonError"],
  ["InsufficientStorage", "insufficient_storage", 507, "CordonError"],
  ["SnapshotLimit", "snapshot_limit", 507, "CordonError"],
  // raised by the SDK, never answered with a status of its own
  ["CordonUnavailable", "unavailable", undefined, "Unavailable"],
  ["StreamLagged", "lagged", undefined, "CordonError"],
  ["BuildFailed", "build_failed", undefined, "CordonError"],
] as const;

type ErrorName = (typeof ERROR_TABLE)[number][0];

const made: Record<string, ErrorClass> = { CordonError };
for (const [name, code, status, parent] of ERROR_TABLE)
  made[name] = define(name, code, status, made[parent]!);

/** every class by its name */
export const errorClasses = made as Record<ErrorName | "CordonError", ErrorClass>;

export const BadRequest = made.BadRequest!;
export const InvalidField = made.InvalidField!;
export const UnknownField = made.UnknownField!;
export const UnsupportedRuntime = made.UnsupportedRuntime!;
export const InvalidPath = made.InvalidPath!;
export const UnsafeArchive = made.UnsafeArchive!;
export const Unauthorized = made.Unauthorized!;
export const Forbidden = made.Forbidden!;
export const NotFound = made.NotFound!;
export const MethodNotAllowed = made.MethodNotAllowed!;
export const Conflict = made.Conflict!;
export const ReadOnly = made.ReadOnly!;
export const NoSpace = made.NoSpace!;
export const NotADirectory = made.NotADirectory!;
export const IsADirectory = made.IsADirectory!;
export const CrossDevice = made.CrossDevice!;
export const SandboxPaused = made.SandboxPaused!;
export const SandboxBusy = made.SandboxBusy!;
export const VolumeInUse = made.VolumeInUse!;
export const VolumeExists = made.VolumeExists!;
export const NoInterpreter = made.NoInterpreter!;
export const NotATerminal = made.NotATerminal!;
export const LengthRequired = made.LengthRequired!;
export const PayloadTooLarge = made.PayloadTooLarge!;
export const QuotaExceeded = made.QuotaExceeded!;
export const InternalError = made.InternalError!;
export const PortUnreachable = made.PortUnreachable!;
export const Unavailable = made.Unavailable!;
export const CapacityError = made.CapacityError!;
export const AuditUnavailable = made.AuditUnavailable!;
export const Timeout = made.Timeout!;
export const InsufficientStorage = made.InsufficientStorage!;
export const SnapshotLimit = made.SnapshotLimit!;
export const CordonUnavailable = made.CordonUnavailable!;
export const StreamLagged = made.StreamLagged!;
export const BuildFailed = made.BuildFailed!;

/** the class of each code the daemon answers */
export const errorsByCode: ReadonlyMap<string, ErrorClass> = new Map(
  ERROR_TABLE.filter((row) => row[2] !== undefined).map((row) => [row[1], made[row[0]]!]),
);

const BY_STATUS: ReadonlyMap<number, ErrorClass> = new Map([
  [400, BadRequest], [401, Unauthorized], [403, Forbidden], [404, NotFound],
  [405, MethodNotAllowed], [409, Conflict], [411, LengthRequired], [413, PayloadTooLarge],
  [429, QuotaExceeded], [500, InternalError], [503, Unavailable], [504, Timeout],
  [507, InsufficientStorage],
]);

/** The typed error for an error answer (status >= 400) with body @body. */
export function errorFromResponse(status: number, body: Uint8Array | string,
                                  retryAfterHeader?: string | string[]): CordonError {
  const text = typeof body === "string" ? body : Buffer.from(body).toString("utf8");
  let code: string | undefined;
  let message = "";
  try {
    const doc = text ? JSON.parse(text) : null;
    const err = doc && typeof doc === "object" ? doc.error : null;
    if (err && typeof err === "object") {
      if (typeof err.code === "string") code = err.code;
      if (typeof err.message === "string") message = err.message;
    }
  } catch {
    /* not JSON: the text is the message */
  }
  if (code === undefined && !message && text) message = text.slice(0, 500).trim();
  let cls = code !== undefined ? errorsByCode.get(code) : undefined;
  if (!cls) cls = BY_STATUS.get(status) ?? (status >= 500 ? InternalError : CordonError);
  if (!code) code = cls !== CordonError ? cls.code : `http_${status}`;
  const ra = Array.isArray(retryAfterHeader) ? retryAfterHeader[0] : retryAfterHeader;
  const retryAfter = ra !== undefined && ra !== "" && !Number.isNaN(Number(ra)) ? Number(ra) : undefined;
  return new cls(code, message || `HTTP ${status}`, status || undefined, retryAfter);
}
