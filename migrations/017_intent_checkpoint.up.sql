-- An attempt's checkpoint: what an effect recorded mid-attempt so that a
-- later attempt, on any replica, resumes the work instead of starting it
-- again. An MCP upstream that answers a call with a task records the
-- upstream's task id here before anything else: the call was received, and
-- the next attempt polls that task rather than calling again
-- (docs/effects.md, "Upstreams that answer with tasks"). NULL for every
-- other intent; nullable without a default, the column is added without
-- rewriting the table, and needs no grant of its own (009).
-- compatibility: safe with the previous release
ALTER TABLE {{schema}}.outbox_intent
    ADD COLUMN checkpoint jsonb;
