// LangChain.js with @langchain/mcp-adapters: outbox's MCP tools loaded as
// LangChain tools. charge_card is invoked twice with one idempotency_key, as
// a LangChain agent's retry would: both answers name one intent, and the card
// is charged once.
import { MultiServerMCPClient } from "@langchain/mcp-adapters";
import { OUTBOX_URL, authHeaders, charge, report } from "./outbox.ts";

const key = `order-${process.env.EXAMPLE_RUN ?? Date.now()}/langchain-charge`;

const client = new MultiServerMCPClient({
  mcpServers: { outbox: { transport: "http", url: `${OUTBOX_URL}/mcp`, headers: authHeaders() } },
});

// A tool's answer, whatever shape this version of the adapters gives it:
// outbox's tools answer JSON text.
function parse(out: unknown): any {
  if (typeof out === "string") return JSON.parse(out);
  if (Array.isArray(out)) {
    const first = out[0];
    return parse(Array.isArray(first) || typeof first === "string" ? first : first.text);
  }
  if (out && typeof out === "object" && "structuredContent" in out) return (out as { structuredContent: unknown }).structuredContent;
  if (out && typeof out === "object" && "text" in out) return parse((out as { text: unknown }).text);
  if (out && typeof out === "object" && "content" in out) return parse((out as { content: unknown }).content);
  throw new Error(`unexpected tool answer: ${JSON.stringify(out)}`);
}

try {
  const tools = await client.getTools();
  const find = (name: string) => {
    const tool = tools.find((t) => t.name === name || t.name.endsWith(`__${name}`));
    if (!tool) throw new Error(`no tool ${name} among ${tools.map((t) => t.name).join(", ")}`);
    return tool;
  };
  const chargeCard = find("charge_card");
  const answers = [];
  for (let i = 0; i < 2; i++) answers.push(parse(await chargeCard.invoke({ ...charge("langchain"), idempotency_key: key })));
  const final = parse(await find("get_intent").invoke({ key, wait_seconds: 30 }));
  report({
    example: "langchain",
    intent_ids: answers.map((a) => a.id),
    duplicates: answers.map((a) => a.duplicate),
    state: final.state,
    result: final.result,
  });
} finally {
  await client.close();
}
