-- What the last attempt that called a provider sent it, where that is not
-- the intent's args: an MCP upstream's recorded tool sends the caller's
-- arguments with its marker and key_arg applied (docs/effects.md, "In
-- front of an MCP server"). The worker records them, scrubbed of the
-- upstream's secrets, as {"attempt": N, "arguments": {...}} before the
-- call is written, so that an operator resolving an unknown intent (the
-- process may have died mid-call) reads exactly what the upstream
-- received. NULL for every other intent; nullable without a default, the
-- column is added without rewriting the table, and needs no grant of its
-- own (009). A previous release never reads or writes it.
-- compatibility: safe with the previous release
ALTER TABLE {{schema}}.outbox_intent
    ADD COLUMN sent_args jsonb;
