-- A cheaper insert (docs/design.md, "Batch enqueue"). The insert trigger of
-- 006 cost about 10 us a row, a third of a batch insert's statement: it
-- called outbox_provider_key, which PostgreSQL does not inline (convert_to
-- is only stable, the function immutable), and it looked the approval rules
-- up with a query for every intent, whether or not any rule names its
-- effect. Neither changes what is enforced: every way a row is inserted
-- still gets the derived provider key and obeys the rules.

-- 1. The provider key, written out: the same derivation as
-- outbox_provider_key (which stays, for tools and tests), without the call.
-- The rules left this trigger for the next one.
CREATE OR REPLACE FUNCTION {{schema}}.outbox_intent_before_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.provider_key := 'obx_' || rtrim(translate(encode(sha256(
        convert_to(NEW.namespace, 'UTF8') || '\x00'::bytea || convert_to(NEW.key, 'UTF8')
        || '\x00'::bytea || convert_to(NEW.id::text, 'UTF8')
    ), 'base64'), '+/', '-_'), '=');
    IF NEW.state = 'awaiting_approval' THEN
        NEW.approval_rule := coalesce(NEW.approval_rule, 'requested');
    END IF;
    RETURN NEW;
END;
$$;

-- 2. The rules, in a trigger of their own that fires only for a pending
-- intent of an effect some rule names: its WHEN clause lists those effects
-- and is evaluated without a plpgsql call or a query. An intent of any
-- other effect pays nothing for approvals.
CREATE FUNCTION {{schema}}.outbox_intent_apply_approval_rules() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    SELECT r.rule INTO NEW.approval_rule FROM {{schema}}.outbox_approval_rule r
    WHERE r.effect = NEW.effect AND {{schema}}.outbox_approval_matches(r.arg, r.op, r.value, r.num, NEW.args)
    ORDER BY r.position
    LIMIT 1;
    IF NEW.approval_rule IS NOT NULL THEN
        NEW.state := 'awaiting_approval';
    END IF;
    RETURN NEW;
END;
$$;

-- outbox_approval_sync_trigger makes that trigger match the rules table:
-- absent when no rule exists, else listing the effects the rules name
-- (recorded in the trigger's comment, so that an unchanged set is left
-- alone). Changing a trigger locks the intent table against inserts until
-- the transaction ends, so it is done only when the set of effects
-- changes, not when serve starts with the rules already in force; and it
-- waits at most 10 s for the transactions inserting now to end rather than
-- queue every later insert behind it. It runs as its owner, so that a role
-- allowed to write the rules need not own the intent table.
CREATE FUNCTION {{schema}}.outbox_approval_sync_trigger() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET lock_timeout = '10s' AS $$
DECLARE
    v_effects text;
    v_oid     oid;
BEGIN
    SELECT string_agg(DISTINCT quote_literal(r.effect), ', ' ORDER BY quote_literal(r.effect)) INTO v_effects
    FROM {{schema}}.outbox_approval_rule r;
    SELECT t.oid INTO v_oid FROM pg_trigger t
    WHERE t.tgrelid = '{{schema}}.outbox_intent'::regclass AND t.tgname = 'outbox_intent_approval_rules';
    IF v_oid IS NULL AND v_effects IS NULL THEN
        RETURN;
    END IF;
    IF v_oid IS NOT NULL AND obj_description(v_oid, 'pg_trigger') IS NOT DISTINCT FROM v_effects THEN
        RETURN;
    END IF;
    IF v_oid IS NOT NULL THEN
        DROP TRIGGER outbox_intent_approval_rules ON {{schema}}.outbox_intent;
    END IF;
    IF v_effects IS NOT NULL THEN
        EXECUTE format('CREATE TRIGGER outbox_intent_approval_rules BEFORE INSERT ON {{schema}}.outbox_intent'
            ' FOR EACH ROW WHEN (NEW.state = %L AND NEW.effect IN (%s))'
            ' EXECUTE FUNCTION {{schema}}.outbox_intent_apply_approval_rules()', 'pending', v_effects);
        EXECUTE format('COMMENT ON TRIGGER outbox_intent_approval_rules ON {{schema}}.outbox_intent IS %L', v_effects);
    END IF;
END;
$$;

-- Any write to the rules, by outbox.Client.SetApprovalRules or by hand,
-- syncs the trigger when its transaction commits: deferred, so that a
-- replacement (delete all, insert the new) is judged by its end state, and
-- in the same transaction, so that the rules and the trigger change
-- together. TRUNCATE fires no row trigger, hence the statement one.
CREATE FUNCTION {{schema}}.outbox_approval_rule_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
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

-- The rules already stored.
SELECT {{schema}}.outbox_approval_sync_trigger();
