-- outbox:no-transaction
-- compatibility: safe with the previous release
-- (its drain still finds undispatched intents once their partial index is
-- gone, by reading the table: slower on a large table, never wrong; roll
-- the old replicas out soon after)
--
-- The intent table's indexes, swapped for indexes on columns that never
-- change after the insert (see 014), without a long lock: CREATE and DROP
-- INDEX CONCURRENTLY, which PostgreSQL runs only outside a transaction, so
-- the migrator runs this file's statements one at a time (still under its
-- advisory lock) and records the migration after the last. Writes to the
-- table go on meanwhile; each build waits for the transactions that were
-- writing when it began. Every statement can be run again: a build that
-- failed leaves an invalid index, which the DROP before it removes on the
-- next run.
--
-- The drain's stream, in commit order (014). Rows from before 014 have no
-- txid and are left out.
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.outbox_intent_txid;
CREATE INDEX CONCURRENTLY outbox_intent_txid ON {{schema}}.outbox_intent (txid, id) WHERE txid IS NOT NULL;
-- Listing a namespace, newest first (replaces (namespace, state, id); a
-- state filter reads the namespace's rows in id order).
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.outbox_intent_namespace_id;
CREATE INDEX CONCURRENTLY outbox_intent_namespace_id ON {{schema}}.outbox_intent (namespace, id);
-- Pruning: an intent completes after it is created, so every intent
-- completed before the cutoff was created before it (replaces
-- outbox_intent_prunable, on completed_at and the state).
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.outbox_intent_created_at;
CREATE INDEX CONCURRENTLY outbox_intent_created_at ON {{schema}}.outbox_intent (created_at);
-- Intents that awaited approval, the few an expiry or an announcement
-- looks at: approval_rule is set on insert only, and only on those
-- (replaces outbox_intent_awaiting_approval, on the state).
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.outbox_intent_approval;
CREATE INDEX CONCURRENTLY outbox_intent_approval ON {{schema}}.outbox_intent (created_at) WHERE approval_rule IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.outbox_intent_undispatched;
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.outbox_intent_namespace_state;
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.outbox_intent_prunable;
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.outbox_intent_awaiting_approval;
