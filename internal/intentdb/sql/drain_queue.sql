-- The queue: intents undispatched after their insert (the trigger of
-- 014) and those of effects another replica runs. SKIP LOCKED lets
-- another drain take the next ones instead of waiting. A drain takes
-- only the effects its replica runs: during a rolling deploy, or with
-- replicas configured for different providers, another replica's
-- effects are left to it.
-- The queue drives, whatever the statistics say: it is small (often
-- empty) and read in its key's order, each row's intent then found by
-- its key. A plain join let the planner, on tables without statistics
-- (a fresh schema), scan every intent and probe the queue for each:
-- milliseconds for an empty answer. The lateral subquery (kept one by
-- OFFSET 0) cannot be the outer side; the effect is filtered inside it,
-- before its row is locked, so that intents of effects another replica
-- serves are left to that replica's drain.
SELECT i.id, i.namespace, i.effect, i.args, i.state = 'pending' AND i.job_id IS NULL
FROM {{schema}}.outbox_dispatch_queue d
CROSS JOIN LATERAL (
	SELECT i.id, i.namespace, i.effect, i.args, i.state, i.job_id
	FROM {{schema}}.outbox_intent i
	WHERE i.id = d.id AND i.effect = ANY($2::text[])
	OFFSET 0
) i
ORDER BY d.id
LIMIT $1
FOR UPDATE OF d, i SKIP LOCKED
