-- The sha256 of the declaration (effects/declared) that the intent's last
-- attempt was sent under: a claim records it before the call, a
-- deduplicated attempt's finish with its outcome. An intent that may have
-- been sent and meets another declaration on its next attempt ends unknown
-- (declaration_changed) rather than sending a different request under the
-- same provider key. NULL for built-in effects, whose requests are the
-- code's. A column of outbox_intent needs no grant of its own (009).
ALTER TABLE {{schema}}.outbox_intent
    ADD COLUMN declaration_sha256 text;
