// The overhead of enqueue through this package against the raw SQL call.
// One enqueue per transaction, N of each in 5 interleaved rounds (the
// median round counts: the machine is shared), on one connection to DATABASE_URL
// (a migrated database; the intents, in namespace bench-<random>, are
// deleted at the end). Needs the build (npm run build).
//
//   DATABASE_URL=postgresql://postgres@127.0.0.1:5432/outbox_bench node bench.mjs [N]
import { randomBytes } from "node:crypto";
import pg from "pg";
import postgres from "postgres";
import { enqueue } from "./dist/index.js";

const N = Number(process.argv[2] ?? 2000);
const ns = `bench-${randomBytes(4).toString("hex")}`;
const args = { amount: 1999, currency: "eur", customer: "cus_bench" };
const RAW = "SELECT (intent).id, (intent).state, duplicate FROM outbox.enqueue($1, $2, $3, $4::jsonb, $5)";

const ROUNDS = 5;

// A round's mean wall time and this process's CPU time (what the client
// itself spends, which the machine's other load disturbs less), in us.
async function round(name, fn, r) {
  const n = Math.ceil(N / ROUNDS);
  const start = process.hrtime.bigint();
  const startCPU = process.cpuUsage();
  for (let i = 0; i < n; i++) await fn(`${name}-${r}-${i}`);
  const c = process.cpuUsage(startCPU);
  return [Number(process.hrtime.bigint() - start) / 1000 / n, (c.user + c.system) / n];
}

async function timeAll(variants) {
  const rounds = Object.fromEntries(Object.keys(variants).map((k) => [k, []]));
  const names = Object.keys(variants);
  for (const [v, name] of names.entries()) for (let i = 0; i < 200; i++) await variants[name](`v${v}-warm-${i}`);
  for (let r = 0; r < ROUNDS; r++) for (const [v, name] of names.entries()) rounds[name].push(await round(`v${v}`, variants[name], r));
  const median = (xs) => xs.sort((a, b) => a - b)[Math.floor(ROUNDS / 2)];
  return Object.fromEntries(Object.entries(rounds).map(([k, v]) => [k, [median(v.map((x) => x[0])), median(v.map((x) => x[1]))]]));
}

const client = new pg.Client({ connectionString: process.env.DATABASE_URL });
await client.connect();
const inTx = (fn) => async (key) => {
  await client.query("BEGIN");
  await fn(key);
  await client.query("COMMIT");
};
const sql = postgres(process.env.DATABASE_URL, { max: 1, onnotice: () => {} });
const results = await timeAll({
  "raw outbox.enqueue (pg)": inTx((key) => client.query({ name: "raw", text: RAW, values: [ns, key, "noop", JSON.stringify(args), null] })),
  "enqueue (pg)": inTx((key) => enqueue(client, { namespace: ns, key, effect: "noop", args })),
  "raw outbox.enqueue (postgres.js)": (key) => sql.begin((tx) => tx.unsafe(RAW, [ns, key, "noop", args, null], { prepare: true })),
  "enqueue (postgres.js)": (key) => sql.begin((tx) => enqueue(tx, { namespace: ns, key, effect: "noop", args })),
});
const base = { pg: results["raw outbox.enqueue (pg)"], "postgres.js": results["raw outbox.enqueue (postgres.js)"] };
for (const [name, [us, cpu]] of Object.entries(results)) {
  const [b, bCPU] = name.includes("postgres.js") ? base["postgres.js"] : base.pg;
  console.log(`${name.padEnd(34)} ${us.toFixed(0).padStart(6)} us/transaction x${(us / b).toFixed(2)}   client CPU ${cpu.toFixed(0).padStart(5)} us x${(cpu / bCPU).toFixed(2)}`);
}
await client.query("DELETE FROM outbox.outbox_intent WHERE namespace = $1", [ns]);
await client.end();
await sql.end();
