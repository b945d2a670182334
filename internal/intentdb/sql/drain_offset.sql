-- The drain finds new intents by snapshots (migration 014): those
-- committed between the snapshot it handed over everything up to
-- (prev) and a newer one (cur), in (txid, id) order, a batch at a
-- time from the last one handed over. The stream is read by one drain
-- at a time: it locks the offset for its transaction, and another
-- waits for that transaction to end, then reads the offset it left.
--
-- A drain whose process stops mid-transaction (SIGSTOP, a debugger, a
-- VM paused) would hold the stream for everyone: its transaction, idle
-- for longer than DrainIdleTimeout, is ended by the server, which
-- closes its session and releases the lock. A drain's transaction is
-- never idle for more than a few milliseconds otherwise (River's
-- insert is planned in Go between two statements).
SELECT prev::text, coalesce(cur::text, ''), txid::text, id,
	set_config('idle_in_transaction_session_timeout', '{{drain_idle_timeout_ms}}', true)
FROM {{schema}}.outbox_drain_offset FOR UPDATE
