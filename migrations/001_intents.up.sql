-- The intent table: one row per logical action, identified by
-- (namespace, key). It is the only thing a caller's transaction writes.
CREATE TABLE {{schema}}.outbox_intent (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- COLLATE "C": keys are compared byte for byte, which is both what
    -- identity means here and much cheaper in the unique index than a
    -- locale's collation.
    namespace        text        COLLATE "C" NOT NULL,
    key              text        COLLATE "C" NOT NULL,
    effect           text        COLLATE "C" NOT NULL,
    args             jsonb       NOT NULL,
    state            text        COLLATE "C" NOT NULL DEFAULT 'pending',
    -- attempt is the fencing token: every claim increments it, and every
    -- result write is conditional on it.
    attempt          integer     NOT NULL DEFAULT 0,
    lease_expires_at timestamptz,
    -- maybe_sent is sticky: once any attempt may have reached the provider,
    -- exhausting the attempts ends in 'unknown' instead of 'failed'.
    maybe_sent       boolean     NOT NULL DEFAULT false,
    result           jsonb,
    error            jsonb,
    provider_key     text        NOT NULL,
    requested_by     text,
    key_source       text        NOT NULL DEFAULT 'explicit',
    -- job_id is the River job the dispatcher created; NULL until dispatched.
    job_id           bigint,
    -- job_attempt is the River attempt of job_id that last recorded an
    -- outcome. A deduplicated effect is not claimed before its call, so a
    -- River attempt beyond job_attempt + 1 tells it an attempt was lost.
    job_attempt      integer     NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    completed_at     timestamptz,

    CONSTRAINT outbox_intent_namespace_key UNIQUE (namespace, key),
    CONSTRAINT outbox_intent_state_check CHECK (state IN ('pending', 'running', 'succeeded', 'failed', 'unknown', 'cancelled')),
    CONSTRAINT outbox_intent_key_source_check CHECK (key_source IN ('explicit', 'auto')),
    -- Written without bounded repetition ({1,255}): Postgres's regex engine
    -- expands it, and '^[!-~]{1,255}$' costs 25 us a row, more than the
    -- rest of the insert.
    CONSTRAINT outbox_intent_key_check CHECK (octet_length(key) BETWEEN 1 AND 255 AND key !~ '[^!-~]'),
    CONSTRAINT outbox_intent_namespace_check CHECK (octet_length(namespace) BETWEEN 1 AND 64 AND namespace !~ '[^!-~]'),
    CONSTRAINT outbox_intent_effect_check CHECK (octet_length(effect) BETWEEN 1 AND 64 AND effect !~ '[^a-z0-9_]' AND effect ~ '^[a-z]'),
    CONSTRAINT outbox_intent_args_check CHECK (jsonb_typeof(args) = 'object'),
    CONSTRAINT outbox_intent_requested_by_check CHECK (requested_by IS NULL OR length(requested_by) <= 255)
) WITH (fillfactor = 80);

-- The dispatcher's drain reads only intents that have no job yet. The index is
-- partial, so it holds only the few rows in flight and stays tiny however
-- large the table grows.
CREATE INDEX outbox_intent_undispatched ON {{schema}}.outbox_intent (id)
    WHERE job_id IS NULL AND state = 'pending';

-- Listing by namespace (newest first), optionally filtered by state.
CREATE INDEX outbox_intent_namespace_state ON {{schema}}.outbox_intent (namespace, state, id);

-- Pruning terminal intents past retention. Non-terminal intents are never in
-- this index, so they can never be pruned.
CREATE INDEX outbox_intent_prunable ON {{schema}}.outbox_intent (completed_at)
    WHERE state IN ('succeeded', 'failed', 'unknown', 'cancelled');

