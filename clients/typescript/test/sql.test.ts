// enqueue in the caller's transaction with pg, postgres.js, and the README's
// Kysely and Drizzle recipes, against a real database and outboxd serve.
import { execFileSync } from "node:child_process";
import { drizzle } from "drizzle-orm/node-postgres";
import { sql as dsql } from "drizzle-orm";
import { CompiledQuery, Kysely, PostgresDialect } from "kysely";
import pg from "pg";
import postgres from "postgres";
import { afterAll, describe, expect, it } from "vitest";
import {
  ForbiddenError, InvalidArgsError, InvalidKeyError, KeyReusedError, NotFoundError, UnknownEffectError, argsSHA256, enqueue, enqueueMany,
  type SQLExecutor,
} from "../src/index.js";
import { agent, cli, effectsAtProvider, env, newKey, operator } from "./env.js";

const pool = new pg.Pool({ connectionString: env.databaseURL, max: 4 });
const sql = postgres(env.databaseURL, { max: 2, onnotice: () => {} });
afterAll(async () => {
  await pool.end();
  await sql.end();
});

describe("pg", () => {
  it("leaves nothing when the transaction rolls back", async () => {
    const key = newKey("rollback");
    const client = await pool.connect();
    try {
      await client.query("BEGIN");
      const r = await enqueue(client, { key, effect: "noop", args: { amount: 1 } });
      expect(r.duplicate).toBe(false);
      expect(r.intent.state).toBe("pending");
      await client.query("ROLLBACK");
    } finally {
      client.release();
    }
    await expect(agent.get(key)).rejects.toBeInstanceOf(NotFoundError);
  });

  it("runs a committed intent once", async () => {
    const key = newKey("commit");
    const client = await pool.connect();
    let id: number;
    try {
      await client.query("BEGIN");
      await client.query("CREATE TEMP TABLE orders (id text) ON COMMIT DROP");
      await client.query("INSERT INTO orders VALUES ('order-1')");
      const r = await enqueue(client, { key, effect: "noop", args: { amount: 1999 }, requestedBy: "vitest" });
      id = r.intent.id;
      expect(r.intent.requested_by).toBe("vitest");
      await client.query("COMMIT");
    } finally {
      client.release();
    }
    const done = await agent.wait(key);
    expect(done.state).toBe("succeeded");
    expect(done.id).toBe(id);
    expect(argsSHA256(done.args)).toBe(done.args_sha256);
    expect(await effectsAtProvider(pool, done.provider_key)).toBe(1);
  });

  it("is one intent from TypeScript, Go and HTTP", async () => {
    const key = newKey("one");
    const args = { amount: 42, note: "same action" };
    const first = await enqueue(pool, { key, effect: "noop", args });
    // Key order and 42 vs 42.0 do not matter: jsonb equality.
    const fromGo = cli("enqueue", "--key", key, "--effect", "noop", "--args", '{"note": "same action", "amount": 42.0}');
    const http = await agent.enqueue({ key, effect: "noop", args });
    const again = await enqueue(pool, { key, effect: "noop", args });
    expect(first.duplicate).toBe(false);
    expect([fromGo.duplicate, http.duplicate, again.duplicate]).toEqual([true, true, true]);
    expect(new Set([first.intent.id, fromGo.id, http.intent.id, again.intent.id]).size).toBe(1);
    expect((await agent.wait(key)).state).toBe("succeeded");
    expect(await effectsAtProvider(pool, first.intent.provider_key)).toBe(1);
  });

  it("throws KeyReusedError with the existing intent and leaves the transaction usable", async () => {
    const key = newKey("reused");
    const first = await enqueue(pool, { key, effect: "noop", args: { amount: 1 } });
    const client = await pool.connect();
    try {
      await client.query("BEGIN");
      await client.query("CREATE TEMP TABLE audit (what text) ON COMMIT DROP");
      const err = await enqueue(client, { key, effect: "noop", args: { amount: 2 } }).catch((e) => e);
      expect(err).toBeInstanceOf(KeyReusedError);
      expect(err.code).toBe("idempotency_key_reused");
      expect(err.existing.id).toBe(first.intent.id);
      expect(err.existing.args).toEqual({ amount: 1 });
      await client.query("INSERT INTO audit VALUES ('after the conflict')");
      await enqueue(client, { key: `${key}-next`, effect: "noop", args: { amount: 3 } });
      await client.query("COMMIT");
    } finally {
      client.release();
    }
    expect((await agent.get(`${key}-next`)).effect).toBe("noop");
    const overHTTP = await agent.enqueue({ key, effect: "noop", args: { amount: 2 } }).catch((e) => e);
    expect(overHTTP).toBeInstanceOf(KeyReusedError);
    expect(overHTTP.status).toBe(422);
    expect(overHTTP.existing.id).toBe(first.intent.id);
  });

  it("refuses bad input before the database", async () => {
    const client = await pool.connect();
    try {
      await client.query("BEGIN");
      const cases: Array<[any, Function, string]> = [
        [{ key: "has space", effect: "noop", args: {} }, InvalidKeyError, "key"],
        [{ key: "k", namespace: "x".repeat(65), effect: "noop", args: {} }, InvalidKeyError, "namespace"],
        [{ key: "k", effect: "Noop", args: {} }, UnknownEffectError, "effect"],
        [{ key: "k", effect: "noop", args: [1] }, InvalidArgsError, "args"],
        [{ key: "k", effect: "noop", args: { x: "\0" } }, InvalidArgsError, "args"],
        [{ key: "k", effect: "noop", args: { x: NaN } }, InvalidArgsError, "args"],
      ];
      for (const [params, Class, field] of cases) {
        const err = await enqueue(client, params).catch((e) => e);
        expect(err).toBeInstanceOf(Class);
        expect(err.field).toBe(field);
      }
      expect((await enqueue(client, { key: newKey("ok"), effect: "noop", args: { amount: 1 } })).duplicate).toBe(false);
      await client.query("ROLLBACK");
    } finally {
      client.release();
    }
  });

  it("holds an intent an approval rule matches", async () => {
    const key = newKey("approval");
    const r = await enqueue(pool, { key, effect: "noop", args: { amount: 25000 } });
    expect(r.intent.state).toBe("awaiting_approval");
    expect(r.intent.approval_rule).toBe(env.approval);
    expect((await agent.wait(key, 1000)).state).toBe("awaiting_approval");
    await operator.approve(key, r.intent.args_sha256, "checked");
    expect((await agent.wait(key)).state).toBe("succeeded");
  });

  it("works for a role granted only the functions (print-grants)", async () => {
    const role = `outbox_tsclient_svc_${Math.random().toString(16).slice(2, 10)}`;
    const grants = execFileSync(env.outboxd, ["migrate", "print-grants", role, "shop"], { env: { ...process.env, DATABASE_URL: env.databaseURL } }).toString();
    await pool.query(`CREATE ROLE "${role}" LOGIN`);
    await pool.query(grants);
    const url = new URL(env.databaseURL);
    url.username = role;
    const svc = new pg.Client({ connectionString: url.toString() });
    await svc.connect();
    try {
      const key = newKey("role");
      await svc.query("BEGIN");
      const first = await enqueue(svc, { namespace: "shop", key, effect: "noop", args: { amount: 1 } });
      const err = await enqueue(svc, { namespace: "shop", key, effect: "noop", args: { amount: 2 } }).catch((e) => e);
      expect(err).toBeInstanceOf(KeyReusedError);
      expect(err.existing.id).toBe(first.intent.id);
      await svc.query("COMMIT");
      await expect(enqueue(svc, { namespace: "elsewhere", key, effect: "noop", args: { amount: 1 } })).rejects.toBeInstanceOf(ForbiddenError);
    } finally {
      await svc.end();
      await pool.query(`DROP OWNED BY "${role}"`);
      await pool.query(`DROP ROLE "${role}"`);
    }
  });

  it("enqueues many atomically", async () => {
    const key = newKey("many");
    await enqueue(pool, { key: `${key}-0`, effect: "noop", args: { amount: 1 } });
    const rs = await enqueueMany(pool, [
      { key: `${key}-0`, effect: "noop", args: { amount: 1 } },
      { key: `${key}-1`, effect: "noop", args: { amount: 2 }, requestedBy: "batch" },
    ]);
    expect(rs.map((r) => r.duplicate)).toEqual([true, false]);
    const err = await enqueueMany(pool, [
      { key: `${key}-2`, effect: "noop", args: { amount: 3 } },
      { key: `${key}-1`, effect: "noop", args: { amount: 99 } },
    ]).catch((e) => e);
    expect(err).toBeInstanceOf(KeyReusedError);
    expect(err.field).toBe("[1].key");
    await expect(agent.get(`${key}-2`)).rejects.toBeInstanceOf(NotFoundError);
    expect(await enqueueMany(pool, [])).toEqual([]);
  });
});

