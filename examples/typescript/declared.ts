// A declared effect (examples/effects.yaml: support_ticket, a Zendesk ticket
// declared in a file, no Go) is enqueued like a built-in one: the same
// Idempotency-Key rule, the same answers. The agent's tool is called twice
// for one action; one ticket is opened.
import { OUTBOX_URL, authHeaders, report } from "./outbox.ts";

interface Intent {
  id: number;
  state: string;
  duplicate?: boolean;
  result?: unknown;
}

const key = `ticket-${process.env.EXAMPLE_RUN ?? Date.now()}`;

async function openTicket(): Promise<Intent> {
  const res = await fetch(`${OUTBOX_URL}/v1/intents`, {
    method: "POST",
    headers: { "Content-Type": "application/json", "Idempotency-Key": key, ...authHeaders() },
    body: JSON.stringify({
      effect: "support_ticket",
      args: { subject: "Refund for order 42", body: "The customer asks for a refund.", priority: "normal" },
      requested_by: "declared-example",
    }),
  });
  if (!res.ok) throw new Error(`outbox answered ${res.status}: ${await res.text()}`);
  return (await res.json()) as Intent;
}

const answers = [await openTicket(), await openTicket()];
const final = (await (
  await fetch(`${OUTBOX_URL}/v1/intents/${encodeURIComponent(key)}?wait=30s`, { headers: authHeaders() })
).json()) as Intent;

report({
  example: "declared",
  intent_ids: answers.map((a) => a.id),
  duplicates: answers.map((a) => a.duplicate ?? false),
  state: final.state,
  result: final.result,
});
