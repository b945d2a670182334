-- A cheaper insert (docs/design.md, "Batch enqueue"). The insert trigger of
-- 006 cost about 10 us a row, a third of a batch insert's statement: it
-- called outbox_provider_key, which PostgreSQL does not inline (convert_to
-- is only stable, the function immutable), and it looked the approval rules
-- up with a query for every intent, whether or not any rule names its
-- effect. Neither changes what is enforced: every way a row is inserted
-- still gets the derived provider key and obeys the rules. Needs
-- PostgreSQL 14 or later (CREATE OR REPLACE TRIGGER).

-- 1. The provider key, written out: the same derivation as
-- outbox_provider_key (which stays, for tools and tests), without the call.
-- The rules leave this trigger for the next one, which fires first (the
-- triggers of one event fire in the order of their names).
CREATE OR REPLACE FUNCTION {{schema}}.outbox_intent_before_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.provider_key := 'obx_' || rtrim(translate(encode(sha256(
        convert_to(NEW.namespace, 'UTF8') || '\x00'::bytea || convert_to(NEW.key, 'UTF8')
        || '\x00'::bytea || convert_to(NEW.id::text, 'UTF8')
    ), 'base64'), '+/', '-_'), '=');
    IF NEW.state = 'awaiting_approval' THEN
        NEW.approval_rule := coalesce(NEW.approval_rule, 'requested');
    ELSIF NEW.state = 'pending' THEN
        -- Only a rule (the trigger before this one) or the caller's
        -- request names one.
        NEW.approval_rule := NULL;
    END IF;
    RETURN NEW;
END;
$$;

