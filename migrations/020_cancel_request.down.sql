ALTER TABLE {{schema}}.outbox_intent
    DROP COLUMN IF EXISTS cancel_requested;
