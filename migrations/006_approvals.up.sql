-- Approvals (docs/approvals.md): an intent that a rule in
-- outbox_approval_rule matches, or whose caller asked for it, is recorded as
-- awaiting_approval instead of pending. It has no River job until an
-- operator approves it with the hash of its arguments.
ALTER TABLE {{schema}}.outbox_intent DROP CONSTRAINT outbox_intent_state_check;
ALTER TABLE {{schema}}.outbox_intent ADD CONSTRAINT outbox_intent_state_check
    CHECK (state IN ('awaiting_approval', 'pending', 'running', 'succeeded', 'failed', 'unknown', 'cancelled'));

-- approval_rule is the rule that matched as written, or 'requested' when the
-- caller asked. The decision is recorded on the intent itself, so the record
-- lives and is pruned with it. approval_notified_at is set once the
-- approval webhook's job is inserted, so each intent is announced once.
ALTER TABLE {{schema}}.outbox_intent
    ADD COLUMN approval_rule        text,
    ADD COLUMN approved_by          text,
    ADD COLUMN approved_at          timestamptz,
    ADD COLUMN denied_by            text,
    ADD COLUMN denied_at            timestamptz,
    ADD COLUMN approval_note        text,
    ADD COLUMN approval_notified_at timestamptz;

-- The approval queue: expiry reads it by age, the webhook's announcer reads
-- the part not yet announced. Partial, so it holds only the intents waiting
-- for a person.
CREATE INDEX outbox_intent_awaiting_approval ON {{schema}}.outbox_intent (created_at)
    WHERE state = 'awaiting_approval';

-- The rules in force, written by outboxd serve from OUTBOX_APPROVAL (or by
-- outbox.Client.SetApprovalRules) and read by the insert trigger, so that
-- every way an intent is inserted obeys them: the Go library, the SQL
-- functions, a hand-written INSERT. A rule is an effect alone (every intent
-- of it), or an effect and one comparison of a top-level argument with a
-- value; num is the value when it is a JSON number, compared as a number.
CREATE TABLE {{schema}}.outbox_approval_rule (
    position integer PRIMARY KEY,
    rule     text NOT NULL,
    effect   text COLLATE "C" NOT NULL,
    arg      text COLLATE "C",
    op       text COLLATE "C" CHECK (op IN ('=', '!=', '>', '>=', '<', '<=')),
    value    text COLLATE "C",
    num      numeric,
    CHECK ((arg IS NULL) = (op IS NULL) AND (op IS NULL) = (value IS NULL)),
    CHECK (num IS NOT NULL OR op IS NULL OR op IN ('=', '!='))
);

-- outbox_approval_matches reports whether one rule holds for args. An
-- argument that is missing, null, or not a number under a numeric rule
-- matches: a brake must not be released by leaving out, or misspelling the
-- type of, what it checks.
CREATE FUNCTION {{schema}}.outbox_approval_matches(
    p_arg text, p_op text, p_value text, p_num numeric, p_args jsonb
) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v  jsonb := p_args -> p_arg;
    n  numeric;
    t  text;
BEGIN
    IF p_arg IS NULL THEN
        RETURN true;
    END IF;
    IF v IS NULL OR jsonb_typeof(v) = 'null' THEN
        RETURN true;
    END IF;
    IF p_num IS NOT NULL THEN
        IF jsonb_typeof(v) <> 'number' THEN
            RETURN true;
        END IF;
        n := v::numeric;
        RETURN CASE p_op
            WHEN '='  THEN n = p_num
            WHEN '!=' THEN n <> p_num
            WHEN '>'  THEN n > p_num
            WHEN '>=' THEN n >= p_num
            WHEN '<'  THEN n < p_num
            WHEN '<=' THEN n <= p_num
        END;
    END IF;
    -- A string rule compares a string argument's content, and any other
    -- JSON value by its text.
    t := CASE WHEN jsonb_typeof(v) = 'string' THEN v #>> '{}' ELSE v::text END;
    RETURN CASE p_op
        WHEN '='  THEN t = p_value
        WHEN '!=' THEN t <> p_value
    END;
END;
$$;

-- The insert trigger now sets the provider key (as before) and applies the
-- approval rules to an intent inserted as pending. One trigger, so an
-- insert pays one plpgsql call; the rule lookup reads a table of a few
-- rows.
CREATE FUNCTION {{schema}}.outbox_intent_before_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.provider_key := {{schema}}.outbox_provider_key(NEW.namespace, NEW.key, NEW.id);
    IF NEW.state = 'awaiting_approval' THEN
        NEW.approval_rule := coalesce(NEW.approval_rule, 'requested');
    ELSIF NEW.state = 'pending' THEN
        -- One SELECT INTO rather than a loop over the rules: a loop opens a
        -- cursor per insert, which cost more than the rest of the trigger.
        SELECT r.rule INTO NEW.approval_rule FROM {{schema}}.outbox_approval_rule r
        WHERE r.effect = NEW.effect AND {{schema}}.outbox_approval_matches(r.arg, r.op, r.value, r.num, NEW.args)
        ORDER BY r.position
        LIMIT 1;
        IF NEW.approval_rule IS NOT NULL THEN
            NEW.state := 'awaiting_approval';
        END IF;
    END IF;
    RETURN NEW;
