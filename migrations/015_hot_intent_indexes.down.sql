-- outbox:no-transaction
--
-- The indexes of 006, back, concurrently (see the up migration).
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.outbox_intent_undispatched;
CREATE INDEX CONCURRENTLY outbox_intent_undispatched ON {{schema}}.outbox_intent (id) WHERE job_id IS NULL AND state = 'pending';
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.outbox_intent_namespace_state;
CREATE INDEX CONCURRENTLY outbox_intent_namespace_state ON {{schema}}.outbox_intent (namespace, state, id);
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.outbox_intent_prunable;
CREATE INDEX CONCURRENTLY outbox_intent_prunable ON {{schema}}.outbox_intent (completed_at) WHERE state IN ('succeeded', 'failed', 'cancelled');
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.outbox_intent_awaiting_approval;
CREATE INDEX CONCURRENTLY outbox_intent_awaiting_approval ON {{schema}}.outbox_intent (created_at) WHERE state = 'awaiting_approval';
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.outbox_intent_txid;
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.outbox_intent_namespace_id;
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.outbox_intent_created_at;
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.outbox_intent_approval;
