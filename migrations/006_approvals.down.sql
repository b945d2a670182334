-- Intents still waiting for a person cannot be represented without the
-- approval columns: they end cancelled, as an expiry would.
UPDATE {{schema}}.outbox_intent
SET state = 'cancelled', completed_at = now(), updated_at = now(),
    error = jsonb_build_object('code', 'approval_expired', 'message', 'approvals were removed (migration 006 reverted)')
WHERE state = 'awaiting_approval';

-- The six-argument enqueue_try becomes the function 005 made it again,
-- before the seven-argument one it now calls is dropped.
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
    IF NOT {{schema}}.outbox_may_enqueue(p_namespace) THEN
        RAISE EXCEPTION USING
            ERRCODE = '42501',
            MESSAGE = format('outbox: role %s may not enqueue in namespace %s (see outbox_namespace_grant)', session_user, p_namespace);
    END IF;
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
ALTER FUNCTION {{schema}}.outbox_enqueue_try(text, text, text, jsonb, text, text)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

DROP FUNCTION {{schema}}.outbox_enqueue_many(text[], text[], text[], jsonb[], text[], text[], boolean[]);
DROP FUNCTION {{schema}}.enqueue(text, text, text, jsonb, text, boolean);
DROP FUNCTION {{schema}}.outbox_enqueue_try(text, text, text, jsonb, text, text, boolean);

DROP TRIGGER outbox_intent_before_insert ON {{schema}}.outbox_intent;
CREATE TRIGGER outbox_intent_provider_key BEFORE INSERT ON {{schema}}.outbox_intent
    FOR EACH ROW EXECUTE FUNCTION {{schema}}.outbox_intent_set_provider_key();
DROP FUNCTION {{schema}}.outbox_intent_before_insert();
DROP FUNCTION {{schema}}.outbox_approval_matches(text, text, text, numeric, jsonb);
DROP TABLE {{schema}}.outbox_approval_rule;

DROP INDEX {{schema}}.outbox_intent_awaiting_approval;
ALTER TABLE {{schema}}.outbox_intent
    DROP COLUMN approval_rule,
    DROP COLUMN approved_by,
    DROP COLUMN approved_at,
    DROP COLUMN denied_by,
    DROP COLUMN denied_at,
    DROP COLUMN approval_note,
    DROP COLUMN approval_notified_at;
ALTER TABLE {{schema}}.outbox_intent DROP CONSTRAINT outbox_intent_state_check;
ALTER TABLE {{schema}}.outbox_intent ADD CONSTRAINT outbox_intent_state_check
    CHECK (state IN ('pending', 'running', 'succeeded', 'failed', 'unknown', 'cancelled'));
