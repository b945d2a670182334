DROP TRIGGER outbox_intent_before_update ON {{schema}}.outbox_intent;

-- The insert trigger of 007.
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
        NEW.approval_rule := NULL;
    END IF;
    RETURN NEW;
END;
$$;

ALTER TABLE {{schema}}.outbox_intent
    ADD CONSTRAINT outbox_intent_namespace_check CHECK (octet_length(namespace) BETWEEN 1 AND 64 AND namespace !~ '[^!-~]'),
    ADD CONSTRAINT outbox_intent_key_check CHECK (octet_length(key) BETWEEN 1 AND 255 AND key !~ '[^!-~]'),
    ADD CONSTRAINT outbox_intent_effect_check CHECK (octet_length(effect) BETWEEN 1 AND 64 AND effect !~ '[^a-z0-9_]' AND effect ~ '^[a-z]'),
    ADD CONSTRAINT outbox_intent_args_check CHECK (jsonb_typeof(args) = 'object'),
    ADD CONSTRAINT outbox_intent_key_source_check CHECK (key_source IN ('explicit', 'auto', 'model_confirmed')),
    ADD CONSTRAINT outbox_intent_requested_by_check CHECK (requested_by IS NULL OR length(requested_by) <= 255);
