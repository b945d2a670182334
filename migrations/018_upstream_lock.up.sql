-- The MCP upstreams' locks the replicas run (docs/effects.md, "In front
-- of an MCP server").
-- compatibility: safe with the previous release
--
-- A replica records, per upstream, the hash of its pinned catalogue when
-- it starts: the last started replica's lock is the one in force. A
-- running replica whose lock differs from the recorded one stops working
-- that upstream's queue (its jobs go back, nothing claimed, to a replica
-- that has the recorded lock) rather than calling a tool that was re-pinned
-- or failing the intent of a tool it lacks. A previous release never reads
-- the table.
CREATE TABLE {{schema}}.outbox_upstream_lock (
    upstream    text PRIMARY KEY,
    lock_sha256 text NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON TABLE {{schema}}.outbox_upstream_lock FROM PUBLIC;
