// A declared effect (examples/effects.yaml: support_ticket, a Zendesk ticket
// declared in a file, no Go) is enqueued like a built-in one: the same
// Idempotency-Key rule, the same answers. The agent's tool is called twice
// for one action; one ticket is opened.
import { outbox, report } from "./outbox.ts";

const key = `ticket-${process.env.EXAMPLE_RUN ?? Date.now()}`;

const openTicket = () =>
  outbox.enqueue({
    key,
    effect: "support_ticket",
    args: { subject: "Refund for order 42", body: "The customer asks for a refund.", priority: "normal" },
    requestedBy: "declared-example",
  });

const answers = [await openTicket(), await openTicket()];
const final = await outbox.wait(key, 30_000);

report({
  example: "declared",
  intent_ids: answers.map((a) => a.intent.id),
  duplicates: answers.map((a) => a.duplicate),
  state: final.state,
  result: final.result,
});
