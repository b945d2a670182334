// Plain fetch against outbox's HTTP API: a tool that charges a card records an
// intent under a key naming the logical action, and every retry (a client
// timeout, a framework's auto-retry) sends the same key, so the card is
// charged once. Then it waits for the outcome with ?wait=.
import { OUTBOX_URL, authHeaders, charge, report } from "./outbox.ts";

const key = `order-${process.env.EXAMPLE_RUN ?? Date.now()}/charge`;

async function recordCharge(): Promise<{ id: number; state: string; duplicate: boolean; result?: unknown }> {
  const res = await fetch(`${OUTBOX_URL}/v1/intents`, {
    method: "POST",
    headers: { "Content-Type": "application/json", "Idempotency-Key": key, ...authHeaders() },
    body: JSON.stringify({ effect: "charge", args: charge("fetch"), requested_by: "fetch-example" }),
  });
  if (!res.ok) throw new Error(`outbox answered ${res.status}: ${await res.text()}`);
  return res.json();
}

// The first call, and two retries of the same action.
const answers = [];
for (let i = 0; i < 3; i++) answers.push(await recordCharge());

// The outcome, as soon as the intent is final (at most 30 s). An intent
// waiting for a person's approval (a rule in OUTBOX_APPROVAL, or
// require_approval) is answered as such at once, and a wait on it lasts until
// the person decides: the agent says so instead of waiting.
const intent =
  answers[0].state === "awaiting_approval"
    ? answers[0]
    : await (await fetch(`${OUTBOX_URL}/v1/intents/${encodeURIComponent(key)}?wait=30s`, { headers: authHeaders() })).json();

report({
  example: "fetch",
  intent_ids: answers.map((a) => a.id),
  duplicates: answers.map((a) => a.duplicate),
  state: intent.state,
  result: intent.result,
});
