-- What a drain decided, in one statement: each intent's River job (a
-- HOT update: job_id is in no index), the queue's rows it settled
-- removed, the stream's intents it leaves to the queue queued, and the
-- stream's offset moved past what it read. Dispatching is not a state
-- change (the intent stays pending), so updated_at is left alone and
-- no notification fires.
WITH mark AS (
	UPDATE {{schema}}.outbox_intent t SET job_id = u.job_id
	FROM unnest($1::bigint[], $2::bigint[]) AS u(id, job_id)
	WHERE t.id = u.id
), dequeued AS (
	DELETE FROM {{schema}}.outbox_dispatch_queue WHERE id = ANY($3::bigint[])
), queued AS (
	INSERT INTO {{schema}}.outbox_dispatch_queue (id) SELECT unnest($4::bigint[]) ON CONFLICT DO NOTHING
), advanced AS (
	UPDATE {{schema}}.outbox_drain_offset SET prev = $5::pg_snapshot, cur = $6::pg_snapshot, txid = $7::text::xid8, id = $8
)
SELECT 1
