-- The enqueue is one statement. Its usual case, a new key or a key
-- recorded long ago, is this plain statement. It does what the SQL
-- function outbox_enqueue_try does, without a plpgsql call (a third of
-- the cost of an enqueue). It returns no row in one race only: a
-- concurrent enqueue of the same key committed while the INSERT waited
-- for it, after this statement's snapshot was taken, so the SELECT
-- cannot see that row. Enqueue then calls outbox_enqueue_try
-- (sqlEnqueueRetry), whose statements take fresh snapshots.
--
-- The provider key is set by the table's insert trigger, from the new
-- row's id; another applies the approval rules (outbox_approval_rule)
-- to the effects they name (migrations/007_cheaper_insert.up.sql).
--
-- The notification wakes the dispatcher's drain; like the function, a
-- session notifies at most once per NotifyWindow, because a notifying
-- commit holds a database-wide lock until it is durable.
WITH ins AS (
	INSERT INTO {{schema}}.outbox_intent (namespace, key, effect, args, requested_by, key_source, state, enqueued_by, traceparent)
	VALUES ($1, $2, $3, $4, $5, $6, CASE WHEN $7::boolean THEN 'awaiting_approval' ELSE 'pending' END, $8, $9)
	ON CONFLICT (namespace, key) DO NOTHING
	RETURNING {{columns}}
), notified AS (
	SELECT pg_notify('{{channel_pending}}', ''),
	       set_config('{{guc_notified}}', clock_timestamp()::text, false)
	FROM ins
	WHERE coalesce(nullif(current_setting('{{guc_notified}}', true), ''), '-infinity')::timestamptz
	      <= clock_timestamp() - interval '{{notify_window}}'
)
SELECT {{columns}}, false, false FROM ins, (SELECT count(*) FROM notified) n
UNION ALL
SELECT {{columns}}, true, NOT (effect = $3 AND args = $4::jsonb) FROM {{schema}}.outbox_intent
WHERE namespace = $1 AND key = $2 AND NOT EXISTS (SELECT 1 FROM ins)
