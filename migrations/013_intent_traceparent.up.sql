-- The W3C traceparent of the span the intent was enqueued in (the
-- request's, when its caller traces), so that an attempt's span can link
-- to the enqueue's: the two run in different processes, often minutes
-- apart, and nothing travels between them but the row. The first
-- enqueue's is kept: a duplicate changes nothing. NULL when the enqueue
-- was in no span, or was a call of the SQL function enqueue. Nullable and
-- without a default, the column is added without rewriting the table. A
-- column of outbox_intent needs no grant of its own (009).
ALTER TABLE {{schema}}.outbox_intent
    ADD COLUMN traceparent text;
