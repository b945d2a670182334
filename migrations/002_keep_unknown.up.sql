-- Unknown intents are never pruned: an unresolved intent must stay in the
-- operator's queue, and pruning it would free its key, so that an agent's
-- retry would send a possibly duplicate at-most-once effect. Once resolved,
-- an intent ages out from its resolution (Resolve sets completed_at).
DROP INDEX {{schema}}.outbox_intent_prunable;
CREATE INDEX outbox_intent_prunable ON {{schema}}.outbox_intent (completed_at)
    WHERE state IN ('succeeded', 'failed', 'cancelled');
