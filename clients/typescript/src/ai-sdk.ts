// A tool for the Vercel AI SDK (ai v5: tool() with inputSchema) whose calls
// record their effect once per logical action. Needs the optional peer
// dependency ai.
import { tool, type Tool } from "ai";
import { idempotentTool, type IdempotentToolConfig, type ToolAnswer } from "./tool.js";

/** outboxTool's settings: idempotentTool's, and what the model reads. */
export interface AISDKToolConfig<Input> extends IdempotentToolConfig<Input> {
  /** description tells the model what the tool does. */
  description: string;
  /** inputSchema is the tool's input (a zod object or the SDK's jsonSchema()). */
  inputSchema: any;
}

/** An AI SDK tool: pass it in generateText's / streamText's tools. */
export function outboxTool<Input>(config: AISDKToolConfig<Input>): Tool<Input, ToolAnswer> {
  const run = idempotentTool(config);
  return tool<Input, ToolAnswer>({
    description: config.description,
    inputSchema: config.inputSchema,
    execute: (input: Input) => run(input),
  } as any) as Tool<Input, ToolAnswer>;
}
