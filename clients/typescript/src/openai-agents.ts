// A tool for the OpenAI Agents SDK (@openai/agents: tool() with parameters)
// whose calls record their effect once per logical action. Needs the
// optional peer dependency @openai/agents.
import { tool } from "@openai/agents";
import { idempotentTool, type IdempotentToolConfig } from "./tool.js";

/** outboxTool's settings: idempotentTool's, and what the model reads. */
export interface OpenAIAgentsToolConfig<Input> extends IdempotentToolConfig<Input> {
  /** name is the tool's name, as the model calls it. */
  name: string;
  /** description tells the model what the tool does. */
  description: string;
  /** parameters is the tool's input: a zod object (strict mode: optional fields as .nullable()). */
  parameters: any;
}

/** An Agents SDK function tool: pass it in an Agent's tools. Its output is the intent as JSON text. */
export function outboxTool<Input>(config: OpenAIAgentsToolConfig<Input>) {
  const run = idempotentTool(config);
  return tool({
    name: config.name,
    description: config.description,
    parameters: config.parameters,
    execute: async (input: unknown) => JSON.stringify(await run(input as Input)),
  });
}
