// idempotentTool: an agent's mutating tool that records its effect once per
// logical action, whatever repeats it (a client timeout, a framework's
// auto-retry, the model calling the tool again). Framework-neutral: a plain
// async function; ./ai-sdk, ./openai-agents and ./langchain wrap it in each
// framework's tool().
import type { OutboxClient } from "./http.js";
import type { Intent } from "./intent.js";

/**
 * Where a tool's key comes from (docs/agents.md, "Keys"):
 * "orchestrator" (the safest): keyFrom derives it from what names the
 * logical action (an order id, a run and step), the same on every retry;
 * "model": an argument the model passed, sent with Idempotency-Key-Source:
 * model so that the server guards it (a model asked to reuse a key
 * sometimes invents a fresh one: PossibleDuplicateError).
 */
export type KeyOrigin = "orchestrator" | "model";

/** idempotentTool's settings. */
export interface IdempotentToolConfig<Input> {
  /** args builds the effect's arguments from the tool's input. Defaults to the input itself. */
  args?: (input: Input) => Record<string, unknown>;
  /** client is the OutboxClient that records the intents. */
  client: OutboxClient;
  /** effect is the effect's name. */
  effect: string;
  /** keyFrom names the logical action of a call: the same on every retry of it. */
  keyFrom: (input: Input) => string;
  /** keyOrigin says who chose the key. Defaults to "orchestrator". */
  keyOrigin?: KeyOrigin;
  /** requestedBy is recorded on the intents. Defaults to none. */
  requestedBy?: string;
  /** requireApproval holds every intent for a person. Defaults to false. */
  requireApproval?: boolean;
  /** waitMs is how long a call waits for the outcome. Defaults to 30000. */
  waitMs?: number;
}

/** A tool's answer: the intent as the API writes it, and whether the call was a repeat. */
export type ToolAnswer = Intent & { duplicate: boolean };

/**
 * Makes a tool function that records config.effect through config.client,
 * once per logical action, and answers the intent once it is terminal or
 * after waitMs. An intent awaiting a person's approval is answered at once,
 * so the model can say so (calling again, under any key, will not hurry
 * it). Errors are thrown (OutboxError), for the framework to report.
 */
export function idempotentTool<Input>(config: IdempotentToolConfig<Input>): (input: Input) => Promise<ToolAnswer> {
  const origin = config.keyOrigin ?? "orchestrator";
  if (origin !== "orchestrator" && origin !== "model") throw new TypeError(`keyOrigin must be "orchestrator" or "model", not ${JSON.stringify(origin)}`);
  const waitMs = config.waitMs ?? 30_000;
  return async (input: Input) => {
    const key = config.keyFrom(input);
    const recorded = await config.client.enqueue({
      key,
      effect: config.effect,
      args: config.args ? config.args(input) : (input as Record<string, unknown>),
      requestedBy: config.requestedBy,
      requireApproval: config.requireApproval,
      keySource: origin === "model" ? "model" : undefined,
    });
    let intent = recorded.intent;
    if (intent.state !== "awaiting_approval" && waitMs > 0 && !["succeeded", "failed", "unknown", "cancelled"].includes(intent.state)) {
      intent = await config.client.wait(key, waitMs);
    }
    return { ...intent, duplicate: recorded.duplicate };
  };
}