-- 2. The rules, compiled into a trigger of their own. Its WHEN clause
-- lists the effects the rules name, evaluated without a plpgsql call or a
-- query, so an intent of any other effect pays nothing for approvals; its
-- arguments are the rules themselves, six per rule (rule, effect, arg, op,
-- value, num; each nullable field as '' for NULL or 'v' and its text), so
-- that it reads no table. An inserter therefore needs no privilege on the
-- rules, and every inserter sees one consistent set: the trigger's, from
-- the catalog, whatever its transaction's snapshot.
CREATE FUNCTION {{schema}}.outbox_trigger_arg(p text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE WHEN p = '' THEN NULL ELSE substr(p, 2) END
$$;

CREATE FUNCTION {{schema}}.outbox_intent_apply_approval_rules() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 0 .. TG_NARGS - 1 BY 6 LOOP
        IF TG_ARGV[i + 1] = NEW.effect AND {{schema}}.outbox_approval_matches(
            {{schema}}.outbox_trigger_arg(TG_ARGV[i + 2]), {{schema}}.outbox_trigger_arg(TG_ARGV[i + 3]),
            {{schema}}.outbox_trigger_arg(TG_ARGV[i + 4]), {{schema}}.outbox_trigger_arg(TG_ARGV[i + 5])::numeric,
            NEW.args) THEN
            NEW.approval_rule := TG_ARGV[i];
            NEW.state := 'awaiting_approval';
            RETURN NEW;
        END IF;
    END LOOP;
    RETURN NEW;
END;
$$;

-- outbox_approval_compile compiles the rules table into that trigger, in
-- position order (WHEN (false), no arguments, when there is no rule).
-- CREATE OR REPLACE TRIGGER takes a SHARE ROW EXCLUSIVE lock on the intent
-- table: writes to it wait until the transaction ends, reads do not. So it
-- runs only when the rules changed (the compiled arguments are kept in the
-- trigger's comment), not when serve starts with the rules in force.
CREATE FUNCTION {{schema}}.outbox_approval_compile() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_args    text;
    v_effects text;
    v_current text;
BEGIN
    SELECT string_agg(format('%L, %L, %L, %L, %L, %L', r.rule, r.effect,
               coalesce('v' || r.arg, ''), coalesce('v' || r.op, ''), coalesce('v' || r.value, ''), coalesce('v' || r.num::text, '')),
               ', ' ORDER BY r.position)
    INTO v_args FROM {{schema}}.outbox_approval_rule r;
    SELECT string_agg(DISTINCT quote_literal(r.effect), ', ' ORDER BY quote_literal(r.effect))
    INTO v_effects FROM {{schema}}.outbox_approval_rule r;

    SELECT obj_description(t.oid, 'pg_trigger') INTO v_current FROM pg_trigger t
    WHERE t.tgrelid = '{{schema}}.outbox_intent'::regclass AND t.tgname = 'outbox_intent_approval_rules';
    IF FOUND AND v_current IS NOT DISTINCT FROM v_args THEN
        RETURN;
    END IF;
    EXECUTE format('CREATE OR REPLACE TRIGGER outbox_intent_approval_rules BEFORE INSERT ON {{schema}}.outbox_intent'
        ' FOR EACH ROW WHEN (%s) EXECUTE FUNCTION {{schema}}.outbox_intent_apply_approval_rules(%s)',
        CASE WHEN v_effects IS NULL THEN 'false' ELSE format('NEW.state = %L AND NEW.effect IN (%s)', 'pending', v_effects) END,
        coalesce(v_args, ''));
    EXECUTE format('COMMENT ON TRIGGER outbox_intent_approval_rules ON {{schema}}.outbox_intent IS %L', v_args);
END;
$$;
REVOKE EXECUTE ON FUNCTION {{schema}}.outbox_approval_compile() FROM PUBLIC;

-- outbox_approval_sync_trigger compiles the rules for a transaction that
-- changed them. It waits at most 10 s for its locks (the transactions
-- writing intents at that moment; writes that come later queue behind it
-- meanwhile) before the rules' change fails as a whole. Two transactions
-- changing rules at once are serialized by an advisory lock, each reading
-- the rules after the other committed; that needs READ COMMITTED (a fresh
-- snapshot per statement), so other levels are refused. It runs as its
-- owner, so that a role allowed to write the rules need not own the intent
-- table; only the owner may call it, or attach the trigger function below.
CREATE FUNCTION {{schema}}.outbox_approval_sync_trigger() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET lock_timeout = '10s' AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION USING
            ERRCODE = '25001',
            MESSAGE = 'outbox: change the approval rules in a READ COMMITTED transaction, so that the trigger applying them is built from the rules committed last';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('outbox_approval_sync'), '{{schema}}.outbox_approval_rule'::regclass::oid::integer);
    PERFORM {{schema}}.outbox_approval_compile();
END;
$$;
REVOKE EXECUTE ON FUNCTION {{schema}}.outbox_approval_sync_trigger() FROM PUBLIC;

-- Any write to the rules, by outbox.Client.SetApprovalRules or by hand,
-- compiles them when its transaction commits: deferred, so that a
-- replacement (delete all, insert the new) is judged by its end state, and
-- in the same transaction, so that the rules and the trigger change
-- together. TRUNCATE fires no row trigger, hence the statement one.
CREATE FUNCTION {{schema}}.outbox_approval_rule_changed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM {{schema}}.outbox_approval_sync_trigger();
    RETURN NULL;
END;
$$;

CREATE CONSTRAINT TRIGGER outbox_approval_rule_changed
    AFTER INSERT OR UPDATE OR DELETE ON {{schema}}.outbox_approval_rule
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION {{schema}}.outbox_approval_rule_changed();
CREATE TRIGGER outbox_approval_rule_truncated
    AFTER TRUNCATE ON {{schema}}.outbox_approval_rule
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.outbox_approval_rule_changed();
-- A trigger function can be attached by anyone allowed to execute it, to a
-- temporary table of their own: this one runs as its owner.
REVOKE EXECUTE ON FUNCTION {{schema}}.outbox_approval_rule_changed() FROM PUBLIC;

-- The rules already stored. The migration runs under the migrator's lock,
-- at whatever isolation level the server defaults to.
SELECT {{schema}}.outbox_approval_compile();
