package intentdb

import (
	"context"
	"encoding/json"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// LivenessClass is the first key of the session advisory locks by which
// outboxd processes of schema say they are alive (the second is their
// outbox_process.lock_key): a number of the schema's own, so that processes
// of two schemas in one database never take each other's locks. It is kept
// positive so that it reads the same as pg_locks' classid (an oid).
func LivenessClass(schema string) int32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte("outbox_process " + schema))
	return int32(h.Sum32() & 0x7fffffff)
}

func (q *Queries) renderProcess(r func(string) string) {
	class := strconv.Itoa(int(LivenessClass(q.schema)))
	// Registering and locking in one transaction: the row becomes visible
	// to other processes only once its lock is held (a session lock taken
	// in a transaction outlives its commit), so no repair ever sees a row
	// of a live process without its lock. A process that lost its session
	// registers again under the same client id and key.
	q.sqlRegister = r(`INSERT INTO {{schema}}.outbox_process (client_id, hostname, pid)
		VALUES ($1, $2, $3)
		ON CONFLICT (client_id) DO UPDATE SET heartbeat_at = now()
		RETURNING lock_key`)
	// try rather than wait: after a session was lost on the client's side
	// only, the old backend may hold the lock until it notices, and the
	// process is alive meanwhile anyway.
	q.sqlLock = r(`SELECT pg_try_advisory_lock(` + class + `, $1)`)
	q.sqlHeartbeat = r(`UPDATE {{schema}}.outbox_process SET heartbeat_at = now() WHERE client_id = $1`)
	// River's elector keeps one row with the leader's client ID and an
	// expiry, renewed while it leads; an expired row is a leader that died
	// and has not been replaced yet.
	q.sqlLeader = r(`SELECT leader_id FROM {{schema}}.river_leader WHERE expires_at > now()`)
	q.sqlUnregister = r(`DELETE FROM {{schema}}.outbox_process WHERE client_id = $1`)
	// A process is dead when no session holds its lock and it has not
	// written a heartbeat for the grace period, counted from the server's
	// start at the earliest: after a restart of PostgreSQL every lock is
	// gone, and live processes need a moment to reconnect and take theirs
	// again. pg_locks is readable by every role. A dead process's running
	// jobs are locked (skipping those another replica's repair holds, so
	// replicas repair concurrently without waiting on each other), with the
	// intent each runs as its own job, if claimed (running).
	q.sqlDeadJobs = r(`WITH dead AS (
			SELECT p.client_id
			FROM {{schema}}.outbox_process p
			WHERE greatest(p.heartbeat_at, pg_postmaster_start_time()) < now() - $1::interval
			  AND NOT EXISTS (
			      SELECT 1 FROM pg_catalog.pg_locks l
			      WHERE l.locktype = 'advisory' AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
			        AND l.classid = ` + class + `::oid AND l.objid = p.lock_key::oid AND l.objsubid = 2
			  )
		)
		SELECT j.id, j.kind, j.attempted_by[cardinality(j.attempted_by)], i.id, i.effect, i.args, i.attempt
		FROM {{schema}}.river_job j
		LEFT JOIN {{schema}}.outbox_intent i ON i.job_id = j.id AND i.state = 'running'
		WHERE j.state = 'running'
		  AND j.attempted_by[cardinality(j.attempted_by)] IN (SELECT client_id FROM dead)
		ORDER BY j.id
		LIMIT $2
		FOR UPDATE OF j SKIP LOCKED`)
	// What River's rescuer does to a stuck job, without its wait: available
	// again at once (River's fetch takes it within a poll), or discarded
	// when its attempts are spent (the reconciler then re-dispatches its
	// intent), or cancelled when a cancel was asked for while it ran. The
	// error is recorded as River records its own, so that River UI shows
	// why the attempt ended.
	q.sqlRescueJobs = r(`UPDATE {{schema}}.river_job j
		SET state = CASE
		        WHEN j.metadata ? 'cancel_attempted_at' THEN 'cancelled'
		        WHEN j.attempt >= j.max_attempts THEN 'discarded'
		        ELSE 'available' END::{{schema}}.river_job_state,
		    finalized_at = CASE WHEN j.metadata ? 'cancel_attempted_at' OR j.attempt >= j.max_attempts THEN now() END,
		    scheduled_at = CASE WHEN j.metadata ? 'cancel_attempted_at' OR j.attempt >= j.max_attempts THEN j.scheduled_at ELSE now() END,
		    errors = array_append(j.errors, jsonb_build_object(
		        'at', now(), 'attempt', greatest(j.attempt, 0),
		        'error', 'outbox: the process running the job died (' || j.attempted_by[cardinality(j.attempted_by)] || '): rescued at once',
		        'trace', '')),
		    metadata = j.metadata || jsonb_build_object('outbox:dead_process_rescues',
		        coalesce((j.metadata ->> 'outbox:dead_process_rescues')::int, 0) + 1)
		WHERE j.id = ANY($1::bigint[]) AND j.state = 'running'`)
	// An at-most-once attempt that died can only end unknown: nothing is
	// ever resent, so its lease protects nothing, and ending it at once
	// tells the agent at once. Fenced on the attempt that died, so a later
	// claim's lease is never cut.
	q.sqlExpireLeases = r(`UPDATE {{schema}}.outbox_intent t
		SET lease_expires_at = now()
		FROM unnest($1::bigint[], $2::int[]) AS u(id, attempt)
		WHERE t.id = u.id AND t.state = 'running' AND t.attempt = u.attempt AND t.lease_expires_at > now()`)
	// Rows of processes long dead, whose jobs River's rescuer has surely
	// dealt with by now if this repair did not.
	q.sqlPruneProcesses = r(`DELETE FROM {{schema}}.outbox_process p
		WHERE p.heartbeat_at < now() - $1::interval
		  AND NOT EXISTS (
		      SELECT 1 FROM pg_catalog.pg_locks l
		      WHERE l.locktype = 'advisory' AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
		        AND l.classid = ` + class + `::oid AND l.objid = p.lock_key::oid AND l.objsubid = 2
		  )`)
}

