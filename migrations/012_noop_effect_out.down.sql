-- The table as migration 001 created it.
CREATE TABLE IF NOT EXISTS {{schema}}.outbox_noop_effect (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider_key text        NOT NULL,
    deduplicated boolean     NOT NULL,
    result       jsonb       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX IF NOT EXISTS outbox_noop_effect_dedupe ON {{schema}}.outbox_noop_effect (provider_key) WHERE deduplicated;
CREATE INDEX IF NOT EXISTS outbox_noop_effect_provider_key ON {{schema}}.outbox_noop_effect (provider_key);
