// The Vercel AI SDK (ai v5) with its MCP client on outbox's /mcp, where an
// MCP server of the operator's sits behind outbox (docs/effects.md, "In
// front of an MCP server"): its write tool, notes_create_note, is mirrored
// and recorded. A scripted model calls it; the run times out before the
// agent sees the answer, the framework runs the step again, and the model
// calls it again with the same idempotency_key. The upstream makes one
// note, and both calls get the same stored answer.
import { generateText, stepCountIs } from "ai";
import { experimental_createMCPClient as createMCPClient } from "@ai-sdk/mcp";
import { MockLanguageModelV2 } from "ai/test";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { z } from "zod";
import { OUTBOX_URL, authHeaders, report } from "./outbox.ts";

const key = `note-${process.env.EXAMPLE_RUN ?? Date.now()}/ai-sdk-upstream`;
const usage = { inputTokens: 1, outputTokens: 1, totalTokens: 2 };

// A recorded upstream tool answers with outbox's intent, plus the
// upstream's stored answer once the intent succeeded (within the
// upstream's wait).
const noteAnswer = z.object({
  id: z.number(),
  duplicate: z.boolean(),
  state: z.string(),
  upstream: z.object({ content: z.array(z.unknown()), structuredContent: z.unknown().optional() }).nullable(),
});
const noteOutput = z.object({ structuredContent: noteAnswer });

function scriptedModel() {
  let calls = 0;
  return new MockLanguageModelV2({
    doGenerate: async () => {
      calls++;
      if (calls === 1) {
        const input = { title: "Call the customer back", body: "about order 42", idempotency_key: key };
        return {
          content: [{ type: "tool-call", toolCallId: "call-1", toolName: "notes_create_note", input: JSON.stringify(input) }],
          finishReason: "tool-calls",
          usage,
          warnings: [],
        };
      }
      return { content: [{ type: "text", text: "Noted." }], finishReason: "stop", usage, warnings: [] };
    },
  });
}

const mcp = await createMCPClient({
  transport: new StreamableHTTPClientTransport(new URL(`${OUTBOX_URL}/mcp`), { requestInit: { headers: authHeaders() } }),
});
try {
  const tools = await mcp.tools();
  const answers: Array<z.infer<typeof noteAnswer>> = [];
  for (let run = 0; run < 2; run++) {
    const result = await generateText({ model: scriptedModel(), tools, stopWhen: stepCountIs(3), prompt: "Note that the customer wants a call back." });
    for (const step of result.steps) {
      for (const toolResult of step.toolResults) {
        if (toolResult.toolName === "notes_create_note") answers.push(noteOutput.parse(toolResult.output).structuredContent);
      }
    }
  }
  const same = JSON.stringify(answers[0]?.upstream) === JSON.stringify(answers[1]?.upstream);
  report({
    example: "ai-sdk-upstream",
    intent_ids: answers.map((a) => a.id),
    duplicates: answers.map((a) => a.duplicate),
    state: same ? answers[answers.length - 1]?.state : "answers differ",
    result: answers[0]?.upstream?.structuredContent ?? null,
  });
} finally {
  await mcp.close();
}
