// The committed openapi.json is what serve publishes, and src/openapi.ts is
// what openapi-typescript makes of it: a drift of the API fails here (and the
// types the client is written against fail its build).
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { expect, it } from "vitest";
import { env } from "./env.js";

const root = resolve(import.meta.dirname, "..");

it("openapi.json is what serve publishes, and src/openapi.ts is generated from it", async () => {
  const served = await (await fetch(`${env.url}/v1/openapi.json`)).json();
  const snapshot = JSON.parse(readFileSync(join(root, "openapi.json"), "utf8"));
  expect(snapshot, "openapi.json is stale: clients/typescript/scripts/update-openapi.sh").toEqual(served);
  const tmp = mkdtempSync(join(tmpdir(), "outbox-openapi-"));
  try {
    writeFileSync(join(tmp, "openapi.json"), JSON.stringify(served, null, 2) + "\n");
    execFileSync(join(root, "node_modules", ".bin", "openapi-typescript"), [join(tmp, "openapi.json"), "-o", join(tmp, "openapi.ts")], { stdio: "pipe" });
    expect(readFileSync(join(tmp, "openapi.ts"), "utf8"), "src/openapi.ts is stale: npm run generate").toBe(readFileSync(join(root, "src", "openapi.ts"), "utf8"));
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});
