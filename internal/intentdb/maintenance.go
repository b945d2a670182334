package intentdb

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

func (q *Queries) renderMaintenance(r func(string) string) {
	// SKIP LOCKED: a row an operator is resolving right now is left for the
	// next run rather than waited for. Only terminal rows that no operator
	// must look at are candidates: an unknown intent stays until it is
	// resolved. They are found through the index on created_at, which never
	// changes (so that the intent's updates stay HOT; migration 015): an
	// intent completed before the cutoff was created before it.
	q.sqlPrune = r(`DELETE FROM {{schema}}.outbox_intent WHERE id IN (
		SELECT id FROM {{schema}}.outbox_intent
		WHERE state IN ('succeeded', 'failed', 'cancelled') AND completed_at < now() - $1::interval
		  AND created_at < now() - $1::interval
		ORDER BY created_at
		LIMIT $2
		FOR UPDATE SKIP LOCKED)`)
	q.sqlCountByState = r(`SELECT state, count(*),
			coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE state IN ('pending', 'awaiting_approval'))), 0)::float8
		FROM {{schema}}.outbox_intent GROUP BY state`)
	// Through the reporting view, which shows what a reader may see.
	q.sqlCreatedAt = r(`SELECT created_at FROM {{schema}}.intents_view WHERE namespace = $1 AND key = $2`)
}

// Prune deletes at most limit terminal intents completed before retention
// ago, and returns how many it deleted.
func (q *Queries) Prune(ctx context.Context, db DBTX, retention time.Duration, limit int) (int64, error) {
	tag, err := db.Exec(ctx, q.sqlPrune, retention, limit)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// StateCounts is what CountByState reads.
type StateCounts struct {
	// ByState counts intents per state; states with none are absent.
	ByState map[string]int64
	// OldestAwaitingApprovalAge is the oldest intent awaiting approval's
	// age, 0 when none: it expires at OUTBOX_APPROVAL_TTL.
	OldestAwaitingApprovalAge time.Duration
	// OldestPendingAge is the oldest pending intent's age, 0 when none.
	OldestPendingAge time.Duration
}

// CountByState counts intents per state in one statement.
func (q *Queries) CountByState(ctx context.Context, db Querier) (*StateCounts, error) {
	out := &StateCounts{ByState: map[string]int64{}}
	var (
		state string
		n     int64
		age   float64
	)
	rows, _ := db.Query(ctx, q.sqlCountByState)
	_, err := pgx.ForEachRow(rows, []any{&state, &n, &age}, func() error {
		out.ByState[state] = n
		switch state {
		case "pending":
			out.OldestPendingAge = seconds(age)
		case "awaiting_approval":
			out.OldestAwaitingApprovalAge = seconds(age)
		}
		return nil
	})
	return out, err
}

// CreatedAt returns when the intent (namespace, key) was created, or
// pgx.ErrNoRows.
func (q *Queries) CreatedAt(ctx context.Context, db Querier, namespace, key string) (time.Time, error) {
	var t time.Time
	err := db.QueryRow(ctx, q.sqlCreatedAt, namespace, key).Scan(&t)
	return t, err
}
