DROP TABLE IF EXISTS {{schema}}.outbox_recent_action;
UPDATE {{schema}}.outbox_intent SET key_source = 'explicit' WHERE key_source = 'model_confirmed';
ALTER TABLE {{schema}}.outbox_intent DROP CONSTRAINT outbox_intent_key_source_check;
ALTER TABLE {{schema}}.outbox_intent ADD CONSTRAINT outbox_intent_key_source_check
    CHECK (key_source IN ('explicit', 'auto'));
