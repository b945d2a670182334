-- The intents prev saw running (txid among its xip: an index look-up
-- each) or not yet started (a range of the (txid, id) index from its
-- xmax), which cur sees committed, past the last one handed over. Two
-- scans merged, each stopping at the batch's size: one range from the
-- lowest running txid would read every intent committed since a long
-- transaction began, at every drain. Read without locks: the drain
-- that holds the offset is the only one reading the stream, and the
-- intents it will dispatch are locked next (sqlDrainLock).
WITH next AS (
	(SELECT id FROM {{schema}}.outbox_intent
	WHERE txid = ANY(ARRAY(SELECT pg_snapshot_xip($2::pg_snapshot)))
	  AND pg_visible_in_snapshot(txid, $3::pg_snapshot)
	  AND (txid, id) > ($4::text::xid8, $5::bigint)
	ORDER BY txid, id
	LIMIT $1)
	UNION ALL
	(SELECT id FROM {{schema}}.outbox_intent
	WHERE txid IS NOT NULL
	  AND (txid, id) > (greatest($4::text::xid8, pg_snapshot_xmax($2::pg_snapshot)),
	                    CASE WHEN $4::text::xid8 >= pg_snapshot_xmax($2::pg_snapshot) THEN $5::bigint ELSE 0 END)
	  AND txid < pg_snapshot_xmax($3::pg_snapshot)
	  AND pg_visible_in_snapshot(txid, $3::pg_snapshot)
	ORDER BY txid, id
	LIMIT $1)
)
SELECT id, namespace, effect, args, txid::text, state = 'pending' AND job_id IS NULL
FROM {{schema}}.outbox_intent
WHERE id IN (SELECT id FROM next)
ORDER BY txid, id
LIMIT $1
