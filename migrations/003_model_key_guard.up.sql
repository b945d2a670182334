-- An intent recorded under a model's fresh key although the same action was
-- recorded moments before under another key is refused, unless the model
-- confirms it is a new action; the intent then says so.
ALTER TABLE {{schema}}.outbox_intent DROP CONSTRAINT outbox_intent_key_source_check;
ALTER TABLE {{schema}}.outbox_intent ADD CONSTRAINT outbox_intent_key_source_check
    CHECK (key_source IN ('explicit', 'auto', 'model_confirmed'));

-- The last key each action (namespace, effect, canonical arguments) was
-- recorded under by an agent (MCP, or HTTP with Idempotency-Key-Source:
-- model), for the model-key guard. Only agents' enqueues write it, so the
-- services' enqueue path pays nothing; the prune job deletes old rows.
CREATE TABLE {{schema}}.outbox_recent_action (
    namespace   text        COLLATE "C" NOT NULL,
    effect      text        COLLATE "C" NOT NULL,
    args_sha256 bytea       NOT NULL,
    key         text        COLLATE "C" NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, effect, args_sha256)
);
