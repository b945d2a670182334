// The tool helpers, each driven by its framework with a scripted model (no
// API key, no network), against a real outboxd serve: the framework's retry
// of a step names the same logical action, so the effect is recorded once.
import { Agent, Usage, run, setTracingDisabled, type Model, type ModelResponse } from "@openai/agents";
import { generateText, stepCountIs } from "ai";
import { MockLanguageModelV2 } from "ai/test";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { PossibleDuplicateError, idempotentTool, type ToolAnswer } from "../src/index.js";
import { outboxTool as aiSDKTool } from "../src/ai-sdk.js";
import { outboxTool as langChainTool } from "../src/langchain.js";
import { outboxTool as openAIAgentsTool } from "../src/openai-agents.js";
import { agent, newKey } from "./env.js";

setTracingDisabled(true);
const chargeInput = z.object({ order_id: z.number(), amount: z.number() });
type ChargeInput = z.infer<typeof chargeInput>;

describe("idempotentTool", () => {
  it("records once per action, answers a held intent at once, and marks a model's key", async () => {
    const key = newKey("tool");
    const charge = idempotentTool<ChargeInput>({ client: agent, effect: "noop", keyFrom: (i) => `${key}-order-${i.order_id}` });
    const answers = [await charge({ order_id: 42, amount: 1999 }), await charge({ order_id: 42, amount: 1999 })];
    expect(answers.map((a) => a.duplicate)).toEqual([false, true]);
    expect(answers[0].id).toBe(answers[1].id);
    expect(answers[1].state).toBe("succeeded");
    const held = await charge({ order_id: 43, amount: 50000 });
    expect(held.state).toBe("awaiting_approval");
    // A key from the model is guarded: a fresh key for an action just
    // recorded under another is refused.
    const fromModel = idempotentTool<ChargeInput & { idempotency_key: string }>({
      client: agent, effect: "noop", keyOrigin: "model", keyFrom: (i) => i.idempotency_key, args: (i) => ({ order_id: i.order_id, amount: i.amount }),
    });
    expect((await fromModel({ idempotency_key: `${key}-m1`, order_id: 7, amount: 3 })).state).toBe("succeeded");
    await expect(fromModel({ idempotency_key: `${key}-m2`, order_id: 7, amount: 3 })).rejects.toBeInstanceOf(PossibleDuplicateError);
  });
});

describe("frameworks", () => {
  it("Vercel AI SDK", async () => {
    const key = newKey("ai-sdk");
    const charge_card = aiSDKTool<ChargeInput>({
      client: agent, effect: "noop", description: "Charges the order.", inputSchema: chargeInput, keyFrom: (i) => `${key}-order-${i.order_id}`,
    });
    const answers: ToolAnswer[] = [];
    for (let attempt = 0; attempt < 2; attempt++) {
      let calls = 0;
      const model = new MockLanguageModelV2({
        doGenerate: async () => {
          const usage = { inputTokens: 1, outputTokens: 1, totalTokens: 2 };
          return ++calls === 1
            ? { content: [{ type: "tool-call", toolCallId: `c${attempt}`, toolName: "charge_card", input: JSON.stringify({ order_id: 42, amount: 1999 }) }], finishReason: "tool-calls", usage, warnings: [] }
            : { content: [{ type: "text", text: "Charged." }], finishReason: "stop", usage, warnings: [] };
        },
      });
      const result = await generateText({ model, tools: { charge_card }, stopWhen: stepCountIs(3), prompt: "Charge order 42." });
      for (const step of result.steps) for (const r of step.toolResults) answers.push(r.output as ToolAnswer);
    }
    expect(answers.map((a) => a.duplicate)).toEqual([false, true]);
    expect(answers[1].id).toBe(answers[0].id);
    expect(answers[1].state).toBe("succeeded");
  });

  it("OpenAI Agents SDK", async () => {
    const key = newKey("openai-agents");
    const charge = openAIAgentsTool<ChargeInput>({
      client: agent, effect: "noop", name: "charge_card", description: "Charges the order.", parameters: chargeInput, keyFrom: (i) => `${key}-order-${i.order_id}`,
    });
    class Scripted implements Model {
      private calls = 0;
      async getResponse(): Promise<ModelResponse> {
        return ++this.calls === 1
          ? { usage: new Usage(), output: [{ type: "function_call", callId: "c1", name: "charge_card", arguments: JSON.stringify({ order_id: 42, amount: 1999 }), status: "completed" }] }
          : { usage: new Usage(), output: [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "Charged." }] }] };
      }
      // eslint-disable-next-line require-yield
      async *getStreamedResponse(): AsyncIterable<never> {
        throw new Error("not streamed");
      }
    }
    const answers: ToolAnswer[] = [];
    for (let attempt = 0; attempt < 2; attempt++) {
      const result = await run(new Agent({ name: "billing", model: new Scripted(), tools: [charge] }), "Charge order 42.");
      for (const item of result.newItems) if (item.type === "tool_call_output_item") answers.push(JSON.parse(String(item.output)));
    }
    expect(answers.map((a) => a.duplicate)).toEqual([false, true]);
    expect(answers[1].id).toBe(answers[0].id);
    expect(answers[1].state).toBe("succeeded");
  });

  it("LangChain.js", async () => {
    const key = newKey("langchain");
    const charge = langChainTool<ChargeInput>({
      client: agent, effect: "noop", name: "charge_card", description: "Charges the order.", schema: chargeInput, keyFrom: (i) => `${key}-order-${i.order_id}`,
    });
    const answers: ToolAnswer[] = [];
    for (let i = 0; i < 2; i++) answers.push(JSON.parse(String(await charge.invoke({ order_id: 42, amount: 1999 }))));
    expect(answers.map((a) => a.duplicate)).toEqual([false, true]);
    expect(answers[1].id).toBe(answers[0].id);
    expect(answers[1].state).toBe("succeeded");
  });
});
