-- The row checks move from CHECK constraints into the insert trigger
-- (docs/design.md, "The enqueue's checks"). PostgreSQL prepares a table's
-- CHECK constraints again for every statement that writes it (it reads each
-- constraint's stored expression and plans it), which cost about 45 us of
-- an enqueue of about 115: 40% of a single insert's statement. A plpgsql
-- trigger keeps its plans for the session. What is enforced does not
-- change for writes that fire the triggers (below): every insert, and every
-- update that names one of these columns, is checked against the same
-- expressions, and a violation is still SQLSTATE 23514 naming the same
-- constraint. The state's check stays a
-- constraint: every update of an intent sets its state, and a trigger on
-- those would cost more than the constraint.
--
-- What a constraint did and a trigger does not: it checks the row at its
-- place among the table's BEFORE triggers (by name), so a trigger of your
-- own named after it that changes these columns is not checked; triggers
-- do not fire for a session in session_replication_role = replica
-- (logical replication's apply, pg_restore --disable-triggers); and it
-- resolves functions and operators with the writer's search_path, as the
-- provider key's derivation always has (a SET search_path on the function
-- would cost a batch about a quarter more a row). These guard the table
-- against mistakes by writers trusted with INSERT, who can write any row
-- (a succeeded one included) anyway; restricted roles enqueue through the
-- SECURITY DEFINER functions, whose search_path is fixed.
ALTER TABLE {{schema}}.outbox_intent
    DROP CONSTRAINT outbox_intent_namespace_check,
    DROP CONSTRAINT outbox_intent_key_check,
    DROP CONSTRAINT outbox_intent_effect_check,
    DROP CONSTRAINT outbox_intent_args_check,
    DROP CONSTRAINT outbox_intent_key_source_check,
    DROP CONSTRAINT outbox_intent_requested_by_check;

-- One function for both triggers: on insert it checks the row, then sets
-- the provider key and the approval rule as in 007; on update it checks the
-- row only. Each check is the dropped constraint's expression, and passes
-- when it is NULL, as a CHECK does (NOT NULL is the columns' own
-- constraint). The error names the constraint but, unlike PostgreSQL's,
-- not the row, whose arguments can carry personal data.
CREATE OR REPLACE FUNCTION {{schema}}.outbox_intent_before_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_failed text;
BEGIN
    -- One expression for the usual case, a valid row; which check failed
    -- is worked out only for an invalid one.
    IF NOT (coalesce(octet_length(NEW.namespace) BETWEEN 1 AND 64 AND NEW.namespace !~ '[^!-~]', true)
            AND coalesce(octet_length(NEW.key) BETWEEN 1 AND 255 AND NEW.key !~ '[^!-~]', true)
            AND coalesce(octet_length(NEW.effect) BETWEEN 1 AND 64 AND NEW.effect !~ '[^a-z0-9_]' AND NEW.effect ~ '^[a-z]', true)
            AND coalesce(jsonb_typeof(NEW.args) = 'object', true)
            AND coalesce(NEW.key_source IN ('explicit', 'auto', 'model_confirmed'), true)
            AND coalesce(NEW.requested_by IS NULL OR length(NEW.requested_by) <= 255, true)) THEN
        -- In the constraints' order (PostgreSQL checks them by name), so
        -- that a row breaking several names the same one as before.
        IF NOT coalesce(jsonb_typeof(NEW.args) = 'object', true) THEN
            v_failed := 'outbox_intent_args_check';
        ELSIF NOT coalesce(octet_length(NEW.effect) BETWEEN 1 AND 64 AND NEW.effect !~ '[^a-z0-9_]' AND NEW.effect ~ '^[a-z]', true) THEN
            v_failed := 'outbox_intent_effect_check';
        ELSIF NOT coalesce(octet_length(NEW.key) BETWEEN 1 AND 255 AND NEW.key !~ '[^!-~]', true) THEN
            v_failed := 'outbox_intent_key_check';
        ELSIF NOT coalesce(NEW.key_source IN ('explicit', 'auto', 'model_confirmed'), true) THEN
            v_failed := 'outbox_intent_key_source_check';
        ELSIF NOT coalesce(octet_length(NEW.namespace) BETWEEN 1 AND 64 AND NEW.namespace !~ '[^!-~]', true) THEN
            v_failed := 'outbox_intent_namespace_check';
        ELSE
            v_failed := 'outbox_intent_requested_by_check';
        END IF;
        RAISE EXCEPTION 'new row for relation "%" violates check constraint "%"', TG_TABLE_NAME, v_failed
            USING ERRCODE = 'check_violation', CONSTRAINT = v_failed, TABLE = TG_TABLE_NAME, SCHEMA = TG_TABLE_SCHEMA;
    END IF;
    IF TG_OP = 'UPDATE' THEN
        RETURN NEW;
    END IF;

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

-- Outbox's own updates never name these columns, so they do not fire it.
CREATE TRIGGER outbox_intent_before_update BEFORE UPDATE OF namespace, key, effect, args, key_source, requested_by
    ON {{schema}}.outbox_intent
    FOR EACH ROW EXECUTE FUNCTION {{schema}}.outbox_intent_before_insert();
