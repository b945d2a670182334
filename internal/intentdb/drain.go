package intentdb

import (
	"context"
	"encoding/json"

	"github.com/jackc/pgx/v5"
)

func (q *Queries) renderDrain(r func(string) string) {
	// The partial index outbox_intent_undispatched holds exactly these rows,
	// in id order, so this reads little more than it returns. SKIP LOCKED
	// lets another drain take the next batch instead of waiting. A drain
	// takes only the effects its replica runs: during a rolling deploy, or
	// with replicas configured for different providers, another replica's
	// effects are left to it.
	q.sqlDrainSelect = r(`SELECT id, namespace, effect, args FROM {{schema}}.outbox_intent
		WHERE job_id IS NULL AND state = 'pending' AND effect = ANY($2::text[])
		ORDER BY id
		LIMIT $1
		FOR UPDATE SKIP LOCKED`)
	// Dispatching is not a state change (the intent stays pending), so
	// updated_at is left alone and no notification fires.
	q.sqlDrainMark = r(`UPDATE {{schema}}.outbox_intent t SET job_id = u.job_id
		FROM unnest($1::bigint[], $2::bigint[]) AS u(id, job_id)
		WHERE t.id = u.id`)
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

// SelectUndispatched locks up to limit pending intents of effects without a
// job, in id order, skipping those another drain holds. tx must be the
// drain's transaction: the locks hold until it marks them and commits.
func (q *Queries) SelectUndispatched(ctx context.Context, tx Querier, effects []string, limit int) ([]Undispatched, error) {
	rows, _ := tx.Query(ctx, q.sqlDrainSelect, limit, effects)
	return pgx.CollectRows(rows, pgx.RowToStructByPos[Undispatched])
}

// MarkDispatched records each intent's River job, ids[i] getting jobIDs[i].
func (q *Queries) MarkDispatched(ctx context.Context, tx DBTX, ids, jobIDs []int64) error {
	_, err := tx.Exec(ctx, q.sqlDrainMark, ids, jobIDs)
	return err
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
