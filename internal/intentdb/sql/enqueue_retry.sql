-- The SQL functions (the fallbacks of Enqueue and EnqueueMany) take no
-- enqueued_by or traceparent: they are set on the rows they inserted by
-- the next statement, in the same transaction when there is one
-- (setOrigin).
SELECT {{r.intent.columns}}, r.duplicate, r.conflict
FROM {{schema}}.outbox_enqueue_try($1, $2, $3, $4, $5, $6, $7) r
