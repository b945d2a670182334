-- MCP tasks and approvals in the host (docs/agents.md, "Tasks and
-- approvals in the host").
-- compatibility: safe with the previous release
--
-- outbox_state_key holds the key that derives MCP task ids and seals the
-- requestState of an approval asked of the host, so that every replica
-- computes the same task id and accepts the state another replica sealed.
-- It is generated here, once, from PostgreSQL's strong random source (two
-- gen_random_uuid() values: 244 random bits); OUTBOX_STATE_KEY overrides it.
-- Only the schema's owner reads it: no grant is given to any role (the
-- roles granted the enqueue functions, 005, never see it), and PUBLIC's
-- default privileges on a new table are none.
CREATE TABLE {{schema}}.outbox_state_key (
    id         integer PRIMARY KEY CHECK (id = 1),
    key        bytea NOT NULL CHECK (length(key) = 32),
    created_at timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON TABLE {{schema}}.outbox_state_key FROM PUBLIC;
INSERT INTO {{schema}}.outbox_state_key (id, key)
VALUES (1, decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex'));

-- outbox_mcp_state_used records each approval request answered from the
-- host, by its id, before the answer is applied, in the same transaction:
-- a requestState (or a task's input request) is consumed once, on every
-- replica. A row outlives its state's expiry by a day, then is pruned.
CREATE TABLE {{schema}}.outbox_mcp_state_used (
    state_id   bytea PRIMARY KEY,
    intent_id  bigint NOT NULL,
    action     text NOT NULL,
    used_at    timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
REVOKE ALL ON TABLE {{schema}}.outbox_mcp_state_used FROM PUBLIC;
CREATE INDEX outbox_mcp_state_used_intent ON {{schema}}.outbox_mcp_state_used (intent_id);
CREATE INDEX outbox_mcp_state_used_expires ON {{schema}}.outbox_mcp_state_used (expires_at);
