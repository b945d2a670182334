package intentdb

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
)

func (q *Queries) renderReconcile(r func(string) string) {
	// A non-terminal intent's job should be alive (available, scheduled,
	// running, retryable, pending). One that is finalized or gone will never
	// run again: an operator cancelled or deleted it in River UI, River
	// discarded it after its attempts, or an older version completed it for a
	// stale attempt. The intents are locked, skipping those a worker or a
	// cancel holds now (they are looked at next time), and their jobs are
	// read in their newest committed state.
	q.sqlStranded = r(`SELECT i.id, i.effect, i.args, i.state, i.job_attempt, i.maybe_sent,
			j.state::text, j.attempt
		FROM {{schema}}.outbox_intent i
		LEFT JOIN {{schema}}.river_job j ON j.id = i.job_id
		WHERE i.state IN ('pending', 'running') AND i.job_id IS NOT NULL
		  AND (j.id IS NULL OR j.state IN ('completed', 'cancelled', 'discarded'))
		ORDER BY i.id
		LIMIT $1
		FOR UPDATE OF i SKIP LOCKED`)
	// A fresh job: the drain dispatches the intent again (the trigger of
	// migration 014 queues a pending intent whose job_id becomes NULL), and its worker
	// decides from the intent's state what the attempt may do (workers.Decide).
	// job_attempt restarts with the new job's attempts.
	q.sqlRedispatch = r(`WITH upd AS (
			UPDATE {{schema}}.outbox_intent t
			SET job_id = NULL, job_attempt = 0, maybe_sent = t.maybe_sent OR u.maybe_sent
			FROM unnest($1::bigint[], $2::bool[]) AS u(id, maybe_sent)
			WHERE t.id = u.id AND t.state IN ('pending', 'running')
			RETURNING t.id
		), notified AS (
			SELECT pg_notify('{{channel_pending}}', '') FROM (SELECT 1 FROM upd LIMIT 1) one
		)
		SELECT count(*), (SELECT count(*) FROM notified) FROM upd`)
	// Pending intents that no drain took, of effects this replica does not
	// run, older than a drain would leave them if any replica ran them.
	// An intent of an effect no drain runs waits in the dispatch queue: the
	// drain that read it from the stream left it there.
	// So does one whose job waits in a shared queue (an MCP upstream's,
	// its args naming the effect) that the replicas working the queue send
	// back, lacking its tool (a re-pin dropped it, its upstream was
	// renamed).
	q.sqlUnserved = r(`SELECT effect, sum(n)::bigint FROM (
			SELECT i.effect, count(*) AS n
			FROM {{schema}}.outbox_dispatch_queue d
			JOIN {{schema}}.outbox_intent i ON i.id = d.id
			WHERE i.job_id IS NULL AND i.state = 'pending'
			  AND NOT (i.effect = ANY($1::text[]))
			  AND i.created_at < now() - $2::interval
			GROUP BY i.effect
			UNION ALL
			SELECT i.effect, count(*)
			FROM {{schema}}.outbox_intent i
			JOIN {{schema}}.river_job j ON j.id = i.job_id
			WHERE i.state IN ('pending', 'running') AND i.job_id IS NOT NULL
			  AND j.state IN ('available', 'scheduled', 'retryable') AND j.args ? 'effect'
			  AND NOT (i.effect = ANY($1::text[]))
			  AND i.created_at < now() - $2::interval
			GROUP BY i.effect
		) u
		GROUP BY effect
		ORDER BY effect`)
}

// Stranded is a non-terminal intent whose River job is finalized or gone.
type Stranded struct {
	ID     int64
	Effect string
	Args   json.RawMessage
	State  string
	// JobAttempt is the last attempt of the job that recorded an outcome.
	JobAttempt int
	MaybeSent  bool
	// JobState is the job's state, nil when the job is gone.
	JobState *string
	// JobAttempts is the job's attempt counter, nil when the job is gone.
	JobAttempts *int
}

// SelectStranded locks up to limit stranded intents in tx.
func (q *Queries) SelectStranded(ctx context.Context, tx Querier, limit int) ([]Stranded, error) {
	rows, _ := tx.Query(ctx, q.sqlStranded, limit)
	return pgx.CollectRows(rows, pgx.RowToStructByPos[Stranded])
}

// Redispatch gives intents a fresh job through the drain, marking those of
// maybeSent as possibly sent, and returns how many it changed.
func (q *Queries) Redispatch(ctx context.Context, tx Querier, ids []int64, maybeSent []bool) (int64, error) {
	var n, notified int64
	err := tx.QueryRow(ctx, q.sqlRedispatch, ids, maybeSent).Scan(&n, &notified)
	return n, err
}

// Unserved counts, by effect, pending intents older than age that no drain
// took, of effects other than those given.
func (q *Queries) Unserved(ctx context.Context, db Querier, effects []string, age time.Duration) (map[string]int64, error) {
	out := map[string]int64{}
	var effect string
	var n int64
	rows, _ := db.Query(ctx, q.sqlUnserved, effects, age)
	_, err := pgx.ForEachRow(rows, []any{&effect, &n}, func() error {
		out[effect] = n
		return nil
	})
	return out, err
}
