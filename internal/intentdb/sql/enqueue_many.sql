SELECT {{r.intent.columns}}, r.duplicate, r.conflict, r.ord
FROM {{schema}}.outbox_enqueue_many($1, $2, $3, $4, $5, $6, $7) r
