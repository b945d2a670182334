package intentdb

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

func (q *Queries) renderBatch(r func(string) string) {
	// A batch job runs the first attempts of the intents that still name it
	// as their job: one the reconciler re-dispatched, or one an earlier run
	// of the batch handed over, belongs to another job now.
	// The batch reads its intents once, as an attempt of a job of its own
	// reads one (the same columns), so that its attempts need no read of
	// their own.
	q.sqlBatchOwned = r(`SELECT ` + readColumns + ` FROM {{schema}}.outbox_intent
		WHERE id = ANY($1::bigint[]) AND job_id = $2
		ORDER BY id`)
	// Only the batch's current run may hand its intents over: one that River
	// rescued (or that an operator retried) while it still ran is stale, and
	// another run may be calling the provider for the same intents. The job
	// row is locked first, as a cancel locks it, so neither waits on the
	// other's intent rows.
	q.sqlBatchCurrent = r(`SELECT state = 'running' AND attempt = $2 FROM {{schema}}.river_job
		WHERE id = $1
		FOR UPDATE`)
	q.sqlBatchLock = r(`SELECT id FROM {{schema}}.outbox_intent
		WHERE id = ANY($1::bigint[]) AND job_id = $2 AND state IN ('pending', 'running')
		ORDER BY id
		FOR UPDATE`)
	// Handing an intent over to a job of its own restarts job_attempt with
	// the new job's attempts, as a re-dispatch does: the lost-attempt rule
	// compares the two. What the batch's attempt learned stays in
	// maybe_sent: its finish recorded it, or, when the outcome could not be
	// recorded, the handover does, and counts the attempt, as the
	// lost-attempt rule counts an attempt that died.
	// A batch's output lists its intents as it left them: read once, at
	// its end, rather than collected from its attempts.
	q.sqlBatchStates = r(`SELECT id, state, attempt, coalesce(error->>'code', '') FROM {{schema}}.outbox_intent
		WHERE id = ANY($1::bigint[])`)
	q.sqlHandOver = r(`UPDATE {{schema}}.outbox_intent t
		SET job_id = u.job_id, job_attempt = 0, maybe_sent = t.maybe_sent OR u.maybe_sent,
		    attempt = t.attempt + CASE WHEN u.maybe_sent THEN 1 ELSE 0 END
		FROM unnest($1::bigint[], $2::bigint[], $3::bool[]) AS u(id, job_id, maybe_sent)
		WHERE t.id = u.id`)
}

// BatchOwned reads, as Read does, those of ids whose job is still jobID, in
// id order.
func (q *Queries) BatchOwned(ctx context.Context, db Querier, ids []int64, jobID int64) ([]*AttemptRow, error) {
	rows, _ := db.Query(ctx, q.sqlBatchOwned, ids, jobID)
	return pgx.CollectRows(rows, scanRead)
}

// LockBatchForHandOver locks the batch job jobID, if attempt is its
// current running attempt (it reports false otherwise), then those of ids
// that still belong to it and are not terminal, which it returns. tx must
// be the handover's transaction.
func (q *Queries) LockBatchForHandOver(ctx context.Context, tx pgx.Tx, ids []int64, jobID int64, attempt int) (current bool, owned []int64, err error) {
	err = tx.QueryRow(ctx, q.sqlBatchCurrent, jobID, attempt).Scan(&current)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil, nil // deleted in River UI
	}
	if err != nil || !current {
		return false, nil, err
	}
	rows, _ := tx.Query(ctx, q.sqlBatchLock, ids, jobID)
	owned, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	return true, owned, err
}

// HandOver points each of ids at jobIDs[i], restarting its job_attempt,
// and marks it maybe_sent (counting its unrecorded attempt) where
// maybeSent[i]. The rows must have been
// locked by LockBatchForHandOver in tx.
func (q *Queries) HandOver(ctx context.Context, tx pgx.Tx, ids, jobIDs []int64, maybeSent []bool) error {
	_, err := tx.Exec(ctx, q.sqlHandOver, ids, jobIDs, maybeSent)
	return err
}

// BatchState is an intent's state as a batch's output lists it.
type BatchState struct {
	Attempt   int
	ErrorCode string
	State     string
}

// BatchStates reads the states of those of ids that exist, by id.
func (q *Queries) BatchStates(ctx context.Context, db Querier, ids []int64) (map[int64]BatchState, error) {
	rows, _ := db.Query(ctx, q.sqlBatchStates, ids)
	out := make(map[int64]BatchState, len(ids))
	var (
		id int64
		s  BatchState
	)
	_, err := pgx.ForEachRow(rows, []any{&id, &s.State, &s.Attempt, &s.ErrorCode}, func() error {
		out[id] = s
		return nil
	})
	return out, err
}
