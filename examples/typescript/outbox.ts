// What every example shares: the outbox client (where outbox serves, and the
// bearer token, from OUTBOX_URL and OUTBOX_TOKEN), and the charge they ask for.
import { OutboxClient } from "@outbox-dev/client";

export const outbox = new OutboxClient({ url: process.env.OUTBOX_URL ?? "http://127.0.0.1:8080", token: process.env.OUTBOX_TOKEN });
export const OUTBOX_URL = outbox.url;

/** Headers for outbox's /mcp, which the MCP clients send themselves: the bearer token, when one is set. */
export function authHeaders(): Record<string, string> {
  return outbox.token ? { Authorization: `Bearer ${outbox.token}` } : {};
}

/**
 * The charge an example asks for: 19.99 EUR to one customer, for its own
 * order, so that two examples' charges are two actions.
 */
export function charge(example: string) {
  return { customer: "cus_example", amount: 1999, currency: "eur", payment_method: "pm_card_visa", description: `order 42 (${example} example)` };
}

/** Prints the example's outcome as one JSON line, for people and for tests. */
export function report(outcome: Record<string, unknown>): void {
  console.log(JSON.stringify(outcome));
}
