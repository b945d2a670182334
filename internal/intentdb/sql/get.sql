-- The reads of whole intents also name the kind of the intent's River
-- job, so that an operator can tell a batch from a job of its own
-- (Row.JobKind): one look-up by primary key per intent.
SELECT {{columns}}, {{job_kind}} FROM {{schema}}.outbox_intent i WHERE namespace = $1 AND key = $2
