// outbox's HTTP API through @outbox-dev/client's OutboxClient (fetch
// underneath, typed from the API's OpenAPI document): a tool that charges a
// card records an intent under a key naming the logical action, and every
// retry (a client timeout, a framework's auto-retry) sends the same key, so
// the card is charged once. Then it waits for the outcome with ?wait=.
import { outbox, charge, report } from "./outbox.ts";

const key = `order-${process.env.EXAMPLE_RUN ?? Date.now()}/charge`;

// The first call, and two retries of the same action: answered as duplicates.
const answers = [];
for (let i = 0; i < 3; i++) answers.push(await outbox.enqueue({ key, effect: "charge", args: charge("fetch"), requestedBy: "fetch-example" }));

// The outcome, as soon as the intent is final (at most 30 s). An intent
// waiting for a person's approval (a rule in OUTBOX_APPROVAL, or
// requireApproval) is answered as such at once, and a wait on it lasts until
// the person decides: the agent says so instead of waiting.
const first = answers[0].intent;
const intent = first.state === "awaiting_approval" ? first : await outbox.wait(key, 30_000);

report({
  example: "fetch",
  intent_ids: answers.map((a) => a.intent.id),
  duplicates: answers.map((a) => a.duplicate),
  state: intent.state,
  result: intent.result,
});
