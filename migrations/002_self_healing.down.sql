-- Back to the provider key of (namespace, key) alone for new intents.
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
        INSERT INTO {{schema}}.outbox_intent (namespace, key, effect, args, provider_key, requested_by, key_source)
        VALUES (p_namespace, p_key, p_effect, p_args, {{schema}}.outbox_provider_key(p_namespace, p_key), p_requested_by, coalesce(p_key_source, 'explicit'))
        ON CONFLICT (namespace, key) DO NOTHING
        RETURNING * INTO r;
        IF FOUND THEN
            -- Wake the dispatcher's drain. The notification is delivered at
            -- commit, and only if the caller commits.
            --
            -- A transaction that notifies holds a database-wide lock from
            -- its commit until the commit is durable, so notifying commits
            -- are flushed one at a time instead of in groups: at a few
            -- thousand enqueues a second that would multiply the caller's
            -- commit time. So a session notifies at most once a second
            -- (the time is kept in a session setting, which a rollback
            -- undoes along with the notification). An enqueue that skips
            -- its notification is still seen at once: the drain woken by
            -- the session's previous notification keeps polling every few
            -- milliseconds for longer than that window (see package
            -- dispatcher), and a slow poll covers the rest.
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
            -- "Same action" is jsonb equality: key order, white space,
            -- escapes and 1 vs 1.0 vs 1e0 do not matter.
            RETURN QUERY SELECT r, true, NOT (r.effect = p_effect AND r.args = p_args);
            RETURN;
        END IF;
        -- The conflicting row was pruned between the two statements: the key
        -- is free again, so try the insert once more.
    END LOOP;
END;
$$;

ALTER TABLE {{schema}}.outbox_intent ALTER COLUMN provider_key DROP DEFAULT;
DROP TRIGGER outbox_intent_provider_key ON {{schema}}.outbox_intent;
DROP FUNCTION {{schema}}.outbox_intent_set_provider_key();
DROP FUNCTION {{schema}}.outbox_provider_key(text, text, bigint);

DROP INDEX {{schema}}.outbox_intent_prunable;
CREATE INDEX outbox_intent_prunable ON {{schema}}.outbox_intent (completed_at)
    WHERE state IN ('succeeded', 'failed', 'unknown', 'cancelled');
