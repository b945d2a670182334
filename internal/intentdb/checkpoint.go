package intentdb

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

func (q *Queries) renderCheckpoint(r func(string) string) {
	q.sqlCheckpoint = r(`SELECT checkpoint FROM {{schema}}.outbox_intent WHERE id = $1`)
	// Fenced like a finish: only the attempt that holds the intent's claim
	// (running, under its attempt number) records a checkpoint, so a stale
	// attempt cannot point the next one at another call's work.
	q.sqlSetCheckpoint = r(`UPDATE {{schema}}.outbox_intent SET checkpoint = $3
		WHERE id = $1 AND attempt = $2 AND state = 'running'`)
	// Only an intent whose provider holds its work (a checkpoint) and that
	// has not ended takes a cancel request; the first request stands.
	q.sqlRequestCancel = r(`UPDATE {{schema}}.outbox_intent
		SET cancel_requested = coalesce(cancel_requested, jsonb_build_object('by', $3::text, 'note', NULLIF($4::text, ''), 'at', now())),
		    updated_at = now()
		WHERE namespace = $1 AND key = $2 AND state IN ('pending', 'running') AND checkpoint IS NOT NULL
		RETURNING id`)
	q.sqlCancelRequested = r(`SELECT cancel_requested IS NOT NULL FROM {{schema}}.outbox_intent WHERE id = $1`)
	q.sqlProviderTask = r(`SELECT checkpoint->>'upstream_task', cancel_requested->>'by', (cancel_requested->>'at')::timestamptz
		FROM {{schema}}.outbox_intent WHERE id = $1`)
}

// ErrCheckpointFenced is SetCheckpoint's error when the attempt no longer
// holds the intent (another attempt took it over, or it ended).
var ErrCheckpointFenced = errors.New("intentdb: the attempt no longer holds the intent; its checkpoint was not recorded")

// Checkpoint returns the checkpoint an earlier attempt of intent id
// recorded, nil when none did.
func (q *Queries) Checkpoint(ctx context.Context, db Querier, id int64) (json.RawMessage, error) {
	var cp []byte
	err := db.QueryRow(ctx, q.sqlCheckpoint, id).Scan(&cp)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return cp, err
}

// SetCheckpoint records checkpoint for attempt of intent id, which must hold
// the intent's claim (ErrCheckpointFenced otherwise).
func (q *Queries) SetCheckpoint(ctx context.Context, db DBTX, id int64, attempt int, checkpoint json.RawMessage) error {
	tag, err := db.Exec(ctx, q.sqlSetCheckpoint, id, attempt, []byte(checkpoint))
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return ErrCheckpointFenced
	}
	return nil
}

// RequestCancel records an operator's cancel of the intent (namespace,
// key) whose provider holds its work: the attempt polling that work sends
// the provider a cancel. It returns pgx.ErrNoRows when the intent has no
// checkpoint or has ended.
func (q *Queries) RequestCancel(ctx context.Context, db Querier, namespace, key, by, note string) (int64, error) {
	var id int64
	err := db.QueryRow(ctx, q.sqlRequestCancel, namespace, key, by, note).Scan(&id)
	return id, err
}

// CancelRequested reports whether a cancel of intent id was requested
// (RequestCancel).
func (q *Queries) CancelRequested(ctx context.Context, db Querier, id int64) (bool, error) {
	var requested bool
	err := db.QueryRow(ctx, q.sqlCancelRequested, id).Scan(&requested)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return requested, err
}

// ProviderTask is what an operator is shown of an intent whose provider
// holds the work as a task of its own: the task, and the cancel asked of
// it, if any.
type ProviderTask struct {
	// Task is the provider's task id (an MCP upstream's, from the
	// checkpoint its attempt recorded); empty when there is none.
	Task string
	// CancelBy and CancelAt are who asked to cancel it (RequestCancel),
	// and when; empty and nil when nobody did.
	CancelBy string
	CancelAt *time.Time
}

// ProviderTaskOf returns intent id's provider task, a zero ProviderTask
// when it has none or there is no such intent.
func (q *Queries) ProviderTaskOf(ctx context.Context, db Querier, id int64) (*ProviderTask, error) {
	var (
		task, by *string
		pt       ProviderTask
	)
	err := db.QueryRow(ctx, q.sqlProviderTask, id).Scan(&task, &by, &pt.CancelAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return &pt, nil
	}
	if err != nil {
		return nil, err
	}
	if task != nil {
		pt.Task = *task
	}
	if by != nil {
		pt.CancelBy = *by
	}
	return &pt, nil
}
