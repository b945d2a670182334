// OpenAI's Agents SDK (@openai/agents) with MCPServerStreamableHttp on
// outbox's /mcp. A scripted model (an implementation of the SDK's Model
// interface: no API key, no network) makes the agent call charge_card; the
// agent run is then repeated, as an orchestrator retries a run whose client
// timed out, and the model calls charge_card again with the same
// idempotency_key. Both calls name one intent: one charge.
import { Agent, MCPServerStreamableHttp, Usage, run, setTracingDisabled } from "@openai/agents";
import type { Model, ModelRequest, ModelResponse } from "@openai/agents";
import { OUTBOX_URL, authHeaders, charge, report } from "./outbox.ts";

const key = `order-${process.env.EXAMPLE_RUN ?? Date.now()}/openai-agents-charge`;

// Traces go to OpenAI's platform by default; nothing leaves this machine.
setTracingDisabled(true);

/** A model that calls charge_card once, then answers. */
class ScriptedModel implements Model {
  private calls = 0;

  async getResponse(_request: ModelRequest): Promise<ModelResponse> {
    this.calls++;
    if (this.calls === 1) {
      return {
        usage: new Usage(),
        output: [{ type: "function_call", callId: "call-1", name: "charge_card", arguments: JSON.stringify({ ...charge("openai-agents"), idempotency_key: key }), status: "completed" }],
      };
    }
    return {
      usage: new Usage(),
      output: [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "The card is charged." }] }],
    };
  }

  // eslint-disable-next-line require-yield
  async *getStreamedResponse(): AsyncIterable<never> {
    throw new Error("this example does not stream");
  }
}

const server = new MCPServerStreamableHttp({ url: `${OUTBOX_URL}/mcp`, name: "outbox", requestInit: { headers: authHeaders() } });
await server.connect();
try {
  const answers: Array<{ id: number; duplicate: boolean }> = [];
  for (let attempt = 0; attempt < 2; attempt++) {
    const agent = new Agent({ name: "billing", instructions: "Charge customers when asked.", model: new ScriptedModel(), mcpServers: [server] });
    const result = await run(agent, "Charge the customer for order 42.");
    for (const item of result.newItems) {
      if (item.type !== "tool_call_output_item") continue;
      const output = item.output as unknown;
      const text = typeof output === "string" ? output : JSON.stringify(output);
      answers.push(JSON.parse(extractJSON(text)));
    }
  }
  const [first] = await server.callTool("get_intent", { key, wait_seconds: 30 });
  if (first?.type !== "text" || typeof first.text !== "string") throw new Error(`unexpected get_intent answer: ${JSON.stringify(first)}`);
  const intent = JSON.parse(first.text);
  report({
    example: "openai-agents",
    intent_ids: answers.map((a) => a.id),
    duplicates: answers.map((a) => a.duplicate),
    state: intent.state,
    result: intent.result,
  });
} finally {
  await server.close();
}

/** The intent's JSON out of a tool output, which the SDK may wrap. */
function extractJSON(text: string): string {
  const parsed = JSON.parse(text);
  if (typeof parsed === "string") return extractJSON(parsed);
  if (parsed && typeof parsed === "object" && "id" in parsed) return JSON.stringify(parsed);
  if (parsed && typeof parsed === "object" && "text" in parsed) return extractJSON(parsed.text);
  if (Array.isArray(parsed) && parsed.length > 0) return extractJSON(JSON.stringify(parsed[0]));
  throw new Error(`unexpected tool output: ${text}`);
}
