-- Least privilege for services that enqueue through SQL. The enqueue
-- functions run as their owner (SECURITY DEFINER, with a fixed search_path so
-- that a caller's objects cannot stand in for ours), so a role needs only
-- EXECUTE on them: it can neither read other intents nor write the table,
-- such as a forged 'succeeded' row the API would then serve. PostgreSQL
-- grants EXECUTE to PUBLIC by default; that is revoked, so only roles given
-- it (outboxd migrate print-grants) may call them.
--
-- A role other than the owner (or a member of it), and without INSERT on the
-- table (such a role could insert anyway: outboxd's own, say), enqueues only
-- in the namespaces listed for it here ('*': every namespace). The role is the
-- session's login role (session_user): inside a SECURITY DEFINER function
-- that is the one name of the caller PostgreSQL keeps.
CREATE TABLE {{schema}}.outbox_namespace_grant (
    role_name name NOT NULL,
    namespace text COLLATE "C" NOT NULL,
    PRIMARY KEY (role_name, namespace)
);

CREATE FUNCTION {{schema}}.outbox_may_enqueue(p_namespace text) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT pg_has_role(session_user, current_user, 'MEMBER')
        OR has_table_privilege(session_user, '{{schema}}.outbox_intent', 'INSERT')
        OR EXISTS (SELECT 1 FROM {{schema}}.outbox_namespace_grant g
                   WHERE g.role_name = session_user AND g.namespace IN (p_namespace, '*'))
$$;

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
ALTER FUNCTION {{schema}}.enqueue(text, text, text, jsonb, text)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION {{schema}}.outbox_enqueue_many(text[], text[], text[], jsonb[], text[], text[])
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

REVOKE EXECUTE ON FUNCTION
    {{schema}}.outbox_may_enqueue(text),
    {{schema}}.outbox_enqueue_try(text, text, text, jsonb, text, text),
    {{schema}}.enqueue(text, text, text, jsonb, text),
    {{schema}}.outbox_enqueue_many(text[], text[], text[], jsonb[], text[], text[])
FROM PUBLIC;
