DROP TABLE IF EXISTS {{schema}}.outbox_noop_effect;
DROP VIEW IF EXISTS {{schema}}.intents_view;
DROP FUNCTION IF EXISTS {{schema}}.outbox_enqueue_many(text[], text[], text[], jsonb[], text[], text[]);
DROP FUNCTION IF EXISTS {{schema}}.enqueue(text, text, text, jsonb, text);
DROP FUNCTION IF EXISTS {{schema}}.outbox_enqueue_try(text, text, text, jsonb, text, text);
DROP FUNCTION IF EXISTS {{schema}}.outbox_provider_key(text, text);
DROP TABLE IF EXISTS {{schema}}.outbox_intent;
