// What every example shares: where outbox serves, and how to say who we are.
export const OUTBOX_URL = process.env.OUTBOX_URL ?? "http://127.0.0.1:8080";
const token = process.env.OUTBOX_TOKEN;

/** Headers for outbox's API: the bearer token, when one is set. */
export function authHeaders(): Record<string, string> {
  return token ? { Authorization: `Bearer ${token}` } : {};
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
