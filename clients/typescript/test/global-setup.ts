// A database of the tests' own, migrated by outboxd, and a real outboxd serve
// on it (sandbox effects, tokens, an approval rule); both go at the end.
// OUTBOXD names a built outboxd (clients/test.sh builds one); without it the
// setup builds one with go. OUTBOX_TEST_PG is the server to create the
// database on (default: the machine's PostgreSQL, trust auth).
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import pg from "pg";
import type { TestProject } from "vitest/node";

export interface OutboxTestEnv {
  databaseURL: string;
  url: string;
  outboxd: string;
  agentToken: string;
  operatorToken: string;
  approval: string;
}

declare module "vitest" {
  export interface ProvidedContext {
    outbox: OutboxTestEnv;
  }
}

const repo = resolve(import.meta.dirname, "..", "..", "..");

function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const srv = createServer();
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => res(port));
    });
    srv.on("error", rej);
  });
}

export default async function setup(project: TestProject) {
  const tmp = mkdtempSync(join(tmpdir(), "outbox-tsclient-"));
  let outboxd = process.env.OUTBOXD;
  if (!outboxd) {
    outboxd = join(tmp, "outboxd");
    execFileSync("go", ["build", "-o", outboxd, "./cmd/outboxd"], { cwd: repo, stdio: "inherit" });
  }
  const base = new URL(process.env.OUTBOX_TEST_PG ?? "postgresql://postgres@127.0.0.1:5432/postgres");
  const name = `outbox_tsclient_${randomBytes(4).toString("hex")}`;
  const admin = new pg.Client({ connectionString: base.toString() });
  await admin.connect();
  await admin.query(`CREATE DATABASE "${name}"`);
  const dbURL = new URL(base.toString());
  dbURL.pathname = `/${name}`;
  const databaseURL = dbURL.toString();

  let serve: ChildProcess | undefined;
  const teardown = async () => {
    if (serve && serve.exitCode === null) {
      const exited = new Promise((r) => serve!.once("exit", r));
      serve.kill("SIGTERM");
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([exited, new Promise((r) => (timer = setTimeout(r, 15_000)))]);
      clearTimeout(timer);
      if (serve.exitCode === null) serve.kill("SIGKILL");
    }
    await admin.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
    await admin.end();
    rmSync(tmp, { recursive: true, force: true });
  };
  try {
    execFileSync(outboxd, ["migrate", "up"], { env: { ...process.env, DATABASE_URL: databaseURL }, stdio: "pipe" });
    const port = await freePort();
    const agentToken = `agent-${randomBytes(12).toString("hex")}`;
    const operatorToken = `operator-${randomBytes(12).toString("hex")}`;
    // A rule on an argument also holds an intent that lacks it, so every
    // test intent names an amount.
    const approval = "noop:amount>=10000";
    const log = openSync(join(tmp, "serve.log"), "w");
    serve = spawn(outboxd, ["serve"], {
      env: {
        ...process.env,
        DATABASE_URL: databaseURL,
        OUTBOX_SANDBOX: "true",
        OUTBOX_HTTP_ADDR: `127.0.0.1:${port}`,
        OUTBOX_APPROVAL: approval,
        OUTBOX_API_TOKENS: `${agentToken}:default,${operatorToken}:default:operator`,
      },
      stdio: ["ignore", log, log],
    });
    const url = `http://127.0.0.1:${port}`;
    const deadline = Date.now() + 30_000;
    for (;;) {
      try {
        if ((await fetch(`${url}/readyz`)).ok) break;
      } catch {
        // not listening yet
      }
      if (serve.exitCode !== null || Date.now() > deadline) {
        throw new Error(`outboxd serve did not become ready:\n${readFileSync(join(tmp, "serve.log"), "utf8")}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    project.provide("outbox", { databaseURL, url, outboxd, agentToken, operatorToken, approval });
  } catch (e) {
    await teardown();
    throw e;
  }
  return teardown;
}
