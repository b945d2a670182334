// outbox's errors as classes: one per error code, one table (ERRORS) for the
// SQL function's errors and the HTTP API's answers alike, so that
// `err instanceof KeyReusedError` holds for a key reused over SQL and over
// HTTP.
import type { Intent } from "./intent.js";

/** Options of an OutboxError. */
export interface OutboxErrorOptions {
  /** The error code; defaults to the class's. */
  code?: string;
  /** The input at fault ("key", "args.amount"), if any. */
  field?: string;
  /** The HTTP status, for an answer of the API. */
  status?: number;
  /** The error this one stands for (a driver's). */
  cause?: unknown;
}

/** An error of outbox's, with its stable code and the field at fault. */
export class OutboxError extends Error {
  /** The code a subclass stands for. */
  static readonly code: string = "outbox_error";
  /** The error code (invalid_args, not_found, ...). */
  readonly code: string;
  /** The input at fault, if any. */
  readonly field?: string;
  /** The HTTP status, for an answer of the API. */
  readonly status?: number;

  constructor(message = "", options: OutboxErrorOptions = {}) {
    const code = options.code ?? (new.target as typeof OutboxError).code;
    super([code, options.field, message].filter(Boolean).join(": "), { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.field = options.field;
    this.status = options.status;
  }
}

/**
 * KeyReusedError: the key was first used for another action (another effect
 * or other args). `existing` is that first intent (over HTTP, read after the
 * refusal; undefined when that read failed).
 */
export class KeyReusedError extends OutboxError {
  static readonly code = "idempotency_key_reused";
  existing?: Intent;
  constructor(message = "", options: OutboxErrorOptions & { existing?: Intent } = {}) {
    super(message || (options.existing ? `${JSON.stringify(options.existing.key)} was first used for another action (effect ${options.existing.effect})` : ""), options);
    this.existing = options.existing;
  }
}
/** A mutating HTTP call without an Idempotency-Key. */
export class KeyRequiredError extends OutboxError { static readonly code = "idempotency_key_required"; }
/** A key or namespace that is not 1 to 255 printable ASCII characters. */
export class InvalidKeyError extends OutboxError { static readonly code = "invalid_key"; }
/** Arguments the effect's schema (or the database) refuses. */
export class InvalidArgsError extends OutboxError { static readonly code = "invalid_args"; }
/** A request body that is not JSON of the expected shape. */
export class InvalidJSONError extends OutboxError { static readonly code = "invalid_json"; }
/** An effect that is not enabled, or not a valid name. */
export class UnknownEffectError extends OutboxError { static readonly code = "unknown_effect"; }
/** An approval or denial naming other arguments (args_sha256) than the intent's. */
export class ApprovalMismatchError extends OutboxError { static readonly code = "approval_mismatch"; }
/** An approval or denial of an intent that does not await approval. */
export class NotAwaitingApprovalError extends OutboxError { static readonly code = "not_awaiting_approval"; }
/** A cancel of an intent that may already have reached its provider. */
export class NotCancellableError extends OutboxError { static readonly code = "not_cancellable"; }
/** A cancel passed to the provider that holds the intent's work as a task (an MCP upstream's): the intent ends by what it reports. */
export class CancelRequestedError extends OutboxError { static readonly code = "cancel_requested"; }
/** No intent with this key in the namespace. */
export class NotFoundError extends OutboxError { static readonly code = "not_found"; }
/** A resolve of an intent that is not unknown. */
export class NotUnknownError extends OutboxError { static readonly code = "not_unknown"; }
/** A model's fresh key for an action recorded moments before under another key. */
export class PossibleDuplicateError extends OutboxError { static readonly code = "possible_duplicate"; }
/** The token's enqueue rate is exceeded. */
export class RateLimitedError extends OutboxError { static readonly code = "rate_limited"; }
/** The token's role, or the database role, may not do this. */
export class ForbiddenError extends OutboxError { static readonly code = "forbidden"; }
/** A missing or unknown bearer token. */
export class UnauthorizedError extends OutboxError { static readonly code = "unauthorized"; }
/** A request body over the API's 1 MiB. */
export class BodyTooLargeError extends OutboxError { static readonly code = "body_too_large"; }
/** A failure of the server's; its log has the details. */
export class InternalError extends OutboxError { static readonly code = "internal_error"; }

/** ERRORS is the one table: error code to class. */
export const ERRORS: Readonly<Record<string, typeof OutboxError>> = Object.freeze(
  Object.fromEntries(
    [
      ApprovalMismatchError, BodyTooLargeError, CancelRequestedError, ForbiddenError, InternalError, InvalidArgsError, InvalidJSONError,
      InvalidKeyError, KeyRequiredError, KeyReusedError, NotAwaitingApprovalError, NotCancellableError, NotFoundError,
      NotUnknownError, PossibleDuplicateError, RateLimitedError, UnauthorizedError, UnknownEffectError,
    ].map((c) => [c.code, c as typeof OutboxError]),
  ),
);

/** The error for an outbox error code, from the table. */
export function errorFor(code: string, message = "", options: OutboxErrorOptions = {}): OutboxError {
  const Class = ERRORS[code] ?? OutboxError;
  return new Class(message, { ...options, code });
}

/** The error for an HTTP API answer that is not a success. */
export function fromHTTP(status: number, body: unknown): OutboxError {
  const err = body && typeof body === "object" && "error" in body ? (body as { error: unknown }).error : undefined;
  if (!err || typeof err !== "object") {
    return errorFor(status >= 500 ? "internal_error" : `http_${status}`, String(typeof body === "string" ? body : JSON.stringify(body)).slice(0, 500), { status });
  }
  const e = err as { code?: string; message?: string; field?: string };
  return errorFor(e.code ?? `http_${status}`, e.message ?? "", { field: e.field || undefined, status });
}

// The intent table's row checks (migrations/008_checks_in_trigger.up.sql)
// name the input at fault.
const constraints: Record<string, [string, string]> = {
  outbox_intent_key_check: ["invalid_key", "key"],
  outbox_intent_namespace_check: ["invalid_key", "namespace"],
  outbox_intent_effect_check: ["unknown_effect", "effect"],
  outbox_intent_args_check: ["invalid_args", "args"],
  outbox_intent_requested_by_check: ["invalid_args", "requested_by"],
};

/**
 * The outbox error a database error stands for (pg's, postgres.js's, or one
 * that wraps them as `cause`), or undefined for one that is not the
 * caller's input (a lost connection), which the caller re-throws as is.
 */
export function fromDatabase(err: unknown): OutboxError | undefined {
  let e = err as { code?: unknown; constraint?: string; constraint_name?: string; message?: string; cause?: unknown } | undefined;
  for (let depth = 0; e && typeof e.code !== "string" && e.cause && depth < 3; depth++) e = e.cause as typeof e;
  const code = e && typeof e.code === "string" ? e.code : undefined;
  if (!e || !code || !/^[0-9A-Z]{5}$/.test(code)) return undefined;
  const message = e.message ?? "";
  if (code === "OB001") return new KeyReusedError(message, { cause: err });
  if (code === "23514") {
    const name = e.constraint ?? e.constraint_name ?? "";
    const [c, field] = constraints[name] ?? ["invalid_args", undefined];
    return errorFor(c, `refused by constraint ${name}`, { field, cause: err });
  }
  if (code === "42501") return new ForbiddenError(message, { cause: err });
  // Class 22 (jsonb refused a value) and 54001 (nesting too deep) are the
  // input's fault.
  if (code.startsWith("22") || code === "54001") return new InvalidArgsError(`refused by the database: ${message}`, { field: "args", cause: err });
  return undefined;
}
