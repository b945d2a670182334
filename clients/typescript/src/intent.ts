// The intent, typed from the HTTP API's OpenAPI document (openapi.json,
// generated into openapi.ts), so that a drift between the API and this
// package fails its build.
import { createHash } from "node:crypto";
import type { components } from "./openapi.js";

/** The intent as the HTTP API answers it; args typed as any JSON object. */
export type Intent = Omit<components["schemas"]["Intent"], "args"> & { args: Record<string, unknown> };

/** An intent's state. */
export type IntentState = Intent["state"];

/** What an enqueue answered. */
export interface EnqueueResult {
  /** The intent: the new one, or for a duplicate the first one, in whatever state it is. */
  intent: Intent;
  /** Whether the key was already recorded for the same action. */
  duplicate: boolean;
}

/** States in which no worker will touch the intent again. */
export const TERMINAL_STATES: ReadonlySet<string> = new Set(["succeeded", "failed", "unknown", "cancelled"]);

/** Whether no worker will touch the intent again. */
export function isTerminal(intent: Pick<Intent, "state">): boolean {
  return TERMINAL_STATES.has(intent.state);
}

/**
 * RFC 8785 (JCS) canonical JSON: object members sorted by UTF-16 code
 * units, no white space, numbers as ECMAScript prints them (which
 * JSON.stringify does). Its SHA-256 is an intent's args_sha256.
 */
export function canonicalJSON(value: unknown): string {
  if (value === null || typeof value !== "object") {
    if (typeof value === "number" && !Number.isFinite(value)) throw new TypeError("NaN and Infinity are not JSON");
    const s = JSON.stringify(value);
    if (s === undefined) throw new TypeError(`not a JSON value: ${typeof value}`);
    return s;
  }
  if (Array.isArray(value)) return `[${value.map(canonicalJSON).join(",")}]`;
  const keys = Object.keys(value).filter((k) => (value as Record<string, unknown>)[k] !== undefined).sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJSON((value as Record<string, unknown>)[k])}`).join(",")}}`;
}

/** The hex SHA-256 of args' canonical JSON: what an approval names. */
export function argsSHA256(args: unknown): string {
  return createHash("sha256").update(canonicalJSON(args), "utf8").digest("hex");
}
