-- Who enqueued an intent, from the credentials the enqueue came with (an
-- API token's fingerprint, "api:local" without tokens, the command line's
-- user): the audit actor of internal/access, as resolved_by, approved_by and
-- denied_by record who moved it on (004, 006). requested_by stays the
-- client's own label of who asked. NULL for an intent enqueued through the
-- library or SQL, where the database role is the credential. A column of
-- outbox_intent needs no grant of its own: its neighbours' column grants are
-- none, and the table's privileges cover it.
ALTER TABLE {{schema}}.outbox_intent
    ADD COLUMN enqueued_by text;
