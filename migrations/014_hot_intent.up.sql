-- compatibility: safe with the previous release
-- (its drain takes undispatched intents FOR UPDATE SKIP LOCKED and marks
-- job_id; this one's locks them FOR UPDATE and hands over only those still
-- pending without a job, so the two never dispatch one intent twice)
-- The intent's updates become HOT (docs/design.md, "A schema where the hot
-- path is HOT"). Until now every update of an intent (the drain's job_id,
-- the claim, the finish) changed a column that an index held or filtered
-- on (state, job_id, completed_at), so PostgreSQL wrote a new entry into
-- every index of the table for each. With migration 015, which swaps the
-- indexes, only columns that never change after the insert are indexed,
-- and those updates are HOT: the new version stays on its page and no
-- index is written. What the old indexes found is found another way:
--
-- * New intents, in commit order: txid is the inserting transaction's id,
--   and the drain reads the intents that committed between two snapshots
--   of the database (PgQ's way): those whose txid the last snapshot saw
--   running or not yet started, and the new one sees committed. A
--   transaction that runs long holds back only its own intents, which each
--   drain looks up by txid until they commit, not the others'. The drain
--   records the snapshot in the transaction that inserts the jobs, so each
--   intent of the stream is handed over once.
-- * Intents that become undispatched after their insert (approved, resolved
--   to pending, given back by the reconciler) and those of effects the
--   drain that read them does not run: a small queue,
--   outbox_dispatch_queue, filled by a trigger whose WHEN the common path's
--   updates never meet, and by the drain.
--
-- This migration takes ACCESS EXCLUSIVE on outbox_intent only for catalog
-- changes (a nullable column without a rewrite, a default, a trigger, a
-- storage parameter), so it waits for the transactions writing intents at
-- that moment and holds writes back for as long as it runs: the queue's
-- backfill reads the undispatched intents through the old partial index,
-- and the unknown ones' backfill reads the table once (about a second at
-- five million intents).

-- Nullable and without a default when added, so that no existing row is
-- rewritten; the default applies to new rows only. Existing rows keep
-- NULL: the ones still undispatched go into the queue below.
ALTER TABLE {{schema}}.outbox_intent ADD COLUMN txid xid8;
ALTER TABLE {{schema}}.outbox_intent ALTER COLUMN txid SET DEFAULT pg_current_xact_id();

-- Room on each page for the versions of its rows' updates, which HOT
-- needs (a HOT update puts the new version on the same page). New pages
-- only; a VACUUM FULL or pg_repack would apply it to existing ones, and
-- nothing requires it.
ALTER TABLE {{schema}}.outbox_intent SET (fillfactor = 70);

-- The stream's position: prev is the snapshot up to which every intent
-- was handed over. A drain takes a new snapshot, cur, and hands over the
-- intents visible in cur and not in prev; when there are more than a
-- batch, it records cur and, in (txid, id), the last intent handed over,
-- and the next drain goes on from there; once all are, prev becomes cur.
-- One row, locked by the drain for its transaction, so the stream is read
-- by one drain at a time. It starts before every transaction: the first
-- drain takes every intent that has a txid (rows from before this
-- migration have none; the undispatched ones are queued below).
CREATE TABLE {{schema}}.outbox_drain_offset (
    one  boolean     PRIMARY KEY DEFAULT true CHECK (one),
    prev pg_snapshot NOT NULL,
    cur  pg_snapshot,
    txid xid8        NOT NULL,
    id   bigint      NOT NULL
);
INSERT INTO {{schema}}.outbox_drain_offset (prev, txid, id) VALUES ('1:1:', '0', 0);

-- The unknown intents: the few an operator must look at, which lists by
-- state find here rather than among the namespace's rows (no index may
-- hold the state). Kept by a trigger whose WHEN only an intent entering
-- or leaving unknown meets; a row whose intent was deleted by hand is
-- ignored by the joins that read it.
CREATE TABLE {{schema}}.outbox_intent_unknown (
    id bigint PRIMARY KEY
);
INSERT INTO {{schema}}.outbox_intent_unknown (id)
    SELECT id FROM {{schema}}.outbox_intent WHERE state = 'unknown';
CREATE FUNCTION {{schema}}.outbox_intent_track_unknown() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = 'unknown' THEN
        INSERT INTO {{schema}}.outbox_intent_unknown (id) VALUES (NEW.id) ON CONFLICT DO NOTHING;
    ELSE
        DELETE FROM {{schema}}.outbox_intent_unknown WHERE id = NEW.id;
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER outbox_intent_track_unknown AFTER UPDATE OF state ON {{schema}}.outbox_intent
    FOR EACH ROW
    WHEN ((OLD.state = 'unknown') <> (NEW.state = 'unknown'))
    EXECUTE FUNCTION {{schema}}.outbox_intent_track_unknown();
CREATE TRIGGER outbox_intent_track_unknown_insert AFTER INSERT ON {{schema}}.outbox_intent
    FOR EACH ROW
    WHEN (NEW.state = 'unknown')
    EXECUTE FUNCTION {{schema}}.outbox_intent_track_unknown();

-- Intents to dispatch outside the stream. A row is deleted when the drain
-- dispatches its intent, or finds it no longer undispatched.
CREATE TABLE {{schema}}.outbox_dispatch_queue (
    id bigint PRIMARY KEY
);
INSERT INTO {{schema}}.outbox_dispatch_queue (id)
    SELECT id FROM {{schema}}.outbox_intent WHERE job_id IS NULL AND state = 'pending';

-- An intent that becomes undispatched by an update (any update: outbox's
-- own, or an operator's by hand) is queued. The WHEN is evaluated without
-- calling the function, and the common path's updates (the drain's
-- job_id, a claim, a finish) never meet it, so they pay only that.
CREATE FUNCTION {{schema}}.outbox_intent_queue_dispatch() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {{schema}}.outbox_dispatch_queue (id) VALUES (NEW.id) ON CONFLICT DO NOTHING;
    RETURN NULL;
END;
$$;
CREATE TRIGGER outbox_intent_queue_dispatch AFTER UPDATE OF state, job_id ON {{schema}}.outbox_intent
    FOR EACH ROW
    WHEN (NEW.state = 'pending' AND NEW.job_id IS NULL AND (OLD.state <> 'pending' OR OLD.job_id IS NOT NULL))
    EXECUTE FUNCTION {{schema}}.outbox_intent_queue_dispatch();
