-- Who moved an intent by hand, and why: a cancel or an operator's
-- resolution records the actor (an API token's fingerprint, the command
-- line's user), the note and the time, on the intent itself, so the record
-- lives and is pruned with it.
ALTER TABLE {{schema}}.outbox_intent
    ADD COLUMN resolved_by     text,
    ADD COLUMN resolution_note text,
    ADD COLUMN resolved_at     timestamptz;
