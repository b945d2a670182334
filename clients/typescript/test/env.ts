// What every test file shares: the environment global-setup.ts started.
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import pg from "pg";
import { inject } from "vitest";
import { OutboxClient } from "../src/index.js";

export const env = inject("outbox");
export const agent = new OutboxClient({ url: env.url, token: env.agentToken });
export const operator = new OutboxClient({ url: env.url, token: env.operatorToken });

/** A key of the test's own. */
export function newKey(prefix: string): string {
  return `${prefix}-${randomBytes(4).toString("hex")}`;
}

/** outboxd's command line (the Go library underneath) on the database; its JSON answer. */
export function cli(...args: string[]): any {
  const out = execFileSync(env.outboxd, args, { env: { ...process.env, DATABASE_URL: env.databaseURL, OUTBOX_SANDBOX: "true" }, stdio: ["ignore", "pipe", "pipe"] });
  return JSON.parse(out.toString());
}

/** How many times the sandbox's noop provider performed the effect. */
export async function effectsAtProvider(pool: pg.Pool, providerKey: string): Promise<number> {
  const { rows } = await pool.query("SELECT count(*)::int AS n FROM outbox.outbox_noop_effect WHERE provider_key = $1", [providerKey]);
  return rows[0].n;
}
