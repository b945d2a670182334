package intentdb

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// IDEpochBits is how many low bits of an intent id count within one
// epoch: each `outboxd recover` moves the id sequence to the start of the
// next epoch (2^40 ids, a trillion, apart), so that no id handed out before
// a restore, even after the restore point, is handed out again; and since
// the provider key is derived from the id, no provider key either.
const IDEpochBits = 40

// ErrLiveProcesses is returned by MarkRestored while an outboxd process
// holds its liveness lock on the database: its workers could claim an
// intent while it is being marked.
var ErrLiveProcesses = errors.New("outboxd processes are running on this database: stop every serve before recovering")

// RestorePointError is returned by MarkRestored when intents were changed
// after the restore point given: the database is not a restore to that
// point, or the point is wrong.
type RestorePointError struct {
	// LastChange is the latest updated_at of an intent.
	LastChange time.Time
	// RestorePoint is the point given.
	RestorePoint time.Time
}

func (e *RestorePointError) Error() string {
	return fmt.Sprintf("an intent was changed at %s, after the restore point %s: this database is not a restore to that point (give the restore's recovery_target_time, or a later time)",
		e.LastChange.UTC().Format(time.RFC3339Nano), e.RestorePoint.UTC().Format(time.RFC3339Nano))
}

// RestoredResult is what MarkRestored did.
type RestoredResult struct {
	// Marked counts the intents marked possibly sent, by state.
	Marked map[string]int
	// Epoch is the id epoch new intents are in: their ids start at
	// Epoch << IDEpochBits.
	Epoch int64
	// NextID is the first id a new intent gets.
	NextID int64
}

// MarkRestored makes a restored database safe to serve again
// (docs/operations.md, "Restoring a backup"). The database has forgotten
// what happened after the restore point, the providers have not: an
// intent that is pending, running or awaiting approval here may have been
// sent since. So every such intent is marked maybe_sent, which the workers
// read as a possibly lost outcome: a deduplicated intent is resent under
// its provider key while the provider's window lasts and ends unknown
// after it, a reconcilable one is looked up before any send, an
// at-most-once one ends unknown for an operator. And the id sequence moves
// to the next epoch, so that no intent created from now on gets an id, nor
// so a provider key, that one created after the restore point had.
//
// It refuses while an outboxd process is alive on the database
// (ErrLiveProcesses), and when an intent was changed after restorePoint
// (*RestorePointError). tx should be the only thing writing: it locks the
// intent table against writes until it commits.
func (q *Queries) MarkRestored(ctx context.Context, tx DBTX, restorePoint time.Time) (*RestoredResult, error) {
	// Writers wait until the commit; readers do not. Taken first, so that
	// nothing changes between the checks and the marking.
	if _, err := tx.Exec(ctx, Render(`LOCK TABLE {{schema}}.outbox_intent IN SHARE ROW EXCLUSIVE MODE`, q.schema)); err != nil {
		return nil, fmt.Errorf("error locking the intent table: %w", err)
	}
	class := strconv.Itoa(int(LivenessClass(q.schema)))
	var live int
	if err := tx.QueryRow(ctx, Render(`SELECT count(*) FROM {{schema}}.outbox_process p
		WHERE EXISTS (
		    SELECT 1 FROM pg_catalog.pg_locks l
		    WHERE l.locktype = 'advisory' AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
		      AND l.classid = `+class+`::oid AND l.objid = p.lock_key::oid AND l.objsubid = 2 AND l.granted)`, q.schema)).Scan(&live); err != nil {
		return nil, fmt.Errorf("error looking for live processes: %w", err)
	}
	if live > 0 {
		return nil, ErrLiveProcesses
	}
	var last *time.Time
	if err := tx.QueryRow(ctx, Render(`SELECT max(updated_at) FROM {{schema}}.outbox_intent`, q.schema)).Scan(&last); err != nil {
		return nil, fmt.Errorf("error reading the latest change: %w", err)
	}
	if last != nil && last.After(restorePoint) {
		return nil, &RestorePointError{LastChange: *last, RestorePoint: restorePoint}
	}
	res := &RestoredResult{Marked: map[string]int{}}
	// updated_at is left alone: it still says when the intent last
	// changed before the restore point, and a second run finds the same.
	rows, err := tx.Query(ctx, Render(`UPDATE {{schema}}.outbox_intent SET maybe_sent = true
		WHERE state IN ('pending', 'running', 'awaiting_approval') AND NOT maybe_sent
		RETURNING state::text`, q.schema))
	if err != nil {
		return nil, fmt.Errorf("error marking intents: %w", err)
	}
	for rows.Next() {
		var state string
		if err := rows.Scan(&state); err != nil {
			return nil, err
		}
		res.Marked[state]++
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("error marking intents: %w", err)
	}
	// The sequence's own value, not only the table's largest id: a
	// restored sequence may be ahead of the table (PostgreSQL logs it 32
	// values ahead), and ids of rolled-back inserts count too. The name
	// comes back quoted as needed.
	var seq string
	if err := tx.QueryRow(ctx, `SELECT pg_get_serial_sequence($1, 'id')`, Render(`{{schema}}.outbox_intent`, q.schema)).Scan(&seq); err != nil {
		return nil, fmt.Errorf("error finding the id sequence: %w", err)
	}
	var cur int64
	if err := tx.QueryRow(ctx, Render(`SELECT greatest((SELECT last_value FROM `+seq+`), (SELECT max(id) FROM {{schema}}.outbox_intent), 0)`, q.schema)).Scan(&cur); err != nil {
		return nil, fmt.Errorf("error reading the id sequence: %w", err)
	}
	res.Epoch = cur>>IDEpochBits + 1
	res.NextID = res.Epoch << IDEpochBits
	if _, err := tx.Exec(ctx, `SELECT setval($1::regclass, $2, false)`, seq, res.NextID); err != nil {
		return nil, fmt.Errorf("error moving the id sequence: %w", err)
	}
	return res, nil
}
