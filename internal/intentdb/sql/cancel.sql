-- Cancelling is allowed only while no attempt may have started: the
-- intent is pending (or awaiting approval, which has no job), no attempt that ran may have reached the provider
-- (maybe_sent), and its River job has not started an attempt that did
-- not record an outcome. A deduplicated effect is not claimed before its
-- call, so an attempt in flight, or one that died mid-call and whose job
-- was rescued, shows only in its job: running, or an attempt counter
-- past the last attempt the intent recorded (job_attempt) — the rule the
-- worker itself uses to detect a lost attempt. The job row is locked
-- first (River fetches with SKIP LOCKED, so it cannot start an attempt
-- meanwhile) and read in its newest committed state; after the cancel
-- commits, an attempt that starts finds the intent cancelled and does
-- nothing.
--
-- The UPDATE also requires job_id to be the one the job check read: a
-- drain that dispatched the intent while the UPDATE waited on its row
-- lock has made a job this statement never checked, so it refuses.
WITH cur AS (
	SELECT job_id, job_attempt FROM {{schema}}.outbox_intent WHERE namespace = $1 AND key = $2
), job AS (
	SELECT j.state, j.attempt FROM {{schema}}.river_job j
	WHERE j.id = (SELECT job_id FROM cur)
	FOR UPDATE
), upd AS (
	UPDATE {{schema}}.outbox_intent
	SET state = 'cancelled', completed_at = now(), updated_at = now(),
	    resolved_by = $3, resolution_note = NULLIF($4, ''), resolved_at = now()
	WHERE namespace = $1 AND key = $2 AND state IN ('pending', 'awaiting_approval') AND NOT maybe_sent
	  AND job_id IS NOT DISTINCT FROM (SELECT job_id FROM cur)
	  AND NOT EXISTS (SELECT 1 FROM job WHERE job.state = 'running' OR job.attempt > (SELECT job_attempt FROM cur))
	RETURNING {{columns}}
), notified AS (
	SELECT pg_notify('{{channel_changed}}', 'cancelled ' || id::text) FROM upd
)
SELECT {{columns}} FROM upd, (SELECT count(*) FROM notified) n
