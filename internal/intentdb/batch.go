package intentdb

import (
	"context"

	"github.com/jackc/pgx/v5"
)

func (q *Queries) renderBatch(r func(string) string) {
	// A batch job runs the first attempts of the intents that still name it
	// as their job: one the reconciler re-dispatched, or one an earlier run
	// of the batch handed over, belongs to another job now.
	q.sqlBatchOwned = r(`SELECT id, namespace FROM {{schema}}.outbox_intent
		WHERE id = ANY($1::bigint[]) AND job_id = $2
		ORDER BY id`)
	// Handing an intent over to a job of its own restarts job_attempt with
	// the new job's attempts, as a re-dispatch does: the lost-attempt rule
	// compares the two. Whether an earlier attempt may have reached the
	// provider stays in maybe_sent, which the batch's finish recorded.
	q.sqlHandOver = r(`UPDATE {{schema}}.outbox_intent
		SET job_id = $3, job_attempt = 0
		WHERE id = $1 AND job_id = $2 AND state IN ('pending', 'running')`)
}

// BatchMember is an intent of a batch job that still belongs to it.
type BatchMember struct {
	ID        int64
	Namespace string
}

// BatchOwned returns those of ids whose job is still jobID, in id order.
func (q *Queries) BatchOwned(ctx context.Context, db Querier, ids []int64, jobID int64) ([]BatchMember, error) {
	rows, _ := db.Query(ctx, q.sqlBatchOwned, ids, jobID)
	return pgx.CollectRows(rows, pgx.RowToStructByPos[BatchMember])
}

// HandOver moves intent id from the batch job batchJobID to jobID, if it is
// still the batch's and not terminal. It reports whether it did.
func (q *Queries) HandOver(ctx context.Context, tx DBTX, id, batchJobID, jobID int64) (bool, error) {
	tag, err := tx.Exec(ctx, q.sqlHandOver, id, batchJobID, jobID)
	return tag.RowsAffected() == 1, err
}
