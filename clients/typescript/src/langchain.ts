// A tool for LangChain.js (@langchain/core's tool() with a schema) whose
// calls record their effect once per logical action. Needs the optional
// peer dependency @langchain/core.
import { tool } from "@langchain/core/tools";
import { idempotentTool, type IdempotentToolConfig } from "./tool.js";

/** outboxTool's settings: idempotentTool's, and what the model reads. */
export interface LangChainToolConfig<Input> extends IdempotentToolConfig<Input> {
  /** name is the tool's name, as the model calls it. */
  name: string;
  /** description tells the model what the tool does. */
  description: string;
  /** schema is the tool's input: a zod object. */
  schema: any;
}

/** A LangChain structured tool: bind it to a model, or invoke it. Its output is the intent as JSON text. */
export function outboxTool<Input>(config: LangChainToolConfig<Input>) {
  const run = idempotentTool(config);
  return tool(async (input: unknown) => JSON.stringify(await run(input as Input)), {
    name: config.name,
    description: config.description,
    schema: config.schema,
  });
}
