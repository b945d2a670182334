-- Intents that reached the table without the library's validation (raw
-- SQL) and fail it end here, without any provider call.
WITH upd AS (
	UPDATE {{schema}}.outbox_intent t
	SET state = 'failed', error = u.error, completed_at = now(), updated_at = now()
	FROM unnest($1::bigint[], $2::jsonb[]) AS u(id, error)
	WHERE t.id = u.id
	RETURNING t.id
), notified AS (
	SELECT pg_notify('{{channel_changed}}', 'failed ' || string_agg(id::text, ','))
	FROM (SELECT id, (row_number() OVER ()) / {{chunk}} AS chunk FROM upd) c
	GROUP BY chunk
)
SELECT count(*) FROM notified
