-- An operator's cancel of an intent whose provider holds the work as a
-- task (an MCP upstream's call answered with a task, recorded in the
-- intent's checkpoint): the intent cannot be cancelled here, since the
-- provider received the call, so the request is recorded and the attempt
-- polling the task sends the provider its own cancel. The intent then ends
-- by what the provider reports: cancelled if it stopped the work, its
-- result if the work finished first (docs/effects.md, "Upstreams that
-- answer with tasks"). {"by", "note", "at"}; NULL for every other intent.
-- Nullable without a default, the column is added without rewriting the
-- table, and needs no grant of its own (009).
-- compatibility: safe with the previous release
ALTER TABLE {{schema}}.outbox_intent
    ADD COLUMN cancel_requested jsonb;
