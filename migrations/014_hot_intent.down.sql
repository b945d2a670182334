-- Before 015's down, which recreates the old indexes: the intents the
-- stream had not read yet are found again by outbox_intent_undispatched.
DROP TRIGGER outbox_intent_track_unknown_insert ON {{schema}}.outbox_intent;
DROP TRIGGER outbox_intent_track_unknown ON {{schema}}.outbox_intent;
DROP FUNCTION {{schema}}.outbox_intent_track_unknown();
DROP TABLE {{schema}}.outbox_intent_unknown;
DROP TRIGGER outbox_intent_queue_dispatch ON {{schema}}.outbox_intent;
DROP FUNCTION {{schema}}.outbox_intent_queue_dispatch();
DROP TABLE {{schema}}.outbox_dispatch_queue;
DROP TABLE {{schema}}.outbox_drain_offset;
ALTER TABLE {{schema}}.outbox_intent SET (fillfactor = 80);
ALTER TABLE {{schema}}.outbox_intent DROP COLUMN txid;