END;
$$;

DROP TRIGGER outbox_intent_provider_key ON {{schema}}.outbox_intent;
CREATE TRIGGER outbox_intent_before_insert BEFORE INSERT ON {{schema}}.outbox_intent
    FOR EACH ROW EXECUTE FUNCTION {{schema}}.outbox_intent_before_insert();

-- The enqueue functions gain a variant that asks for approval. The old
-- signatures stay (granted roles keep calling them) and call the new ones.
CREATE FUNCTION {{schema}}.outbox_enqueue_try(
    p_namespace        text,
    p_key              text,
    p_effect           text,
    p_args             jsonb,
    p_requested_by     text,
    p_key_source       text,
    p_require_approval boolean
) RETURNS TABLE (intent {{schema}}.outbox_intent, duplicate boolean, conflict boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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
        INSERT INTO {{schema}}.outbox_intent (namespace, key, effect, args, requested_by, key_source, state)
        VALUES (p_namespace, p_key, p_effect, p_args, p_requested_by, coalesce(p_key_source, 'explicit'),
                CASE WHEN p_require_approval THEN 'awaiting_approval' ELSE 'pending' END)
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

CREATE OR REPLACE FUNCTION {{schema}}.outbox_enqueue_try(
    p_namespace    text,
    p_key          text,
    p_effect       text,
    p_args         jsonb,
    p_requested_by text DEFAULT NULL,
    p_key_source   text DEFAULT 'explicit'
) RETURNS TABLE (intent {{schema}}.outbox_intent, duplicate boolean, conflict boolean)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT * FROM {{schema}}.outbox_enqueue_try(p_namespace, p_key, p_effect, p_args, p_requested_by, p_key_source, false)
$$;

-- enqueue with require_approval: the SQL interface's way to ask a person
-- first, for example enqueue('shop', 'order-1', 'charge', '{...}', NULL, true).
CREATE FUNCTION {{schema}}.enqueue(
    namespace        text,
    key              text,
    effect           text,
    args             jsonb,
    requested_by     text,
    require_approval boolean
) RETURNS TABLE (intent {{schema}}.outbox_intent, duplicate boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t record;
BEGIN
    SELECT * INTO t FROM {{schema}}.outbox_enqueue_try(enqueue.namespace, enqueue.key, enqueue.effect, enqueue.args,
                                                       enqueue.requested_by, 'explicit', coalesce(enqueue.require_approval, false));
    IF t.conflict THEN
        RAISE EXCEPTION USING
            ERRCODE = 'OB001',
            MESSAGE = format('idempotency_key_reused: key %s in namespace %s was first used for another action (effect %s)', (t.intent).key, (t.intent).namespace, (t.intent).effect),
            DETAIL = format('intent_id=%s', (t.intent).id);
    END IF;
    RETURN QUERY SELECT t.intent, t.duplicate;
END;
$$;

CREATE FUNCTION {{schema}}.outbox_enqueue_many(
    p_namespace        text[],
    p_key              text[],
    p_effect           text[],
    p_args             jsonb[],
    p_requested_by     text[],
    p_key_source       text[],
    p_require_approval boolean[]
) RETURNS TABLE (ord integer, intent {{schema}}.outbox_intent, duplicate boolean, conflict boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    n integer := coalesce(array_length(p_key, 1), 0);
    t record;
    res_ord integer[] := '{}';
    res_intent {{schema}}.outbox_intent[] := '{}';
    res_dup boolean[] := '{}';
BEGIN
    BEGIN
        FOR i IN 1..n LOOP
            SELECT * INTO t FROM {{schema}}.outbox_enqueue_try(p_namespace[i], p_key[i], p_effect[i], p_args[i],
                                                               p_requested_by[i], p_key_source[i], coalesce(p_require_approval[i], false));
            IF t.conflict THEN
                ord := i - 1; intent := t.intent; duplicate := true; conflict := true;
                RAISE EXCEPTION USING ERRCODE = 'OB001', MESSAGE = 'idempotency_key_reused';
            END IF;
            res_ord := res_ord || (i - 1);
            res_intent := res_intent || t.intent;
            res_dup := res_dup || t.duplicate;
        END LOOP;
    EXCEPTION WHEN SQLSTATE 'OB001' THEN
        RETURN NEXT;
        RETURN;
    END;
    -- Returned only now: rows returned inside the block would survive its
    -- rollback.
    FOR j IN 1..coalesce(array_length(res_ord, 1), 0) LOOP
        ord := res_ord[j]; intent := res_intent[j]; duplicate := res_dup[j]; conflict := false;
        RETURN NEXT;
    END LOOP;
END;
$$;

REVOKE EXECUTE ON FUNCTION
    {{schema}}.outbox_enqueue_try(text, text, text, jsonb, text, text, boolean),
    {{schema}}.enqueue(text, text, text, jsonb, text, boolean),
    {{schema}}.outbox_enqueue_many(text[], text[], text[], jsonb[], text[], text[], boolean[])
FROM PUBLIC;
