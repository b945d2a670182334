-- One row per running `outboxd serve` (a River client), so that a process
-- that died is told from a slow or paused one within seconds, on every
-- replica, rather than by River's rescuer (leader only, every 30 s, after
-- three effect timeouts). client_id is River's client id, the value River
-- appends to river_job.attempted_by when that client fetches a job.
--
-- Liveness is the process's own database session: it holds a session-level
-- advisory lock, (the schema's liveness class, lock_key), for as long as it
-- runs. A process killed with SIGKILL, or that crashed, loses its sockets at
-- once, so its session ends and the lock is released; a paused process
-- (SIGSTOP), a slow one, or one stuck in a long call keeps its session and
-- its lock, and is not dead. heartbeat_at (written every second on that
-- session, on the database's clock) only bridges the moment a live process
-- takes to open a new session after losing one.
--
-- Only outboxd itself reads and writes the table (the role serve runs as,
-- which owns the schema's tables); a role that only enqueues needs no
-- privilege on it, and PUBLIC has none on a new table.
CREATE TABLE {{schema}}.outbox_process (
    client_id    text PRIMARY KEY,
    lock_key     integer GENERATED ALWAYS AS IDENTITY UNIQUE,
    hostname     text NOT NULL DEFAULT '',
    pid          integer NOT NULL DEFAULT 0,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE {{schema}}.outbox_process IS
    'outboxd processes: each holds the session advisory lock (liveness class, lock_key) while it runs; see docs/design.md, "Crash recovery timing"';
