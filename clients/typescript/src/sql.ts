// Enqueue in the caller's own database transaction.
//
// An enqueue writes only the intent row, in the transaction it is given: if
// the caller rolls back, nothing is left; if it commits, outboxd's
// dispatcher runs the intent. No outboxd call, no River client.
//
// It goes through outbox's SQL function outbox_enqueue_many (the batch form
// of outbox.enqueue, same rules, granted to the same roles by `outboxd
// migrate print-grants`), in one statement and one round trip. That function
// answers a key reused for another action with the existing intent instead
// of raising, and undoes its own writes in a subtransaction of its own: so
// KeyReusedError carries the existing intent and the caller's transaction
// stays usable, without a SAVEPOINT round trip. Input the database would
// refuse (a bad key, args that are not an object) is checked here first,
// for the same reason: a refusal by the database aborts the transaction.
import { InvalidArgsError, InvalidKeyError, KeyReusedError, OutboxError, UnknownEffectError, fromDatabase } from "./errors.js";
import { argsSHA256 } from "./intent.js";
import type { EnqueueResult, Intent } from "./intent.js";

/** The schema of outbox's tables and functions (outboxd's OUTBOX_SCHEMA). */
export const SCHEMA_DEFAULT = "outbox";
/** The namespace of an enqueue that names none. */
export const NAMESPACE_DEFAULT = "default";

/** One intent to enqueue. */
export interface EnqueueParams {
  /** The tenant. Defaults to NAMESPACE_DEFAULT. */
  namespace?: string;
  /** The idempotency key naming the logical action: 1 to 255 printable ASCII characters. */
  key: string;
  /** The effect's name. */
  effect: string;
  /** The effect's arguments: a JSON object. */
  args: Record<string, unknown>;
  /** Who asked, for the record. */
  requestedBy?: string;
  /** Hold the intent for a person's approval, whatever the rules (which apply anyway). */
  requireApproval?: boolean;
}

/** Options of enqueue and enqueueMany. */
export interface EnqueueOpts {
  /** outbox's schema. Defaults to SCHEMA_DEFAULT. */
  schema?: string;
}

/**
 * A node-postgres Client, PoolClient or Pool (in a transaction: BEGIN ...
 * COMMIT on a client), or anything with its query method.
 */
export interface PgQueryable {
  query(config: { name?: string; text: string; values: unknown[] }): Promise<{ rows: any[] }>;
}

/** A postgres.js Sql or TransactionSql (the `tx` of `sql.begin(tx => ...)`). */
export interface PostgresJsSql {
  unsafe(query: string, parameters?: any[], options?: { prepare?: boolean }): PromiseLike<any[]>;
}

/**
 * Any other driver or query builder: runs text ($1, $2, ... placeholders)
 * with values in the caller's transaction and answers the rows as objects.
 * The README has the recipes for Kysely and Drizzle.
 */
export type SQLExecutor = (text: string, values: unknown[]) => Promise<any[]>;

/** What enqueue takes: pg, postgres.js, or an SQLExecutor. */
export type Executor = PgQueryable | PostgresJsSql | SQLExecutor;

const printable = /^[\x21-\x7e]+$/;
const effectName = /^[a-z][a-z0-9_]{0,63}$/;
const identifier = /^[A-Za-z_][A-Za-z0-9_$]{0,62}$/;

// The intent as the HTTP API writes it, built by the server as one jsonb
// value: every driver then answers the same (ids as numbers, times as ISO
// text), whatever its own type parsing.
const intentJSON = `jsonb_build_object(
    'id', (r.intent).id, 'namespace', (r.intent).namespace, 'key', (r.intent).key, 'effect', (r.intent).effect,
    'args', (r.intent).args, 'state', (r.intent).state, 'attempts', (r.intent).attempt, 'result', (r.intent).result,
    'error', (r.intent).error, 'provider_key', (r.intent).provider_key, 'requested_by', (r.intent).requested_by,
    'key_source', (r.intent).key_source, 'created_at', (r.intent).created_at, 'updated_at', (r.intent).updated_at,
    'completed_at', (r.intent).completed_at, 'resolved_by', (r.intent).resolved_by,
    'resolution_note', (r.intent).resolution_note, 'resolved_at', (r.intent).resolved_at,
    'approval_rule', (r.intent).approval_rule, 'approved_by', (r.intent).approved_by,
    'approved_at', (r.intent).approved_at, 'denied_by', (r.intent).denied_by, 'denied_at', (r.intent).denied_at,
    'approval_note', (r.intent).approval_note, 'job_id', (r.intent).job_id)::text`;

/**
 * enqueueStatement is the statement enqueueMany sends ($1 to $7: arrays of
 * namespaces, keys, effects, args as JSON text, requested_by, key sources,
 * require_approval), for a driver of your own. Rows: ord, intent (JSON
 * text), duplicate, conflict.
 */
export function enqueueStatement(schema: string = SCHEMA_DEFAULT): string {
  if (!identifier.test(schema)) throw new TypeError(`schema ${JSON.stringify(schema)} is not a plain SQL identifier`);
  return `SELECT r.ord, ${intentJSON} AS intent, r.duplicate, r.conflict
FROM "${schema}".outbox_enqueue_many($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::text[], $6::text[], $7::boolean[]) r
ORDER BY r.ord`;
}

