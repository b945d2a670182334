DROP INDEX {{schema}}.outbox_intent_prunable;
CREATE INDEX outbox_intent_prunable ON {{schema}}.outbox_intent (completed_at)
    WHERE state IN ('succeeded', 'failed', 'unknown', 'cancelled');
