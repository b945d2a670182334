-- Unknown intents are never pruned: an unresolved intent must stay in the
-- operator's queue, and pruning it would free its key, so that an agent's
-- retry would send a possibly duplicate at-most-once effect. Once resolved,
-- an intent ages out from its resolution (Resolve sets completed_at).
DROP INDEX {{schema}}.outbox_intent_prunable;
CREATE INDEX outbox_intent_prunable ON {{schema}}.outbox_intent (completed_at)
    WHERE state IN ('succeeded', 'failed', 'cancelled');

-- The provider key is derived from the intent's own identity too: (namespace,
-- key, id). Every retry of one intent sends the same key, as before; but a
-- key enqueued again after its intent was pruned is a new action, and must
-- not send the old provider key, which a provider that still remembers it
-- (Stripe, 24 h) would answer with the old result, silently not acting.
-- Existing rows keep the keys they were created with.
CREATE FUNCTION {{schema}}.outbox_provider_key(p_namespace text, p_key text, p_id bigint) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT 'obx_' || rtrim(translate(encode(sha256(
        convert_to(p_namespace, 'UTF8') || '\x00'::bytea || convert_to(p_key, 'UTF8')
        || '\x00'::bytea || convert_to(p_id::text, 'UTF8')
    ), 'base64'), '+/', '-_'), '=')
$$;

-- The id is known only once the row is being inserted, so a trigger sets
-- the key, for every way a row is inserted (the Go library's statement, the
-- SQL functions, a hand-written INSERT).
CREATE FUNCTION {{schema}}.outbox_intent_set_provider_key() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.provider_key := {{schema}}.outbox_provider_key(NEW.namespace, NEW.key, NEW.id);
    RETURN NEW;
END;
$$;

CREATE TRIGGER outbox_intent_provider_key BEFORE INSERT ON {{schema}}.outbox_intent
    FOR EACH ROW EXECUTE FUNCTION {{schema}}.outbox_intent_set_provider_key();

-- The trigger sets it: inserts need not (and the old two-argument function
-- no longer names what is sent).
ALTER TABLE {{schema}}.outbox_intent ALTER COLUMN provider_key SET DEFAULT '';

CREATE OR REPLACE FUNCTION {{schema}}.outbox_enqueue_try(
    p_namespace    text,
    p_key          text,
    p_effect       text,
    p_args         jsonb,
    p_requested_by text DEFAULT NULL,
    p_key_source   text DEFAULT 'explicit'
) RETURNS TABLE (intent {{schema}}.outbox_intent, duplicate boolean, conflict boolean)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    r      {{schema}}.outbox_intent;
    v_last text;
BEGIN
    LOOP
        INSERT INTO {{schema}}.outbox_intent (namespace, key, effect, args, requested_by, key_source)
        VALUES (p_namespace, p_key, p_effect, p_args, p_requested_by, coalesce(p_key_source, 'explicit'))
        ON CONFLICT (namespace, key) DO NOTHING
        RETURNING * INTO r;
        IF FOUND THEN
            -- Wake the dispatcher's drain, at most once per notify window
            -- per session (see 001_intents.up.sql).
            v_last := current_setting('{{guc_notified}}', true);
            IF v_last IS NULL OR v_last = '' OR clock_timestamp() - v_last::timestamptz >= interval '{{notify_window}}' THEN
                PERFORM pg_notify('{{channel_pending}}', '');
                PERFORM set_config('{{guc_notified}}', clock_timestamp()::text, false);
            END IF;
            RETURN QUERY SELECT r, false, false;
            RETURN;
        END IF;

        SELECT * INTO r FROM {{schema}}.outbox_intent i WHERE i.namespace = p_namespace AND i.key = p_key;
        IF FOUND THEN
            RETURN QUERY SELECT r, true, NOT (r.effect = p_effect AND r.args = p_args);
            RETURN;
        END IF;
        -- The conflicting row was pruned between the two statements: the key
        -- is free again, so try the insert once more.
    END LOOP;
END;
$$;
