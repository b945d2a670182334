// Enqueues COUNT webhook intents through the client package's enqueue, each
// in a transaction of its own, alternating between two node-postgres
// clients: on a transaction pooler the two then share server connections,
// where a statement one prepared by name is already there for the other.
//
//   node enqueue.mjs CLIENT_DIR URL SCHEMA NAMESPACE COUNT
//
// Prints one line per acknowledged key; exits 1 at the first error.
import { createRequire } from "node:module";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [clientDir, url, schema, namespace, countText] = process.argv.slice(2);
// The client package's own node-postgres and build (clients/typescript).
const require = createRequire(path.join(clientDir, "package.json"));
const pg = require("pg");
const { enqueue } = await import(pathToFileURL(path.join(clientDir, "dist", "index.js")).href);

const clients = [new pg.Client({ connectionString: url }), new pg.Client({ connectionString: url })];
for (const c of clients) await c.connect();
try {
  for (let i = 0; i < Number(countText); i++) {
    const c = clients[i % 2];
    const key = `${namespace}-${String(i).padStart(4, "0")}`;
    await c.query("BEGIN");
    try {
      await enqueue(c, { namespace, key, effect: "webhook", args: { endpoint: "hook", payload: { key } } }, { schema });
      await c.query("COMMIT");
    } catch (e) {
      await c.query("ROLLBACK").catch(() => {});
      throw e;
    }
    console.log(key);
  }
} finally {
  for (const c of clients) await c.end();
}
