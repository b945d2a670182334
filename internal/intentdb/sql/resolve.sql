-- Resolving moves an unknown intent on. "retry" sends it again knowingly:
-- back to pending with no job, so the dispatcher gives it a fresh River
-- job, and maybe_sent cleared, because the operator has taken that risk
-- (otherwise a deduplicated intent past its window would turn unknown
-- again at once). The attempt number is kept: it is the fencing token and
-- must only grow.
WITH upd AS (
	UPDATE {{schema}}.outbox_intent
	SET state = $3,
	    result = CASE WHEN $3 = 'succeeded' THEN jsonb_build_object('resolved_by', 'operator', 'note', $4::text) ELSE result END,
	    error = CASE WHEN $3 = 'failed' THEN jsonb_build_object('code', 'resolved_failed', 'message', $4::text)
	                 WHEN $3 = 'pending' THEN NULL ELSE error END,
	    completed_at = CASE WHEN $3 = 'pending' THEN NULL ELSE now() END,
	    job_id = CASE WHEN $3 = 'pending' THEN NULL ELSE job_id END,
	    job_attempt = CASE WHEN $3 = 'pending' THEN 0 ELSE job_attempt END,
	    maybe_sent = CASE WHEN $3 = 'pending' THEN false ELSE maybe_sent END,
	    lease_expires_at = NULL,
	    updated_at = now(),
	    resolved_by = $5, resolution_note = NULLIF($4, ''), resolved_at = now()
	WHERE namespace = $1 AND key = $2 AND state = 'unknown'
	RETURNING {{columns}}
), notified AS (
	SELECT pg_notify('{{channel_changed}}', state || ' ' || id::text) FROM upd
), pending AS (
	SELECT pg_notify('{{channel_pending}}', '') FROM upd WHERE state = 'pending'
)
SELECT {{columns}} FROM upd, (SELECT count(*) FROM notified) n, (SELECT count(*) FROM pending) p
