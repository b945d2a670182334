package intentdb

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/jackc/pgx/v5"
)

func (q *Queries) renderCheckpoint(r func(string) string) {
	q.sqlCheckpoint = r(`SELECT checkpoint FROM {{schema}}.outbox_intent WHERE id = $1`)
	// Fenced like a finish: only the attempt that holds the intent's claim
	// (running, under its attempt number) records a checkpoint, so a stale
	// attempt cannot point the next one at another call's work.
	q.sqlSetCheckpoint = r(`UPDATE {{schema}}.outbox_intent SET checkpoint = $3
		WHERE id = $1 AND attempt = $2 AND state = 'running'`)
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
