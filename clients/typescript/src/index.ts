// @outbox-dev/client: outbox from TypeScript.
//
// - enqueue / enqueueMany: record intents in your own Postgres transaction
//   (pg, postgres.js, or any driver through an SQLExecutor: Kysely, Drizzle);
// - OutboxClient: the HTTP API, typed from its OpenAPI document;
// - idempotentTool: an agent's tool that records its effect once per logical
//   action (and ./ai-sdk, ./openai-agents, ./langchain for each framework);
// - errors, one class per error code (ERRORS).
export * from "./errors.js";
export * from "./intent.js";
export * from "./sql.js";
export * from "./http.js";
export * from "./tool.js";
export type { components, paths } from "./openapi.js";
