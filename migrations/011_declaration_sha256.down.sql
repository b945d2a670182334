ALTER TABLE {{schema}}.outbox_intent
    DROP COLUMN IF EXISTS declaration_sha256;
