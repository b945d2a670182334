package intentdb

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

func (q *Queries) renderRecentAction(r func(string) string) {
	q.sqlRecentAction = r(`SELECT key, extract(epoch FROM now() - created_at)::float8 FROM {{schema}}.outbox_recent_action
		WHERE namespace = $1 AND effect = $2 AND args_sha256 = $3`)
	q.sqlRecordAction = r(`INSERT INTO {{schema}}.outbox_recent_action (namespace, effect, args_sha256, key)
		VALUES ($1, $2, $3, $4)
		ON CONFLICT (namespace, effect, args_sha256) DO UPDATE SET key = excluded.key, created_at = excluded.created_at`)
	// The lock comes before the clock is read, so a call that waited for
	// it reads a time after the first call's commit.
	q.sqlLockAction = `SELECT clock_timestamp() FROM pg_advisory_xact_lock($1)`
	q.sqlPruneRecentActions = r(`DELETE FROM {{schema}}.outbox_recent_action WHERE created_at < now() - $1::interval`)
}

// RecentAction is the key an agent's action was last recorded under, and how
// long ago, on the database's clock.
type RecentAction struct {
	Key string
	Age time.Duration
}

// GetRecentAction returns the action's last record, or nil.
func (q *Queries) GetRecentAction(ctx context.Context, db Querier, namespace, effect string, argsSHA256 []byte) (*RecentAction, error) {
	var a RecentAction
	var age float64
	err := db.QueryRow(ctx, q.sqlRecentAction, namespace, effect, argsSHA256).Scan(&a.Key, &age)
	a.Age = seconds(age)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &a, nil
}

// LockAction takes the transaction-level advisory lock lockID (an action's,
// autokey.LockID), waiting for a transaction that holds it to end, and
// returns the database's clock read after the lock was taken.
func (q *Queries) LockAction(ctx context.Context, tx Querier, lockID int64) (time.Time, error) {
	var now time.Time
	err := tx.QueryRow(ctx, q.sqlLockAction, lockID).Scan(&now)
	return now, err
}

// RecordAction records that the action was recorded under key now.
func (q *Queries) RecordAction(ctx context.Context, db DBTX, namespace, effect string, argsSHA256 []byte, key string) error {
	_, err := db.Exec(ctx, q.sqlRecordAction, namespace, effect, argsSHA256, key)
	return err
}

// PruneRecentActions deletes action records older than age, and returns how
// many.
func (q *Queries) PruneRecentActions(ctx context.Context, db DBTX, age time.Duration) (int64, error) {
	tag, err := db.Exec(ctx, q.sqlPruneRecentActions, age)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}
