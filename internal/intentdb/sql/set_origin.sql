-- What the SQL functions take none of, set by setOrigin on the rows
-- they inserted (never on a duplicate's, the first enqueue's); a value
-- a row already holds is kept.
UPDATE {{schema}}.outbox_intent i
SET enqueued_by = coalesce(i.enqueued_by, u.enqueued_by), traceparent = coalesce(i.traceparent, u.traceparent)
FROM unnest($1::bigint[], $2::text[], $3::text[]) AS u(id, enqueued_by, traceparent)
WHERE i.id = u.id
