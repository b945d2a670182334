ALTER TABLE {{schema}}.outbox_intent
    DROP COLUMN IF EXISTS sent_args;