/** Checks params as the database would, and answers the statement's values. */
export function enqueueValues(items: EnqueueParams[]): unknown[][] {
  const cols: unknown[][] = [[], [], [], [], [], [], []];
  items.forEach((p, i) => {
    const at = (field: string) => (items.length > 1 ? `[${i}].${field}` : field);
    const ns = p.namespace || NAMESPACE_DEFAULT;
    if (typeof ns !== "string" || ns.length > 64 || !printable.test(ns)) {
      throw new InvalidKeyError("must be 1 to 64 printable ASCII characters (0x21 to 0x7E)", { field: at("namespace") });
    }
    if (typeof p.key !== "string" || p.key.length > 255 || !printable.test(p.key)) {
      throw new InvalidKeyError("must be 1 to 255 printable ASCII characters (0x21 to 0x7E)", { field: at("key") });
    }
    if (typeof p.effect !== "string" || !effectName.test(p.effect)) {
      throw new UnknownEffectError(`effect ${JSON.stringify(p.effect)} is not a valid effect name`, { field: at("effect") });
    }
    if (!p.args || typeof p.args !== "object" || Array.isArray(p.args)) {
      throw new InvalidArgsError("must be a JSON object", { field: at("args") });
    }
    let args: string;
    try {
      args = JSON.stringify(p.args, (_k, v) => {
        if (typeof v === "number" && !Number.isFinite(v)) throw new TypeError("NaN and Infinity are not JSON");
        if (typeof v === "bigint") throw new TypeError("a BigInt is not JSON");
        return v;
      });
    } catch (e) {
      throw new InvalidArgsError(`not JSON: ${(e as Error).message}`, { field: at("args") });
    }
    // jsonb refuses the NUL character.
    if (args.includes("\\u0000")) throw new InvalidArgsError("must not contain the NUL character (\\u0000)", { field: at("args") });
    if (p.requestedBy !== undefined && p.requestedBy !== null &&
        (typeof p.requestedBy !== "string" || p.requestedBy.length > 255 || p.requestedBy.includes("\0"))) {
      throw new InvalidArgsError("must be a string of at most 255 characters without NUL", { field: at("requested_by") });
    }
    cols[0].push(ns);
    cols[1].push(p.key);
    cols[2].push(p.effect);
    cols[3].push(args);
    cols[4].push(p.requestedBy ?? null);
    cols[5].push("explicit");
    cols[6].push(Boolean(p.requireApproval));
  });
  return cols;
}

interface Row {
  ord: number | string;
  intent: string | Intent;
  duplicate: boolean;
  conflict: boolean;
}

/** Maps the statement's rows to results; a conflict is a KeyReusedError. */
export function enqueueAnswer(rows: Row[], n: number): EnqueueResult[] {
  const results: EnqueueResult[] = new Array(n);
  for (const row of rows) {
    const intent = (typeof row.intent === "string" ? JSON.parse(row.intent) : row.intent) as Intent;
    intent.args_sha256 = argsSHA256(intent.args);
    const ord = Number(row.ord);
    if (row.conflict) {
      // The function wrote nothing of the batch, and answered only with the
      // intent first recorded under the key.
      throw new KeyReusedError("", { existing: intent, field: n === 1 ? "key" : `[${ord}].key` });
    }
    results[ord] = { intent, duplicate: Boolean(row.duplicate) };
  }
  for (let i = 0; i < n; i++) {
    if (!results[i]) throw new OutboxError("the enqueue answered for fewer intents than it was given", { code: "internal_error" });
  }
  return results;
}



function isPostgresJs(x: Executor): x is PostgresJsSql {
  return typeof (x as PostgresJsSql).unsafe === "function";
}

async function run(tx: Executor, schema: string, values: unknown[][]): Promise<Row[]> {
  const text = enqueueStatement(schema);
  if (typeof tx === "function" && !isPostgresJs(tx)) return (await (tx as SQLExecutor)(text, values)) as Row[];
  if (isPostgresJs(tx)) {
    // postgres.js encodes each element by the parameter's type (jsonb[]),
    // so it takes the args as values, not as JSON text.
    const v = [...values];
    v[3] = values[3].map((s) => JSON.parse(s as string));
    // Unnamed: a named statement stays on the server connection that
    // prepared it, which a transaction pooler (PgBouncer before 1.21) then
    // lends to another client, or does not give this one next time.
    return (await tx.unsafe(text, v as any[], { prepare: false })) as Row[];
  }
  // Unnamed, for the same reason: node-postgres prepares a query only
  // when it is given a name.
  const res = await (tx as PgQueryable).query({ text, values });
  return res.rows as Row[];
}

/**
 * Records one intent in tx's transaction, with one statement. A new key
 * answers the new intent; the same key for the same action (effect and args
 * equal as jsonb) answers the first intent with duplicate true, whatever
 * its state; the same key for another action throws KeyReusedError carrying
 * the first intent, and leaves the transaction usable. Approval rules
 * (OUTBOX_APPROVAL) hold as for every enqueue.
 */
export async function enqueue(tx: Executor, params: EnqueueParams, opts: EnqueueOpts = {}): Promise<EnqueueResult> {
  const [result] = await enqueueMany(tx, [params], opts);
  return result;
}

/**
 * Records many intents in tx's transaction, with one statement, atomically:
 * every one is recorded (new or duplicate), or, when one key was used for
 * another action, none is and KeyReusedError names it. Results are in the
 * order of items.
 */
export async function enqueueMany(tx: Executor, items: EnqueueParams[], opts: EnqueueOpts = {}): Promise<EnqueueResult[]> {
  if (items.length === 0) return [];
  const schema = opts.schema ?? SCHEMA_DEFAULT;
  enqueueStatement(schema);
  const values = enqueueValues(items);
  let rows: Row[];
  try {
    rows = await run(tx, schema, values);
  } catch (e) {
    const mapped = fromDatabase(e);
    if (mapped) throw mapped;
    throw e;
  }
  return enqueueAnswer(rows, items.length);
}
