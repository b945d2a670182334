package intentdb

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
)

func (q *Queries) renderDrain(r func(string) string) {
	q.sqlDrainOffset = r(statement("drain_offset"))
	// The new snapshot is taken by a statement of its own, after the lock:
	// in READ COMMITTED a statement's snapshot is taken when it starts, so
	// the locking one's may predate the commit of the drain it waited for,
	// and be older than the prev that drain recorded.
	q.sqlDrainSnapshot = `SELECT pg_current_snapshot()::text`
	q.sqlDrainStream = r(statement("drain_stream"))
	q.sqlDrainLock = r(statement("drain_lock"))
	q.sqlDrainQueue = r(statement("drain_queue"))
	q.sqlDrainCommit = r(statement("drain_commit"))
	q.sqlDrainFailInvalid = r(statement("drain_fail_invalid"))
}

// Undispatched is a pending intent that has no River job yet.
type Undispatched struct {
	ID        int64
	Namespace string
	Effect    string
	Args      json.RawMessage
}

// DrainIdleTimeout is how long a drain's transaction, which holds the
// stream's offset, may stay idle before the server ends it (see
// LockDrainOffset).
const DrainIdleTimeout = 5 * time.Second

// DrainOffset is the stream's position (see migration 014).
type DrainOffset struct {
	// Prev is the snapshot up to which every intent was handed over.
	Prev string
	// Cur is the snapshot whose intents are being handed over.
	Cur string
	// TxID and ID are the last intent handed over of those Cur sees and
	// Prev does not, or "0" and 0.
	TxID string
	ID   int64
	// Fresh is whether Cur was taken by LockDrainOffset, rather than
	// recorded by a drain that handed over part of its intents.
	Fresh bool
}

// StreamIntent is an intent of the stream, as read without a lock.
type StreamIntent struct {
	Undispatched
	TxID string
	// Pending is whether it is still pending without a job (not awaiting
	// approval, cancelled, or dispatched by another way meanwhile).
	Pending bool
}

// QueuedIntent is an intent of the dispatch queue, locked with its queue
// row.
type QueuedIntent struct {
	Undispatched
	// Pending is whether it still needs a job.
	Pending bool
}

// LockDrainOffset locks the stream's offset for tx, the drain's
// transaction (READ COMMITTED), waiting for another drain that holds it,
// and returns it, with a new snapshot as Cur when the last drain finished
// the one before.
func (q *Queries) LockDrainOffset(ctx context.Context, tx Querier) (*DrainOffset, error) {
	var o DrainOffset
	if err := tx.QueryRow(ctx, q.sqlDrainOffset).Scan(&o.Prev, &o.Cur, &o.TxID, &o.ID, nil); err != nil {
		return nil, err
	}
	if o.Cur == "" {
		o.Fresh, o.TxID, o.ID = true, "0", 0
		if err := tx.QueryRow(ctx, q.sqlDrainSnapshot).Scan(&o.Cur); err != nil {
			return nil, err
		}
	}
	return &o, nil
}

// SelectStream reads up to limit intents of the stream past off, in
// (txid, id) order, without locking them. tx must hold off
// (LockDrainOffset).
func (q *Queries) SelectStream(ctx context.Context, tx Querier, off *DrainOffset, limit int) ([]StreamIntent, error) {
	rows, _ := tx.Query(ctx, q.sqlDrainStream, limit, off.Prev, off.Cur, off.TxID, off.ID)
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (StreamIntent, error) {
		var s StreamIntent
		err := row.Scan(&s.ID, &s.Namespace, &s.Effect, &s.Args, &s.TxID, &s.Pending)
		return s, err
	})
}

// LockUndispatched locks those of ids that are still pending without a
// job and that no other transaction holds, and returns them.
func (q *Queries) LockUndispatched(ctx context.Context, tx Querier, ids []int64) (map[int64]bool, error) {
	out := make(map[int64]bool, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	var id int64
	rows, _ := tx.Query(ctx, q.sqlDrainLock, ids)
	_, err := pgx.ForEachRow(rows, []any{&id}, func() error {
		out[id] = true
		return nil
	})
	return out, err
}

// SelectQueued locks up to limit queued intents of effects, skipping those
// another drain holds.
func (q *Queries) SelectQueued(ctx context.Context, tx Querier, effects []string, limit int) ([]QueuedIntent, error) {
	rows, _ := tx.Query(ctx, q.sqlDrainQueue, limit, effects)
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (QueuedIntent, error) {
		var s QueuedIntent
		err := row.Scan(&s.ID, &s.Namespace, &s.Effect, &s.Args, &s.Pending)
		return s, err
	})
}

// DrainCommit is what a drain writes before it commits.
type DrainCommit struct {
	// IDs and JobIDs are the dispatched intents, IDs[i] getting JobIDs[i].
	IDs, JobIDs []int64
	// Dequeue are the queue's rows the drain settled.
	Dequeue []int64
	// Queue are the stream's intents left to the queue.
	Queue []int64
	// Offset is the stream's new position.
	Offset *DrainOffset
}

// CommitDrain writes c in tx.
func (q *Queries) CommitDrain(ctx context.Context, tx DBTX, c *DrainCommit) error {
	o := c.Offset
	var cur *string
	if o.Cur != "" {
		cur = &o.Cur
	}
	_, err := tx.Exec(ctx, q.sqlDrainCommit, nonNil(c.IDs), nonNil(c.JobIDs), nonNil(c.Dequeue), nonNil(c.Queue), o.Prev, cur, o.TxID, o.ID)
	return err
}

// nonNil is ids, or an empty array where it is nil (NULL in SQL).
func nonNil(ids []int64) []int64 {
	if ids == nil {
		return []int64{}
	}
	return ids
}

// FailInvalid fails intents whose arguments (or effect) the drain refused,
// ids[i] with errs[i] (see ErrorJSON), and notifies their waiters.
func (q *Queries) FailInvalid(ctx context.Context, tx DBTX, ids []int64, errs []json.RawMessage) error {
	texts := make([]string, len(errs))
	for i, e := range errs {
		texts[i] = string(e)
	}
	_, err := tx.Exec(ctx, q.sqlDrainFailInvalid, ids, texts)
	return err
}
