// @outbox-dev/client's tool helpers, one per framework: the Vercel AI SDK's
// tool(), the OpenAI Agents SDK's tool() and LangChain.js's tool(), each a
// charge_card whose key the orchestrator derives from the order. Each
// framework's agent charges the order, and its retry charges it again: both
// calls name one intent, so each order is charged once. Scripted models: no
// API key, no network.
import { Agent, Usage, run, setTracingDisabled, type Model, type ModelResponse } from "@openai/agents";
import { generateText, stepCountIs } from "ai";
import { MockLanguageModelV2 } from "ai/test";
import { z } from "zod";
import type { ToolAnswer } from "@outbox-dev/client";
import { outboxTool as aiSDKTool } from "@outbox-dev/client/ai-sdk";
import { outboxTool as langChainTool } from "@outbox-dev/client/langchain";
import { outboxTool as openAIAgentsTool } from "@outbox-dev/client/openai-agents";
import { outbox, charge, report } from "./outbox.ts";

setTracingDisabled(true);
const run_ = process.env.EXAMPLE_RUN ?? Date.now();
const input = z.object({ order_id: z.number() });
type Input = z.infer<typeof input>;
// The key names the logical action: this framework's charge of this order.
const common = (framework: string) => ({
  client: outbox,
  effect: "charge",
  keyFrom: (i: Input) => `order-${run_}-${i.order_id}/${framework}-tool-charge`,
  args: () => charge(`${framework} tool`),
  requestedBy: `${framework}-tool-example`,
});
const callCharge = JSON.stringify({ order_id: 42 });

// The Vercel AI SDK: the step, and the framework's retry of it.
const aiTools = { charge_card: aiSDKTool<Input>({ ...common("ai-sdk"), description: "Charges the customer for an order.", inputSchema: input }) };
const aiAnswers: ToolAnswer[] = [];
for (let attempt = 0; attempt < 2; attempt++) {
  let calls = 0;
  const usage = { inputTokens: 1, outputTokens: 1, totalTokens: 2 };
  const model = new MockLanguageModelV2({
    doGenerate: async () =>
      ++calls === 1
        ? { content: [{ type: "tool-call", toolCallId: `call-${attempt}`, toolName: "charge_card", input: callCharge }], finishReason: "tool-calls", usage, warnings: [] }
        : { content: [{ type: "text", text: "The card is charged." }], finishReason: "stop", usage, warnings: [] },
  });
  const result = await generateText({ model, tools: aiTools, stopWhen: stepCountIs(3), prompt: "Charge order 42." });
  for (const step of result.steps) for (const r of step.toolResults) aiAnswers.push(r.output as ToolAnswer);
}

// The OpenAI Agents SDK: the agent run twice, as an orchestrator retries a
// run whose client timed out.
class ScriptedModel implements Model {
  private calls = 0;
  async getResponse(): Promise<ModelResponse> {
    return ++this.calls === 1
      ? { usage: new Usage(), output: [{ type: "function_call", callId: "call-1", name: "charge_card", arguments: callCharge, status: "completed" }] }
      : { usage: new Usage(), output: [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "The card is charged." }] }] };
  }
  // eslint-disable-next-line require-yield
  async *getStreamedResponse(): AsyncIterable<never> {
    throw new Error("this example does not stream");
  }
}
const agentsTool = openAIAgentsTool<Input>({ ...common("openai-agents"), name: "charge_card", description: "Charges the customer for an order.", parameters: input });
const agentsAnswers: ToolAnswer[] = [];
for (let attempt = 0; attempt < 2; attempt++) {
  const result = await run(new Agent({ name: "billing", model: new ScriptedModel(), tools: [agentsTool] }), "Charge order 42.");
  for (const item of result.newItems) if (item.type === "tool_call_output_item") agentsAnswers.push(JSON.parse(String(item.output)));
}

// LangChain.js: the tool invoked twice, as a LangChain agent's retry would.
const lcTool = langChainTool<Input>({ ...common("langchain"), name: "charge_card", description: "Charges the customer for an order.", schema: input });
const lcAnswers: ToolAnswer[] = [];
for (let i = 0; i < 2; i++) lcAnswers.push(JSON.parse(String(await lcTool.invoke({ order_id: 42 }))));

const all = { "ai-sdk": aiAnswers, "openai-agents": agentsAnswers, langchain: lcAnswers };
report({
  example: "tools",
  frameworks: Object.fromEntries(
    Object.entries(all).map(([name, answers]) => [name, { intent_ids: answers.map((a) => a.id), duplicates: answers.map((a) => a.duplicate), state: answers.at(-1)?.state }]),
  ),
});
