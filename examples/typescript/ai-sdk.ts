// The Vercel AI SDK (ai v5) with its MCP client on outbox's /mcp. A scripted
// model (the SDK's own mock) plays what the failure looks like: it calls
// charge_card, the run times out before the agent sees the answer, the
// framework runs the step again, and the model calls charge_card again with
// the same idempotency_key. outbox answers the second call with the first
// call's intent: one charge.
import { generateText, stepCountIs } from "ai";
import { experimental_createMCPClient as createMCPClient } from "@ai-sdk/mcp";
import { MockLanguageModelV2 } from "ai/test";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { z } from "zod";
import { OUTBOX_URL, authHeaders, charge, report } from "./outbox.ts";

const key = `order-${process.env.EXAMPLE_RUN ?? Date.now()}/ai-sdk-charge`;
const usage = { inputTokens: 1, outputTokens: 1, totalTokens: 2 };

// What this example reads of the intents in the tools' structuredContent:
// charge_card's answer (a step's tool output, which the SDK types unknown),
// and get_intent's once the outcome is known.
const chargeAnswer = z.object({ id: z.number(), duplicate: z.boolean(), state: z.string() });
const chargeOutput = z.object({ structuredContent: chargeAnswer });
const finalAnswer = z.object({ state: z.string(), result: z.unknown() });

// The model: first a tool call, then, once it has the tool's answer, a reply.
function scriptedModel() {
  let calls = 0;
  return new MockLanguageModelV2({
    doGenerate: async () => {
      calls++;
      if (calls === 1) {
        return {
          content: [{ type: "tool-call", toolCallId: "call-1", toolName: "charge_card", input: JSON.stringify({ ...charge("ai-sdk"), idempotency_key: key }) }],
          finishReason: "tool-calls",
          usage,
          warnings: [],
        };
      }
      return { content: [{ type: "text", text: "The card is charged." }], finishReason: "stop", usage, warnings: [] };
    },
  });
}

const mcp = await createMCPClient({
  transport: new StreamableHTTPClientTransport(new URL(`${OUTBOX_URL}/mcp`), { requestInit: { headers: authHeaders() } }),
});
try {
  const tools = await mcp.tools();
  const answers: Array<z.infer<typeof chargeAnswer>> = [];
  // The step, and the framework's retry of it after a client timeout.
  for (let run = 0; run < 2; run++) {
    const result = await generateText({ model: scriptedModel(), tools, stopWhen: stepCountIs(3), prompt: "Charge the customer for order 42." });
    for (const step of result.steps) {
      for (const toolResult of step.toolResults) {
        if (toolResult.toolName === "charge_card") answers.push(chargeOutput.parse(toolResult.output).structuredContent);
      }
    }
  }
  // get_intent waits for the outcome, as an agent would.
  const output = await tools.get_intent.execute({ key, wait_seconds: 30 }, { toolCallId: "wait", messages: [] });
  if (Symbol.asyncIterator in output) throw new Error("get_intent answered with a stream");
  const final = finalAnswer.parse(output.structuredContent);
  report({
    example: "ai-sdk",
    intent_ids: answers.map((a) => a.id),
    duplicates: answers.map((a) => a.duplicate),
    state: final.state,
    result: final.result,
  });
} finally {
  await mcp.close();
}
