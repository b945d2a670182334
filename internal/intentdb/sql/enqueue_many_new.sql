-- The batch's usual case, in a caller's transaction: every key new.
-- One set-based INSERT without ON CONFLICT (whose speculative
-- insertion costs a tenth of the statement) and without looking any
-- key up; it answers only what the insert did not already know: a
-- fresh row's other columns are their defaults (scanNewRow). A key
-- recorded before, or by a concurrent transaction, raises a unique
-- violation, and EnqueueMany takes the next statement. A key repeated
-- within the batch is inserted once (its first occurrence); the others
-- answer as duplicates of it, or conflicts.
WITH input AS (
	SELECT u.*, row_number() OVER w AS rn, first_value(u.effect) OVER w AS first_effect, first_value(u.args) OVER w AS first_args
	FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::text[], $6::text[], $7::boolean[], $8::text[], $9::text[])
		WITH ORDINALITY AS u(namespace, key, effect, args, requested_by, key_source, require_approval, enqueued_by, traceparent, ord)
	WINDOW w AS (PARTITION BY u.namespace, u.key ORDER BY u.ord)
), ins AS (
	INSERT INTO {{schema}}.outbox_intent (namespace, key, effect, args, requested_by, key_source, state, enqueued_by, traceparent)
	SELECT namespace, key, effect, args, requested_by, key_source,
	       CASE WHEN require_approval THEN 'awaiting_approval' ELSE 'pending' END, enqueued_by, traceparent
	FROM input WHERE rn = 1 ORDER BY ord
	RETURNING {{new_columns}}
), notified AS ({{batch_notified}})
SELECT {{ins.new_columns}}, input.rn > 1,
       NOT (input.effect = input.first_effect AND input.args = input.first_args), input.ord - 1
FROM input JOIN ins ON ins.namespace = input.namespace AND ins.key = input.key,
     (SELECT count(*) FROM notified) n
