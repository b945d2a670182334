ALTER TABLE {{schema}}.outbox_intent
    DROP COLUMN IF EXISTS resolved_by,
    DROP COLUMN IF EXISTS resolution_note,
    DROP COLUMN IF EXISTS resolved_at;
