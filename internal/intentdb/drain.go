package intentdb

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

func (q *Queries) renderDrain(r func(string) string) {
	// The drain finds new intents by snapshots (migration 014): those
	// committed between the snapshot it handed over everything up to
	// (prev) and a newer one (cur), in (txid, id) order, a batch at a
	// time from the last one handed over. The stream is read by one drain
	// at a time: it locks the offset for its transaction, and another
	// waits for that transaction to end, then reads the offset it left.
	//
	// A drain whose process stops mid-transaction (SIGSTOP, a debugger, a
	// VM paused) would hold the stream for everyone: its transaction, idle
	// for longer than DrainIdleTimeout, is ended by the server, which
	// closes its session and releases the lock. A drain's transaction is
	// never idle for more than a few milliseconds otherwise (River's
	// insert is planned in Go between two statements).
	q.sqlDrainOffset = r(`SELECT prev::text, coalesce(cur::text, ''), txid::text, id,
			set_config('idle_in_transaction_session_timeout', '` + strconv.Itoa(int(DrainIdleTimeout.Milliseconds())) + `', true)
		FROM {{schema}}.outbox_drain_offset FOR UPDATE`)
	// The new snapshot is taken by a statement of its own, after the lock:
	// in READ COMMITTED a statement's snapshot is taken when it starts, so
	// the locking one's may predate the commit of the drain it waited for,
	// and be older than the prev that drain recorded.
	q.sqlDrainSnapshot = `SELECT pg_current_snapshot()::text`
	// The intents prev saw running (txid among its xip: an index look-up
	// each) or not yet started (a range of the (txid, id) index from its
	// xmax), which cur sees committed, past the last one handed over. Two
	// scans merged, each stopping at the batch's size: one range from the
	// lowest running txid would read every intent committed since a long
	// transaction began, at every drain. Read without locks: the drain
	// that holds the offset is the only one reading the stream, and the
	// intents it will dispatch are locked next (sqlDrainLock).
	q.sqlDrainStream = r(`WITH next AS (
			(SELECT id FROM {{schema}}.outbox_intent
			WHERE txid = ANY(ARRAY(SELECT pg_snapshot_xip($2::pg_snapshot)))
			  AND pg_visible_in_snapshot(txid, $3::pg_snapshot)
			  AND (txid, id) > ($4::text::xid8, $5::bigint)
			ORDER BY txid, id
			LIMIT $1)
			UNION ALL
			(SELECT id FROM {{schema}}.outbox_intent
			WHERE txid IS NOT NULL
			  AND (txid, id) > (greatest($4::text::xid8, pg_snapshot_xmax($2::pg_snapshot)),
			                    CASE WHEN $4::text::xid8 >= pg_snapshot_xmax($2::pg_snapshot) THEN $5::bigint ELSE 0 END)
			  AND txid < pg_snapshot_xmax($3::pg_snapshot)
			  AND pg_visible_in_snapshot(txid, $3::pg_snapshot)
			ORDER BY txid, id
			LIMIT $1)
		)
		SELECT id, namespace, effect, args, txid::text, state = 'pending' AND job_id IS NULL
		FROM {{schema}}.outbox_intent
		WHERE id IN (SELECT id FROM next)
		ORDER BY txid, id
		LIMIT $1`)
	// The stream's intents to dispatch, locked and read again in their
	// newest version: one that an approval, a cancel, or a drain of the
	// queue (or of an older release) dispatched or ended meanwhile is
	// left out. SKIP LOCKED: one that another transaction holds is not
	// waited for (a long one would hold up the whole stream), the drain
	// queues it instead, to be taken, or found settled, from the queue.
	q.sqlDrainLock = r(`SELECT id FROM {{schema}}.outbox_intent
		WHERE id = ANY($1::bigint[]) AND state = 'pending' AND job_id IS NULL
		ORDER BY id
		FOR UPDATE SKIP LOCKED`)
	// The queue: intents undispatched after their insert (the trigger of
	// 014) and those of effects another replica runs. SKIP LOCKED lets
	// another drain take the next ones instead of waiting. A drain takes
	// only the effects its replica runs: during a rolling deploy, or with
	// replicas configured for different providers, another replica's
	// effects are left to it.
	// The queue drives, whatever the statistics say: it is small (often
	// empty) and read in its key's order, each row's intent then found by
	// its key. A plain join let the planner, on tables without statistics
	// (a fresh schema), scan every intent and probe the queue for each:
	// milliseconds for an empty answer. The lateral subquery (kept one by
	// OFFSET 0) cannot be the outer side; the effect is filtered inside it,
	// before its row is locked, so that intents of effects another replica
	// serves are left to that replica's drain.
	q.sqlDrainQueue = r(`SELECT i.id, i.namespace, i.effect, i.args, i.state = 'pending' AND i.job_id IS NULL
		FROM {{schema}}.outbox_dispatch_queue d
		CROSS JOIN LATERAL (
			SELECT i.id, i.namespace, i.effect, i.args, i.state, i.job_id
			FROM {{schema}}.outbox_intent i
			WHERE i.id = d.id AND i.effect = ANY($2::text[])
			OFFSET 0
		) i
		ORDER BY d.id
		LIMIT $1
		FOR UPDATE OF d, i SKIP LOCKED`)
	// What a drain decided, in one statement: each intent's River job (a
	// HOT update: job_id is in no index), the queue's rows it settled
	// removed, the stream's intents it leaves to the queue queued, and the
	// stream's offset moved past what it read. Dispatching is not a state
	// change (the intent stays pending), so updated_at is left alone and
	// no notification fires.
	q.sqlDrainCommit = r(`WITH mark AS (
			UPDATE {{schema}}.outbox_intent t SET job_id = u.job_id
			FROM unnest($1::bigint[], $2::bigint[]) AS u(id, job_id)
			WHERE t.id = u.id
		), dequeued AS (
			DELETE FROM {{schema}}.outbox_dispatch_queue WHERE id = ANY($3::bigint[])
		), queued AS (
			INSERT INTO {{schema}}.outbox_dispatch_queue (id) SELECT unnest($4::bigint[]) ON CONFLICT DO NOTHING
		), advanced AS (
			UPDATE {{schema}}.outbox_drain_offset SET prev = $5::pg_snapshot, cur = $6::pg_snapshot, txid = $7::text::xid8, id = $8
		)
		SELECT 1`)
	// Intents that reached the table without the library's validation (raw
	// SQL) and fail it end here, without any provider call.
	q.sqlDrainFailInvalid = r(`WITH upd AS (
			UPDATE {{schema}}.outbox_intent t
			SET state = 'failed', error = u.error, completed_at = now(), updated_at = now()
			FROM unnest($1::bigint[], $2::jsonb[]) AS u(id, error)
			WHERE t.id = u.id
			RETURNING t.id
		), notified AS (
			SELECT pg_notify('{{channel_changed}}', 'failed ' || string_agg(id::text, ','))
			FROM (SELECT id, (row_number() OVER ()) / {{chunk}} AS chunk FROM upd) c
			GROUP BY chunk
		)
		SELECT count(*) FROM notified`)
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
