GRANT EXECUTE ON FUNCTION
    {{schema}}.outbox_enqueue_try(text, text, text, jsonb, text, text),
    {{schema}}.enqueue(text, text, text, jsonb, text),
    {{schema}}.outbox_enqueue_many(text[], text[], text[], jsonb[], text[], text[])
TO PUBLIC;
ALTER FUNCTION {{schema}}.outbox_enqueue_try(text, text, text, jsonb, text, text) SECURITY INVOKER RESET search_path;
ALTER FUNCTION {{schema}}.enqueue(text, text, text, jsonb, text) SECURITY INVOKER RESET search_path;
ALTER FUNCTION {{schema}}.outbox_enqueue_many(text[], text[], text[], jsonb[], text[], text[]) SECURITY INVOKER RESET search_path;

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

DROP FUNCTION IF EXISTS {{schema}}.outbox_may_enqueue(text);
DROP TABLE IF EXISTS {{schema}}.outbox_namespace_grant;