// RegisterProcess records the process of River client clientID and takes
// its liveness lock on conn, which must be a session of its own held for
// the process's life. It reports whether the lock is held: false when an
// old session of the same process still holds it.
func (q *Queries) RegisterProcess(ctx context.Context, conn *pgx.Conn, clientID, hostname string, pid int) (bool, error) {
	var locked bool
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var key int32
		if err := tx.QueryRow(ctx, q.sqlRegister, clientID, hostname, pid).Scan(&key); err != nil {
			return err
		}
		return tx.QueryRow(ctx, q.sqlLock, key).Scan(&locked)
	})
	return locked, err
}

// Leader returns the client ID of River's elected leader, or pgx.ErrNoRows
// when none leads.
func (q *Queries) Leader(ctx context.Context, db Querier) (string, error) {
	var id string
	err := db.QueryRow(ctx, q.sqlLeader).Scan(&id)
	return id, err
}

// Heartbeat records that the process of clientID is alive.
func (q *Queries) Heartbeat(ctx context.Context, db DBTX, clientID string) error {
	_, err := db.Exec(ctx, q.sqlHeartbeat, clientID)
	return err
}

// UnregisterProcess removes the row of a process that stops gracefully.
func (q *Queries) UnregisterProcess(ctx context.Context, db DBTX, clientID string) error {
	_, err := db.Exec(ctx, q.sqlUnregister, clientID)
	return err
}

// DeadJob is a running River job of a dead process.
type DeadJob struct {
	ID   int64
	Kind string
	// ClientID is the dead process's River client id.
	ClientID string
	// IntentID, Effect, Args and Attempt describe the intent the job runs
	// as its own, when that intent is claimed (running); nil otherwise.
	IntentID *int64
	Effect   *string
	Args     json.RawMessage
	Attempt  *int
}

// LockDeadJobs locks, in tx, up to limit running jobs of processes dead for
// longer than grace, skipping those another transaction holds.
func (q *Queries) LockDeadJobs(ctx context.Context, tx Querier, grace time.Duration, limit int) ([]DeadJob, error) {
	rows, _ := tx.Query(ctx, q.sqlDeadJobs, grace, limit)
	return pgx.CollectRows(rows, pgx.RowToStructByPos[DeadJob])
}

// RescueJobs makes the running jobs ids available again (or ends them, as
// River's rescuer would), and returns how many it changed.
func (q *Queries) RescueJobs(ctx context.Context, tx DBTX, ids []int64) (int64, error) {
	tag, err := tx.Exec(ctx, q.sqlRescueJobs, ids)
	return tag.RowsAffected(), err
}

// ExpireLeases ends the leases of the running intents ids, each only while
// it is still under the attempt of the same position in attempts.
func (q *Queries) ExpireLeases(ctx context.Context, tx DBTX, ids []int64, attempts []int) error {
	_, err := tx.Exec(ctx, q.sqlExpireLeases, ids, attempts)
	return err
}

// PruneProcesses deletes the rows of processes dead for longer than age.
func (q *Queries) PruneProcesses(ctx context.Context, db DBTX, age time.Duration) (int64, error) {
	tag, err := db.Exec(ctx, q.sqlPruneProcesses, age)
	return tag.RowsAffected(), err
}
