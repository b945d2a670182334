// OutboxClient against a real outboxd serve.
import { createServer, type Server } from "node:http";
import { describe, expect, it } from "vitest";
import {
  ApprovalMismatchError, ForbiddenError, InvalidArgsError, InvalidKeyError, NotAwaitingApprovalError, NotCancellableError,
  NotFoundError, NotUnknownError, OutboxClient, OutboxError, UnauthorizedError, UnknownEffectError, ERRORS, KeyReusedError,
} from "../src/index.js";
import { agent, env, newKey, operator } from "./env.js";

describe("OutboxClient", () => {
  it("enqueues, answers duplicates, waits, and maps every error to its class", async () => {
    const key = newKey("http");
    const first = await agent.enqueue({ key, effect: "noop", args: { amount: 5 }, requestedBy: "vitest" });
    const again = await agent.enqueue({ key, effect: "noop", args: { amount: 5.0 } });
    expect([first.duplicate, again.duplicate]).toEqual([false, true]);
    expect(again.intent.id).toBe(first.intent.id);
    expect((await agent.wait(key)).state).toBe("succeeded");
    const unknown = await agent.enqueue({ key: `${key}-x`, effect: "no_such_effect", args: {} }).catch((e) => e);
    expect(unknown).toBeInstanceOf(UnknownEffectError);
    expect([unknown.field, unknown.status]).toEqual(["effect", 400]);
    const invalid = await agent.enqueue({ key: `${key}-x`, effect: "charge", args: { amount: 1 } }).catch((e) => e);
    expect(invalid).toBeInstanceOf(InvalidArgsError);
    expect(invalid.field).toMatch(/^args\./);
    await expect(agent.enqueue({ key: "has space", effect: "noop", args: { amount: 1 } })).rejects.toBeInstanceOf(InvalidKeyError);
    await expect(new OutboxClient({ url: env.url, token: "not-a-token-0123456789" }).get(key)).rejects.toBeInstanceOf(UnauthorizedError);
    await expect(agent.get(`${key}-missing`)).rejects.toBeInstanceOf(NotFoundError);
    expect(ERRORS["idempotency_key_reused"]).toBe(KeyReusedError);
  });

  it("lists every page, cancels, approves, denies and resolves", async () => {
    const key = newKey("list");
    for (let i = 0; i < 5; i++) await agent.enqueue({ key: `${key}-${i}`, effect: "noop", args: { amount: 20000 + i } });
    const held: string[] = [];
    for await (const i of agent.list({ state: "awaiting_approval", effect: "noop", limit: 2 })) if (i.key.startsWith(key)) held.push(i.key);
    expect(held.sort()).toEqual([0, 1, 2, 3, 4].map((i) => `${key}-${i}`));
    expect((await agent.cancel(`${key}-0`, "changed my mind")).state).toBe("cancelled");
    const one = await agent.get(`${key}-1`);
    await expect(agent.approve(one.key, one.args_sha256)).rejects.toBeInstanceOf(ForbiddenError);
    await expect(operator.approve(one.key, "0".repeat(64))).rejects.toBeInstanceOf(ApprovalMismatchError);
    expect((await operator.approve(one.key, one.args_sha256, "ok")).approved_by).toBeTruthy();
    expect((await operator.deny(`${key}-2`, (await agent.get(`${key}-2`)).args_sha256, "no")).state).toBe("cancelled");
    await expect(operator.deny(`${key}-2`, one.args_sha256)).rejects.toBeInstanceOf(NotAwaitingApprovalError);
    expect((await agent.wait(one.key)).state).toBe("succeeded");
    await expect(agent.cancel(one.key)).rejects.toBeInstanceOf(NotCancellableError);
    await expect(operator.resolve(one.key, "succeeded", "x")).rejects.toBeInstanceOf(NotUnknownError);
  });

  it("retries what is safe, and only that", async () => {
    // A proxy in front of serve that answers 503 to its first two requests.
    let seen = 0;
    const proxy: Server = createServer(async (req, res) => {
      seen++;
      const chunks: Buffer[] = [];
      for await (const c of req) chunks.push(c as Buffer);
      if (seen <= 2) {
        res.writeHead(503, { "Retry-After": "0" }).end();
        return;
      }
      const headers = Object.fromEntries(Object.entries(req.headers).filter(([k]) => !["host", "content-length", "connection"].includes(k))) as Record<string, string>;
      const up = await fetch(env.url + req.url, { method: req.method, headers, body: chunks.length ? Buffer.concat(chunks) : undefined });
      res.writeHead(up.status, { "Content-Type": up.headers.get("Content-Type") ?? "application/json" }).end(Buffer.from(await up.arrayBuffer()));
    });
    await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r));
    try {
      const { port } = proxy.address() as { port: number };
      const client = new OutboxClient({ url: `http://127.0.0.1:${port}`, token: env.agentToken, backoffMs: 10 });
      const key = newKey("retry");
      const r = await client.enqueue({ key, effect: "noop", args: { amount: 20001 } });
      expect(r.duplicate).toBe(false);
      expect(seen).toBe(3);
      seen = 0;
      const err = await client.cancel(key).catch((e) => e);
      expect(err).toBeInstanceOf(OutboxError);
      expect(err.status).toBe(503);
      expect(seen).toBe(1);
    } finally {
      proxy.close();
    }
  });
});