-- outbox_provider_key derives the key sent to providers from (namespace, key):
-- at most 64 characters, never the raw key (keys can carry personal data),
-- always the same for one intent, and different across namespaces. The NUL
-- separator cannot occur in text, so (namespace, key) pairs cannot collide by
-- concatenation.
CREATE FUNCTION {{schema}}.outbox_provider_key(p_namespace text, p_key text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT 'obx_' || rtrim(translate(encode(sha256(
        convert_to(p_namespace, 'UTF8') || '\x00'::bytea || convert_to(p_key, 'UTF8')
    ), 'base64'), '+/', '-_'), '=')
$$;

-- outbox_enqueue_try is the one statement behind every enqueue. It never
-- raises on a conflict, so that the Go library can report
-- idempotency_key_reused without aborting the caller's transaction; the public
-- enqueue() below raises instead, as SQL callers expect.
--
-- It runs as a VOLATILE plpgsql function on purpose: in READ COMMITTED every
-- statement inside takes a fresh snapshot. INSERT ... ON CONFLICT DO NOTHING
-- waits for a concurrent inserter of the same key to commit or roll back; when
-- it committed, the SELECT that follows (with its new snapshot) sees that row.
-- A single-statement CTE could not, because its snapshot predates the commit.
CREATE FUNCTION {{schema}}.outbox_enqueue_try(
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

-- enqueue is the SQL interface for services in any language: call it inside
-- your own transaction. It returns the intent and whether it was a duplicate,
-- and raises 'idempotency_key_reused: ...' (SQLSTATE OB001) on a conflict.
CREATE FUNCTION {{schema}}.enqueue(
    namespace    text,
    key          text,
    effect       text,
    args         jsonb,
    requested_by text DEFAULT NULL
) RETURNS TABLE (intent {{schema}}.outbox_intent, duplicate boolean)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    t record;
BEGIN
    SELECT * INTO t FROM {{schema}}.outbox_enqueue_try(enqueue.namespace, enqueue.key, enqueue.effect, enqueue.args, enqueue.requested_by, 'explicit');
    IF t.conflict THEN
        RAISE EXCEPTION USING
            ERRCODE = 'OB001',
            MESSAGE = format('idempotency_key_reused: key %s in namespace %s was first used for another action (effect %s)', (t.intent).key, (t.intent).namespace, (t.intent).effect),
            DETAIL = format('intent_id=%s', (t.intent).id);
    END IF;
    RETURN QUERY SELECT t.intent, t.duplicate;
END;
$$;

-- outbox_enqueue_many enqueues a batch atomically: every item is new or a
-- duplicate, or nothing of the batch is kept. On the first conflict it undoes
-- its own inserts (the exception block is a subtransaction, so the caller's
-- transaction stays usable) and returns only the conflicting intent, with
-- its 0-based position in ord.
CREATE FUNCTION {{schema}}.outbox_enqueue_many(
    p_namespace    text[],
    p_key          text[],
    p_effect       text[],
    p_args         jsonb[],
    p_requested_by text[],
    p_key_source   text[]
) RETURNS TABLE (ord integer, intent {{schema}}.outbox_intent, duplicate boolean, conflict boolean)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    n integer := coalesce(array_length(p_key, 1), 0);
    t record;
    res_ord integer[] := '{}';
    res_intent {{schema}}.outbox_intent[] := '{}';
    res_dup boolean[] := '{}';
BEGIN
    BEGIN
        FOR i IN 1..n LOOP
            SELECT * INTO t FROM {{schema}}.outbox_enqueue_try(p_namespace[i], p_key[i], p_effect[i], p_args[i], p_requested_by[i], p_key_source[i]);
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

-- intents_view is the stable face of the table for reporting tools: it leaves
-- out the dispatcher's bookkeeping, which may change between versions.
CREATE VIEW {{schema}}.intents_view AS
SELECT id, namespace, key, effect, args, state, attempt AS attempts, result, error,
       provider_key, requested_by, key_source, created_at, updated_at, completed_at
FROM {{schema}}.outbox_intent;

-- outbox_noop_effect is where the sandbox's noop effect records what it did,
-- outside any worker transaction, so that tests and benchmarks can count
-- effects the way a real provider would.
CREATE TABLE {{schema}}.outbox_noop_effect (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider_key text        NOT NULL,
    deduplicated boolean     NOT NULL,
    result       jsonb       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
-- A deduplicating provider performs one effect per provider key.
CREATE UNIQUE INDEX outbox_noop_effect_dedupe ON {{schema}}.outbox_noop_effect (provider_key) WHERE deduplicated;
CREATE INDEX outbox_noop_effect_provider_key ON {{schema}}.outbox_noop_effect (provider_key);
