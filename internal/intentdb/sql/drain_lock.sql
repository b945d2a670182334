-- The stream's intents to dispatch, locked and read again in their
-- newest version: one that an approval, a cancel, or a drain of the
-- queue (or of an older release) dispatched or ended meanwhile is
-- left out. SKIP LOCKED: one that another transaction holds is not
-- waited for (a long one would hold up the whole stream), the drain
-- queues it instead, to be taken, or found settled, from the queue.
SELECT id FROM {{schema}}.outbox_intent
WHERE id = ANY($1::bigint[]) AND state = 'pending' AND job_id IS NULL
ORDER BY id
FOR UPDATE SKIP LOCKED