describe("postgres.js", () => {
  it("enqueues in sql.begin, and a conflict leaves the transaction usable", async () => {
    const key = newKey("postgresjs");
    const rolledBack = newKey("postgresjs-rb");
    await sql
      .begin(async (tx) => {
        await enqueue(tx, { key: rolledBack, effect: "noop", args: { amount: 1 } });
        throw new Error("roll back");
      })
      .catch(() => {});
    await expect(agent.get(rolledBack)).rejects.toBeInstanceOf(NotFoundError);
    const [first, err, count] = await sql.begin(async (tx) => {
      const first = await enqueue(tx, { key, effect: "noop", args: { amount: 5 }, requestedBy: "postgres.js" });
      const err = await enqueue(tx, { key, effect: "noop", args: { amount: 6 } }).catch((e) => e);
      const [{ n }] = await tx`SELECT 1 AS n`;
      return [first, err, n] as const;
    });
    expect(first.duplicate).toBe(false);
    expect(err).toBeInstanceOf(KeyReusedError);
    expect(err.existing.id).toBe(first.intent.id);
    expect(count).toBe(1);
    expect((await agent.wait(key)).state).toBe("succeeded");
  });
});

describe("recipes", () => {
  it("Kysely", async () => {
    const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: env.databaseURL, max: 1 }) }) });
    const key = newKey("kysely");
    try {
      const r = await db.transaction().execute(async (trx) => {
        // The README's recipe.
        const exec: SQLExecutor = async (text, values) => (await trx.executeQuery(CompiledQuery.raw(text, values))).rows as any[];
        return enqueue(exec, { key, effect: "noop", args: { amount: 7 } });
      });
      expect(r.duplicate).toBe(false);
      expect((await agent.wait(key)).state).toBe("succeeded");
    } finally {
      await db.destroy();
    }
  });

  it("Drizzle", async () => {
    const dpool = new pg.Pool({ connectionString: env.databaseURL, max: 1 });
    const db = drizzle(dpool);
    const key = newKey("drizzle");
    try {
      const r = await db.transaction(async (tx) => {
        // The README's recipe: $n placeholders as drizzle params.
        const exec: SQLExecutor = async (text, values) =>
          (await tx.execute(dsql.join(text.split(/\$(\d+)/).map((s, i) => (i % 2 ? dsql.param(values[Number(s) - 1]) : dsql.raw(s)))))).rows;
        const first = await enqueue(exec, { key, effect: "noop", args: { amount: 8 } });
        const err = await enqueue(exec, { key, effect: "noop", args: { amount: 9 } }).catch((e) => e);
        expect(err).toBeInstanceOf(KeyReusedError);
        return first;
      });
      expect(r.duplicate).toBe(false);
      expect((await agent.wait(key)).state).toBe("succeeded");
    } finally {
      await dpool.end();
    }
  });
});
