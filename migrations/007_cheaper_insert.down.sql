DROP TRIGGER outbox_approval_rule_truncated ON {{schema}}.outbox_approval_rule;
DROP TRIGGER outbox_approval_rule_changed ON {{schema}}.outbox_approval_rule;
DROP FUNCTION {{schema}}.outbox_approval_rule_changed();
DROP FUNCTION {{schema}}.outbox_approval_sync_trigger();
DROP FUNCTION {{schema}}.outbox_approval_compile();
DROP TRIGGER outbox_intent_approval_rules ON {{schema}}.outbox_intent;
DROP FUNCTION {{schema}}.outbox_intent_apply_approval_rules();
DROP FUNCTION {{schema}}.outbox_trigger_arg(text);

-- The insert trigger of 006: the provider key and the rules, for every row.
CREATE OR REPLACE FUNCTION {{schema}}.outbox_intent_before_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.provider_key := {{schema}}.outbox_provider_key(NEW.namespace, NEW.key, NEW.id);
    IF NEW.state = 'awaiting_approval' THEN
        NEW.approval_rule := coalesce(NEW.approval_rule, 'requested');
    ELSIF NEW.state = 'pending' THEN
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
